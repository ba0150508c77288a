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

#include "core/log.h"

/* ---- traceparent ---- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1; /* uppercase is invalid (W3C §3.2.2) */
}

static bool unhex(const char *p, uint8_t *out, size_t nbytes)
{
    unsigned any = 0;
    for (size_t i = 0; i < nbytes; i++) {
        int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        out[i] = (uint8_t)(hi << 4 | lo);
        any |= out[i];
    }
    return any != 0; /* all zeros: invalid */
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

/* splitmix64, seeded per thread from getrandom: ids must not repeat, not be secret (one add
 * and two multiplies per 64 bits) */
static __thread uint64_t rng;
static __thread bool rng_seeded;

static __attribute__((cold, noinline)) void rng_seed(void)
{
    if (getrandom(&rng, sizeof rng, 0) != (ssize_t)sizeof rng) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        rng = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uintptr_t)&ts;
    }
    rng_seeded = true;
}

static inline uint64_t rng_next(void)
{
    if (__builtin_expect(!rng_seeded, 0)) rng_seed();
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* a random 64-bit value that is not 0 (an all-zero id is invalid) */
static uint64_t random_nz(void)
{
    uint64_t r;
    while (!(r = rng_next())) {
    }
    return r;
}

/* ---- the filter ---- */

typedef struct trace_filter {
    fy_filter_t f;
    const fy_trace_conf_t *conf;
} trace_filter_t;

static bool is_name(fy_str_t n, const char *lower, size_t len)
{
    return n.len == len && fy_str_ieq(n, lower, len);
}

static fy_filter_verdict_t on_request(fy_filter_t *f, fy_exchange_t *ex)
{
    const fy_trace_conf_t *c = ((trace_filter_t *)f)->conf;
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
    /* version 00, written straight from the characters: a kept trace id and flags are the
       received (validated, lowercase) hex; new ids are hex of random 64-bit words */
    char *v = fy_arena_alloc(ex->arena, FY_TRACEPARENT_LEN + 1);
    memcpy(v, "00-", 3);
    if (valid) {
        memcpy(v + 3, got + 3, 32);
        memcpy(v + 53, got + 53, 2);
    } else {
        uint64_t id[2] = {rng_next(), random_nz()}; /* never all zeros */
        hex16(v + 3, (const uint8_t *)&id[0]);
        hex16(v + 19, (const uint8_t *)&id[1]);
        memcpy(v + 53, c->sampled ? "01" : "00", 2);
    }
    v[35] = '-';
    uint64_t parent = random_nz();
    hex16(v + 36, (const uint8_t *)&parent);
    v[52] = '-';
    v[55] = '\0';
    if (hs->n < hs->cap) /* the codec's array has room (h1): no call */
        hs->v[hs->n++] = (fy_header_t){FY_STR_LIT("traceparent"), fy_str(v, FY_TRACEPARENT_LEN)};
    else
        FY_HDR_ADD(ex->arena, hs, "traceparent", v, FY_TRACEPARENT_LEN);
    if (tsn) FY_HDR_ADD(ex->arena, hs, "tracestate", ts, tsn);
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
    if (fy_filter_chain_add(chain, &t->f) < 0) {
        free(t);
        return -1;
    }
    return 0;
}
