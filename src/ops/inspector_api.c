/* The inspector's JSON API and UI files (docs/INSPECTOR.md lists the endpoints). */
#include "ops/inspector_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/alloc.h"
#include "ops/inspector_filter.h"

#define PAGE_MAX 5000
#define BATCH 512

static const char *version_name(int v)
{
    return v == 10 ? "HTTP/1.0" : v == 20 ? "HTTP/2" : v == 30 ? "HTTP/3" : "HTTP/1.1";
}

static void respond(fy__sb_t *o, int status, const char *type, const char *extra, const char *p,
                    size_t n)
{
    const char *reason = status == 200   ? "OK"
                         : status == 400 ? "Bad Request"
                         : status == 404 ? "Not Found"
                         : status == 405 ? "Method Not Allowed"
                         : status == 502 ? "Bad Gateway"
                                         : "Error";
    fy__sb_printf(o,
                  "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                  "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
                  "Content-Security-Policy: default-src 'self'; img-src 'self' data: blob:; "
                  "style-src 'self' 'unsafe-inline'\r\n%sConnection: close\r\n\r\n",
                  status, reason, type, n, extra ? extra : "");
    fy__sb_put(o, p, n);
}

static int json_reply(fy__sb_t *o, int status, fy__sb_t *body)
{
    respond(o, status, "application/json", NULL, body->p ? body->p : "", body->len);
    free(body->p);
    return status;
}

static int error_reply(fy__sb_t *o, int status, const char *msg, long at)
{
    fy__sb_t b = {0};
    fy__sb_puts(&b, "{\"error\": ");
    fy__sb_json(&b, msg, strlen(msg));
    if (at >= 0) fy__sb_printf(&b, ", \"at\": %ld", at);
    fy__sb_puts(&b, "}\n");
    return json_reply(o, status, &b);
}

/* ---- entries copied out of the index (matching may read segments: not under its lock) ---- */

typedef struct batch {
    fy_cs_entry_t v[BATCH];
    size_t n;
    uint64_t last;
} batch_t;

static char *sdup(const char *s)
{
    return fy_xstrdup(s ? s : "");
}

static bool collect_cb(const fy_cs_entry_t *e, void *ud)
{
    batch_t *b = ud;
    fy_cs_entry_t *c = &b->v[b->n++];
    *c = *e;
    c->method = sdup(e->method);
    c->host = sdup(e->host);
    c->target = sdup(e->target);
    c->ctype = sdup(e->ctype);
    b->last = e->id;
    return b->n < BATCH;
}

static void batch_free(batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->v[i].method);
        free(b->v[i].host);
        free(b->v[i].target);
        free(b->v[i].ctype);
    }
    b->n = 0;
}

typedef struct lazy {
    fy_inspector_t *ins;
    const fy_cs_entry_t *e;
    fy_cs_loaded_t l;
    int state; /* 0 not tried, 1 loaded, -1 failed */
} lazy_t;

static const fy_cs_flow_t *lazy_load(void *ud)
{
    lazy_t *z = ud;
    if (!z->state) z->state = fy_cs_load_entry(z->ins->store, z->e, &z->l) == 0 ? 1 : -1;
    return z->state == 1 ? &z->l.f : NULL;
}

static bool matches(fy_inspector_t *ins, const fy_insp_expr_t *x, const fy_cs_entry_t *e)
{
    if (!x) return true;
    lazy_t z = {.ins = ins, .e = e};
    fy_insp_subject_t s = {.e = e, .load = lazy_load, .ud = &z};
    bool m = fy_insp_filter_match(x, &s);
    if (z.state == 1) fy_cs_loaded_free(&z.l);
    return m;
}

size_t fy__insp_select(fy_inspector_t *ins, const fy_insp_expr_t *x, uint64_t *ids, size_t max)
{
    fy_cs_flush(ins->store);
    batch_t *bt = fy_xmalloc(sizeof *bt);
    uint64_t from = 0;
    size_t n = 0;
    while (n < max) {
        bt->n = 0;
        fy_cs_walk(ins->store, false, from, collect_cb, bt);
        if (!bt->n) break;
        for (size_t i = 0; i < bt->n && n < max; i++)
            if (matches(ins, x, &bt->v[i])) ids[n++] = bt->v[i].id;
        from = bt->last;
        size_t got = bt->n;
        batch_free(bt);
        if (got < BATCH) break;
    }
    free(bt);
    return n;
}

static void flags_json(fy__sb_t *b, unsigned f)
{
    fy__sb_puts(b, "[");
    const char *sep = "";
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{FY_CS_REQ_TRUNCATED, "request-truncated"},
                 {FY_CS_RES_TRUNCATED, "response-truncated"},
                 {FY_CS_INTERCEPTED, "intercepted"},
                 {FY_CS_IMPORTED, "imported"},
                 {FY_CS_REPLAY, "replay"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (f & names[i].bit) {
            fy__sb_printf(b, "%s\"%s\"", sep, names[i].name);
            sep = ", ";
        }
    fy__sb_puts(b, "]");
}

static void summary(fy__sb_t *b, const fy_cs_entry_t *e)
{
    fy__sb_printf(b, "{\"id\": %llu, \"time\": %lld, \"method\": ", (unsigned long long)e->id,
                  (long long)(e->start_us / 1000));
    fy__sb_json(b, e->method, strlen(e->method));
    fy__sb_puts(b, ", \"host\": ");
    fy__sb_json(b, e->host, strlen(e->host));
    fy__sb_puts(b, ", \"path\": ");
    fy__sb_json(b, e->target, strlen(e->target));
    fy__sb_printf(b, ", \"status\": %d, \"type\": ", e->status);
    fy__sb_json(b, e->ctype, strlen(e->ctype));
    fy__sb_printf(b,
                  ", \"size\": %llu, \"requestSize\": %llu, \"duration\": %u, \"protocol\": "
                  "\"%s\", \"stream\": %u, \"flags\": ",
                  (unsigned long long)e->res_size, (unsigned long long)e->req_size, e->duration_ms,
                  version_name(e->version), e->stream_id);
    flags_json(b, e->flags);
    fy__sb_puts(b, "}");
}

static fy_insp_expr_t *parse_filter(const fy__insp_req_t *r, fy__sb_t *o, int *status)
{
    char f[4096];
    *status = 0;
    long fl = fy_insp_query_get(r->query, r->query_len, "filter", f, sizeof f);
    if (fl <= 0) return NULL;
    const char *err;
    size_t at;
    fy_insp_expr_t *x = fy_insp_filter_parse(f, (size_t)fl, &err, &at);
    if (!x && err) *status = error_reply(o, 400, err, (long)at);
    return x;
}

/* GET /api/flows?filter=F&limit=N&before=ID (newest first) or &after=ID (oldest first) */
static int flows_list(fy_inspector_t *ins, const fy__insp_req_t *r, fy__sb_t *o)
{
    int st;
    fy_insp_expr_t *x = parse_filter(r, o, &st);
    if (st) return st;
    unsigned long long limit = fy_insp_query_uint(r->query, r->query_len, "limit", 500, PAGE_MAX);
    unsigned long long after = fy_insp_query_uint(r->query, r->query_len, "after", 0, ~0ull);
    unsigned long long before = fy_insp_query_uint(r->query, r->query_len, "before", 0, ~0ull);
    bool reverse = after == 0;
    fy__sb_t b = {0};
    fy__sb_puts(&b, "{\"flows\": [");
    size_t n = 0;
    bool more = false;
    batch_t *bt = fy_xmalloc(sizeof *bt);
    bt->n = 0;
    uint64_t from = reverse ? before : after;
    for (;;) {
        bt->n = 0;
        fy_cs_walk(ins->store, reverse, from, collect_cb, bt);
        if (!bt->n) break;
        for (size_t i = 0; i < bt->n; i++) {
            if (!matches(ins, x, &bt->v[i])) continue;
            if (n == limit) {
                more = true;
                break;
            }
            if (n++) fy__sb_puts(&b, ",\n");
            summary(&b, &bt->v[i]);
        }
        from = bt->last;
        size_t got = bt->n;
        batch_free(bt);
        if (more || got < BATCH) break;
    }
    batch_free(bt);
    free(bt);
    fy_cs_stats_t s;
    fy_cs_stats(ins->store, &s);
    fy__sb_printf(&b, "], \"more\": %s, \"stored\": %llu, \"last\": %llu}\n",
                  more ? "true" : "false", (unsigned long long)s.flows,
                  (unsigned long long)s.last_id);
    fy_insp_filter_free(x);
    return json_reply(o, 200, &b);
}

static bool is_text(fy_str_t s)
{
    for (size_t i = 0; i < s.len;) {
        unsigned char c = (unsigned char)s.p[i];
        if (c < 0x20 && c != '\n' && c != '\r' && c != '\t') return false;
        if (c == 0x7f) return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k = 0;
        if ((c & 0xe0) == 0xc0)
            k = 2;
        else if ((c & 0xf0) == 0xe0)
            k = 3;
        else if ((c & 0xf8) == 0xf0)
            k = 4;
        if (!k) return false;
        if (i + k > s.len) return i + 4 > s.len; /* a character cut by the body cap */
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s.p[i + j] & 0xc0) != 0x80) return false;
        i += k;
    }
    return true;
}

static void headers_json(fy__sb_t *b, const fy_cs_header_t *h, size_t n)
{
    fy__sb_puts(b, "[");
    for (size_t i = 0; i < n; i++) {
        fy__sb_puts(b, i ? ", [" : "[");
        fy__sb_json(b, h[i].name.p, h[i].name.len);
        fy__sb_puts(b, ", ");
        fy__sb_json(b, h[i].value.p, h[i].value.len);
        fy__sb_puts(b, "]");
    }
    fy__sb_puts(b, "]");
}

static void body_json(fy__sb_t *b, fy_str_t body, uint64_t size, bool cut)
{
    fy__sb_printf(b, "\"size\": %llu, \"kept\": %zu, \"truncated\": %s, ", (unsigned long long)size,
                  body.len, cut ? "true" : "false");
    if (is_text(body)) {
        fy__sb_puts(b, "\"text\": ");
        fy__sb_json(b, body.p, body.len);
    } else {
        fy__sb_puts(b, "\"base64\": \"");
        fy__sb_base64(b, body.p, body.len);
        fy__sb_puts(b, "\"");
    }
}

static fy_str_t find_hdr(const fy_cs_header_t *h, size_t n, const char *lower)
{
    size_t ln = strlen(lower);
    for (size_t i = 0; i < n; i++)
        if (h[i].name.len == ln && strncasecmp(h[i].name.p, lower, ln) == 0) return h[i].value;
    return FY_STR_LIT("");
}

static void flow_json(fy__sb_t *b, const fy_cs_flow_t *f)
{
    fy__sb_printf(b,
                  "{\"id\": %llu, \"time\": %lld, \"duration\": %u, \"ttfb\": %u, \"status\": %d, ",
                  (unsigned long long)f->id, (long long)(f->start_us / 1000), f->duration_ms,
                  f->ttfb_ms, f->status);
    fy__sb_puts(b, "\"method\": ");
    fy__sb_json(b, f->method.p, f->method.len);
    fy__sb_puts(b, ", \"scheme\": ");
    fy__sb_json(b, f->scheme.p, f->scheme.len);
    fy__sb_puts(b, ", \"host\": ");
    fy__sb_json(b, f->authority.p, f->authority.len);
    fy__sb_puts(b, ", \"path\": ");
    fy__sb_json(b, f->target.p, f->target.len);
    fy__sb_printf(b,
                  ", \"protocol\": \"%s\", \"stream\": %u, \"error\": ", version_name(f->version),
                  f->stream_id);
    fy__sb_json(b, f->error.p, f->error.len);
    fy__sb_puts(b, ", \"flags\": ");
    flags_json(b, f->flags);
    fy__sb_puts(b, ", ");
    fy__insp_meta_json(b, f);
    fy__sb_puts(b, ", ");
    fy__insp_ws_json(b, f);
    fy__sb_puts(b, ",\n \"request\": {\"headers\": ");
    headers_json(b, f->req_headers, f->n_req_headers);
    fy__sb_puts(b, ", \"type\": ");
    fy_str_t t = find_hdr(f->req_headers, f->n_req_headers, "content-type");
    fy__sb_json(b, t.p, t.len);
    fy__sb_puts(b, ", ");
    body_json(b, f->req_body, f->req_size, f->flags & FY_CS_REQ_TRUNCATED);
    fy__sb_puts(b, "},\n \"response\": {\"headers\": ");
    headers_json(b, f->res_headers, f->n_res_headers);
    fy__sb_puts(b, ", \"type\": ");
    t = find_hdr(f->res_headers, f->n_res_headers, "content-type");
    fy__sb_json(b, t.p, t.len);
    fy__sb_puts(b, ", ");
    body_json(b, f->res_body, f->res_size, f->flags & FY_CS_RES_TRUNCATED);
    fy__sb_puts(b, "}}\n");
}

/* curl command line for f (POSIX shell quoting). */
static void sq(fy__sb_t *b, const char *s, size_t n)
{
    fy__sb_puts(b, "'");
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\'')
            fy__sb_puts(b, "'\\''");
        else
            fy__sb_put(b, s + i, 1);
    }
    fy__sb_puts(b, "'");
}

static void curl_cmd(fy__sb_t *b, const fy_cs_flow_t *f)
{
    fy__sb_puts(b, "curl");
    if (f->method.len != 3 || memcmp(f->method.p, "GET", 3)) {
        fy__sb_puts(b, " -X ");
        sq(b, f->method.p, f->method.len);
    }
    for (size_t i = 0; i < f->n_req_headers; i++) {
        fy_str_t n = f->req_headers[i].name;
        if ((n.len == 4 && strncasecmp(n.p, "host", 4) == 0) ||
            (n.len == 14 && strncasecmp(n.p, "content-length", 14) == 0) ||
            (n.len == 16 && strncasecmp(n.p, "proxy-connection", 16) == 0) ||
            (n.len && n.p[0] == ':'))
            continue;
        fy__sb_puts(b, " \\\n  -H ");
        fy__sb_t h = {0};
        fy__sb_put(&h, n.p, n.len);
        fy__sb_puts(&h, ": ");
        fy__sb_put(&h, f->req_headers[i].value.p, f->req_headers[i].value.len);
        sq(b, h.p, h.len);
        free(h.p);
    }
    if (f->req_body.len) {
        fy__sb_puts(b, " \\\n  --data-binary ");
        sq(b, f->req_body.p, f->req_body.len);
    }
    fy__sb_puts(b, " \\\n  ");
    fy__sb_t u = {0};
    fy__sb_put(&u, f->scheme.p, f->scheme.len);
    fy__sb_puts(&u, "://");
    fy__sb_put(&u, f->authority.p, f->authority.len);
    fy__sb_put(&u, f->target.p, f->target.len);
    sq(b, u.p, u.len);
    free(u.p);
    fy__sb_puts(b, "\n");
}

/* HAR of a filtered set (?filter=) or of ?ids=1,2,3 */
static int export_har(fy_inspector_t *ins, const fy__insp_req_t *r, fy__sb_t *o)
{
    int st;
    fy_insp_expr_t *x = parse_filter(r, o, &st);
    if (st) return st;
    char ids[8192];
    long il = fy_insp_query_get(r->query, r->query_len, "ids", ids, sizeof ids);
    fy_cs_flush(ins->store);
    fy__sb_t b = {0};
    fy__sb_puts(&b,
                "{\"log\": {\"version\": \"1.2\", \"creator\": {\"name\": \"ferry\", \"version\": "
                "\"0.1.0\"}, \"pages\": [], \"entries\": [");
    size_t n = 0;
    if (il > 0) {
        char *p = ids;
        while (*p) {
            char *end;
            unsigned long long id = strtoull(p, &end, 10);
            if (end == p) break;
            fy_cs_loaded_t l;
            if (fy_cs_load(ins->store, id, &l) == 0) {
                fy__sb_puts(&b, n++ ? ",\n" : "\n");
                fy__insp_har_entry(&b, &l.f);
                fy_cs_loaded_free(&l);
            }
            p = *end == ',' ? end + 1 : end;
            if (*end != ',') break;
        }
    } else {
        batch_t *bt = fy_xmalloc(sizeof *bt);
        uint64_t from = 0;
        for (;;) {
            bt->n = 0;
            fy_cs_walk(ins->store, false, from, collect_cb, bt);
            if (!bt->n) break;
            for (size_t i = 0; i < bt->n; i++) {
                if (!matches(ins, x, &bt->v[i])) continue;
                fy_cs_loaded_t l;
                if (fy_cs_load_entry(ins->store, &bt->v[i], &l) == 0) {
                    fy__sb_puts(&b, n++ ? ",\n" : "\n");
                    fy__insp_har_entry(&b, &l.f);
                    fy_cs_loaded_free(&l);
                }
            }
            from = bt->last;
            size_t got = bt->n;
            batch_free(bt);
            if (got < BATCH) break;
        }
        free(bt);
    }
    fy__sb_puts(&b, "\n]}}\n");
    fy_insp_filter_free(x);
    respond(o, 200, "application/json",
            "Content-Disposition: attachment; filename=\"ferry-flows.har\"\r\n", b.p, b.len);
    free(b.p);
    return 200;
}

static int stats(fy_inspector_t *ins, fy__sb_t *o)
{
    fy_cs_stats_t s;
    fy_cs_stats(ins->store, &s);
    fy__sb_t b = {0};
    fy__sb_printf(
        &b,
        "{\"stored\": %llu, \"flows\": %llu, \"bytes\": %llu, \"segments\": %llu, "
        "\"deleted\": %llu, \"queued\": %llu, \"dropped_queue\": %llu, "
        "\"dropped_write\": %llu, \"sampled_out\": %llu, \"last\": %llu}\n",
        (unsigned long long)s.stored, (unsigned long long)s.flows, (unsigned long long)s.bytes,
        (unsigned long long)s.segments, (unsigned long long)s.deleted, (unsigned long long)s.queued,
        (unsigned long long)s.dropped_queue, (unsigned long long)s.dropped_write,
        (unsigned long long)atomic_load(&ins->sampled_out), (unsigned long long)s.last_id);
    return json_reply(o, 200, &b);
}

/* Edits of a replay (application/x-www-form-urlencoded): method, url (scheme://host/path),
   headers (one "name: value" per line), body. Absent fields keep the flow's. */
static int replay(fy_inspector_t *ins, const fy__insp_req_t *r, uint64_t id, fy__sb_t *o)
{
    fy_cs_loaded_t l;
    if (fy_cs_load(ins->store, id, &l) < 0) return error_reply(o, 404, "no such flow", -1);
    fy_cs_flow_t f = l.f;
    size_t cap = r->body_len + 1;
    char *m = fy_xmalloc(cap), *u = fy_xmalloc(cap), *h = fy_xmalloc(cap), *bd = fy_xmalloc(cap);
    fy_cs_header_t *hv = NULL;
    long ml = fy_insp_query_get(r->body, r->body_len, "method", m, cap);
    long ul = fy_insp_query_get(r->body, r->body_len, "url", u, cap);
    long hl = fy_insp_query_get(r->body, r->body_len, "headers", h, cap);
    long bl = fy_insp_query_get(r->body, r->body_len, "body", bd, cap);
    const char *err = NULL;
    if (ml > 0) f.method = fy_str(m, (size_t)ml);
    if (ul > 0) {
        char *se = strstr(u, "://");
        char *slash = se ? strchr(se + 3, '/') : NULL;
        if (!se || se == u) {
            err = "url must be scheme://host/path";
        } else {
            f.scheme = fy_str(u, (size_t)(se - u));
            f.authority = fy_str(se + 3, slash ? (size_t)(slash - se - 3) : strlen(se + 3));
            f.target = slash ? fy_str(slash, strlen(slash)) : FY_STR_LIT("/");
        }
    }
    if (hl >= 0) {
        size_t n = 0;
        hv = fy_xcalloc((size_t)hl / 2 + 2, sizeof *hv);
        for (char *p = h; *p;) {
            char *eol = strchr(p, '\n');
            size_t len = eol ? (size_t)(eol - p) : strlen(p);
            if (len && p[len - 1] == '\r') len--;
            char *colon = memchr(p, ':', len);
            if (colon && colon > p) {
                char *v = colon + 1;
                while (v < p + len && *v == ' ') v++;
                hv[n].name = fy_str(p, (size_t)(colon - p));
                hv[n].value = fy_str(v, (size_t)(p + len - v));
                n++;
            } else if (len) {
                err = "each header line must be name: value";
            }
            if (!eol) break;
            p = eol + 1;
        }
        f.req_headers = hv;
        f.n_req_headers = n;
    }
    if (bl >= 0) {
        f.req_body = fy_str(bd, (size_t)bl);
        f.req_size = (uint64_t)bl;
    }
    int status = err ? -1 : fy__insp_replay(ins, &f, &err);
    fy__sb_t b = {0};
    if (status < 0) {
        fy__sb_puts(&b, "{\"error\": ");
        fy__sb_json(&b, err, strlen(err));
        fy__sb_puts(&b, "}\n");
    } else {
        fy__sb_printf(&b, "{\"status\": %d}\n", status);
    }
    free(m);
    free(u);
    free(h);
    free(bd);
    free(hv);
    fy_cs_loaded_free(&l);
    return json_reply(o, status < 0 ? 502 : 200, &b);
}

static int import_har(fy_inspector_t *ins, const fy__insp_req_t *r, fy__sb_t *o)
{
    const char *err = NULL;
    long n = fy__insp_har_import(ins, r->body, r->body_len, &err);
    if (n < 0) return error_reply(o, 400, err, -1);
    fy_cs_flush(ins->store);
    fy__sb_t b = {0};
    fy__sb_printf(&b, "{\"imported\": %ld}\n", n);
    return json_reply(o, 200, &b);
}

/* GET: the breakpoints and what they hold; POST (form `filter` for requests, `response` for
   responses): set them, blank clears, absent leaves alone. */
static int breakpoint(fy_inspector_t *ins, const fy__insp_req_t *r, bool post, fy__sb_t *o)
{
    for (int which = 0; post && which < 2; which++) {
        char *f = fy_xmalloc(r->body_len + 1);
        long fl = fy_insp_query_get(r->body, r->body_len, which ? "response" : "filter", f,
                                    r->body_len + 1);
        const char *err = NULL;
        size_t at = 0;
        /* a form without `filter` leaves the request breakpoint alone, and so for `response` */
        int rc = fl < 0 ? 0 : fy__insp_break_set(ins, which, f, (size_t)fl, &err, &at);
        free(f);
        if (rc < 0) return error_reply(o, 400, err, (long)at);
    }
    fy__sb_t b = {0};
    fy__insp_break_list(ins, &b);
    return json_reply(o, 200, &b);
}

/* POST /api/held/ID/release (form `headers`: replacement headers; for a response also
   `status` and `body`) or .../drop */
static int held(fy_inspector_t *ins, const fy__insp_req_t *r, const char *rest, fy__sb_t *o)
{
    char *end;
    unsigned long long id = strtoull(rest, &end, 10);
    bool drop = strcmp(end, "/drop") == 0;
    if (end == rest || (!drop && strcmp(end, "/release") != 0))
        return error_reply(o, 404, "no such resource", -1);
    char *h = fy_xmalloc(r->body_len + 1), *bd = fy_xmalloc(r->body_len + 1);
    long hl = fy_insp_query_get(r->body, r->body_len, "headers", h, r->body_len + 1);
    long bl = fy_insp_query_get(r->body, r->body_len, "body", bd, r->body_len + 1);
    fy__insp_decision_t d = {
        .drop = drop,
        .headers = hl >= 0 ? h : NULL,
        .status = (int)fy_insp_query_uint(r->body, r->body_len, "status", 0, 999),
        .body = bl >= 0 ? bd : NULL,
        .body_len = bl >= 0 ? (size_t)bl : 0,
    };
    int rc = fy__insp_break_decide(ins, id, &d);
    free(h);
    free(bd);
    if (rc < 0)
        return error_reply(o, 404, "no such held request (released, dropped, timed out?)", -1);
    fy__sb_t b = {0};
    fy__sb_printf(&b, "{\"%s\": %llu}\n", drop ? "dropped" : "released", id);
    return json_reply(o, 200, &b);
}

int fy__insp_api(fy_inspector_t *ins, const fy__insp_req_t *r, fy__sb_t *o)
{
    bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
    bool post = strcmp(r->method, "POST") == 0;
    const char *p = r->path;
    if (get && (strcmp(p, "/") == 0 || strncmp(p, "/ui/", 4) == 0)) {
        const char *name = strcmp(p, "/") == 0 ? "index.html" : p + 4;
        for (size_t i = 0; i < fy__insp_nassets; i++)
            if (strcmp(fy__insp_assets[i].name, name) == 0) {
                respond(o, 200, fy__insp_assets[i].type, NULL,
                        (const char *)fy__insp_assets[i].data, fy__insp_assets[i].len);
                return 200;
            }
        return error_reply(o, 404, "no such file", -1);
    }
    if (get && strcmp(p, "/api/flows") == 0) return flows_list(ins, r, o);
    if (get && strcmp(p, "/api/events") == 0) {
        int st;
        fy_insp_expr_t *x = parse_filter(r, o, &st);
        fy_insp_filter_free(x);
        return st; /* 0: the caller streams */
    }
    if (get && strcmp(p, "/api/stats") == 0) return stats(ins, o);
    if (strcmp(p, "/api/breakpoint") == 0 && (get || post)) return breakpoint(ins, r, post, o);
    if (post && strncmp(p, "/api/held/", 10) == 0) return held(ins, r, p + 10, o);
    if (post && strcmp(p, "/api/compare") == 0) {
        fy__sb_t b = {0};
        int st = fy__insp_compare(ins, r->body, r->body_len, &b);
        return json_reply(o, st, &b);
    }
    if (get && strcmp(p, "/api/export.har") == 0) return export_har(ins, r, o);
    if (post && strcmp(p, "/api/import") == 0) return import_har(ins, r, o);
    if (strncmp(p, "/api/flows/", 11) == 0) {
        char *end;
        unsigned long long id = strtoull(p + 11, &end, 10);
        if (end == p + 11) return error_reply(o, 404, "no such flow", -1);
        if (post && strcmp(end, "/replay") == 0) return replay(ins, r, id, o);
        if (!get) return error_reply(o, 405, "method not allowed", -1);
        fy_cs_loaded_t l;
        int e = fy_cs_load(ins->store, id, &l);
        if (e < 0) return error_reply(o, 404, e == -ENOENT ? "no such flow" : "unreadable", -1);
        int st = 200;
        if (*end == 0) {
            fy__sb_t b = {0};
            flow_json(&b, &l.f);
            st = json_reply(o, 200, &b);
        } else if (strcmp(end, "/request/body") == 0 || strcmp(end, "/response/body") == 0) {
            bool res = end[1] == 'r' && end[3] == 's';
            fy_str_t body = res ? l.f.res_body : l.f.req_body;
            fy_str_t t = res ? find_hdr(l.f.res_headers, l.f.n_res_headers, "content-type")
                             : find_hdr(l.f.req_headers, l.f.n_req_headers, "content-type");
            char type[256];
            snprintf(type, sizeof type, "%.*s", (int)(t.len && t.len < 200 ? t.len : 24),
                     t.len && t.len < 200 ? t.p : "application/octet-stream");
            for (char *q = type; *q; q++)
                if (*q == '\r' || *q == '\n') *q = ' ';
            respond(o, 200, type, "Content-Disposition: inline\r\n", body.p, body.len);
        } else if (strcmp(end, "/curl") == 0) {
            fy__sb_t b = {0};
            curl_cmd(&b, &l.f);
            respond(o, 200, "text/plain; charset=utf-8", NULL, b.p, b.len);
            free(b.p);
        } else if (strcmp(end, "/python") == 0) {
            fy__sb_t b = {0};
            fy__insp_python(&b, &l.f);
            respond(o, 200, "text/x-python; charset=utf-8", NULL, b.p, b.len);
            free(b.p);
        } else if (strcmp(end, "/har") == 0) {
            fy__sb_t b = {0};
            fy__insp_har_entry(&b, &l.f);
            st = json_reply(o, 200, &b);
        } else {
            st = error_reply(o, 404, "no such resource", -1);
        }
        fy_cs_loaded_free(&l);
        return st;
    }
    if (!get && !post) return error_reply(o, 405, "method not allowed", -1);
    return error_reply(o, 404, "no such resource", -1);
}

/* ---- server-sent events ---- */

static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        struct pollfd pf = {fd, POLLOUT, 0};
        if (poll(&pf, 1, 10000) <= 0) return false;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

void fy__insp_events(fy_inspector_t *ins, int fd, const fy__insp_req_t *r, uint64_t last_id)
{
    int st;
    fy__sb_t o = {0};
    fy_insp_expr_t *x = parse_filter(r, &o, &st);
    free(o.p);
    uint64_t after = fy_insp_query_uint(r->query, r->query_len, "after", 0, ~0ull);
    if (last_id > after) after = last_id;
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
                               "retry: 1000\n\n";
    if (!send_all(fd, head, sizeof head - 1)) goto out;
    batch_t *bt = fy_xmalloc(sizeof *bt);
    int idle = 0;
    while (!atomic_load(&ins->stopping)) {
        struct pollfd pf = {fd, POLLIN | POLLRDHUP, 0};
        if (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR))) break;
        if (!fy_cs_wait_newer(ins->store, after, 1000)) {
            if (++idle >= 15) { /* a comment now and then finds clients that went away */
                idle = 0;
                if (!send_all(fd, ": ping\n\n", 8)) break;
            }
            continue;
        }
        fy__sb_t b = {0};
        bt->n = 0;
        fy_cs_walk(ins->store, false, after, collect_cb, bt);
        for (size_t i = 0; i < bt->n; i++) {
            if (!matches(ins, x, &bt->v[i])) continue;
            fy__sb_printf(&b, "id: %llu\ndata: ", (unsigned long long)bt->v[i].id);
            summary(&b, &bt->v[i]);
            fy__sb_puts(&b, "\n\n");
        }
        if (bt->n) after = bt->last;
        batch_free(bt);
        if (!b.len) fy__sb_printf(&b, "event: seen\ndata: %llu\n\n", (unsigned long long)after);
        bool ok = send_all(fd, b.p, b.len);
        free(b.p);
        if (!ok) break;
    }
    free(bt);
out:
    fy_insp_filter_free(x);
}
