#include "core/spool.h"

#include <stdlib.h>
#include <string.h>

#define HDR 16
#define NCLASS (FY_SPOOL_MAX / 16 + 1)

/* header: [0] bytes counted, [1] size class (0: malloc'd above FY_SPOOL_MAX) */
#ifndef FY_NO_POOL
static _Thread_local void *free_list[NCLASS];
static _Thread_local unsigned nfree[NCLASS];
#endif

void *fy_spool_alloc(size_t n)
{
    if (n <= FY_SPOOL_MAX) {
        size_t k = (n + 15) >> 4;
        if (k == 0) k = 1;
        size_t *h;
#ifndef FY_NO_POOL
        h = free_list[k];
        if (h) {
            free_list[k] = *(void **)(h + 2);
            nfree[k]--;
            return h + 2;
        }
#endif
        h = malloc(HDR + (k << 4));
        if (!h) return NULL;
        h[0] = k << 4;
        h[1] = k;
        return h + 2;
    }
    if (n > (size_t)-1 - HDR) return NULL;
    size_t *h = malloc(HDR + n);
    if (!h) return NULL;
    h[0] = n;
    h[1] = 0;
    return h + 2;
}

void fy_spool_free(void *p)
{
    if (!p) return;
    size_t *h = (size_t *)p - 2;
#ifndef FY_NO_POOL
    size_t k = h[1];
    if (k && nfree[k] < FY_SPOOL_KEEP) {
        *(void **)p = free_list[k];
        free_list[k] = h;
        nfree[k]++;
        return;
    }
#endif
    free(h);
}

void *fy_spool_realloc(void *p, size_t n)
{
    if (!p) return fy_spool_alloc(n);
    size_t old = fy_spool_size(p);
    if (((size_t *)p)[-1] && n <= old) return p; /* its class has room */
    void *q = fy_spool_alloc(n);
    if (!q) return NULL;
    memcpy(q, p, old < n ? old : n);
    fy_spool_free(p);
    return q;
}

size_t fy_spool_thread_drain(void)
{
    size_t n = 0;
#ifndef FY_NO_POOL
    for (size_t k = 0; k < NCLASS; k++) {
        while (free_list[k]) {
            size_t *h = free_list[k];
            free_list[k] = *(void **)(h + 2);
            free(h);
            n++;
        }
        nfree[k] = 0;
    }
#endif
    return n;
}
