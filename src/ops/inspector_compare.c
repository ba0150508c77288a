/* Replay against a new upstream: stored flows (a filter or a list of ids) sent again, one
 * after the other from the API thread, to another origin (the same Host, TLS unverified), and
 * each answer compared with the stored one: status, response headers (those that say nothing
 * about the content left out), a SHA-256 of the body, latency. The new body is redacted as the
 * store redacts before it is hashed, so redaction alone makes no difference; a stored body cut
 * at body-cap cannot be compared (reported as such). Nothing is captured. */
#include "ops/inspector_int.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/alloc.h"
#include "ops/inspector_filter.h"

#define MAX_FLOWS 500
#define RESP_CAP (64u << 20)

static const char *const volatile_hdrs[] = {
    "date",       "age",        "expires", "content-length", "transfer-encoding",
    "connection", "keep-alive", "via",     "alt-svc",        NULL};

typedef struct hdr {
    fy_str_t name, value;
} hdr_t;

/* A raw HTTP/1.1 response: status, headers (into v, at most cap), body (de-chunked into *body,
   malloc). 0 or -1. */
static int parse_response(char *p, size_t n, int *status, hdr_t *v, size_t cap, size_t *nh,
                          char **body, size_t *blen)
{
    char *end = memmem(p, n, "\r\n\r\n", 4);
    if (!end || sscanf(p, "HTTP/1.%*d %d", status) != 1) return -1;
    *nh = 0;
    bool chunked = false;
    char *line = memchr(p, '\n', (size_t)(end - p));
    for (char *l = line ? line + 1 : end; l < end;) {
        char *eol = memchr(l, '\r', (size_t)(end - l));
        if (!eol) eol = end;
        char *colon = memchr(l, ':', (size_t)(eol - l));
        if (colon && *nh < cap) {
            char *val = colon + 1;
            while (val < eol && (*val == ' ' || *val == '\t')) val++;
            v[*nh].name = fy_str(l, (size_t)(colon - l));
            v[*nh].value = fy_str(val, (size_t)(eol - val));
            if (v[*nh].name.len == 17 && strncasecmp(l, "transfer-encoding", 17) == 0 &&
                v[*nh].value.len >= 7 && strncasecmp(val, "chunked", 7) == 0)
                chunked = true;
            (*nh)++;
        }
        l = eol + 2;
    }
    char *b = end + 4;
    size_t left = n - (size_t)(b - p);
    if (!chunked) {
        *body = fy_xmalloc(left + 1);
        memcpy(*body, b, left);
        *blen = left;
        return 0;
    }
    *body = fy_xmalloc(left + 1);
    *blen = 0;
    while (left) {
        char *eol = memmem(b, left, "\r\n", 2);
        if (!eol) break;
        unsigned long long k = strtoull(b, NULL, 16);
        size_t hl = (size_t)(eol + 2 - b);
        if (k == 0 || k > left - hl) break;
        memcpy(*body + *blen, eol + 2, (size_t)k);
        *blen += (size_t)k;
        b = eol + 2 + k;
        left -= hl + (size_t)k;
        if (left >= 2) {
            b += 2;
            left -= 2;
        } else {
            left = 0;
        }
    }
    return 0;
}

static void sha256_hex(const char *p, size_t n, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned ml = 0;
    EVP_Digest(p, n, md, &ml, EVP_sha256(), NULL);
    for (unsigned i = 0; i < ml && i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static bool ignored(fy_str_t name, const char *extra)
{
    for (const char *const *h = volatile_hdrs; *h; h++)
        if (name.len == strlen(*h) && strncasecmp(name.p, *h, name.len) == 0) return true;
    for (const char *p = extra; p && *p;) { /* comma-separated `ignore` */
        while (*p == ',' || *p == ' ') p++;
        size_t l = strcspn(p, ", ");
        if (l && l == name.len && strncasecmp(p, name.p, l) == 0) return true;
        p += l;
    }
    return false;
}

static const fy_str_t *find(const hdr_t *v, size_t n, fy_str_t name)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].name.len == name.len && strncasecmp(v[i].name.p, name.p, name.len) == 0)
            return &v[i].value;
    return NULL;
}

/* {"added": [[n, v]...], "removed": [...], "changed": [[n, old, new]...]}; the number of
   differences. Redacted names compare as "[redacted]" on both sides. */
static int headers_diff(fy_inspector_t *ins, fy__sb_t *b, const fy_cs_flow_t *f, hdr_t *nv,
                        size_t nn, const char *extra)
{
    static const fy_str_t red = FY_STR_LIT("[redacted]");
    hdr_t *ov = fy_xcalloc(f->n_res_headers + 1, sizeof *ov);
    for (size_t i = 0; i < f->n_res_headers; i++)
        ov[i] = (hdr_t){f->res_headers[i].name, f->res_headers[i].value};
    for (size_t i = 0; i < nn; i++)
        if (fy_cs_header_redacted(ins->store, nv[i].name)) nv[i].value = red;
    int diffs = 0;
    const char *sep = "";
    fy__sb_puts(b, "{\"added\": [");
    for (size_t i = 0; i < nn; i++) {
        if (ignored(nv[i].name, extra) || find(ov, f->n_res_headers, nv[i].name)) continue;
        fy__sb_printf(b, "%s[", sep);
        fy__sb_json(b, nv[i].name.p, nv[i].name.len);
        fy__sb_puts(b, ", ");
        fy__sb_json(b, nv[i].value.p, nv[i].value.len);
        fy__sb_puts(b, "]");
        sep = ", ";
        diffs++;
    }
    fy__sb_puts(b, "], \"removed\": [");
    sep = "";
    for (size_t i = 0; i < f->n_res_headers; i++) {
        if (ignored(ov[i].name, extra) || find(nv, nn, ov[i].name)) continue;
        fy__sb_printf(b, "%s[", sep);
        fy__sb_json(b, ov[i].name.p, ov[i].name.len);
        fy__sb_puts(b, ", ");
        fy__sb_json(b, ov[i].value.p, ov[i].value.len);
        fy__sb_puts(b, "]");
        sep = ", ";
        diffs++;
    }
    fy__sb_puts(b, "], \"changed\": [");
    sep = "";
    for (size_t i = 0; i < f->n_res_headers; i++) {
        const fy_str_t *nvv = find(nv, nn, ov[i].name);
        if (ignored(ov[i].name, extra) || !nvv ||
            (nvv->len == ov[i].value.len && memcmp(nvv->p, ov[i].value.p, nvv->len) == 0))
            continue;
        fy__sb_printf(b, "%s[", sep);
        fy__sb_json(b, ov[i].name.p, ov[i].name.len);
        fy__sb_puts(b, ", ");
        fy__sb_json(b, ov[i].value.p, ov[i].value.len);
        fy__sb_puts(b, ", ");
        fy__sb_json(b, nvv->p, nvv->len);
        fy__sb_puts(b, "]");
        sep = ", ";
        diffs++;
    }
    fy__sb_puts(b, "]}");
    free(ov);
    return diffs;
}

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* One flow against the upstream: a result object into b; true when it differs. */
static bool compare_one(fy_inspector_t *ins, const fy_cs_flow_t *f, const char *host,
                        const char *port, bool tls, const char *extra, fy__sb_t *b)
{
    fy__sb_printf(b, "{\"id\": %llu, \"method\": ", (unsigned long long)f->id);
    fy__sb_json(b, f->method.p, f->method.len);
    fy__sb_puts(b, ", \"host\": ");
    fy__sb_json(b, f->authority.p, f->authority.len);
    fy__sb_puts(b, ", \"path\": ");
    fy__sb_json(b, f->target.p, f->target.len);
    fy__sb_t raw = {0};
    const char *err = NULL;
    double t0 = mono_ms();
    int rc = fy__insp_fetch(ins, f, host, port, tls, RESP_CAP, &raw, &err);
    double took = mono_ms() - t0;
    int st = 0;
    hdr_t hv[128];
    size_t nh = 0;
    char *body = NULL;
    size_t blen = 0;
    if (rc == 0 && parse_response(raw.p, raw.len, &st, hv, 128, &nh, &body, &blen) < 0) {
        rc = -1;
        err = "the upstream's answer is not HTTP/1.1";
    }
    if (rc < 0) {
        fy__sb_puts(b, ", \"error\": ");
        fy__sb_json(b, err, strlen(err));
        fy__sb_printf(b, ", \"status\": [%d, null], \"differs\": true}", f->status);
        free(raw.p);
        return true;
    }
    bool differs = st != f->status;
    fy__sb_printf(b, ", \"status\": [%d, %d], \"headers\": ", f->status, st);
    differs |= headers_diff(ins, b, f, hv, nh, extra) > 0;
    size_t rl = 0;
    char *red = fy_cs_redact_body(ins->store, body, blen, &rl);
    char nh_[65] = "", oh[65] = "";
    sha256_hex(red ? red : body, red ? rl : blen, nh_);
    sha256_hex(f->res_body.p ? f->res_body.p : "", f->res_body.len, oh);
    bool cut = f->flags & FY_CS_RES_TRUNCATED;
    bool same = !cut && strcmp(nh_, oh) == 0;
    differs |= !cut && !same;
    fy__sb_printf(b,
                  ", \"body\": {\"stored\": \"%s\", \"new\": \"%s\", \"same\": %s, \"size\": "
                  "[%llu, %zu]%s}",
                  cut ? "" : oh, nh_,
                  cut    ? "null"
                  : same ? "true"
                         : "false",
                  (unsigned long long)f->res_size, blen,
                  cut ? ", \"note\": \"the stored body was cut at body-cap\"" : "");
    fy__sb_printf(b, ", \"latency_ms\": [%u, %.3f], \"differs\": %s}", f->duration_ms, took,
                  differs ? "true" : "false");
    free(red);
    free(body);
    free(raw.p);
    return differs;
}

int fy__insp_compare(fy_inspector_t *ins, const char *form, size_t n, fy__sb_t *out)
{
    char *up = fy_xmalloc(n + 1), *flt = fy_xmalloc(n + 1), *ids = fy_xmalloc(n + 1),
         *ign = fy_xmalloc(n + 1);
    long ul = fy_insp_query_get(form, n, "upstream", up, n + 1);
    long fl = fy_insp_query_get(form, n, "filter", flt, n + 1);
    long il = fy_insp_query_get(form, n, "ids", ids, n + 1);
    if (fy_insp_query_get(form, n, "ignore", ign, n + 1) < 0) ign[0] = 0;
    size_t limit = (size_t)fy_insp_query_uint(form, n, "limit", 100, MAX_FLOWS);
    int status = 200;
    uint64_t *sel = fy_xcalloc(MAX_FLOWS, sizeof *sel);
    fy_insp_expr_t *x = NULL;
    /* upstream: http://host[:port] or https://host[:port] (a path is ignored) */
    bool tls = ul > 8 && strncasecmp(up, "https://", 8) == 0;
    bool plain = ul > 7 && strncasecmp(up, "http://", 7) == 0;
    char host[512] = "", port[16] = "";
    if (tls || plain) {
        const char *a = up + (tls ? 8 : 7);
        size_t al = strcspn(a, "/?#");
        char t[512];
        snprintf(t, sizeof t, "%.*s", (int)(al < 511 ? al : 511), a);
        char *colon = strrchr(t, ':'), *rb = strchr(t, ']');
        if (colon && (!rb || colon > rb)) {
            *colon = 0;
            snprintf(port, sizeof port, "%s", colon + 1);
        } else {
            snprintf(port, sizeof port, "%s", tls ? "443" : "80");
        }
        char *h = t;
        if (h[0] == '[' && rb) {
            *rb = 0;
            h++;
        }
        snprintf(host, sizeof host, "%s", h);
    }
    if (!host[0]) {
        fy__sb_puts(out, "{\"error\": \"upstream must be http://host[:port] or https://...\"}\n");
        status = 400;
        goto done;
    }
    size_t ns = 0;
    if (il > 0) {
        for (char *p = ids; *p && ns < limit;) {
            char *end;
            unsigned long long id = strtoull(p, &end, 10);
            if (end == p) break;
            sel[ns++] = id;
            if (*end != ',') break;
            p = end + 1;
        }
    } else {
        const char *err = NULL;
        size_t at = 0;
        x = fl > 0 ? fy_insp_filter_parse(flt, (size_t)fl, &err, &at) : NULL;
        if (!x && err) {
            fy__sb_puts(out, "{\"error\": ");
            fy__sb_json(out, err, strlen(err));
            fy__sb_printf(out, ", \"at\": %zu}\n", at);
            status = 400;
            goto done;
        }
        ns = fy__insp_select(ins, x, sel, limit);
    }
    fy__sb_puts(out, "{\"upstream\": ");
    fy__sb_json(out, up, (size_t)ul);
    fy__sb_puts(out, ", \"results\": [");
    size_t done = 0, differ = 0;
    for (size_t i = 0; i < ns && !atomic_load(&ins->stopping); i++) {
        fy_cs_loaded_t l;
        if (fy_cs_load(ins->store, sel[i], &l) < 0) continue;
        if (done) fy__sb_puts(out, ",\n");
        differ += compare_one(ins, &l.f, host, port, tls, ign, out);
        done++;
        fy_cs_loaded_free(&l);
    }
    fy__sb_printf(out, "], \"compared\": %zu, \"differ\": %zu}\n", done, differ);
done:
    fy_insp_filter_free(x);
    free(sel);
    free(up);
    free(flt);
    free(ids);
    free(ign);
    return status;
}
