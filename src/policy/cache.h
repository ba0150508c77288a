/* The shared HTTP cache (RFC 9111) as a filter at FY_STAGE_CACHE (issue 16). On a fresh hit it
 * answers from the store with its own producer and the handler is not called; on a miss it
 * lets the exchange go on and pushes a sink layer that tees the response into the store while
 * it streams to the client; concurrent misses for one key follow one fetch. Semantics in
 * policy/cache_fresh.h, storage in policy/cache_store.h, config in policy/cache_conf.h;
 * docs/CACHE.md has the conformance table. Threads: the filter is built on the main thread
 * and shared by workers (http/filter.h). */
#ifndef FY_POLICY_CACHE_H
#define FY_POLICY_CACHE_H

#include "http/filter.h"
#include "policy/cache_conf.h"

/* A cache filter for one route's `cache:` (borrowed: lives as long as the generation). NULL
 * after logging why. */
fy_filter_t *fy_cache_filter_new(const fy_cache_conf_t *conf);
/* Frees the calling thread's free list of per-exchange cache states; a worker calls it at exit,
 * after its last exchange is gone. */
void fy_cache_thread_cleanup(void);
/* How many free exchange states the calling thread keeps (0 after fy_cache_thread_cleanup). */
size_t fy_cache_thread_cached(void);

#endif
