/* Per-thread free lists of fixed-size objects: 16 KiB I/O chunks and hot structs (conns).
 * Compiled out with -DFY_NO_POOL (sanitizer builds) so ASan sees every use-after-free.
 * A pool is used only by its owning worker thread. */
#ifndef FY_CORE_POOL_H
#define FY_CORE_POOL_H

#include <stddef.h>

#define FY_CHUNK_SIZE 16384

typedef struct fy_pool {
    size_t size;     /* object size */
    size_t max_free; /* free objects kept; more are returned to malloc */
    void *free_list;
    size_t nfree;
} fy_pool_t;

void fy_pool_init(fy_pool_t *p, size_t size, size_t max_free);
/* Uninitialised object of p->size bytes; aborts on OOM. */
void *fy_pool_get(fy_pool_t *p);
void fy_pool_put(fy_pool_t *p, void *obj);
void fy_pool_drain(fy_pool_t *p);

/* The calling thread's pool of FY_CHUNK_SIZE buffers. */
fy_pool_t *fy_chunk_pool(void);

#endif
