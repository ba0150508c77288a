/* W3C Trace Context: parsing and formatting (pure) and the trace filter (see trace.h). */
#include "policy/trace.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/arena.h"
#include "core/log.h"

/* ---- traceparent ---- */

/* a lowercase hex digit's value plus one; 0: not one (uppercase is invalid, W3C §3.2.2) */
static const uint8_t hexv1[256] = {
    ['0'] = 1, ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
};

/* the value of a hex digit, or -1 */
static inline int hexval(char c)
{
    return (int)hexv1[(unsigned char)c] - 1;
}

/* nbytes from 2*nbytes hex digits: no branch per digit (a bad digit sets the sign bit) */
static bool unhex(const char *p, uint8_t *out, size_t nbytes)
{
    int bad = 0;
    unsigned any = 0;
    for (size_t i = 0; i < nbytes; i++) {
        int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
        bad |= hi | lo;
        out[i] = (uint8_t)((unsigned)hi << 4 | (unsigned)lo);
        any |= out[i];
    }
    return bad >= 0 && any != 0; /* all zeros: invalid */
}

int fy_traceparent_parse(const char *p, size_t n, fy_traceparent_t *out)
{
    if (n < FY_TRACEPARENT_LEN) return -1;
    int v0 = hexval(p[0]), v1 = hexval(p[1]);
    if (v0 < 0 || v1 < 0) return -1;
    uint8_t version = (uint8_t)(v0 << 4 | v1);
    if (version == 0xff) return -1;
    if (version == 0 && n != FY_TRACEPARENT_LEN) return -1;
    if (n > FY_TRACEPARENT_LEN && p[FY_TRACEPARENT_LEN] != '-') return -1;
    if (p[2] != '-' || p[35] != '-' || p[52] != '-') return -1;
    fy_traceparent_t tp = {.version = version};
    if (!unhex(p + 3, tp.trace_id, 16) || !unhex(p + 36, tp.parent_id, 8)) return -1;
    int f0 = hexval(p[53]), f1 = hexval(p[54]);
    if (f0 < 0 || f1 < 0) return -1;
    tp.flags = (uint8_t)(f0 << 4 | f1);
    *out = tp;
    return 0;
}

/* 16 lowercase hex characters of the 8 bytes at b, in their order. SSE2 (every x86-64): the
 * nibbles interleaved into 16 bytes, then '0'..'9' or 'a'..'f' for all at once. */
static void hex16(char *o, const uint8_t *b)
{
#if defined(__SSE2__)
    __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)b);
    __m128i mask = _mm_set1_epi8(0x0f);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask), lo = _mm_and_si128(v, mask);
    __m128i n = _mm_unpacklo_epi8(hi, lo); /* hi0 lo0 hi1 lo1 ... */
    __m128i gt9 = _mm_and_si128(_mm_cmpgt_epi8(n, _mm_set1_epi8(9)), _mm_set1_epi8(39));
    n = _mm_add_epi8(_mm_add_epi8(n, _mm_set1_epi8('0')), gt9);
    _mm_storeu_si128((__m128i *)(void *)o, n);
#else
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 8; i++) {
        o[2 * i] = digits[b[i] >> 4];
        o[2 * i + 1] = digits[b[i] & 15];
    }
#endif
}

void fy_traceparent_format(const fy_traceparent_t *tp, char out[FY_TRACEPARENT_LEN + 1])
{
    memcpy(out, "00-", 3);
    hex16(out + 3, tp->trace_id);
    hex16(out + 19, tp->trace_id + 8);
    out[35] = '-';
    hex16(out + 36, tp->parent_id);
    out[52] = '-';
    static const char digits[] = "0123456789abcdef";
    out[53] = digits[tp->flags >> 4];
    out[54] = digits[tp->flags & 15];
    out[55] = '\0';
}

/* ---- tracestate ---- */

size_t fy_tracestate_trim(const char *p, size_t n, size_t max)
{
    size_t keep = 0, members = 0, i = 0;
    while (i < n) {
        size_t start = i;
        while (i < n && p[i] != ',') i++;
        /* the member without its surrounding spaces and tabs */
        size_t a = start, b = i;
        while (a < b && (p[a] == ' ' || p[a] == '\t')) a++;
        while (b > a && (p[b - 1] == ' ' || p[b - 1] == '\t')) b--;
        if (b > a) { /* empty members are allowed and skipped (W3C §3.3.1.1) */
            if (b > max || ++members > FY_TRACESTATE_MAX_MEMBERS) break;
            keep = b;
        }
        i++; /* past the comma */
    }
    return keep;
}

/* ---- ids ---- */

/* wyrand (Wang Yi), one per thread, seeded from getrandom on first use: ids must not repeat,
 * not be secret; one add, one 64x64->128 multiply and two xors per 64 bits. State 0 is "not
 * seeded" (a state that wraps to 0 only reseeds). */
static __thread uint64_t rng;

static __attribute__((cold, noinline)) uint64_t rng_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uintptr_t)&ts;
    }
    return s | 1;
}

static inline uint64_t wyrand(uint64_t *s)
{
    *s += 0xa0761d6478bd642full;
    __uint128_t t = (__uint128_t)*s * (*s ^ 0xe7037ed1a0b428dbull);
    return (uint64_t)(t >> 64) ^ (uint64_t)t;
}

/* three 64-bit ids from one load and store of the state: a trace id (two words, not both
 * zero) and a parent id (not zero); an all-zero id is invalid (W3C §3.2.2.3-4) */
static inline void new_ids_from(uint64_t s, uint64_t *t0, uint64_t *t1, uint64_t *par)
{
    *t0 = wyrand(&s);
    *t1 = wyrand(&s);
    *par = wyrand(&s);
    rng = s;
    *t1 |= (uint64_t)((*t0 | *t1) == 0);
    *par |= (uint64_t)(*par == 0);
}

static inline void new_ids(uint64_t *t0, uint64_t *t1, uint64_t *par)
{
    uint64_t s = rng;
    if (__builtin_expect(s == 0, 0)) s = rng_seed();
    new_ids_from(s, t0, t1, par);
}

static inline uint64_t new_parent(void)
{
    uint64_t s = rng;
    if (__builtin_expect(s == 0, 0)) s = rng_seed();
    uint64_t p = wyrand(&s);
    rng = s;
    return p | (uint64_t)(p == 0);
}

/* Lowercase hex of 64-bit words, bytes in memory order (little-endian: the low byte first).
 * SSE2 (every x86-64): the nibbles interleaved, then '0'..'9' or 'a'..'f' for all at once. */
#if defined(__SSE2__)
static inline __m128i hex_nibbles(__m128i n)
{
    __m128i gt9 = _mm_and_si128(_mm_cmpgt_epi8(n, _mm_set1_epi8(9)), _mm_set1_epi8(39));
    return _mm_add_epi8(_mm_add_epi8(n, _mm_set1_epi8('0')), gt9);
}

/* 32 characters of a and b */
static inline void hex_2w(char *o, uint64_t a, uint64_t b)
{
    __m128i v = _mm_set_epi64x((long long)b, (long long)a), mask = _mm_set1_epi8(0x0f);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask), lo = _mm_and_si128(v, mask);
    _mm_storeu_si128((__m128i *)(void *)o, hex_nibbles(_mm_unpacklo_epi8(hi, lo)));
    _mm_storeu_si128((__m128i *)(void *)(o + 16), hex_nibbles(_mm_unpackhi_epi8(hi, lo)));
}

/* 16 characters of a */
static inline void hex_w(char *o, uint64_t a)
{
    __m128i v = _mm_cvtsi64_si128((long long)a), mask = _mm_set1_epi8(0x0f);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask), lo = _mm_and_si128(v, mask);
    _mm_storeu_si128((__m128i *)(void *)o, hex_nibbles(_mm_unpacklo_epi8(hi, lo)));
}
#else
static inline void hex_w(char *o, uint64_t a)
{
    uint8_t b[8];
    memcpy(b, &a, 8);
    hex16(o, b);
}

static inline void hex_2w(char *o, uint64_t a, uint64_t b)
{
    hex_w(o, a);
    hex_w(o + 16, b);
}
#endif

/* ---- the filter ----
 *
 * The fields it adds are named from http/filter.h's table (FY_FILTER_FIELD_*) and appended
 * last: the proxy forwards them without classifying their names. */

typedef struct trace_filter {
    fy_filter_t f;
    const fy_trace_conf_t *conf;
    char tail[4]; /* "-0" and the flag digit of the traces we start, NUL: the value's last 4 */
} trace_filter_t;

static bool is_name(fy_str_t n, const char *lower, size_t len)
{
    return n.len == len && fy_str_ieq(n, lower, len);
}

/* room for the value: the arena's bump without the call (the value needs no alignment) */
static inline char *value_room(fy_arena_t *a)
{
    char *p = a->cur;
    if (__builtin_expect((size_t)(a->end - p) >= FY_TRACEPARENT_LEN + 1, 1)) {
        a->cur = p + FY_TRACEPARENT_LEN + 1;
        return p;
    }
    return fy_arena_alloc(a, FY_TRACEPARENT_LEN + 1);
}

/* a new trace from the ids: "00-" trace id "-" parent id flags, with the NUL, into v */
static inline __attribute__((always_inline)) void write_ids(char *v, const trace_filter_t *t,
                                                            uint64_t t0, uint64_t t1, uint64_t par)
{
    memcpy(v, "00--", 4); /* the 4th byte is the trace id's first, written next */
    hex_2w(v + 3, t0, t1);
    v[35] = '-';
    hex_w(v + 36, par);
    memcpy(v + 52, t->tail, 4); /* the flags of the traces Ferry starts */
}

/* a new trace, with new ids, into v */
static inline __attribute__((always_inline)) void write_new(char *v, const trace_filter_t *t)
{
    uint64_t t0, t1, par;
    new_ids(&t0, &t1, &par);
    write_ids(v, t, t0, t1, par);
}

static inline __attribute__((always_inline)) void add_traceparent(fy_exchange_t *ex,
                                                                  fy_headers_t *hs, char *v)
{
    if (__builtin_expect(hs->n < hs->cap, 1)) /* the codec's array has room (h1): no call */
        hs->v[hs->n++] =
            (fy_header_t){fy_str(FY_FILTER_FIELD_TRACEPARENT, 11), fy_str(v, FY_TRACEPARENT_LEN)};
    else
        fy_headers_add(ex->arena, hs, FY_FILTER_FIELD_TRACEPARENT, 11, v, FY_TRACEPARENT_LEN);
    ex->trace_id = v + 3; /* 32 hex characters */
}

/* The request has a field that may be a traceparent or tracestate: the whole rule. */
static __attribute__((noinline)) fy_filter_verdict_t on_request_fields(trace_filter_t *t,
                                                                       fy_exchange_t *ex)
{
    const fy_trace_conf_t *c = t->conf;
    fy_headers_t *hs = &ex->req.headers;
    const fy_header_t *tph = NULL;
    size_t ntp = 0, nts = 0, tslen = 0;
    for (size_t i = 0; i < hs->n; i++) {
        if (is_name(hs->v[i].name, "traceparent", 11)) {
            tph = &hs->v[i];
            ntp++;
        } else if (is_name(hs->v[i].name, "tracestate", 10)) {
            nts++;
            tslen += hs->v[i].value.len + 1;
        }
    }
    fy_traceparent_t tp;
    bool valid = ntp == 1 && fy_traceparent_parse(tph->value.p, tph->value.len, &tp) == 0;
    const char *got = valid ? tph->value.p : NULL; /* tph moves when the fields go below */
    /* tracestate, only with a valid traceparent: its fields joined, then trimmed */
    char *ts = NULL;
    size_t tsn = 0;
    if (valid && nts) {
        ts = fy_arena_alloc(ex->arena, tslen);
        for (size_t i = 0; i < hs->n; i++)
            if (is_name(hs->v[i].name, "tracestate", 10)) {
                if (tsn) ts[tsn++] = ',';
                memcpy(ts + tsn, hs->v[i].value.p, hs->v[i].value.len);
                tsn += hs->v[i].value.len;
            }
        tsn = fy_tracestate_trim(ts, tsn, c->tracestate_max);
    }
    /* the received fields go; ours are added below */
    if (ntp || nts) {
        size_t k = 0;
        for (size_t i = 0; i < hs->n; i++)
            if (!is_name(hs->v[i].name, "traceparent", 11) &&
                !is_name(hs->v[i].name, "tracestate", 10))
                hs->v[k++] = hs->v[i];
        hs->n = k;
    }
    if (!valid && !c->generate) return FY_FILTER_NEXT;
    char *v = value_room(ex->arena);
    if (valid) { /* version 00 with the received (validated, lowercase) trace id and flags */
        memcpy(v, "00-", 3);
        memcpy(v + 3, got + 3, 32);
        v[35] = '-';
        hex_w(v + 36, new_parent());
        v[52] = '-';
        memcpy(v + 53, got + 53, 2);
        v[55] = '\0';
    } else {
        write_new(v, t);
    }
    add_traceparent(ex, hs, v);
    if (tsn) fy_headers_add(ex->arena, hs, FY_FILTER_FIELD_TRACESTATE, 10, ts, tsn);
    return FY_FILTER_NEXT;
}

/* A new trace the long way (seeding the generator, a new arena block, a larger array). */
static __attribute__((noinline, cold)) fy_filter_verdict_t new_trace_slow(trace_filter_t *t,
                                                                          fy_exchange_t *ex)
{
    char *v = value_room(ex->arena);
    write_new(v, t);
    add_traceparent(ex, &ex->req.headers, v);
    return FY_FILTER_NEXT;
}

static fy_filter_verdict_t on_request(fy_filter_t *f, fy_exchange_t *ex)
{
    trace_filter_t *t = (trace_filter_t *)f;
    fy_headers_t *hs = &ex->req.headers;
    /* the usual request has neither field: a name of 10 or 11 bytes starting with 't' or 'T'
       sends it to the whole rule */
    for (const fy_header_t *h = hs->v, *e = h + hs->n; h < e; h++)
        if (__builtin_expect(h->name.len - 10 <= 1 && (h->name.p[0] | 0x20) == 't', 0))
            return on_request_fields(t, ex);
    if (!t->conf->generate) return FY_FILTER_NEXT;
    /* no call below (nothing to save on the stack): a first use of the generator, a full
       arena block or a full field array take the slow path */
    fy_arena_t *a = ex->arena;
    char *v = a->cur;
    uint64_t s = rng;
    if (__builtin_expect(
            s == 0 || (size_t)(a->end - v) < FY_TRACEPARENT_LEN + 1 || hs->n >= hs->cap, 0))
        return new_trace_slow(t, ex);
    a->cur = v + FY_TRACEPARENT_LEN + 1;
    uint64_t t0, t1, par;
    new_ids_from(s, &t0, &t1, &par);
    write_ids(v, t, t0, t1, par);
    hs->v[hs->n++] =
        (fy_header_t){fy_str(FY_FILTER_FIELD_TRACEPARENT, 11), fy_str(v, FY_TRACEPARENT_LEN)};
    ex->trace_id = v + 3; /* 32 hex characters */
    return FY_FILTER_NEXT;
}

static void destroy(fy_filter_t *f)
{
    free(f);
}

static const fy_filter_ops_t trace_ops = {"trace", FY_STAGE_TRACE, on_request, destroy};

int fy_trace_filter_add(const fy_trace_conf_t *conf, fy_filter_chain_t *chain)
{
    trace_filter_t *t = calloc(1, sizeof *t);
    if (!t) return -1;
    t->f.ops = &trace_ops;
    t->conf = conf;
    memcpy(t->tail, conf->sampled ? "-01" : "-00", 4);
    if (fy_filter_chain_add(chain, &t->f) < 0) {
        free(t);
        return -1;
    }
    return 0;
}
