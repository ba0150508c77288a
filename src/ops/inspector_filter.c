/* The inspector's filter language: a recursive-descent parser into a small tree. */
#include "ops/inspector_filter.h"

#include <stdlib.h>
#include <string.h>

#define MAX_TERMS 256
#define MAX_DEPTH 32

enum kind {
    K_AND,
    K_OR,
    K_NOT,
    K_DOMAIN,
    K_URL,
    K_METHOD,
    K_CODE,
    K_HDR,
    K_HDR_Q,
    K_HDR_S,
    K_BODY,
    K_BODY_Q,
    K_BODY_S,
    K_CTYPE,
    K_DUR,
    K_SIZE,
    K_INTERCEPTED,
    K_ERROR,
};

enum cmp { C_EQ, C_NE, C_GT, C_GE, C_LT, C_LE, C_CLASS };

struct fy_insp_expr {
    int kind;
    fy_insp_expr_t *a, *b; /* AND/OR: both; NOT: a */
    char *s;               /* text terms (owned) */
    size_t slen;
    int cmp;
    long long num;
};

typedef struct parser {
    const char *p;
    size_t n, i;
    int terms, depth;
    const char *err;
    size_t errpos;
} parser_t;

static void ws(parser_t *ps)
{
    while (ps->i < ps->n && (ps->p[ps->i] == ' ' || ps->p[ps->i] == '\t' || ps->p[ps->i] == '\n' ||
                             ps->p[ps->i] == '\r'))
        ps->i++;
}

static fy_insp_expr_t *fail(parser_t *ps, const char *why)
{
    if (!ps->err) {
        ps->err = why;
        ps->errpos = ps->i;
    }
    return NULL;
}

static fy_insp_expr_t *node(parser_t *ps, int kind)
{
    if (++ps->terms > MAX_TERMS) return fail(ps, "too many terms");
    fy_insp_expr_t *x = calloc(1, sizeof *x);
    if (!x) return fail(ps, "out of memory");
    x->kind = kind;
    return x;
}

void fy_insp_filter_free(fy_insp_expr_t *x)
{
    if (!x) return;
    fy_insp_filter_free(x->a);
    fy_insp_filter_free(x->b);
    free(x->s);
    free(x);
}

/* A word or a quoted string into x->s. */
static bool word(parser_t *ps, fy_insp_expr_t *x)
{
    ws(ps);
    if (ps->i >= ps->n) return fail(ps, "a value is missing"), false;
    char *out = malloc(ps->n - ps->i + 1);
    if (!out) return fail(ps, "out of memory"), false;
    size_t o = 0;
    if (ps->p[ps->i] == '"') {
        ps->i++;
        for (;;) {
            if (ps->i >= ps->n) {
                free(out);
                return fail(ps, "unterminated quoted string"), false;
            }
            char c = ps->p[ps->i++];
            if (c == '"') break;
            if (c == '\\' && ps->i < ps->n) c = ps->p[ps->i++];
            out[o++] = c;
        }
    } else {
        while (ps->i < ps->n) {
            char c = ps->p[ps->i];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '(' || c == ')') break;
            out[o++] = c;
            ps->i++;
        }
        if (!o) {
            free(out);
            return fail(ps, "a value is missing"), false;
        }
    }
    out[o] = 0;
    x->s = out;
    x->slen = o;
    return true;
}

/* A comparison: [op] integer, or for status "5xx". */
static bool number(parser_t *ps, fy_insp_expr_t *x, bool status)
{
    if (!word(ps, x)) return false;
    const char *s = x->s;
    x->cmp = C_EQ;
    if (status && x->slen == 3 && s[0] >= '1' && s[0] <= '9' && (s[1] == 'x' || s[1] == 'X') &&
        (s[2] == 'x' || s[2] == 'X')) {
        x->cmp = C_CLASS;
        x->num = s[0] - '0';
        return true;
    }
    if (s[0] == '>' && s[1] == '=')
        x->cmp = C_GE, s += 2;
    else if (s[0] == '<' && s[1] == '=')
        x->cmp = C_LE, s += 2;
    else if (s[0] == '!' && s[1] == '=')
        x->cmp = C_NE, s += 2;
    else if (s[0] == '>')
        x->cmp = C_GT, s++;
    else if (s[0] == '<')
        x->cmp = C_LT, s++;
    else if (s[0] == '=')
        s++;
    if (*s < '0' || *s > '9') return fail(ps, "a number is expected"), false;
    long long v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > 1000000000000000ll) return fail(ps, "number too large"), false;
        v = v * 10 + (*s - '0');
    }
    if (*s) return fail(ps, "a number is expected"), false;
    x->num = v;
    return true;
}

static const struct {
    const char *name;
    int kind;
    int arg; /* 0 none, 1 text, 2 number, 3 status */
} terms[] = {
    {"d", K_DOMAIN, 1},  {"u", K_URL, 1},         {"m", K_METHOD, 1}, {"c", K_CODE, 3},
    {"h", K_HDR, 1},     {"hq", K_HDR_Q, 1},      {"hs", K_HDR_S, 1}, {"b", K_BODY, 1},
    {"bq", K_BODY_Q, 1}, {"bs", K_BODY_S, 1},     {"t", K_CTYPE, 1},  {"dur", K_DUR, 2},
    {"size", K_SIZE, 2}, {"i", K_INTERCEPTED, 0}, {"e", K_ERROR, 0},
};

static fy_insp_expr_t *or_expr(parser_t *ps);

static fy_insp_expr_t *unary(parser_t *ps)
{
    ws(ps);
    if (ps->i >= ps->n) return fail(ps, "a term is expected");
    char c = ps->p[ps->i];
    if (c == '!') {
        ps->i++;
        if (++ps->depth > MAX_DEPTH) return fail(ps, "nested too deep");
        fy_insp_expr_t *a = unary(ps);
        ps->depth--;
        if (!a) return NULL;
        fy_insp_expr_t *x = node(ps, K_NOT);
        if (!x) {
            fy_insp_filter_free(a);
            return NULL;
        }
        x->a = a;
        return x;
    }
    if (c == '(') {
        ps->i++;
        if (++ps->depth > MAX_DEPTH) return fail(ps, "nested too deep");
        fy_insp_expr_t *x = or_expr(ps);
        ps->depth--;
        if (!x) return NULL;
        ws(ps);
        if (ps->i >= ps->n || ps->p[ps->i] != ')') {
            fy_insp_filter_free(x);
            return fail(ps, "')' is missing");
        }
        ps->i++;
        return x;
    }
    if (c == ')' || c == '&' || c == '|') return fail(ps, "a term is expected");
    if (c == '~') {
        size_t s = ++ps->i;
        while (ps->i < ps->n && ps->p[ps->i] >= 'a' && ps->p[ps->i] <= 'z') ps->i++;
        size_t len = ps->i - s;
        for (size_t t = 0; t < sizeof terms / sizeof terms[0]; t++) {
            if (strlen(terms[t].name) != len || memcmp(terms[t].name, ps->p + s, len)) continue;
            fy_insp_expr_t *x = node(ps, terms[t].kind);
            if (!x) return NULL;
            bool ok = terms[t].arg == 0   ? true
                      : terms[t].arg == 1 ? word(ps, x)
                                          : number(ps, x, terms[t].arg == 3);
            if (!ok) {
                fy_insp_filter_free(x);
                return NULL;
            }
            return x;
        }
        ps->i = s - 1;
        return fail(ps, "unknown term (use ~d ~u ~m ~c ~h ~hq ~hs ~b ~bq ~bs ~t ~dur ~size ~i ~e)");
    }
    fy_insp_expr_t *x = node(ps, K_URL);
    if (!x) return NULL;
    if (!word(ps, x)) {
        fy_insp_filter_free(x);
        return NULL;
    }
    return x;
}

static fy_insp_expr_t *join(parser_t *ps, int kind, fy_insp_expr_t *a, fy_insp_expr_t *b)
{
    fy_insp_expr_t *x = node(ps, kind);
    if (!x) {
        fy_insp_filter_free(a);
        fy_insp_filter_free(b);
        return NULL;
    }
    x->a = a;
    x->b = b;
    return x;
}

static fy_insp_expr_t *and_expr(parser_t *ps)
{
    fy_insp_expr_t *x = unary(ps);
    while (x) {
        ws(ps);
        if (ps->i >= ps->n || ps->p[ps->i] == ')' || ps->p[ps->i] == '|') break;
        if (ps->p[ps->i] == '&') ps->i++;
        fy_insp_expr_t *b = unary(ps);
        if (!b) {
            fy_insp_filter_free(x);
            return NULL;
        }
        x = join(ps, K_AND, x, b);
    }
    return x;
}

static fy_insp_expr_t *or_expr(parser_t *ps)
{
    fy_insp_expr_t *x = and_expr(ps);
    while (x) {
        ws(ps);
        if (ps->i >= ps->n || ps->p[ps->i] != '|') break;
        ps->i++;
        fy_insp_expr_t *b = and_expr(ps);
        if (!b) {
            fy_insp_filter_free(x);
            return NULL;
        }
        x = join(ps, K_OR, x, b);
    }
    return x;
}

fy_insp_expr_t *fy_insp_filter_parse(const char *s, size_t n, const char **err, size_t *errpos)
{
    parser_t ps = {.p = s, .n = n};
    *err = NULL;
    *errpos = 0;
    ws(&ps);
    if (ps.i >= n) return NULL;
    fy_insp_expr_t *x = or_expr(&ps);
    if (x) {
        ws(&ps);
        if (ps.i < n) {
            fy_insp_filter_free(x);
            x = fail(&ps, "unexpected text (a ')' too many?)");
        }
    }
    if (!x) {
        *err = ps.err ? ps.err : "invalid filter";
        *errpos = ps.errpos;
    }
    return x;
}

bool fy_insp_filter_needs_flow(const fy_insp_expr_t *x)
{
    if (!x) return false;
    switch (x->kind) {
    case K_HDR:
    case K_HDR_Q:
    case K_HDR_S:
    case K_BODY:
    case K_BODY_Q:
    case K_BODY_S:
    case K_ERROR:
        return true;
    default:
        return fy_insp_filter_needs_flow(x->a) || fy_insp_filter_needs_flow(x->b);
    }
}

/* ---- matching ---- */

static bool icontains(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn == 0) return true;
    if (nn > hn) return false;
    for (size_t i = 0; i + nn <= hn; i++) {
        size_t k = 0;
        while (k < nn && fy_lower(h[i + k]) == fy_lower(nd[k])) k++;
        if (k == nn) return true;
    }
    return false;
}

static bool cmp(const fy_insp_expr_t *x, long long v)
{
    switch (x->cmp) {
    case C_NE:
        return v != x->num;
    case C_GT:
        return v > x->num;
    case C_GE:
        return v >= x->num;
    case C_LT:
        return v < x->num;
    case C_LE:
        return v <= x->num;
    case C_CLASS:
        return v / 100 == x->num;
    default:
        return v == x->num;
    }
}

/* "name: value" of any header in hs contains the term's text */
static bool hdr_match(const fy_insp_expr_t *x, const fy_cs_header_t *hs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char line[8192];
        size_t nl = hs[i].name.len < 4096 ? hs[i].name.len : 4096;
        size_t vl = hs[i].value.len < 4000 ? hs[i].value.len : 4000;
        memcpy(line, hs[i].name.p, nl);
        line[nl] = ':';
        line[nl + 1] = ' ';
        memcpy(line + nl + 2, hs[i].value.p, vl);
        if (icontains(line, nl + 2 + vl, x->s, x->slen)) return true;
    }
    return false;
}

bool fy_insp_filter_match(const fy_insp_expr_t *x, fy_insp_subject_t *s)
{
    if (!x) return true;
    const fy_cs_entry_t *e = s->e;
    const fy_cs_flow_t *f = NULL;
    switch (x->kind) {
    case K_AND:
        return fy_insp_filter_match(x->a, s) && fy_insp_filter_match(x->b, s);
    case K_OR:
        return fy_insp_filter_match(x->a, s) || fy_insp_filter_match(x->b, s);
    case K_NOT:
        return !fy_insp_filter_match(x->a, s);
    case K_DOMAIN:
        return icontains(e->host, strlen(e->host), x->s, x->slen);
    case K_URL:
        return icontains(e->target, strlen(e->target), x->s, x->slen);
    case K_METHOD:
        return strlen(e->method) == x->slen && icontains(e->method, x->slen, x->s, x->slen);
    case K_CODE:
        return cmp(x, e->status);
    case K_CTYPE:
        return icontains(e->ctype, strlen(e->ctype), x->s, x->slen);
    case K_DUR:
        return cmp(x, e->duration_ms);
    case K_SIZE:
        return cmp(x, (long long)e->res_size);
    case K_INTERCEPTED:
        return (e->flags & FY_CS_INTERCEPTED) != 0;
    default:
        break;
    }
    if (s->load) f = s->load(s->ud);
    if (!f) return false;
    switch (x->kind) {
    case K_HDR:
        return hdr_match(x, f->req_headers, f->n_req_headers) ||
               hdr_match(x, f->res_headers, f->n_res_headers);
    case K_HDR_Q:
        return hdr_match(x, f->req_headers, f->n_req_headers);
    case K_HDR_S:
        return hdr_match(x, f->res_headers, f->n_res_headers);
    case K_BODY:
        return icontains(f->req_body.p, f->req_body.len, x->s, x->slen) ||
               icontains(f->res_body.p, f->res_body.len, x->s, x->slen);
    case K_BODY_Q:
        return icontains(f->req_body.p, f->req_body.len, x->s, x->slen);
    case K_BODY_S:
        return icontains(f->res_body.p, f->res_body.len, x->s, x->slen);
    case K_ERROR:
        return f->error.len > 0;
    default:
        return false;
    }
}

/* ---- query strings ---- */

static int hexv(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

long fy_insp_query_get(const char *q, size_t n, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name), i = 0;
    while (i <= n) {
        size_t e = i;
        while (e < n && q[e] != '&') e++;
        size_t eq = i;
        while (eq < e && q[eq] != '=') eq++;
        if (eq - i == nl && memcmp(q + i, name, nl) == 0) {
            size_t o = 0;
            for (size_t k = eq < e ? eq + 1 : e; k < e; k++) {
                char c = q[k];
                if (c == '+') {
                    c = ' ';
                } else if (c == '%' && k + 2 < e && hexv(q[k + 1]) >= 0 && hexv(q[k + 2]) >= 0) {
                    c = (char)(hexv(q[k + 1]) * 16 + hexv(q[k + 2]));
                    k += 2;
                }
                if (cap && o + 1 < cap) out[o] = c;
                o++;
            }
            if (cap) out[o + 1 < cap ? o : cap - 1] = 0;
            return (long)(o + 1 < cap ? o : (cap ? cap - 1 : 0));
        }
        i = e + 1;
    }
    return -1;
}

unsigned long long fy_insp_query_uint(const char *q, size_t n, const char *name,
                                      unsigned long long def, unsigned long long max)
{
    char b[32];
    long l = fy_insp_query_get(q, n, name, b, sizeof b);
    if (l <= 0) return def;
    unsigned long long v = 0;
    for (long i = 0; i < l; i++) {
        if (b[i] < '0' || b[i] > '9') return def;
        v = v * 10 + (unsigned)(b[i] - '0');
        if (v > max) return max;
    }
    return v;
}
