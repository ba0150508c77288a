#include "core/pool.h"

#include <stdlib.h>

#include "core/alloc.h"

void fy_pool_init(fy_pool_t *p, size_t size, size_t max_free)
{
    p->size = size < sizeof(void *) ? sizeof(void *) : size;
    p->max_free = max_free;
    p->free_list = NULL;
    p->nfree = 0;
}

void *fy_pool_get(fy_pool_t *p)
{
#ifndef FY_NO_POOL
    if (p->free_list) {
        void *o = p->free_list;
        p->free_list = *(void **)o;
        p->nfree--;
        return o;
    }
#endif
    return fy_xmalloc(p->size);
}

void fy_pool_put(fy_pool_t *p, void *obj)
{
#ifndef FY_NO_POOL
    if (p->nfree < p->max_free) {
        *(void **)obj = p->free_list;
        p->free_list = obj;
        p->nfree++;
        return;
    }
#endif
    free(obj);
}

void fy_pool_drain(fy_pool_t *p)
{
    while (p->free_list) {
        void *o = p->free_list;
        p->free_list = *(void **)o;
        free(o);
    }
    p->nfree = 0;
}

static __thread fy_pool_t chunk_pool = {FY_CHUNK_SIZE, 1024, NULL, 0};

fy_pool_t *fy_chunk_pool(void)
{
    return &chunk_pool;
}
