/* Small-block allocator for libraries that allocate on the request path (OpenSSL's per-record
 * parameter blocks, nghttp2's per-stream state): per-thread free lists in 16-byte size classes
 * up to FY_SPOOL_MAX bytes, larger blocks straight from malloc. Every block carries a 16-byte
 * header with its size, so a free needs no malloc_usable_size and the caller can count the
 * bytes it holds (issue 19's per-connection accounting).
 *
 * Blocks are interchangeable between threads: one freed on another thread joins that thread's
 * list. A list keeps at most FY_SPOOL_KEEP blocks; the rest go back to malloc. Compiled to
 * plain malloc/free (header kept) with -DFY_NO_POOL, so sanitizers see every block. */
#ifndef FY_CORE_SPOOL_H
#define FY_CORE_SPOOL_H

#include <stddef.h>

#define FY_SPOOL_MAX 512
#define FY_SPOOL_KEEP 256

/* n bytes (16-byte aligned), uninitialised; NULL on OOM. */
void *fy_spool_alloc(size_t n);
/* Give p (from fy_spool_alloc / fy_spool_realloc, or NULL) back. */
void fy_spool_free(void *p);
/* realloc semantics (p NULL: alloc; the old block is freed on success only). */
void *fy_spool_realloc(void *p, size_t n);
/* Give the calling thread's free blocks back to malloc (at a thread's exit: nothing else can
 * reach its lists). Returns how many it freed (always 0 with -DFY_NO_POOL). */
size_t fy_spool_thread_drain(void);
/* The bytes p counts as (its size class, or its requested size above FY_SPOOL_MAX). */
static inline size_t fy_spool_size(const void *p)
{
    return ((const size_t *)p)[-2];
}

#endif
