/* W3C Trace Context: parsing and formatting (pure) and the trace filter (see trace.h). */
#include "policy/trace.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

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

/* "00" "01" ... "ff": two characters per byte with one copy */
static const char hex2[513] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
                              "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
                              "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
                              "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
                              "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
                              "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
                              "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
                              "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

static char *puthex(char *o, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++, o += 2) memcpy(o, hex2 + 2 * b[i], 2);
    return o;
}

void fy_traceparent_format(const fy_traceparent_t *tp, char out[FY_TRACEPARENT_LEN + 1])
{
    char *o = out;
    memcpy(o, "00-", 3);
    o = puthex(o + 3, tp->trace_id, 16);
    *o++ = '-';
    o = puthex(o, tp->parent_id, 8);
    *o++ = '-';
    o = puthex(o, &tp->flags, 1);
    *o = '\0';
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

/* xorshift128+, seeded per thread from getrandom: ids must not repeat, not be secret */
static __thread uint64_t rng[2];

static uint64_t rng_next(void)
{
    if (!rng[0] && !rng[1]) {
        if (getrandom(rng, sizeof rng, 0) != (ssize_t)sizeof rng) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            rng[0] = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uintptr_t)&ts;
            rng[1] = 0x9e3779b97f4a7c15ull ^ (uintptr_t)rng;
        }
        rng[1] |= 1;
    }
    uint64_t s1 = rng[0];
    const uint64_t s0 = rng[1];
    rng[0] = s0;
    s1 ^= s1 << 23;
    rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return rng[1] + s0;
}

/* n is 8 or 16; never all zeros (an invalid id) */
static void random_id(uint8_t *b, size_t n)
{
    uint64_t r[2];
    do {
        r[0] = rng_next();
        r[1] = n > 8 ? rng_next() : 0;
    } while (!r[0] && !r[1]);
    memcpy(b, r, n);
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
    if (!valid) {
        if (!c->generate) return FY_FILTER_NEXT;
        random_id(tp.trace_id, sizeof tp.trace_id);
        tp.flags = c->sampled ? 1 : 0;
    }
    tp.version = 0;
    random_id(tp.parent_id, sizeof tp.parent_id);
    char *v = fy_arena_alloc(ex->arena, FY_TRACEPARENT_LEN + 1);
    fy_traceparent_format(&tp, v);
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
