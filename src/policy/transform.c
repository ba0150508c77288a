/* The transform filter (policy/transform.h). Templates are compiled once into segments
 * (literal, capture, variable) and expanded per request into the exchange's arena. */
#include "policy/transform.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>

#include "core/alloc.h"
#include "h1/h1_resp.h"
#include "http/path.h"
#include "net/sock.h"
#include "policy/hname.h"

#define MAX_WORKERS 256
#define MAX_SEGS 32
#define OVEC 10 /* $0..$9 */

enum seg_kind {
    S_LIT = 0,
    S_CAP,
    S_HOST,
    S_AUTHORITY,
    S_PATH,
    S_QUERY,
    S_URI,
    S_METHOD,
    S_SCHEME,
    S_CLIENT,
    S_REQID,
    S_HEADER,
};

typedef struct seg {
    int kind;
    const char *p; /* S_LIT text, S_HEADER lowercase name (borrowed from config) */
    size_t len;    /* bytes; S_CAP: the capture number */
} seg_t;

typedef struct tpl {
    seg_t s[MAX_SEGS];
    size_t n;
    bool check; /* has a part from the client (header, capture, query...): check before use */
} tpl_t;

static const struct {
    const char *name;
    int kind;
} vars[] = {
    {"host", S_HOST},     {"authority", S_AUTHORITY}, {"path", S_PATH},
    {"query", S_QUERY},   {"request_uri", S_URI},     {"method", S_METHOD},
    {"scheme", S_SCHEME}, {"client", S_CLIENT},       {"request_id", S_REQID},
};

static const char *compile(const char *t, tpl_t *out)
{
    tpl_t tmp;
    if (!out) out = &tmp;
    out->n = 0;
    out->check = false;
    const char *p = t;
    while (*p) {
        if (out->n == MAX_SEGS) return "too many parts (32 at most)";
        seg_t *s = &out->s[out->n];
        if (*p == '$' && p[1] >= '0' && p[1] <= '9') {
            *s = (seg_t){S_CAP, NULL, (size_t)(p[1] - '0')};
            p += 2;
        } else if (*p == '{') {
            const char *e = strchr(p, '}');
            if (!e) return "'{' without '}'";
            size_t n = (size_t)(e - p - 1);
            s->kind = -1;
            for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
                if (strlen(vars[i].name) == n && !memcmp(vars[i].name, p + 1, n))
                    *s = (seg_t){vars[i].kind, NULL, 0};
            if (s->kind < 0) {
                if (n > 7 && !memcmp(p + 1, "header.", 7)) {
                    *s = (seg_t){S_HEADER, p + 8, n - 7};
                    for (size_t i = 0; i < s->len; i++)
                        if (s->p[i] >= 'A' && s->p[i] <= 'Z') return "header names are lowercase";
                } else {
                    return "unknown variable (host, authority, path, query, request_uri, "
                           "method, scheme, client, request_id, header.NAME)";
                }
            }
            p = e + 1;
        } else {
            const char *e = p + 1;
            while (*e && *e != '{' && !(*e == '$' && e[1] >= '0' && e[1] <= '9')) e++;
            *s = (seg_t){S_LIT, p, (size_t)(e - p)};
            p = e;
        }
        out->check =
            out->check || (s->kind != S_LIT && s->kind != S_METHOD && s->kind != S_SCHEME &&
                           s->kind != S_CLIENT && s->kind != S_REQID);
        out->n++;
    }
    return NULL;
}

const char *fy_transform_template_why(const char *t)
{
    return compile(t, NULL);
}

typedef struct rule {
    pcre2_code *re;
    bool jit; /* JIT-compiled: matched by pcre2_jit_match (no option checks per call) */
    tpl_t to;
    int status;
} rule_t;

typedef struct hdr_edit {
    fy_hname_t name; /* lowercase (borrowed from the config) */
    fy_str_t h1name; /* its spelling on h1 (h1_spelling()); owned */
    tpl_t v;
    fy_str_t lit; /* the value when the template is one literal (planned at config time) */
    bool is_lit, append;
} hdr_edit_t;

typedef struct hdr_edits {
    hdr_edit_t *v; /* owned */
    size_t n;
    fy_hname_t *remove; /* owned; names borrowed from the config */
    size_t nremove;
    bool all_lit;  /* every value is a literal: no expansion context needed */
    bool lit_only; /* all_lit and nothing to remove (apply_lit) */
} hdr_edits_t;

typedef struct transform_filter {
    fy_filter_t f;
    const fy_transform_conf_t *conf;
    rule_t *redirect, *rewrite; /* owned */
    size_t nredirect, nrewrite;
    hdr_edits_t req, res;
    fy_hname_t reqid;                  /* `request-id`, lowercase */
    fy_str_t reqid_h1;                 /* its spelling on h1; owned */
    bool need_layer;                   /* a response edit or the request id echoed */
    bool res_lit_only;                 /* res.lit_only and no request id echoed */
    bool req_work;                     /* rules, request edits or a request id */
    pcre2_match_data *md[MAX_WORKERS]; /* slot w: made and used by worker w only */
} transform_filter_t;

/* ---- expansion ---- */

typedef struct vctx {
    fy_exchange_t *ex;
    const char *subject;
    const PCRE2_SIZE *ov;
    int nmatch;
    fy_str_t reqid;
    fy_str_t client; /* {client}, in the arena once asked for (NULL p: not yet) */
} vctx_t;

/* Each byte in decimal and a '.', padded to 4 bytes, and how many of them count: {client}
 * writes an IPv4 address as four 4-byte copies. */
#define OCT(x)                                                                                     \
    {                                                                                              \
        {(char)('0' + ((x) >= 100  ? (x) / 100                                                     \
                       : (x) >= 10 ? (x) / 10                                                      \
                                   : (x))),                                                        \
         (char)((x) >= 100  ? '0' + (x) / 10 % 10                                                  \
                : (x) >= 10 ? '0' + (x) % 10                                                       \
                            : '.'),                                                                \
         (char)((x) >= 100  ? '0' + (x) % 10                                                       \
                : (x) >= 10 ? '.'                                                                  \
                            : 0),                                                                  \
         (char)((x) >= 100 ? '.' : 0)},                                                            \
            (x) >= 100  ? 4                                                                        \
            : (x) >= 10 ? 3                                                                        \
                        : 2                                                                        \
    }
#define OCT4(x) OCT(x), OCT((x) + 1), OCT((x) + 2), OCT((x) + 3)
#define OCT16(x) OCT4(x), OCT4((x) + 4), OCT4((x) + 8), OCT4((x) + 12)
#define OCT64(x) OCT16(x), OCT16((x) + 16), OCT16((x) + 32), OCT16((x) + 48)
static const struct {
    char s[4];
    unsigned char n;
} octets[256] = {OCT64(0), OCT64(64), OCT64(128), OCT64(192)};
#undef OCT64
#undef OCT16
#undef OCT4
#undef OCT

static fy_str_t var(vctx_t *v, const seg_t *s)
{
    fy_exchange_t *ex = v->ex;
    switch (s->kind) {
    case S_LIT:
        return fy_str(s->p, s->len);
    case S_CAP:
        if ((int)s->len < v->nmatch && v->ov[2 * s->len] != PCRE2_UNSET)
            return fy_str(v->subject + v->ov[2 * s->len],
                          v->ov[2 * s->len + 1] - v->ov[2 * s->len]);
        return FY_STR_NULL;
    case S_HOST: {
        fy_str_t a = ex->req.authority;
        if (a.len && a.p[0] == '[') {
            const char *e = memchr(a.p, ']', a.len);
            return e ? fy_str(a.p, (size_t)(e - a.p + 1)) : a;
        }
        const char *c = memchr(a.p, ':', a.len);
        return c ? fy_str(a.p, (size_t)(c - a.p)) : a;
    }
    case S_AUTHORITY:
        return ex->req.authority;
    case S_PATH:
        return ex->req.path;
    case S_QUERY:
        return ex->req.query;
    case S_URI:
        if (!ex->req.query.len) return ex->req.path;
        {
            size_t n = ex->req.path.len + 1 + ex->req.query.len;
            char *b = fy_arena_alloc(ex->arena, n);
            memcpy(b, ex->req.path.p, ex->req.path.len);
            b[ex->req.path.len] = '?';
            memcpy(b + ex->req.path.len + 1, ex->req.query.p, ex->req.query.len);
            return fy_str(b, n);
        }
    case S_METHOD:
        return ex->req.method;
    case S_SCHEME:
        return ex->req.scheme;
    case S_CLIENT:
        if (!v->client.p) {
            if (ex->remote && ex->remote->sa_family == AF_INET) {
                /* the common case without inet_ntop's generality */
                const unsigned char *q =
                    (const unsigned char *)&((const struct sockaddr_in *)ex->remote)->sin_addr;
                char *b = fy_arena_alloc(ex->arena, 16), *w = b;
                for (int i = 0; i < 4; i++) {
                    memcpy(w, octets[q[i]].s, 4); /* at most 16 bytes in all */
                    w += octets[q[i]].n;
                }
                v->client = fy_str(b, (size_t)(w - b - 1)); /* without the last '.' */
            } else if (ex->remote) {
                char *b = fy_arena_alloc(ex->arena, 64);
                b[0] = '\0';
                fy_sock_host_str(ex->remote, b, 64);
                v->client = fy_str(b, strlen(b));
            } else {
                v->client = fy_str("", 0);
            }
        }
        return v->client;
    case S_REQID:
        return v->reqid;
    case S_HEADER: {
        const fy_header_t *h = fy_headers_find(&ex->req.headers, s->p, s->len);
        return h ? h->value : FY_STR_NULL;
    }
    }
    return FY_STR_NULL;
}

/* The expanded template (not NUL-terminated): a template of one part is that part itself (the
 * config's, the exchange's or the arena's memory, all alive as long as the exchange), others
 * are put together in the arena. */
static fy_str_t expand(vctx_t *v, const tpl_t *t)
{
    if (t->n == 1) {
        fy_str_t r = var(v, &t->s[0]);
        return r.p ? r : fy_str("", 0); /* never a NULL pointer: it may reach a memcpy */
    }
    fy_str_t parts[MAX_SEGS];
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) {
        parts[i] = var(v, &t->s[i]);
        n += parts[i].len;
    }
    char *b = fy_arena_alloc(v->ex->arena, n ? n : 1), *w = b;
    for (size_t i = 0; i < t->n; i++) {
        if (parts[i].len) memcpy(w, parts[i].p, parts[i].len);
        w += parts[i].len;
    }
    return fy_str(b, n);
}

/* A value that may go on the wire as a header value or a Location: no control bytes. */
static bool wire_ok(fy_str_t s)
{
    for (size_t i = 0; i < s.len; i++)
        if ((unsigned char)s.p[i] < 0x20 && s.p[i] != '\t') return false;
    return !(s.len && (s.p[0] == ' ' || s.p[s.len - 1] == ' '));
}

static void remove_named(fy_headers_t *hs, const fy_hname_t *name)
{
    size_t k = 0;
    for (size_t i = 0; i < hs->n; i++) {
        if (fy_hname_eq(name, hs->v[i].name)) continue;
        if (k != i) hs->v[k] = hs->v[i];
        k++;
    }
    hs->n = k;
}

/* Append (name, value): in place while the array has room (the proxy sizes the response's
 * with spare entries), else through fy_headers_add's growth. */
static inline void add_hdr(fy_arena_t *a, fy_headers_t *hs, fy_str_t name, fy_str_t val)
{
    if (hs->n < hs->cap) {
        hs->v[hs->n].name = name;
        hs->v[hs->n].value = val;
        hs->n++;
        return;
    }
    fy_headers_add(a, hs, name.p, name.len, val.p, val.len);
}

/* `set`: the first field of that name takes the value in place, the others go; appended when
 * there is none. One pass over the fields. `wire`: the name as it is written (name->lower, or
 * its h1 spelling). */
static inline __attribute__((always_inline)) void
set_hdr(fy_arena_t *a, fy_headers_t *hs, const fy_hname_t *name, fy_str_t wire, fy_str_t val)
{
    fy_header_t *v = hs->v;
    size_t i = 0, n = hs->n;
    while (i < n && !fy_hname_eq(name, v[i].name)) i++;
    if (i == n) { /* the common case: a name the response does not have */
        add_hdr(a, hs, wire, val);
        return;
    }
    v[i].name = wire;
    v[i].value = val;
    size_t k = ++i;
    for (; i < n; i++)
        if (!fy_hname_eq(name, v[i].name)) v[k++] = v[i];
    hs->n = k;
}

static inline fy_str_t lower_of(const fy_hname_t *n)
{
    return fy_str(n->lower, n->len);
}

/* Literal values only and nothing removed (planned at build time): no expansion, no checks. */
static inline __attribute__((always_inline)) void apply_lit(fy_arena_t *a, const hdr_edits_t *e,
                                                            fy_headers_t *hs, bool h1)
{
    for (const hdr_edit_t *h = e->v, *end = e->v + e->n; h < end; h++) {
        fy_str_t wire = h1 ? h->h1name : lower_of(&h->name);
        if (h->append)
            add_hdr(a, hs, wire, h->lit);
        else
            set_hdr(a, hs, &h->name, wire, h->lit);
    }
}

/* v may be NULL when e->all_lit. h1: the fields go to an h1 client (names in h1 spelling). */
static void apply_edits(fy_arena_t *a, vctx_t *v, const hdr_edits_t *e, fy_headers_t *hs, bool h1)
{
    for (size_t i = 0; i < e->nremove; i++) remove_named(hs, &e->remove[i]);
    for (size_t i = 0; i < e->n; i++) {
        const hdr_edit_t *h = &e->v[i];
        fy_str_t val;
        if (h->is_lit) {
            val = h->lit;
        } else {
            val = expand(v, &h->v);
            if (h->v.check && !wire_ok(val)) continue; /* e.g. a client's header with a bare CR */
        }
        fy_str_t wire = h1 ? h->h1name : lower_of(&h->name);
        if (h->append)
            add_hdr(a, hs, wire, val);
        else
            set_hdr(a, hs, &h->name, wire, val);
    }
}

/* ---- response layer ---- */

/* 48 bytes of the exchange's arena (the proxy's exchange nearly fills the h1 arena's first
 * block: every byte here brings a second block's malloc nearer) */
typedef struct res_layer {
    fy_sink_layer_t l;
    const transform_filter_t *t; /* NULL once the response is edited */
    fy_str_t reqid;
} res_layer_t;

/* An h1 client gets the configured names in their h1 spelling (h1 writes a name holding a
 * capital as it is, with no per-field casing); h2 and h3 get them lowercase. */
static inline bool to_h1(const fy_exchange_t *ex)
{
    return ex->req.version < 20;
}

/* Templates, removals or the request id echoed: out of line, so that the literal-only path of
 * edit_response() keeps a small frame. */
static __attribute__((noinline)) void edit_response_full(const transform_filter_t *t,
                                                         fy_str_t reqid, fy_exchange_t *ex)
{
    const hdr_edits_t *e = &t->res;
    bool h1 = to_h1(ex);
    if (e->lit_only) {
        apply_lit(ex->arena, e, &ex->res.headers, h1);
    } else if (e->all_lit) {
        apply_edits(ex->arena, NULL, e, &ex->res.headers, h1);
    } else {
        vctx_t v = {.ex = ex, .reqid = reqid};
        apply_edits(ex->arena, &v, e, &ex->res.headers, h1);
    }
    const fy_transform_conf_t *c = t->conf;
    if (c->request_id && c->request_id_response && reqid.len)
        set_hdr(ex->arena, &ex->res.headers, &t->reqid, h1 ? t->reqid_h1 : lower_of(&t->reqid),
                reqid);
}

/* Once, at the first send. */
static inline __attribute__((always_inline)) void edit_response(res_layer_t *rl, fy_exchange_t *ex)
{
    const transform_filter_t *t = rl->t;
    rl->t = NULL;
    if (t->res_lit_only)
        apply_lit(ex->arena, &t->res, &ex->res.headers, to_h1(ex));
    else
        edit_response_full(t, rl->reqid, ex);
}

static void l_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                   int state)
{
    if (((res_layer_t *)l)->t) edit_response((res_layer_t *)l, ex);
    fy_layer_next_send(l, ex, bufs, n, state);
}

static void l_send_file(fy_sink_layer_t *l, fy_exchange_t *ex, int fd, off_t off, size_t len,
                        int state)
{
    if (((res_layer_t *)l)->t) edit_response((res_layer_t *)l, ex);
    fy_layer_next_send_file(l, ex, fd, off, len, state);
}

static const fy_layer_ops_t res_layer_ops = {
    .name = "transform",
    .send = l_send,
    .send_file = l_send_file,
};

/* ---- request ---- */

static bool reqid_ok(fy_str_t s)
{
    if (s.len == 0 || s.len > 128) return false;
    for (size_t i = 0; i < s.len; i++)
        if ((unsigned char)s.p[i] <= 0x20 || (unsigned char)s.p[i] >= 0x7f) return false;
    return true;
}

/* Eight hex digits of v, one per byte of the result (the digits' order is of no matter: the
 * bits are random): the nibbles spread one to a byte, then 0..9 -> '0'..'9', 10..15 ->
 * 'a'..'f' (a byte >= 10 gets 0x10 from the + 6). */
static inline uint64_t hex8(uint32_t v)
{
    uint64_t x = v;
    x = (x | x << 16) & 0x0000ffff0000ffffull;
    x = (x | x << 8) & 0x00ff00ff00ff00ffull;
    x = (x | x << 4) & 0x0f0f0f0f0f0f0f0full;
    uint64_t ge10 = ((x + 0x0606060606060606ull) >> 4) & 0x0101010101010101ull;
    return x + 0x3030303030303030ull + ge10 * ('a' - '0' - 10);
}

/* 32 hex digits (not NUL-terminated) in the arena. */
static fy_str_t new_reqid(fy_arena_t *a)
{
    static __thread uint64_t s0, s1;
    if (!s0 && !s1) {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&s0, sizeof s0, 1, f) != 1 || fread(&s1, sizeof s1, 1, f) != 1)
            s0 = (uint64_t)(uintptr_t)&s0 ^ 0x9e3779b97f4a7c15ull, s1 = 0x2545f4914f6cdd1dull;
        if (f) fclose(f);
        s1 |= 1;
    }
    char *b = fy_arena_alloc(a, 32);
    for (int k = 0; k < 2; k++) {
        /* xorshift128+ */
        uint64_t x = s0, y = s1;
        s0 = y;
        x ^= x << 23;
        s1 = x ^ y ^ (x >> 17) ^ (y >> 26);
        uint64_t r = s1 + y, w[2] = {hex8((uint32_t)r), hex8((uint32_t)(r >> 32))};
        memcpy(b + 16 * k, w, 16);
    }
    return fy_str(b, 32);
}

static pcre2_match_data *md_of(transform_filter_t *t, int w)
{
    if (w < 0 || w >= MAX_WORKERS) return NULL;
    if (!t->md[w]) t->md[w] = pcre2_match_data_create(OVEC, NULL);
    return t->md[w];
}

/* Does rule r match the path? Fills v's captures. */
static bool rule_match(const rule_t *r, pcre2_match_data *md, vctx_t *v)
{
    fy_str_t p = v->ex->req.path;
    int rc = r->jit ? pcre2_jit_match(r->re, (PCRE2_SPTR)p.p, p.len, 0, 0, md, NULL)
                    : pcre2_match(r->re, (PCRE2_SPTR)p.p, p.len, 0, 0, md, NULL);
    if (rc < 0) return false;
    v->subject = p.p;
    v->ov = pcre2_get_ovector_pointer(md);
    v->nmatch = rc == 0 ? OVEC : rc;
    return true;
}

/* The filter's on_request when it has response edits only (chosen at build time): the layer
 * and nothing else. */
static fy_filter_verdict_t on_request_res(fy_filter_t *f, fy_exchange_t *ex)
{
    res_layer_t *rl = fy_arena_alloc(ex->arena, sizeof *rl);
    rl->t = (transform_filter_t *)f;
    rl->reqid = FY_STR_NULL;
    fy_exchange_push_layer(ex, &rl->l, &res_layer_ops, FY_STAGE_REWRITE);
    return FY_FILTER_NEXT;
}

static fy_filter_verdict_t on_request_none(fy_filter_t *f, fy_exchange_t *ex)
{
    (void)f, (void)ex;
    return FY_FILTER_NEXT;
}

static fy_filter_verdict_t on_request(fy_filter_t *f, fy_exchange_t *ex)
{
    transform_filter_t *t = (transform_filter_t *)f;
    const fy_transform_conf_t *c = t->conf;
    vctx_t v = {.ex = ex};
    if (c->request_id) {
        const fy_header_t *h = NULL;
        for (size_t i = 0; i < ex->req.headers.n && !h; i++)
            if (fy_hname_eq(&t->reqid, ex->req.headers.v[i].name)) h = &ex->req.headers.v[i];
        if (h && reqid_ok(h->value)) {
            v.reqid = h->value;
        } else {
            v.reqid = new_reqid(ex->arena);
            if (h) /* a bad one: replaced (and any other of that name goes) */
                set_hdr(ex->arena, &ex->req.headers, &t->reqid, lower_of(&t->reqid), v.reqid);
            else
                add_hdr(ex->arena, &ex->req.headers, lower_of(&t->reqid), v.reqid);
        }
    }
    if (t->need_layer) {
        res_layer_t *rl = fy_arena_alloc(ex->arena, sizeof *rl);
        rl->t = t;
        rl->reqid = v.reqid;
        fy_exchange_push_layer(ex, &rl->l, &res_layer_ops, FY_STAGE_REWRITE);
    }
    pcre2_match_data *md = (t->nredirect || t->nrewrite) ? md_of(t, ex->ctx->worker_id) : NULL;
    if (md) {
        for (size_t i = 0; i < t->nredirect; i++) {
            if (!rule_match(&t->redirect[i], md, &v)) continue;
            fy_str_t loc = expand(&v, &t->redirect[i].to);
            v.nmatch = 0;
            if (!wire_ok(loc) || !loc.len) {
                fy_exchange_fail(ex, 500, "redirect produced an invalid Location");
                return FY_FILTER_DONE;
            }
            FY_HDR_ADD(ex->arena, &ex->res.headers, "location", loc.p, loc.len);
            int st = t->redirect[i].status;
            char *body = fy_arena_alloc(ex->arena, 128);
            int n = snprintf(body, 128, "<html><body><h1>%d %s</h1></body></html>\n", st,
                             fy_http_reason(st));
            fy_exchange_respond(ex, st, "text/html; charset=utf-8", body, (size_t)n);
            return FY_FILTER_DONE;
        }
        for (size_t i = 0; i < t->nrewrite; i++) {
            if (!rule_match(&t->rewrite[i], md, &v)) continue;
            fy_str_t np = expand(&v, &t->rewrite[i].to);
            v.nmatch = 0;
            const char *q = memchr(np.p, '?', np.len);
            fy_str_t path = q ? fy_str(np.p, (size_t)(q - np.p)) : np;
            fy_str_t query = q ? fy_str(q + 1, (size_t)(np.p + np.len - q - 1)) : ex->req.query;
            bool ok = path.len && path.p[0] == '/';
            for (size_t k = 0; ok && k < np.len; k++)
                ok = (unsigned char)np.p[k] > 0x20 && (unsigned char)np.p[k] < 0x7f &&
                     np.p[k] != '#';
            if (ok && !fy_path_is_normal(path.p, path.len, true)) {
                char *out = fy_arena_alloc(ex->arena, path.len);
                fy_path_opts_t o = {.encoded_slash = FY_PATH_SLASH_KEEP, .merge_slashes = true};
                int n = fy_path_normalize(path.p, path.len, out, path.len, &o);
                ok = n > 0;
                if (ok) path = fy_str(out, (size_t)n);
            }
            if (!ok) {
                fy_exchange_fail(ex, 500, "rewrite produced an invalid path");
                return FY_FILTER_DONE;
            }
            if (path.p == np.p && (q ? query.len > 0 : !query.len)) {
                /* the expansion is the whole target already (arena or config memory) */
                ex->req.target = np;
                ex->req.path = path;
                ex->req.query = query.len ? query : FY_STR_NULL;
                break;
            }
            size_t tl = path.len + (query.len ? 1 + query.len : 0);
            char *tg = fy_arena_alloc(ex->arena, tl);
            memcpy(tg, path.p, path.len);
            if (query.len) {
                tg[path.len] = '?';
                memcpy(tg + path.len + 1, query.p, query.len);
            }
            ex->req.target = fy_str(tg, tl);
            ex->req.path = fy_str(tg, path.len);
            ex->req.query = query.len ? fy_str(tg + path.len + 1, query.len) : FY_STR_NULL;
            break;
        }
    }
    apply_edits(ex->arena, &v, &t->req, &ex->req.headers, false);
    return FY_FILTER_NEXT;
}

/* ---- build ---- */

static void destroy(fy_filter_t *f)
{
    transform_filter_t *t = (transform_filter_t *)f;
    for (size_t i = 0; i < t->nredirect; i++) pcre2_code_free(t->redirect[i].re);
    for (size_t i = 0; i < t->nrewrite; i++) pcre2_code_free(t->rewrite[i].re);
    for (size_t i = 0; i < t->req.n; i++) free((char *)t->req.v[i].h1name.p);
    for (size_t i = 0; i < t->res.n; i++) free((char *)t->res.v[i].h1name.p);
    free((char *)t->reqid_h1.p);
    free(t->redirect);
    free(t->rewrite);
    free(t->req.v);
    free(t->res.v);
    free(t->req.remove);
    free(t->res.remove);
    for (size_t w = 0; w < MAX_WORKERS; w++) pcre2_match_data_free(t->md[w]);
    free(t);
}

/* Which on_request is decided once, at build time, from what the config asks for: a route
 * whose transform has nothing to do on the request pays only for its response layer. */
static const fy_filter_ops_t transform_ops = {
    .name = "transform",
    .stage = FY_STAGE_REWRITE,
    .on_request = on_request,
    .destroy = destroy,
};
static const fy_filter_ops_t transform_res_ops = {
    .name = "transform",
    .stage = FY_STAGE_REWRITE,
    .on_request = on_request_res,
    .destroy = destroy,
};
static const fy_filter_ops_t transform_none_ops = {
    .name = "transform",
    .stage = FY_STAGE_REWRITE,
    .on_request = on_request_none,
    .destroy = destroy,
};

static int build_rules(const fy_conf_list_t *l, rule_t **out, size_t *nout, char *err,
                       size_t errlen)
{
    const fy_transform_rule_t *rc = l->v;
    *out = calloc(l->n ? l->n : 1, sizeof **out);
    if (!*out) return -1;
    for (size_t i = 0; i < l->n; i++) {
        int ec;
        PCRE2_SIZE eo;
        rule_t *r = &(*out)[i];
        r->re = pcre2_compile((PCRE2_SPTR)rc[i].match, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
        if (!r->re) {
            snprintf(err, errlen, "transform: bad regex '%s'", rc[i].match);
            return -1;
        }
        r->jit = pcre2_jit_compile(r->re, PCRE2_JIT_COMPLETE) == 0;
        const char *why = compile(rc[i].to, &r->to);
        if (why) {
            snprintf(err, errlen, "transform: template '%s': %s", rc[i].to, why);
            return -1;
        }
        r->status = (int)rc[i].status;
        (*nout)++;
    }
    return 0;
}

/* The h1 spelling of a configured name (malloc'd): as written when it has a capital (the h1
 * writer keeps such a name as it is, and so do we), else the canonical case, irregular
 * spellings included ("www-authenticate" -> "WWW-Authenticate"), from the h1 writer itself. */
static fy_str_t h1_spelling(const char *name)
{
    size_t n = strlen(name);
    char *b = fy_xmalloc(n + 1);
    fy_h1_put_field_name(b, name, n);
    b[n] = '\0';
    return fy_str(b, n);
}

static int build_edits(const fy_transform_headers_t *h, hdr_edits_t *e, char *err, size_t errlen)
{
    size_t n = h->set.n + h->append.n;
    e->v = calloc(n ? n : 1, sizeof *e->v);
    if (!e->v) return -1;
    e->remove = calloc(h->remove.n ? h->remove.n : 1, sizeof *e->remove);
    if (!e->remove) return -1;
    for (size_t i = 0; i < h->remove.n; i++) {
        for (char *p = h->remove.v[i]; *p; p++)
            if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
        fy_hname_init(&e->remove[e->nremove++], h->remove.v[i]);
    }
    e->all_lit = true;
    for (int pass = 0; pass < 2; pass++) {
        const fy_conf_strmap_t *m = pass ? &h->append : &h->set;
        for (size_t i = 0; i < m->n; i++) {
            hdr_edit_t *x = &e->v[e->n];
            /* names are matched and sent on h2/h3 lowercase (h2/h3 require it), on h1 in their
               h1 spelling */
            char *nm = m->keys[i];
            x->h1name = h1_spelling(nm);
            for (char *p = nm; *p; p++)
                if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
            fy_hname_init(&x->name, nm);
            x->append = pass == 1;
            const char *why = compile(m->values[i], &x->v);
            if (why) {
                snprintf(err, errlen, "transform: header %s: %s", nm, why);
                free((char *)x->h1name.p); /* not counted in e->n: destroy() won't see it */
                return -1;
            }
            /* a literal value needs no expansion and no check per request (compile() made
               one literal segment of it; an empty value has no segment) */
            if (x->v.n == 0 || (x->v.n == 1 && x->v.s[0].kind == S_LIT)) {
                x->is_lit = true;
                x->lit = x->v.n ? fy_str(x->v.s[0].p, x->v.s[0].len) : fy_str("", 0);
            }
            e->all_lit = e->all_lit && x->is_lit;
            e->n++;
        }
    }
    e->lit_only = e->all_lit && !e->nremove;
    return 0;
}

fy_filter_t *fy_transform_filter_new(const fy_transform_conf_t *conf, char *err, size_t errlen)
{
    transform_filter_t *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->f.ops = &transform_ops;
    t->conf = conf;
    if (conf->request_id) {
        t->reqid_h1 = h1_spelling(conf->request_id);
        for (char *p = conf->request_id; *p; p++)
            if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
        fy_hname_init(&t->reqid, conf->request_id);
    }
    if (build_rules(&conf->redirect, &t->redirect, &t->nredirect, err, errlen) < 0 ||
        build_rules(&conf->rewrite, &t->rewrite, &t->nrewrite, err, errlen) < 0 ||
        build_edits(&conf->request_headers, &t->req, err, errlen) < 0 ||
        build_edits(&conf->response_headers, &t->res, err, errlen) < 0) {
        destroy(&t->f);
        return NULL;
    }
    t->need_layer = t->res.n || t->res.nremove || (conf->request_id && conf->request_id_response);
    t->req_work = t->nredirect || t->nrewrite || t->req.n || t->req.nremove || conf->request_id;
    t->res_lit_only = t->res.lit_only && !(conf->request_id && conf->request_id_response);
    if (!t->req_work) t->f.ops = t->need_layer ? &transform_res_ops : &transform_none_ops;
    return &t->f;
}
