/* The named facts of a flow the store keeps beside its heads and bodies (capture_store.h,
 * "meta"): the origin side's timings and, for intercepted flows, the TLS of both sides and the
 * certificate we forged. Worker's thread, at the end of the exchange. */
#include "ops/inspector_int.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "handler/mitm.h"
#include "ops/inspector_ws.h"

static void put_ref(fy_cs_header_t *m, size_t *n, size_t max, const char *name, const char *value)
{
    if (*n >= max || !value[0]) return;
    m[*n].name = fy_str(name, strlen(name));
    m[*n].value = fy_str(value, strlen(value));
    (*n)++;
}

/* Decimal by hand, two digits a step (snprintf was half of this observer's cost per flow,
   bench/policy_cost.py capture row; one digit a step was ~30 instructions a value). */
static const char d2[201] = "00010203040506070809101112131415161718192021222324252627282930313233"
                            "34353637383940414243444546474849505152535455565758596061626364656667"
                            "6869707172737475767778798081828384858687888990919293949596979899";

static void put_us(char *t, fy_cs_header_t *m, size_t *n, size_t max, const char *name,
                   size_t name_len, int32_t us)
{
    if (*n >= max) return;
    char *e = t + 12, *q = e; /* the 12 bytes at t, written from their end */
    if (us < 0) {
        *--q = '1';
        *--q = '-';
    } else {
        uint32_t v = (uint32_t)us;
        while (v >= 100) {
            q -= 2;
            memcpy(q, d2 + 2 * (v % 100), 2);
            v /= 100;
        }
        if (v >= 10) {
            q -= 2;
            memcpy(q, d2 + 2 * v, 2);
        } else {
            *--q = (char)('0' + v);
        }
    }
    m[*n].name = fy_str(name, name_len);
    m[*n].value = fy_str(q, (size_t)(e - q));
    (*n)++;
}

size_t fy__insp_meta(fy_exchange_t *ex, fy_cs_header_t *meta, size_t max)
{
    size_t n = 0;
    const fy_mitm_tls_facts_t *t = ex->tunnel ? fy_mitm_tls_facts(ex) : NULL;
    if (!t) return n;
    /* the strings live in the tunnel (as long as the connection): the store copies them */
    static const struct {
        const char *name;
        size_t off;
        bool origin;
    } f[] = {
#define C(n, m) {"tls.client_" n, offsetof(fy_mitm_peer_tls_t, m), false}
#define O(n, m)                                                                                    \
    {                                                                                              \
        "tls.origin_" n, offsetof(fy_mitm_peer_tls_t, m), true                                     \
    }
        C("version", version),
        C("cipher", cipher),
        C("alpn", alpn),
        O("version", version),
        O("cipher", cipher),
        O("alpn", alpn),
        O("subject", subject),
        O("issuer", issuer),
        O("sha256", sha256),
        O("not_after", not_after),
        {"tls.forged_subject", offsetof(fy_mitm_peer_tls_t, subject), false},
        {"tls.forged_issuer", offsetof(fy_mitm_peer_tls_t, issuer), false},
        {"tls.forged_sha256", offsetof(fy_mitm_peer_tls_t, sha256), false},
        {"tls.forged_not_after", offsetof(fy_mitm_peer_tls_t, not_after), false},
#undef C
#undef O
    };
    put_ref(meta, &n, max, "tls.sni", t->sni);
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        put_ref(meta, &n, max, f[i].name,
                (const char *)(f[i].origin ? &t->origin : &t->client) + f[i].off);
    if (t->origin_cached) put_ref(meta, &n, max, "tls.origin_seen", "by an earlier tunnel's probe");
    return n;
}

bool fy__insp_meta_get(const fy_cs_flow_t *f, const char *name, fy_str_t *out)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < f->n_meta; i++)
        if (f->meta[i].name.len == nl && memcmp(f->meta[i].name.p, name, nl) == 0) {
            *out = f->meta[i].value;
            return true;
        }
    return false;
}

double fy__insp_meta_ms(const fy_cs_flow_t *f, const char *name)
{
    fy_str_t v;
    if (!fy__insp_meta_get(f, name, &v) || v.len == 0 || v.len > 15) return -2;
    char buf[16];
    memcpy(buf, v.p, v.len);
    buf[v.len] = 0;
    long us = strtol(buf, NULL, 10);
    return us < 0 ? -1 : (double)us / 1000.0;
}

static void ms_json(fy__sb_t *b, double ms)
{
    if (ms <= -2)
        fy__sb_puts(b, "null");
    else if (ms < 0)
        fy__sb_puts(b, "-1");
    else
        fy__sb_printf(b, "%.3f", ms);
}

void fy__insp_meta_json(fy__sb_t *b, const fy_cs_flow_t *f)
{
    static const struct {
        const char *key, *meta;
    } t[] = {{"dns", FY_CS_META_DNS},
             {"connect", FY_CS_META_CONNECT},
             {"tls", FY_CS_META_TLS},
             {"wait", FY_CS_META_WAIT}};
    fy__sb_puts(b, "\"timings\": {");
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        fy__sb_printf(b, "\"%s\": ", t[i].key);
        ms_json(b, fy__insp_meta_ms(f, t[i].meta));
        fy__sb_puts(b, ", ");
    }
    fy__sb_printf(b, "\"first_byte\": %u, \"total\": %u}", f->ttfb_ms, f->duration_ms);
    /* the rest (TLS, ...) by name, without the prefix: {"tls": {"sni": ...}} */
    fy__sb_puts(b, ", \"tls\": {");
    bool first = true;
    for (size_t i = 0; i < f->n_meta; i++) {
        fy_str_t n = f->meta[i].name;
        if (n.len < 5 || memcmp(n.p, "tls.", 4) != 0) continue;
        if (!first) fy__sb_puts(b, ", ");
        first = false;
        fy__sb_json(b, n.p + 4, n.len - 4);
        fy__sb_puts(b, ": ");
        fy__sb_json(b, f->meta[i].value.p, f->meta[i].value.len);
    }
    fy__sb_puts(b, "}");
}

size_t fy__insp_ws_meta(fy_exchange_t *ex, const fy_insp_ws_t *w, fy_cs_header_t *meta)
{
    size_t n = 0;
    for (size_t i = 0; i < w->n; i++) {
        const fy_insp_ws_msg_t *m = &w->msgs[i];
        char head[32];
        int hl = snprintf(head, sizeof head, "%c%x%x%llu:", m->from_client ? '>' : '<', m->opcode,
                          (m->cut ? 1u : 0u) | (m->compressed ? 2u : 0u) | (m->inflated ? 4u : 0u),
                          (unsigned long long)m->size);
        char *v = fy_arena_alloc(ex->arena, (size_t)hl + m->len);
        memcpy(v, head, (size_t)hl);
        if (m->len) memcpy(v + hl, m->data, m->len);
        meta[n].name = FY_STR_LIT(FY_CS_META_WS);
        meta[n].value = fy_str(v, (size_t)hl + m->len);
        n++;
    }
    if (w->dropped)
        put_us(fy_arena_alloc(ex->arena, 12), meta, &n, n + 1, FY_CS_META_WS_DROPPED,
               sizeof FY_CS_META_WS_DROPPED - 1, (int32_t)w->dropped);
    return n;
}

/* The payload as "text" (a text message, valid UTF-8 without NULs) or "base64". */
static void payload_json(fy__sb_t *b, bool textmsg, const char *p, size_t n)
{
    bool text = textmsg;
    for (size_t i = 0; i < n && text; i++) text = p[i] != 0;
    if (text) { /* fy__sb_json replaces invalid UTF-8: check it round-trips */
        fy__sb_t t = {0};
        fy__sb_json(&t, p, n);
        text = !memmem(t.p, t.len, "\xef\xbf\xbd", 3) || memmem(p, n, "\xef\xbf\xbd", 3);
        if (text) {
            fy__sb_puts(b, "\"text\": ");
            fy__sb_put(b, t.p, t.len);
        }
        free(t.p);
        if (text) return;
    }
    fy__sb_puts(b, "\"base64\": \"");
    fy__sb_base64(b, p, n);
    fy__sb_puts(b, "\"");
}

void fy__insp_ws_json(fy__sb_t *b, const fy_cs_flow_t *f)
{
    fy__sb_puts(b, "\"ws\": [");
    bool first = true;
    for (size_t i = 0; i < f->n_meta; i++) {
        fy_str_t nm = f->meta[i].name, v = f->meta[i].value;
        if (nm.len != 2 || memcmp(nm.p, FY_CS_META_WS, 2) != 0 || v.len < 5) continue;
        const char *colon = memchr(v.p, ':', v.len);
        if (!colon) continue;
        char num[24];
        size_t dl = (size_t)(colon - v.p - 3);
        if (dl >= sizeof num) continue;
        memcpy(num, v.p + 3, dl);
        num[dl] = 0;
        char op[2] = {v.p[1], 0}, fl[2] = {v.p[2], 0};
        long flags = strtol(fl, NULL, 16);
        fy__sb_printf(b,
                      "%s{\"from\": \"%s\", \"opcode\": %ld, \"size\": %llu, \"cut\": %s, "
                      "\"compressed\": %s, \"inflated\": %s, ",
                      first ? "" : ", ", v.p[0] == '>' ? "client" : "origin", strtol(op, NULL, 16),
                      strtoull(num, NULL, 10), flags & 1 ? "true" : "false",
                      flags & 2 ? "true" : "false", flags & 4 ? "true" : "false");
        payload_json(b, op[0] == '1' && (!(flags & 2) || (flags & 4)), colon + 1,
                     v.len - (size_t)(colon + 1 - v.p));
        fy__sb_puts(b, "}");
        first = false;
    }
    fy__sb_puts(b, "]");
    fy_str_t d;
    if (fy__insp_meta_get(f, FY_CS_META_WS_DROPPED, &d)) {
        fy__sb_puts(b, ", \"ws_dropped\": ");
        fy__sb_put(b, d.p, d.len);
    }
}
