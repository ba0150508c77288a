/* Strict JSON (policy/json.h). Recursive descent bounded by max_depth; memory from the caller's
 * buffer, nodes from the front and strings packed after them. */
#include "policy/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const unsigned char *p, *end, *start;
    char *mem, *mend;
    int depth, max_depth;
    const char *err;
} parser_t;

static void *take(parser_t *ps, size_t n, size_t align)
{
    uintptr_t a = ((uintptr_t)ps->mem + align - 1) & ~(uintptr_t)(align - 1);
    if (a + n > (uintptr_t)ps->mend || a + n < a) {
        ps->err = "out of memory (document too large)";
        return NULL;
    }
    ps->mem = (char *)(a + n);
    return (void *)a;
}

static void ws(parser_t *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex4(const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 (overlong, surrogate, > U+10FFFF). */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, min = 0x10000;
    else
        return 0;
    if ((size_t)(end - p) < n) return 0;
    unsigned v = c & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    return n;
}

static size_t put_utf8(char *o, unsigned v)
{
    if (v < 0x80) {
        o[0] = (char)v;
        return 1;
    }
    if (v < 0x800) {
        o[0] = (char)(0xc0 | v >> 6);
        o[1] = (char)(0x80 | (v & 0x3f));
        return 2;
    }
    if (v < 0x10000) {
        o[0] = (char)(0xe0 | v >> 12);
        o[1] = (char)(0x80 | (v >> 6 & 0x3f));
        o[2] = (char)(0x80 | (v & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | v >> 18);
    o[1] = (char)(0x80 | (v >> 12 & 0x3f));
    o[2] = (char)(0x80 | (v >> 6 & 0x3f));
    o[3] = (char)(0x80 | (v & 0x3f));
    return 4;
}

/* At the opening quote. The decoded form is never longer than the escaped one. */
static int string(parser_t *ps, const char **out, size_t *outlen)
{
    const unsigned char *s = ++ps->p;
    const unsigned char *q = s;
    while (q < ps->end && *q != '"') {
        if (*q == '\\' && ++q == ps->end) break;
        q++;
    }
    if (q >= ps->end) {
        ps->err = "unterminated string";
        return -1;
    }
    char *o = take(ps, (size_t)(q - s) + 1, 1), *w = o;
    if (!o) return -1;
    while (ps->p < q) {
        unsigned c = *ps->p;
        if (c < 0x20) {
            ps->err = "control character in string";
            return -1;
        }
        if (c != '\\') {
            size_t n = utf8_len(ps->p, q);
            if (!n) {
                ps->err = "invalid UTF-8 in string";
                return -1;
            }
            memcpy(w, ps->p, n);
            w += n;
            ps->p += n;
            continue;
        }
        ps->p++;
        c = *ps->p++;
        switch (c) {
        case '"':
        case '\\':
        case '/':
            *w++ = (char)c;
            break;
        case 'b':
            *w++ = '\b';
            break;
        case 'f':
            *w++ = '\f';
            break;
        case 'n':
            *w++ = '\n';
            break;
        case 'r':
            *w++ = '\r';
            break;
        case 't':
            *w++ = '\t';
            break;
        case 'u': {
            unsigned v, lo;
            if (q - ps->p < 4 || hex4(ps->p, &v) < 0) goto bad_escape;
            ps->p += 4;
            if (v >= 0xdc00 && v <= 0xdfff) goto bad_escape;
            if (v >= 0xd800 && v <= 0xdbff) {
                if (q - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
                    hex4(ps->p + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                    goto bad_escape;
                ps->p += 6;
                v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
            }
            w += put_utf8(w, v);
            break;
        }
        default:
            goto bad_escape;
        }
    }
    ps->p = q + 1;
    *w = '\0';
    *out = o;
    *outlen = (size_t)(w - o);
    return 0;
bad_escape:
    ps->err = "invalid escape in string";
    return -1;
}

static int number(parser_t *ps, fy_json_t *v)
{
    const unsigned char *s = ps->p, *p = s;
    bool integral = true;
    if (p < ps->end && *p == '-') p++;
    if (p >= ps->end) goto bad;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    } else {
        goto bad;
    }
    if (p < ps->end && *p == '.') {
        integral = false;
        p++;
        if (p >= ps->end || *p < '0' || *p > '9') goto bad;
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        integral = false;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (p >= ps->end || *p < '0' || *p > '9') goto bad;
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    size_t n = (size_t)(p - s);
    if (n > 64) {
        ps->err = "number too long";
        return -1;
    }
    char buf[72];
    memcpy(buf, s, n);
    buf[n] = '\0';
    v->type = FY_JSON_NUMBER;
    v->num = strtod(buf, NULL);
    if (!isfinite(v->num)) {
        ps->err = "number out of range";
        return -1;
    }
    v->is_int = false;
    if (integral) {
        const char *d = buf[0] == '-' ? buf + 1 : buf;
        uint64_t u = 0;
        bool ok = strlen(d) <= 19;
        for (; ok && *d; d++) {
            if (u > (UINT64_MAX - 9) / 10) ok = false;
            u = u * 10 + (uint64_t)(*d - '0');
        }
        if (ok && (buf[0] == '-' ? u <= (uint64_t)INT64_MAX + 1 : u <= INT64_MAX)) {
            v->is_int = true;
            v->i = buf[0] == '-' ? (int64_t)(0 - u) : (int64_t)u;
        }
    }
    ps->p = p;
    return 0;
bad:
    ps->err = "invalid number";
    return -1;
}

static bool lit(parser_t *ps, const char *w, size_t n)
{
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0) return false;
    ps->p += n;
    return true;
}

static fy_json_t *value(parser_t *ps);

static fy_json_t *container(parser_t *ps, fy_json_t *v, bool obj)
{
    if (++ps->depth > ps->max_depth) {
        ps->err = "nesting too deep";
        return NULL;
    }
    v->type = obj ? FY_JSON_OBJECT : FY_JSON_ARRAY;
    unsigned char close = obj ? '}' : ']';
    ps->p++;
    ws(ps);
    fy_json_t **tail = &v->child;
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return v;
    }
    for (;;) {
        const char *key = NULL;
        size_t klen = 0;
        if (obj) {
            ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') {
                ps->err = "expected a string key";
                return NULL;
            }
            if (string(ps, &key, &klen) < 0) return NULL;
            for (const fy_json_t *c = v->child; c; c = c->next)
                if (c->key_len == klen && memcmp(c->key, key, klen) == 0) {
                    ps->err = "duplicate key";
                    return NULL;
                }
            ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                ps->err = "expected ':'";
                return NULL;
            }
            ps->p++;
        }
        fy_json_t *c = value(ps);
        if (!c) return NULL;
        c->key = key;
        c->key_len = klen;
        *tail = c;
        tail = &c->next;
        v->len++;
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            ws(ps);
            if (ps->p < ps->end && *ps->p == close) {
                ps->err = "trailing comma";
                return NULL;
            }
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            ps->depth--;
            return v;
        }
        ps->err = obj ? "expected ',' or '}'" : "expected ',' or ']'";
        return NULL;
    }
}

static fy_json_t *value(parser_t *ps)
{
    ws(ps);
    if (ps->p >= ps->end) {
        ps->err = "unexpected end";
        return NULL;
    }
    fy_json_t *v = take(ps, sizeof *v, 8);
    if (!v) return NULL;
    memset(v, 0, sizeof *v);
    switch (*ps->p) {
    case '{':
        return container(ps, v, true);
    case '[':
        return container(ps, v, false);
    case '"':
        v->type = FY_JSON_STRING;
        return string(ps, &v->str, &v->len) < 0 ? NULL : v;
    case 't':
        v->type = FY_JSON_TRUE;
        if (lit(ps, "true", 4)) return v;
        break;
    case 'f':
        v->type = FY_JSON_FALSE;
        if (lit(ps, "false", 5)) return v;
        break;
    case 'n':
        v->type = FY_JSON_NULL;
        if (lit(ps, "null", 4)) return v;
        break;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return number(ps, v) < 0 ? NULL : v;
        break;
    }
    ps->err = "unexpected character";
    return NULL;
}

fy_json_t *fy_json_parse(const char *in, size_t len, void *mem, size_t cap, int max_depth,
                         const char **err, size_t *at)
{
    parser_t ps = {(const unsigned char *)in,
                   (const unsigned char *)in + len,
                   (const unsigned char *)in,
                   mem,
                   (char *)mem + cap,
                   0,
                   max_depth,
                   NULL};
    fy_json_t *v = value(&ps);
    if (v) {
        ws(&ps);
        if (ps.p != ps.end) {
            ps.err = "trailing bytes after the value";
            v = NULL;
        }
    }
    if (!v) {
        if (err) *err = ps.err ? ps.err : "invalid";
        if (at) *at = (size_t)(ps.p - ps.start);
    }
    return v;
}

const fy_json_t *fy_json_get(const fy_json_t *o, const char *key)
{
    if (!o || o->type != FY_JSON_OBJECT) return NULL;
    size_t n = strlen(key);
    for (const fy_json_t *c = o->child; c; c = c->next)
        if (c->key_len == n && memcmp(c->key, key, n) == 0) return c;
    return NULL;
}

const char *fy_json_get_str(const fy_json_t *o, const char *key)
{
    const fy_json_t *v = fy_json_get(o, key);
    return v && v->type == FY_JSON_STRING ? v->str : NULL;
}
