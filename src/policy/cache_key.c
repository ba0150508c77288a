/* Cache keys (policy/cache_key.h). */
#include "policy/cache_key.h"

#include <string.h>

uint64_t fy_cache_hash(const char *p, size_t n)
{
    /* eight bytes a step, then a final mix (the index uses the high and the low bits) */
    uint64_t h = 1469598103934665603ull ^ (n * 0x9e3779b97f4a7c15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
}

char *fy_cache_key(fy_arena_t *a, const fy_request_t *req, char *const *extra, size_t nextra,
                   size_t *len)
{
    return fy_cache_key_into(NULL, 0, a, req, extra, nextra, len);
}

/* s[0..n) lowercased at p (branch-free: the compiler can do it a vector at a time). */
static char *lower_into(char *p, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        p[i] = (char)(c | (unsigned char)(((unsigned char)(c - 'A') < 26u) << 5));
    }
    return p + n;
}

char *fy_cache_key_into(char *buf, size_t cap, fy_arena_t *a, const fy_request_t *req,
                        char *const *extra, size_t nextra, size_t *len)
{
    fy_str_t au = req->authority;
    /* the default port of the scheme is the same origin as none (RFC 9110 §4.2.3) */
    bool https = req->scheme.len == 5;
    if (https && au.len > 4 && memcmp(au.p + au.len - 4, ":443", 4) == 0) au.len -= 4;
    if (!https && au.len > 3 && memcmp(au.p + au.len - 3, ":80", 3) == 0) au.len -= 3;
    if (au.len && au.p[au.len - 1] == '.') au.len--; /* "example.com." */
    size_t need = req->scheme.len + 3 + au.len + req->path.len + 1 + req->query.len + 1;
    for (size_t i = 0; i < nextra; i++) {
        const fy_header_t *h = fy_headers_find(&req->headers, extra[i], strlen(extra[i]));
        need += strlen(extra[i]) + 2 + (h ? h->value.len : 0);
    }
    char *k = buf && need <= cap ? buf : fy_arena_alloc(a, need), *p = k;
    p = lower_into(p, req->scheme.p, req->scheme.len);
    memcpy(p, "://", 3);
    p += 3;
    p = lower_into(p, au.p, au.len);
    memcpy(p, req->path.p, req->path.len);
    p += req->path.len;
    if (req->query.len) {
        *p++ = '?';
        memcpy(p, req->query.p, req->query.len);
        p += req->query.len;
    }
    for (size_t i = 0; i < nextra; i++) {
        const fy_header_t *h = fy_headers_find(&req->headers, extra[i], strlen(extra[i]));
        size_t l = strlen(extra[i]);
        *p++ = '\n';
        memcpy(p, extra[i], l);
        p += l;
        *p++ = h ? ':' : '!';
        if (h) {
            memcpy(p, h->value.p, h->value.len);
            p += h->value.len;
        }
    }
    *len = (size_t)(p - k);
    *p = '\0';
    return k;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t';
}

char *fy_cache_vary_names(fy_arena_t *a, const fy_headers_t *hs, size_t *len)
{
    /* collect members */
    fy_str_t names[64];
    size_t nn = 0;
    for (size_t i = 0; i < hs->n; i++) {
        if (!fy_str_ieq(hs->v[i].name, "vary", 4)) continue;
        const char *p = hs->v[i].value.p, *e = p + hs->v[i].value.len;
        while (p < e) {
            while (p < e && (is_ws(*p) || *p == ',')) p++;
            const char *s = p;
            while (p < e && *p != ',') p++;
            const char *t = p;
            while (t > s && is_ws(t[-1])) t--;
            if (t == s) continue;
            fy_str_t m = fy_str(s, (size_t)(t - s));
            bool dup = false;
            for (size_t k = 0; k < nn && !dup; k++) {
                if (names[k].len != m.len) continue;
                dup = true;
                for (size_t j = 0; j < m.len; j++)
                    if (fy_lower(names[k].p[j]) != fy_lower(m.p[j])) dup = false;
            }
            if (dup) continue;
            if (nn == sizeof names / sizeof names[0]) {
                /* more names than we keep: treat as "*" (never matches) */
                names[0] = fy_str("*", 1);
                nn = 1;
                break;
            }
            names[nn++] = m;
        }
    }
    if (!nn) {
        *len = 0;
        return NULL;
    }
    /* sort (insertion; case-insensitively) */
    for (size_t i = 1; i < nn; i++) {
        fy_str_t x = names[i];
        size_t j = i;
        while (j > 0) {
            fy_str_t y = names[j - 1];
            size_t m = x.len < y.len ? x.len : y.len;
            int c = 0;
            for (size_t k = 0; k < m && !c; k++)
                c = (unsigned char)fy_lower(y.p[k]) - (unsigned char)fy_lower(x.p[k]);
            if (c < 0 || (c == 0 && y.len <= x.len)) break;
            names[j] = y;
            j--;
        }
        names[j] = x;
    }
    size_t need = 0;
    for (size_t i = 0; i < nn; i++) need += names[i].len + 1;
    char *out = fy_arena_alloc(a, need), *p = out;
    for (size_t i = 0; i < nn; i++) {
        if (i) *p++ = '\n';
        for (size_t k = 0; k < names[i].len; k++) *p++ = fy_lower(names[i].p[k]);
    }
    *p = '\0';
    *len = (size_t)(p - out);
    return out;
}

/* Accept-Encoding by what it means: the codings we know, best first (RFC 9110 §12.5.3) */
static const char *const codings[] = {"br", "compress", "deflate", "gzip", "identity", "zstd"};
#define NCODINGS 6
#define AE_NORM_MAX 48 /* "br,compress,deflate,gzip,identity,zstd" and separators */

/* q-value "0.5" in thousandths; -1 when malformed */
static int qvalue(const char *p, const char *e)
{
    if (p == e || (*p != '0' && *p != '1')) return -1;
    int v = (*p++ - '0') * 1000, scale = 100;
    if (p < e && *p == '.') {
        p++;
        for (int k = 0; p < e && k < 3; k++, p++, scale /= 10) {
            if (*p < '0' || *p > '9') return -1;
            v += (*p - '0') * scale;
        }
    }
    return p == e && v <= 1000 ? v : -1;
}

/* One Accept-Encoding line into q[] (per known coding; -1: not named) and *star. */
static void ae_scan(const char *v, const char *ve, int *q, int *star)
{
    while (v < ve) {
        while (v < ve && (is_ws(*v) || *v == ',')) v++;
        const char *ts = v;
        while (v < ve && *v != ',' && *v != ';' && !is_ws(*v)) v++;
        fy_str_t t = fy_str(ts, (size_t)(v - ts));
        int qv = 1000;
        while (v < ve && *v != ',') { /* parameters: only q counts */
            while (v < ve && (is_ws(*v) || *v == ';')) v++;
            const char *ps = v;
            while (v < ve && *v != ',' && *v != ';') v++;
            const char *pe = v;
            while (pe > ps && is_ws(pe[-1])) pe--;
            if (pe - ps >= 2 && (ps[0] == 'q' || ps[0] == 'Q') && ps[1] == '=') {
                qv = qvalue(ps + 2, pe);
                if (qv < 0) qv = 0; /* malformed: not acceptable (as compress_neg.c) */
            }
        }
        if (!t.len) continue;
        if (t.len == 1 && t.p[0] == '*') {
            if (qv > *star) *star = qv;
            continue;
        }
        if (fy_str_ieq(t, "x-gzip", 6)) t = fy_str("gzip", 4);
        if (fy_str_ieq(t, "x-compress", 10)) t = fy_str("compress", 8);
        for (int k = 0; k < NCODINGS; k++)
            if (fy_str_ieq(t, codings[k], strlen(codings[k])) && qv > q[k]) q[k] = qv;
    }
}

/* The acceptable known codings by falling q, ',' between equals, '>' between levels; "-"
   when none is acceptable. Unknown codings are left out: no origin answers with them. */
static char *ae_emit(char *p, const int *q0, int star)
{
    int q[NCODINGS];
    for (int k = 0; k < NCODINGS; k++)
        q[k] = q0[k] >= 0 ? q0[k] : star >= 0 ? star : k == 4 ? 1000 : 0; /* 4: identity */
    int last = -1;
    char *start = p;
    for (int level = 1000; level > 0;) {
        int next = 0;
        for (int k = 0; k < NCODINGS; k++) {
            if (q[k] == level) {
                if (p > start) *p++ = last == level ? ',' : '>';
                size_t l = strlen(codings[k]);
                memcpy(p, codings[k], l);
                p += l;
                last = level;
            } else if (q[k] < level && q[k] > next)
                next = q[k];
        }
        level = next;
    }
    if (p == start) *p++ = '-';
    return p;
}

char *fy_cache_vary_key(fy_arena_t *a, const fy_headers_t *req_headers, const char *names,
                        size_t nlen, size_t *len)
{
    size_t need = nlen + 2;
    for (size_t i = 0; i < req_headers->n; i++) need += req_headers->v[i].value.len + 2;
    need += AE_NORM_MAX;
    char *out = fy_arena_alloc(a, need), *p = out;
    const char *n = names, *ne = names + nlen;
    while (n < ne) {
        const char *s = n;
        while (n < ne && *n != '\n') n++;
        fy_str_t nm = fy_str(s, (size_t)(n - s));
        if (n < ne) n++;
        bool any = false;
        if (nm.len == 15 && fy_str_ieq(nm, "accept-encoding", 15)) {
            int q[NCODINGS] = {-1, -1, -1, -1, -1, -1}, star = -1;
            for (size_t i = 0; i < req_headers->n; i++)
                if (fy_str_ieq(req_headers->v[i].name, "accept-encoding", 15)) {
                    any = true;
                    const char *v = req_headers->v[i].value.p;
                    ae_scan(v, v + req_headers->v[i].value.len, q, &star);
                }
            if (any) {
                *p++ = ':';
                p = ae_emit(p, q, star);
            } else
                *p++ = '!';
            *p++ = '\n';
            continue;
        }
        for (size_t i = 0; i < req_headers->n; i++) {
            if (!fy_str_ieq(req_headers->v[i].name, nm.p, nm.len)) continue;
            *p++ = any ? ',' : ':';
            any = true;
            /* members without surrounding whitespace, joined by ',' */
            const char *v = req_headers->v[i].value.p, *ve = v + req_headers->v[i].value.len;
            bool first = true;
            while (v < ve) {
                while (v < ve && is_ws(*v)) v++;
                const char *ms = v;
                while (v < ve && *v != ',') v++;
                const char *me = v;
                while (me > ms && is_ws(me[-1])) me--;
                if (!first) *p++ = ',';
                first = false;
                memcpy(p, ms, (size_t)(me - ms));
                p += me - ms;
                if (v < ve) v++; /* the comma */
            }
        }
        if (!any) *p++ = '!';
        *p++ = '\n';
    }
    *p = '\0';
    *len = (size_t)(p - out);
    return out;
}
