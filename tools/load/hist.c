/* Fixed-memory log-linear histogram (HdrHistogram's layout with 128 sub-buckets). */
#include "fl.h"

#include <string.h>

static int bucket_of(uint64_t v)
{
    if (v < (2u << FL_HIST_SUB_BITS)) return (int)v;
    int e = 63 - __builtin_clzll(v); /* e >= SUB_BITS + 1 */
    if (e >= FL_HIST_MAX_EXP) return FL_HIST_BUCKETS - 1;
    int shift = e - FL_HIST_SUB_BITS;
    /* sub in [128, 255]: index continues the linear range without a gap */
    return (shift << FL_HIST_SUB_BITS) + (int)(v >> shift);
}

static uint64_t bucket_low(int i, uint64_t *width)
{
    if (i < (2 << FL_HIST_SUB_BITS)) {
        *width = 1;
        return (uint64_t)i;
    }
    int shift = (i >> FL_HIST_SUB_BITS) - 1;
    uint64_t sub = (uint64_t)(i - (shift << FL_HIST_SUB_BITS));
    *width = 1ull << shift;
    return sub << shift;
}

void fl_hist_record(fl_hist_t *h, uint64_t ns)
{
    if (h->count == 0 || ns < h->min) h->min = ns;
    if (ns > h->max) h->max = ns;
    h->count++;
    h->sum += (double)ns;
    h->b[bucket_of(ns)]++;
}

void fl_hist_merge(fl_hist_t *dst, const fl_hist_t *src)
{
    if (src->count == 0) return;
    if (dst->count == 0 || src->min < dst->min) dst->min = src->min;
    if (src->max > dst->max) dst->max = src->max;
    dst->count += src->count;
    dst->sum += src->sum;
    for (int i = 0; i < FL_HIST_BUCKETS; i++) dst->b[i] += src->b[i];
}

uint64_t fl_hist_quantile(const fl_hist_t *h, double q)
{
    if (h->count == 0) return 0;
    if (q >= 1.0) return h->max;
    uint64_t rank = (uint64_t)(q * (double)h->count);
    if ((double)rank < q * (double)h->count) rank++;
    if (rank == 0) rank = 1;
    uint64_t seen = 0;
    for (int i = 0; i < FL_HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t w, lo = bucket_low(i, &w);
            uint64_t v = lo + w / 2;
            if (v < h->min) v = h->min;
            if (v > h->max) v = h->max;
            return v;
        }
    }
    return h->max;
}
