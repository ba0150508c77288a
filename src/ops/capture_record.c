/* The capture store's records: encoded in one pass into memory the caller holds (the store's
 * queue), so a flow is copied once on its way to disk; parsed for the index in place. */
#include "ops/capture_record.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

void fy__cs_hred_init(fy__cs_hred_t *t, const char *const *names)
{
    memset(t, 0, sizeof *t);
    t->names = names;
    for (const char *const *h = names; h && *h; h++) {
        size_t n = strlen(*h);
        if (!n) continue;
        t->lens |= 1ull << (n < 63 ? n : 63);
        unsigned char c = (unsigned char)fy_lower((*h)[0]);
        t->first[c >> 3] |= (uint8_t)(1u << (c & 7));
    }
}

bool fy__cs_hred_slow(const fy__cs_hred_t *t, fy_str_t name)
{
    for (const char *const *h = t->names; h && *h; h++) {
        size_t n = strlen(*h);
        if (n != name.len) continue;
        size_t i = 0;
        while (i < n && fy_lower(name.p[i]) == (*h)[i]) i++;
        if (i == n) return true;
    }
    return false;
}

static const fy_str_t red = FY_STR_LIT("[redacted]");

static inline fy_str_t hval(const fy__cs_rec_edit_t *e, const fy_cs_header_t *h)
{
    return e->hred && fy__cs_hred_match(e->hred, h->name) ? red : h->value;
}

/* The timing meta's names (fy_cs_flow_t.t_set's bits) */
static const fy_str_t tname[4] = {FY_STR_LIT(FY_CS_META_DNS), FY_STR_LIT(FY_CS_META_CONNECT),
                                  FY_STR_LIT(FY_CS_META_TLS), FY_STR_LIT(FY_CS_META_WAIT)};

static const char d2[201] = "00010203040506070809101112131415161718192021222324252627282930313233"
                            "34353637383940414243444546474849505152535455565758596061626364656667"
                            "6869707172737475767778798081828384858687888990919293949596979899";

/* us in decimal ("-1" when negative) ending at e: its first byte */
static inline char *digits(char *e, int32_t us)
{
    char *q = e;
    if (us < 0) {
        *--q = '1';
        *--q = '-';
        return q;
    }
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
    return q;
}

static inline size_t n_time(const fy_cs_flow_t *f)
{
    static const uint8_t bits[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};
    return bits[f->t_set & 15]; /* no popcnt without -mpopcnt: a libgcc call */
}

size_t fy__cs_rec_size(const fy_cs_flow_t *f, const fy__cs_rec_edit_t *e)
{
    size_t n = 8 + 64 + 4 * 7; /* magic, length, fixed fields, 5 strings and 2 bodies' lengths */
    n += f->method.len + f->scheme.len + f->authority.len + f->target.len + f->error.len;
    n += e->req_body.len + e->res_body.len;
    n += (f->n_req_headers + f->n_res_headers) * 8;
    for (int d = 0; d < 2; d++) {
        const fy_cs_header_t *h = d ? f->res_headers : f->req_headers;
        size_t nh = d ? f->n_res_headers : f->n_req_headers;
        for (size_t i = 0; i < nh; i++) n += h[i].name.len + hval(e, &h[i]).len;
    }
    if (f->n_meta || n_time(f)) n += 4 + (f->n_meta + n_time(f)) * 8;
    for (int i = 0; i < 4; i++) {
        char t[12];
        if (f->t_set >> i & 1) n += tname[i].len + (size_t)(t + 12 - digits(t + 12, f->t_us[i]));
    }
    if (f->n_meta) {
        for (size_t i = 0; i < f->n_meta; i++)
            n += f->meta[i].name.len +
                 (e->meta_values ? e->meta_values[i].len : f->meta[i].value.len);
    }
    return n;
}

static inline char *w32(char *p, uint32_t v)
{
    memcpy(p, &v, 4);
    return p + 4;
}

static inline char *w64(char *p, uint64_t v)
{
    memcpy(p, &v, 8);
    return p + 8;
}

static inline char *wstr(char *p, fy_str_t s)
{
    p = w32(p, (uint32_t)s.len);
    fy__cs_copy(p, s.p, s.len);
    return p + s.len;
}

/* Is name "content-type" in any case? Two overlapping 8-byte words with ASCII letters
   folded (| 0x20: only '\r' would fold to '-', which position 7 rules out), not a byte loop. */
static inline bool is_ctype(fy_str_t name)
{
    if (name.len != 12 || name.p[7] != '-') return false;
    uint64_t a, b, fa, fb;
    memcpy(&a, name.p, 8);
    memcpy(&b, name.p + 4, 8);
    memcpy(&fa, "content-", 8);
    memcpy(&fb, "ent-type", 8);
    const uint64_t fold = 0x2020202020202020ull;
    return ((a | fold) == fa) && ((b | fold) == fb);
}

/* A field that does not fit before `end` ends the encoding (0): the caller grows its buffer
   and encodes again, which is rare. One compare per header (name and value together), where a
   sizing pass first was a second walk over every header (~150 instructions a flow). */
#define ROOM(n)                                                                                    \
    do {                                                                                           \
        if ((size_t)(end - p) < (n)) return 0;                                                     \
    } while (0)

size_t fy__cs_rec_encode(char *dst, size_t room, const fy_cs_flow_t *f, const fy__cs_rec_edit_t *e,
                         uint64_t id, uint32_t ct[2])
{
    ct[0] = ct[1] = 0;
    char *p = dst;
    const char *end = dst + room;
    ROOM(8 + 64 + 4 * 5 + f->method.len + f->scheme.len + f->authority.len + f->target.len +
         f->error.len);
    memcpy(p, FY__CS_REC_MAGIC, 4);
    p += 8; /* the length, filled below */
    p = w64(p, id);
    p = w64(p, (uint64_t)f->start_us);
    p = w32(p, f->duration_ms);
    p = w32(p, f->ttfb_ms);
    p = w32(p, (uint32_t)f->status);
    p = w32(p, (uint32_t)f->version);
    p = w32(p, f->stream_id);
    p = w32(p, e->flags);
    p = w64(p, f->req_size);
    p = w64(p, f->res_size);
    p = w32(p, (uint32_t)f->n_req_headers);
    p = w32(p, (uint32_t)f->n_res_headers);
    p = wstr(p, f->method);
    p = wstr(p, f->scheme);
    p = wstr(p, f->authority);
    p = wstr(p, f->target);
    p = wstr(p, f->error);
    const fy__cs_hred_t *hr = e->hred;
    for (size_t i = 0; i < f->n_req_headers; i++) {
        const fy_cs_header_t *h = &f->req_headers[i];
        fy_str_t v = hr && fy__cs_hred_match(hr, h->name) ? red : h->value;
        ROOM(8 + h->name.len + v.len);
        p = wstr(p, h->name);
        p = wstr(p, v);
    }
    for (size_t i = 0; i < f->n_res_headers; i++) {
        const fy_cs_header_t *h = &f->res_headers[i];
        fy_str_t v = hr && fy__cs_hred_match(hr, h->name) ? red : h->value;
        ROOM(8 + h->name.len + v.len);
        p = wstr(p, h->name);
        if (!ct[0] && is_ctype(h->name)) {
            ct[0] = (uint32_t)(p + 4 - dst);
            ct[1] = (uint32_t)v.len;
        }
        p = wstr(p, v);
    }
    size_t nt = n_time(f);
    ROOM(8 + (f->n_meta || nt ? 4 : 0) + e->req_body.len + e->res_body.len); /* and the count */
    p = wstr(p, e->req_body);
    p = wstr(p, e->res_body);
    if (f->n_meta || nt) p = w32(p, (uint32_t)(f->n_meta + nt));
    if (nt) {
        for (int i = 0; i < 4; i++) {
            if (!(f->t_set >> i & 1)) continue;
            char t[12], *q = digits(t + 12, f->t_us[i]);
            size_t dl = (size_t)(t + 12 - q);
            ROOM(8 + tname[i].len + dl);
            p = wstr(p, tname[i]);
            p = wstr(p, fy_str(q, dl));
        }
    }
    if (f->n_meta) {
        const fy_cs_header_t *m = f->meta;
        const fy_str_t *mv = e->meta_values;
        for (size_t i = 0; i < f->n_meta; i++) {
            fy_str_t v = mv ? mv[i] : m[i].value;
            ROOM(8 + m[i].name.len + v.len);
            p = wstr(p, m[i].name);
            p = wstr(p, v);
        }
    }
    w32(dst + 4, (uint32_t)(p - dst));
    return (size_t)(p - dst);
}

#undef ROOM

/* ---- reading ---- */

typedef struct rd {
    const char *p;
    size_t n, i;
    bool bad;
} rd_t;

static inline uint32_t ru32(rd_t *r)
{
    uint32_t v = 0;
    if (r->i + 4 > r->n) {
        r->bad = true;
        return 0;
    }
    memcpy(&v, r->p + r->i, 4);
    r->i += 4;
    return v;
}

static inline uint64_t ru64(rd_t *r)
{
    uint64_t v = 0;
    if (r->i + 8 > r->n) {
        r->bad = true;
        return 0;
    }
    memcpy(&v, r->p + r->i, 8);
    r->i += 8;
    return v;
}

static inline fy_str_t rstr(rd_t *r)
{
    uint32_t n = ru32(r);
    if (r->bad || n > r->n - r->i) {
        r->bad = true;
        return FY_STR_LIT("");
    }
    fy_str_t s = fy_str(r->p + r->i, n);
    r->i += n;
    return s;
}

/* The fixed fields (after magic and length) into f; the header counts into *nq, *ns. */
static void fixed(rd_t *r, fy_cs_flow_t *f, uint32_t *nq, uint32_t *ns)
{
    f->id = ru64(r);
    f->start_us = (int64_t)ru64(r);
    f->duration_ms = ru32(r);
    f->ttfb_ms = ru32(r);
    f->status = (int)ru32(r);
    f->version = (int)ru32(r);
    f->stream_id = ru32(r);
    f->flags = ru32(r);
    f->req_size = ru64(r);
    f->res_size = ru64(r);
    *nq = ru32(r);
    *ns = ru32(r);
}

static inline uint32_t g32(const char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t g64(const char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The string at p[*i] (u32 length, bytes) into *out, *i past it: false when it runs past n
   (*i <= n stays true). */
static inline bool skip(const char *p, size_t n, size_t *i, fy_str_t *out)
{
    uint32_t l;
    if (n - *i < 4) return false;
    memcpy(&l, p + *i, 4);
    if (l > n - *i - 4) return false;
    *out = fy_str(p + *i + 4, l);
    *i += 4 + (size_t)l;
    return true;
}

/* Every stored record is indexed at start: one bound check a string, the fixed part read
   after one length check. */
int fy__cs_rec_index(const char *p, size_t n, fy_cs_entry_t *e, fy_str_t str[4])
{
    if (n < 8 + FY__CS_REC_FIXED || memcmp(p, FY__CS_REC_MAGIC, 4) != 0) return -EIO;
    uint32_t nq = g32(p + 64), ns = g32(p + 68);
    if (nq > n / 8 || ns > n / 8) return -EIO;
    e->id = g64(p + 8);
    e->start_us = (int64_t)g64(p + 16);
    e->duration_ms = g32(p + 24);
    e->status = (int)g32(p + 32);
    e->version = (int)g32(p + 36);
    e->stream_id = g32(p + 40);
    e->flags = g32(p + 44);
    e->req_size = g64(p + 48);
    e->res_size = g64(p + 56);
    size_t i = 72; /* magic, length and the fixed fields */
    fy_str_t x;
    if (!skip(p, n, &i, &str[0]) || !skip(p, n, &i, &x) || !skip(p, n, &i, &str[1]) ||
        !skip(p, n, &i, &str[2]) || !skip(p, n, &i, &x))
        return -EIO;
    str[3] = FY_STR_LIT("");
    for (uint32_t k = 0; k < 2 * nq; k++) /* nq <= n / 8: no overflow */
        if (!skip(p, n, &i, &x)) return -EIO;
    bool ct = false;
    for (uint32_t k = 0; k < ns; k++) {
        fy_str_t name, value;
        if (!skip(p, n, &i, &name) || !skip(p, n, &i, &value)) return -EIO;
        if (!ct && is_ctype(name)) {
            str[3] = value;
            ct = true;
        }
    }
    if (!skip(p, n, &i, &x) || !skip(p, n, &i, &x)) return -EIO; /* the bodies */
    if (i == n) return 0;                                        /* no meta */
    if (n - i < 4) return -EIO;
    uint32_t nm = g32(p + i);
    i += 4;
    if (nm > n / 8) return -EIO;
    for (uint32_t k = 0; k < 2 * nm; k++)
        if (!skip(p, n, &i, &x)) return -EIO;
    return 0;
}

void fy__cs_rec_index_encoded(const char *p, const uint32_t ct[2], fy_cs_entry_t *e,
                              fy_str_t str[4])
{
    e->id = g64(p + 8);
    e->start_us = (int64_t)g64(p + 16);
    e->duration_ms = g32(p + 24);
    e->status = (int)g32(p + 32);
    e->version = (int)g32(p + 36);
    e->stream_id = g32(p + 40);
    e->flags = g32(p + 44);
    e->req_size = g64(p + 48);
    e->res_size = g64(p + 56);
    const char *q = p + 72; /* method, scheme, authority, target */
    uint32_t n = g32(q);
    str[0] = fy_str(q + 4, n);
    q += 4 + n;
    q += 4 + g32(q);
    n = g32(q);
    str[1] = fy_str(q + 4, n);
    q += 4 + n;
    str[2] = fy_str(q + 4, g32(q));
    str[3] = fy_str(p + ct[0], ct[1]);
}

int fy__cs_rec_decode(char *buf, size_t n, fy_cs_loaded_t *out)
{
    memset(out, 0, sizeof *out);
    rd_t r = {buf, n, 8, false};
    if (n < 8 + FY__CS_REC_FIXED || memcmp(buf, FY__CS_REC_MAGIC, 4) != 0) return -EIO;
    fy_cs_flow_t *f = &out->f;
    uint32_t nq, ns;
    fixed(&r, f, &nq, &ns);
    if (r.bad || nq > n / 8 || ns > n / 8) return -EIO;
    out->hdrs = fy_xcalloc((size_t)nq + ns + 1, sizeof *out->hdrs);
    f->method = rstr(&r);
    f->scheme = rstr(&r);
    f->authority = rstr(&r);
    f->target = rstr(&r);
    f->error = rstr(&r);
    for (uint32_t i = 0; i < nq + ns; i++) {
        out->hdrs[i].name = rstr(&r);
        out->hdrs[i].value = rstr(&r);
    }
    f->req_headers = out->hdrs;
    f->n_req_headers = nq;
    f->res_headers = out->hdrs + nq;
    f->n_res_headers = ns;
    f->req_body = rstr(&r);
    f->res_body = rstr(&r);
    uint32_t nm = r.i < n ? ru32(&r) : 0;
    if (!r.bad && nm && nm <= n / 8) {
        fy_cs_header_t *m = fy_xcalloc(nm, sizeof *m);
        for (uint32_t i = 0; i < nm; i++) {
            m[i].name = rstr(&r);
            m[i].value = rstr(&r);
        }
        out->meta = m;
        f->meta = m;
        f->n_meta = nm;
    } else if (nm) {
        r.bad = true;
    }
    if (r.bad) {
        free(out->meta);
        out->meta = NULL;
        free(out->hdrs);
        out->hdrs = NULL;
        return -EIO;
    }
    out->buf = buf;
    return 0;
}
