/* HAR 1.2 of stored flows: one entry per flow (export), and HAR documents read back as flows
 * (import) through a small JSON reader of our own (the DOM lives in one arena per import). */
#include "ops/inspector_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"

static const char *http_version(int v)
{
    return v == 10 ? "HTTP/1.0" : v == 20 ? "HTTP/2.0" : v == 30 ? "HTTP/3.0" : "HTTP/1.1";
}

static bool printable(fy_str_t s)
{
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.p[i];
        if ((c < 0x20 && c != '\n' && c != '\r' && c != '\t') || c == 0x7f) return false;
    }
    return true;
}

static void hdrs(fy__sb_t *b, const fy_cs_header_t *h, size_t n)
{
    fy__sb_puts(b, "[");
    for (size_t i = 0; i < n; i++) {
        fy__sb_puts(b, i ? ", {\"name\": " : "{\"name\": ");
        fy__sb_json(b, h[i].name.p, h[i].name.len);
        fy__sb_puts(b, ", \"value\": ");
        fy__sb_json(b, h[i].value.p, h[i].value.len);
        fy__sb_puts(b, "}");
    }
    fy__sb_puts(b, "]");
}

static fy_str_t ctype(const fy_cs_header_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (h[i].name.len == 12 && strncasecmp(h[i].name.p, "content-type", 12) == 0)
            return h[i].value;
    return FY_STR_LIT("");
}

/* query string pairs of the target, as HAR wants them (undecoded) */
static void query(fy__sb_t *b, fy_str_t t)
{
    fy__sb_puts(b, "[");
    const char *q = memchr(t.p, '?', t.len);
    size_t n = 0;
    if (q) {
        const char *p = q + 1, *end = t.p + t.len;
        while (p < end) {
            const char *amp = memchr(p, '&', (size_t)(end - p));
            if (!amp) amp = end;
            const char *eq = memchr(p, '=', (size_t)(amp - p));
            if (amp > p) {
                fy__sb_puts(b, n++ ? ", {\"name\": " : "{\"name\": ");
                fy__sb_json(b, p, (size_t)((eq ? eq : amp) - p));
                fy__sb_puts(b, ", \"value\": ");
                fy__sb_json(b, eq ? eq + 1 : amp, eq ? (size_t)(amp - eq - 1) : 0);
                fy__sb_puts(b, "}");
            }
            p = amp + 1;
        }
    }
    fy__sb_puts(b, "]");
}

/* HAR 1.2 timings: dns, connect (which includes ssl), ssl, send, wait, receive, -1 for what
   did not happen or was not measured; wait is the origin's when measured, else the time to
   the response head; receive is what is left of the flow's time. */
static void har_timings(fy__sb_t *b, const fy_cs_flow_t *f)
{
    double dns = fy__insp_meta_ms(f, FY_CS_META_DNS), con = fy__insp_meta_ms(f, FY_CS_META_CONNECT);
    double ssl = fy__insp_meta_ms(f, FY_CS_META_TLS), wait = fy__insp_meta_ms(f, FY_CS_META_WAIT);
    if (dns < 0) dns = -1;
    if (con < 0) con = -1;
    if (ssl < 0) ssl = -1;
    if (con >= 0 && ssl >= 0) con += ssl;
    if (wait < 0) wait = f->ttfb_ms;
    double used = (dns > 0 ? dns : 0) + (con > 0 ? con : 0) + wait;
    double receive = f->duration_ms > used ? f->duration_ms - used : 0;
    fy__sb_printf(b,
                  "\"timings\": {\"blocked\": -1, \"dns\": %.3f, \"connect\": %.3f, \"ssl\": %.3f, "
                  "\"send\": 0, \"wait\": %.3f, \"receive\": %.3f}",
                  dns, con, ssl, wait, receive);
}

/* One stored WebSocket message (FY_CS_META_WS value): direction, opcode, flags, size and the
 * payload kept. False when the value is not one. */
typedef struct ws_msg {
    bool from_client;
    unsigned opcode, flags;
    unsigned long long size;
    fy_str_t data;
} ws_msg_t;

static bool ws_parse(fy_str_t v, ws_msg_t *m)
{
    if (v.len < 5 || (v.p[0] != '>' && v.p[0] != '<')) return false;
    const char *colon = memchr(v.p, ':', v.len);
    if (!colon || colon - v.p < 4 || colon - v.p > 23) return false;
    char buf[24];
    memcpy(buf, v.p, (size_t)(colon - v.p));
    buf[colon - v.p] = 0;
    char op[2] = {buf[1], 0}, fl[2] = {buf[2], 0};
    m->from_client = buf[0] == '>';
    m->opcode = (unsigned)strtoul(op, NULL, 16);
    m->flags = (unsigned)strtoul(fl, NULL, 16);
    m->size = strtoull(buf + 3, NULL, 10);
    m->data = fy_str(colon + 1, v.len - (size_t)(colon + 1 - v.p));
    return true;
}

/* Chrome DevTools' HAR extension for WebSocket frames: `_webSocketMessages`, one object per
 * message: type send/receive, time (seconds since the epoch: the flow's start, as Ferry keeps no
 * per-message time), opcode, data (text; binary and compressed payloads in base64, as Chrome
 * writes binary ones). Ours beside them: `_cut` when the payload was cut at body-cap, `_size`
 * when the message's size is not the payload's (cut, or JSON-redacted), `_compressed` for a
 * permessage-deflate payload kept as it was sent, `_inflated` for one kept inflated (its data is
 * the message's text). */
static void har_ws(fy__sb_t *b, const fy_cs_flow_t *f)
{
    bool first = true;
    for (size_t i = 0; i < f->n_meta; i++) {
        fy_str_t nm = f->meta[i].name;
        ws_msg_t m;
        if (nm.len != 2 || memcmp(nm.p, FY_CS_META_WS, 2) != 0 || !ws_parse(f->meta[i].value, &m))
            continue;
        fy__sb_printf(b, "%s{\"type\": \"%s\", \"time\": %.6f, \"opcode\": %u, \"data\": ",
                      first ? ", \"_webSocketMessages\": [" : ", ",
                      m.from_client ? "send" : "receive", (double)f->start_us / 1e6, m.opcode);
        first = false;
        if (m.opcode == 1 && (!(m.flags & 2) || (m.flags & 4)) && printable(m.data)) {
            fy__sb_json(b, m.data.p, m.data.len);
        } else {
            fy__sb_puts(b, "\"");
            fy__sb_base64(b, m.data.p, m.data.len);
            fy__sb_puts(b, "\", \"_encoding\": \"base64\"");
        }
        if (m.flags & 1) fy__sb_puts(b, ", \"_cut\": true");
        if (m.size != m.data.len) fy__sb_printf(b, ", \"_size\": %llu", m.size);
        if ((m.flags & 6) == 2) fy__sb_puts(b, ", \"_compressed\": true");
        if (m.flags & 4) fy__sb_puts(b, ", \"_inflated\": true");
        fy__sb_puts(b, "}");
    }
    if (!first) fy__sb_puts(b, "]");
}

void fy__insp_har_entry(fy__sb_t *b, const fy_cs_flow_t *f)
{
    time_t sec = (time_t)(f->start_us / 1000000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    char when[64];
    size_t wl = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + wl, sizeof when - wl, ".%03dZ", (int)((f->start_us / 1000) % 1000));
    fy__sb_printf(b, "{\"startedDateTime\": \"%s\", \"time\": %u, \"request\": {\"method\": ", when,
                  f->duration_ms);
    fy__sb_json(b, f->method.p, f->method.len);
    fy__sb_puts(b, ", \"url\": ");
    fy__sb_t u = {0};
    fy__sb_put(&u, f->scheme.p, f->scheme.len);
    fy__sb_puts(&u, "://");
    fy__sb_put(&u, f->authority.p, f->authority.len);
    if (f->target.len && f->target.p[0] == '/')
        fy__sb_put(&u, f->target.p, f->target.len);
    else
        fy__sb_puts(&u, "/");
    fy__sb_json(b, u.p, u.len);
    free(u.p);
    fy__sb_printf(
        b, ", \"httpVersion\": \"%s\", \"cookies\": [], \"headers\": ", http_version(f->version));
    hdrs(b, f->req_headers, f->n_req_headers);
    fy__sb_puts(b, ", \"queryString\": ");
    query(b, f->target);
    fy__sb_printf(b, ", \"headersSize\": -1, \"bodySize\": %llu", (unsigned long long)f->req_size);
    if (f->req_body.len) {
        fy__sb_puts(b, ", \"postData\": {\"mimeType\": ");
        fy_str_t t = ctype(f->req_headers, f->n_req_headers);
        fy__sb_json(b, t.p, t.len);
        fy__sb_puts(b, ", \"text\": ");
        if (printable(f->req_body)) {
            fy__sb_json(b, f->req_body.p, f->req_body.len);
        } else { /* HAR 1.2 postData has no encoding: ours is a documented extension */
            fy__sb_puts(b, "\"");
            fy__sb_base64(b, f->req_body.p, f->req_body.len);
            fy__sb_puts(b, "\", \"_encoding\": \"base64\"");
        }
        fy__sb_puts(b, "}");
    }
    fy__sb_printf(b, "}, \"response\": {\"status\": %d, \"statusText\": \"\", ", f->status);
    fy__sb_printf(
        b, "\"httpVersion\": \"%s\", \"cookies\": [], \"headers\": ", http_version(f->version));
    hdrs(b, f->res_headers, f->n_res_headers);
    fy__sb_printf(
        b, ", \"content\": {\"size\": %llu, \"mimeType\": ", (unsigned long long)f->res_size);
    fy_str_t t = ctype(f->res_headers, f->n_res_headers);
    fy__sb_json(b, t.p, t.len);
    if (f->res_body.len || !f->res_size) {
        fy__sb_puts(b, ", \"text\": ");
        if (printable(f->res_body)) {
            fy__sb_json(b, f->res_body.p, f->res_body.len);
        } else {
            fy__sb_puts(b, "\"");
            fy__sb_base64(b, f->res_body.p, f->res_body.len);
            fy__sb_puts(b, "\", \"encoding\": \"base64\"");
        }
    }
    if (f->flags & (FY_CS_REQ_TRUNCATED | FY_CS_RES_TRUNCATED))
        fy__sb_puts(b, ", \"comment\": \"body cut at inspector.body-cap\"");
    fy__sb_printf(b,
                  "}, \"redirectURL\": \"\", \"headersSize\": -1, \"bodySize\": %llu}, "
                  "\"cache\": {}, ",
                  (unsigned long long)f->res_size);
    har_timings(b, f);
    if (f->error.len) {
        fy__sb_puts(b, ", \"comment\": ");
        fy__sb_json(b, f->error.p, f->error.len);
    }
    har_ws(b, f);
    fy__sb_printf(b, ", \"_ferry\": {\"id\": %llu}}", (unsigned long long)f->id);
}

/* ---- a small JSON reader (import) ---- */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv {
    int t;
    double num;
    char *s; /* J_STR (decoded, NUL-terminated); keys of J_OBJ members */
    size_t slen;
    struct jv **items; /* J_ARR / J_OBJ */
    char **keys;       /* J_OBJ */
    size_t n;
} jv_t;

typedef struct jp {
    const char *p;
    size_t n, i;
    int depth;
    void **allocs; /* everything allocated, freed at the end */
    size_t na, ca;
} jp_t;

static void *jalloc(jp_t *j, size_t n)
{
    if (j->na == j->ca) {
        j->ca = j->ca ? j->ca * 2 : 256;
        j->allocs = fy_xrealloc(j->allocs, j->ca * sizeof *j->allocs);
    }
    void *p = fy_xcalloc(1, n ? n : 1);
    j->allocs[j->na++] = p;
    return p;
}

static void jws(jp_t *j)
{
    while (j->i < j->n &&
           (j->p[j->i] == ' ' || j->p[j->i] == '\t' || j->p[j->i] == '\n' || j->p[j->i] == '\r'))
        j->i++;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static char *jstring(jp_t *j, size_t *len)
{
    j->i++; /* '"' */
    size_t k = j->i;
    while (k < j->n && j->p[k] != '"') k += j->p[k] == '\\' ? 2 : 1;
    char *out = jalloc(j, k - j->i + 4); /* escapes only shrink (\uXXXX: 6 bytes -> <= 4) */
    size_t o = 0;
    while (j->i < j->n) {
        char c = j->p[j->i++];
        if (c == '"') {
            out[o] = 0;
            *len = o;
            return out;
        }
        if (c != '\\') {
            out[o++] = c;
            continue;
        }
        if (j->i >= j->n) return NULL;
        c = j->p[j->i++];
        switch (c) {
        case 'n':
            out[o++] = '\n';
            break;
        case 't':
            out[o++] = '\t';
            break;
        case 'r':
            out[o++] = '\r';
            break;
        case 'b':
            out[o++] = '\b';
            break;
        case 'f':
            out[o++] = '\f';
            break;
        case 'u': {
            if (j->i + 4 > j->n) return NULL;
            int cp = hex4(j->p + j->i);
            if (cp < 0) return NULL;
            j->i += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && j->i + 6 <= j->n && j->p[j->i] == '\\' &&
                j->p[j->i + 1] == 'u') {
                int lo = hex4(j->p + j->i + 2);
                if (lo >= 0xdc00 && lo < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    j->i += 6;
                }
            }
            if (cp < 0x80) {
                out[o++] = (char)cp;
            } else if (cp < 0x800) {
                out[o++] = (char)(0xc0 | cp >> 6);
                out[o++] = (char)(0x80 | (cp & 63));
            } else if (cp < 0x10000) {
                out[o++] = (char)(0xe0 | cp >> 12);
                out[o++] = (char)(0x80 | (cp >> 6 & 63));
                out[o++] = (char)(0x80 | (cp & 63));
            } else {
                out[o++] = (char)(0xf0 | cp >> 18);
                out[o++] = (char)(0x80 | (cp >> 12 & 63));
                out[o++] = (char)(0x80 | (cp >> 6 & 63));
                out[o++] = (char)(0x80 | (cp & 63));
            }
            break;
        }
        default:
            out[o++] = c;
        }
    }
    return NULL;
}

static jv_t *jvalue(jp_t *j);

static jv_t *jlist(jp_t *j, bool obj)
{
    jv_t *v = jalloc(j, sizeof *v);
    v->t = obj ? J_OBJ : J_ARR;
    size_t cap = 0;
    j->i++;
    jws(j);
    if (j->i < j->n && j->p[j->i] == (obj ? '}' : ']')) {
        j->i++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        if (obj) {
            jws(j);
            size_t kl;
            if (j->i >= j->n || j->p[j->i] != '"' || !(key = jstring(j, &kl))) return NULL;
            jws(j);
            if (j->i >= j->n || j->p[j->i] != ':') return NULL;
            j->i++;
        }
        jv_t *item = jvalue(j);
        if (!item) return NULL;
        if (v->n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            jv_t **ni = jalloc(j, nc * sizeof *ni);
            char **nk = jalloc(j, nc * sizeof *nk);
            if (v->n) {
                memcpy(ni, v->items, v->n * sizeof *ni);
                memcpy(nk, v->keys, v->n * sizeof *nk);
            }
            v->items = ni;
            v->keys = nk;
            cap = nc;
        }
        v->keys[v->n] = key;
        v->items[v->n++] = item;
        jws(j);
        if (j->i >= j->n) return NULL;
        char c = j->p[j->i++];
        if (c == ',') continue;
        if (c == (obj ? '}' : ']')) return v;
        return NULL;
    }
}

static jv_t *jvalue(jp_t *j)
{
    jws(j);
    if (j->i >= j->n || ++j->depth > 64) return NULL;
    jv_t *v = NULL;
    char c = j->p[j->i];
    if (c == '{' || c == '[') {
        v = jlist(j, c == '{');
    } else if (c == '"') {
        v = jalloc(j, sizeof *v);
        v->t = J_STR;
        if (!(v->s = jstring(j, &v->slen))) v = NULL;
    } else if (j->n - j->i >= 4 && !memcmp(j->p + j->i, "true", 4)) {
        v = jalloc(j, sizeof *v);
        v->t = J_BOOL;
        v->num = 1;
        j->i += 4;
    } else if (j->n - j->i >= 5 && !memcmp(j->p + j->i, "false", 5)) {
        v = jalloc(j, sizeof *v);
        v->t = J_BOOL;
        j->i += 5;
    } else if (j->n - j->i >= 4 && !memcmp(j->p + j->i, "null", 4)) {
        v = jalloc(j, sizeof *v);
        v->t = J_NULL;
        j->i += 4;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        char t[64];
        size_t k = 0;
        while (j->i < j->n && k < sizeof t - 1 && strchr("+-.eE0123456789", j->p[j->i]))
            t[k++] = j->p[j->i++];
        t[k] = 0;
        v = jalloc(j, sizeof *v);
        v->t = J_NUM;
        v->num = strtod(t, NULL);
    }
    j->depth--;
    return v;
}

static const jv_t *jget(const jv_t *o, const char *key)
{
    if (!o || o->t != J_OBJ) return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (o->keys[i] && strcmp(o->keys[i], key) == 0) return o->items[i];
    return NULL;
}

static fy_str_t jstr(const jv_t *v)
{
    return v && v->t == J_STR ? fy_str(v->s, v->slen) : FY_STR_LIT("");
}

static double jnum(const jv_t *v, double def)
{
    return v && v->t == J_NUM ? v->num : def;
}

/* A number of the document as an integer in [0, max] (NaN, negatives and huge values clamp:
   casting an out-of-range double is undefined). */
static uint64_t jint(const jv_t *v, uint64_t max)
{
    double d = jnum(v, 0);
    if (!(d > 0)) return 0;
    if (d >= (double)max) return max;
    return (uint64_t)d;
}

static fy_cs_header_t *jheaders(jp_t *j, const jv_t *a, size_t *n)
{
    *n = 0;
    if (!a || a->t != J_ARR) return NULL;
    fy_cs_header_t *h = jalloc(j, (a->n + 1) * sizeof *h);
    for (size_t i = 0; i < a->n; i++) {
        const jv_t *name = jget(a->items[i], "name"), *value = jget(a->items[i], "value");
        if (!name || name->t != J_STR) continue;
        h[*n].name = jstr(name);
        h[*n].value = jstr(value);
        (*n)++;
    }
    return h;
}

static int b64v(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

static fy_str_t unbase64(jp_t *j, fy_str_t s)
{
    char *out = jalloc(j, s.len);
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < s.len; i++) {
        int v = b64v(s.p[i]);
        if (v < 0) continue;
        acc = acc << 6 | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)(acc >> bits & 0xff);
        }
    }
    return fy_str(out, o);
}

/* "2026-12-01T10:00:00.123Z" (UTC or with an offset ignored) -> µs; 0 when unreadable */
static int64_t parse_time(fy_str_t s)
{
    struct tm tm = {0};
    char t[64];
    snprintf(t, sizeof t, "%.*s", (int)(s.len < 63 ? s.len : 63), s.p);
    int ms = 0;
    if (sscanf(t, "%4d-%2d-%2dT%2d:%2d:%2d.%3d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &ms) < 6)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000000 + (int64_t)ms * 1000;
}

long fy__insp_har_import(fy_inspector_t *ins, const char *s, size_t n, const char **err)
{
    jp_t j = {.p = s, .n = n};
    long count = -1;
    jv_t *root = jvalue(&j);
    const jv_t *entries = jget(jget(root, "log"), "entries");
    if (!root) {
        *err = "not JSON";
    } else if (!entries || entries->t != J_ARR) {
        *err = "not a HAR document (log.entries is missing)";
    } else {
        count = 0;
        for (size_t i = 0; i < entries->n; i++) {
            const jv_t *e = entries->items[i], *rq = jget(e, "request"), *rs = jget(e, "response");
            if (!rq || !rs) continue;
            fy_cs_flow_t f = {0};
            f.start_us = parse_time(jstr(jget(e, "startedDateTime")));
            f.duration_ms = (uint32_t)jint(jget(e, "time"), UINT32_MAX);
            f.ttfb_ms = (uint32_t)jint(jget(jget(e, "timings"), "wait"), UINT32_MAX);
            f.status = (int)jint(jget(rs, "status"), 999);
            fy_str_t hv = jstr(jget(rq, "httpVersion"));
            f.version = hv.len >= 6 && hv.p[5] == '2'   ? 20
                        : hv.len >= 6 && hv.p[5] == '3' ? 30
                                                        : 11;
            f.flags = FY_CS_IMPORTED;
            f.method = jstr(jget(rq, "method"));
            fy_str_t url = jstr(jget(rq, "url"));
            const char *se = url.len ? strstr(url.p, "://") : NULL;
            if (!se) continue;
            f.scheme = fy_str(url.p, (size_t)(se - url.p));
            const char *auth = se + 3, *slash = strchr(auth, '/');
            f.authority = fy_str(auth, slash ? (size_t)(slash - auth) : strlen(auth));
            f.target = slash ? fy_str(slash, strlen(slash)) : FY_STR_LIT("/");
            f.req_headers = jheaders(&j, jget(rq, "headers"), &f.n_req_headers);
            f.res_headers = jheaders(&j, jget(rs, "headers"), &f.n_res_headers);
            const jv_t *pd = jget(rq, "postData");
            f.req_body = jstr(jget(pd, "text"));
            if (jstr(jget(pd, "_encoding")).len == 6) f.req_body = unbase64(&j, f.req_body);
            const jv_t *ct = jget(rs, "content");
            f.res_body = jstr(jget(ct, "text"));
            if (jstr(jget(ct, "encoding")).len == 6) f.res_body = unbase64(&j, f.res_body);
            f.req_size = f.req_body.len;
            const jv_t *sz = jget(ct, "size");
            f.res_size =
                sz && sz->t == J_NUM && sz->num >= 0 ? jint(sz, UINT64_MAX / 2) : f.res_body.len;
            const jv_t *wsm = jget(e, "_webSocketMessages");
            size_t nws = wsm && wsm->t == J_ARR ? wsm->n : 0;
            if (nws > 1000) nws = 1000; /* FY_INSP_WS_MAX_MSGS, as a capture keeps */
            fy_cs_header_t *meta = jalloc(&j, (4 + nws) * sizeof *meta);
            char mv[4][24];
            static const char *const tn[4] = {"dns", "connect", "ssl", "wait"};
            static const char *const mn[4] = {FY_CS_META_DNS, FY_CS_META_CONNECT, FY_CS_META_TLS,
                                              FY_CS_META_WAIT};
            const jv_t *tm = jget(e, "timings");
            const jv_t *sv = jget(tm, "ssl");
            double ssl = sv && sv->t == J_NUM ? sv->num : -1;
            for (int k = 0; k < 4; k++) {
                const jv_t *v = jget(tm, tn[k]);
                if (!v || v->t != J_NUM || k == 3) continue; /* wait is the ttfb above */
                double ms = v->num;
                if (k == 1 && ms >= 0 && ssl >= 0) ms -= ssl; /* ours: connect without TLS */
                snprintf(mv[f.n_meta], sizeof mv[0], "%ld", ms < 0 ? -1L : (long)(ms * 1000));
                meta[f.n_meta].name = fy_str(mn[k], strlen(mn[k]));
                meta[f.n_meta].value = fy_str(mv[f.n_meta], strlen(mv[f.n_meta]));
                f.n_meta++;
            }
            for (size_t k = 0; k < nws; k++) {
                const jv_t *m = wsm->items[k];
                fy_str_t data = jstr(jget(m, "data")), type = jstr(jget(m, "type"));
                bool b64 = jstr(jget(m, "_encoding")).len == 6 ||
                           (jint(jget(m, "opcode"), 15) == 2 && !jget(m, "_encoding"));
                if (b64) data = unbase64(&j, data);
                const jv_t *cut = jget(m, "_cut"), *cmp = jget(m, "_compressed");
                const jv_t *inf = jget(m, "_inflated");
                unsigned fl = (cut && cut->t == J_BOOL && cut->num ? 1u : 0u) |
                              (cmp && cmp->t == J_BOOL && cmp->num ? 2u : 0u) |
                              (inf && inf->t == J_BOOL && inf->num ? 6u : 0u);
                const jv_t *msz = jget(m, "_size");
                unsigned long long size = msz ? jint(msz, UINT64_MAX / 2) : data.len;
                char *v = jalloc(&j, 32 + data.len);
                int hl = snprintf(v, 32, "%c%x%x%llu:", type.len == 4 ? '>' : '<',
                                  (unsigned)jint(jget(m, "opcode"), 15), fl, size);
                if (data.len) memcpy(v + hl, data.p, data.len);
                meta[f.n_meta].name = FY_STR_LIT(FY_CS_META_WS);
                meta[f.n_meta].value = fy_str(v, (size_t)hl + data.len);
                f.n_meta++;
            }
            f.meta = meta;
            if (fy_cs_submit(ins->store, &f) == 0) count++;
        }
    }
    for (size_t i = 0; i < j.na; i++) free(j.allocs[i]);
    free(j.allocs);
    return count;
}
