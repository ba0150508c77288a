/* What the cache filter (cache.c: request phase, the layer, the filter) and its producer
 * (cache_serve.c: answering from a stored object) share.
 * Threads: the cache's stores are shared by workers (see cache_store.h for their locking);
 * everything declared here runs on the exchange's worker thread. */
#ifndef FY_POLICY_CACHE_INT_H
#define FY_POLICY_CACHE_INT_H

#include "policy/cache.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/pool.h"
#include "policy/cache_disk.h"
#include "policy/cache_fresh.h"
#include "policy/cache_key.h"
#include "policy/cache_store.h"

typedef struct cache_filter {
    fy_filter_t f;
    const fy_cache_conf_t *conf;
    fy_cache_zone_t *zone;
    bool get_ok, head_ok;
    size_t name_len;
    /* strip-request-headers without the key's own headers, with lengths; a request field
       whose length is not in the mask is not compared at all */
    fy_str_t *strip;
    size_t nstrip;
    uint64_t strip_lens;
    fy_str_t status_full[16]; /* "NAME; " + forwarded[i], made once (add_status) */
} cache_filter_t;

/* The Cache-Status members of forwarded and answered-here responses (identical literals are
   one object in this file, so add_status finds them by address; others are formatted). */
static const char *const forwarded[16] = {
    "fwd=bypass",
    "fwd=bypass; detail=purge",
    "fwd=bypass; detail=purge-not-allowed",
    "fwd=bypass; detail=request-body",
    "fwd=method",
    "fwd=miss; detail=only-if-cached",
    "fwd=request",
    "fwd=stale",
    "fwd=stale; stored",
    "fwd=uri-miss",
    "fwd=uri-miss; detail=collapse-timeout",
    "fwd=uri-miss; detail=only-if-cached",
    "fwd=uri-miss; stored",
};

/* What the exchange is doing with the cache. */
enum mode {
    M_PASS = 0,   /* not cacheable here: only Cache-Status */
    M_UNSAFE,     /* unsafe or unknown method: invalidate on a non-error response */
    M_MISS,       /* fetching; `fill` (if any) is stored as it streams */
    M_REVALIDATE, /* `obj` is stale: a conditional request went to the origin */
    M_FOLLOW,     /* waiting for another request's fetch of `obj` */
    M_SERVE,      /* answering from `obj` */
};

typedef struct cache_ex {
    fy_sink_layer_t layer; /* pushed on misses, revalidations, passes */
    cache_filter_t *cf;
    fy_exchange_t *ex;
    int mode;
    char *key; /* GET/HEAD: on on_request's stack, valid only during it; unsafe: arena */
    size_t keylen;
    uint64_t hash;
    fy_cache_req_info_t qi;
    fy_cache_obj_t *obj;  /* ref: served, followed, or the stale one being revalidated */
    fy_cache_obj_t *fill; /* ref: the object this exchange's response fills */
    time_t request_time;
    const char *fwd; /* Cache-Status fwd= of a forwarded request */
    bool layer_pushed, seen_head, storing, serving, swr_owner, no_collapse, client_cond;
    /* serving */
    size_t off, end; /* body range being sent; end SIZE_MAX: up to the object's end */
    const fy_cache_chunk_t *chunk;
    size_t chunk_off;
    bool head_only, sending, finished;
    const char *detail;   /* Cache-Status of the served response */
    struct cache_wait *w; /* made when first needed (following, streaming, taking over) */
    const fy_producer_ops_t *handler_producer;
    /* the client's own conditionals and range, kept before a revalidation replaces them */
    const fy_header_t *inm, *ims, *range, *if_range;
} cache_ex_t;

/* What only waiting exchanges need (kept out of every exchange's arena share). */
typedef struct cache_wait {
    fy_cache_waiter_t waiter;
    fy_timer_t timer; /* collapse-timeout while following */
    fy_defer_t defer; /* take the response over from the handler */
    cache_ex_t *ce;
} cache_wait_t;

/* Is a followed object still to be waited for? A disk load is followed until it is complete
   (its body is already in memory: ranges and validators then see the whole object). */
static inline bool fy__cache_follow_waits(const fy_cache_obj_t *o)
{
    int st = atomic_load(&o->state);
    return st == FY_CACHE_PENDING || (o->disk_load && st == FY_CACHE_STREAMING);
}

char *fy__cache_put_u64(char *p, uint64_t v);
char *fy__cache_put_s(char *p, const char *s, size_t n);
#define PUT_LIT(p, s) fy__cache_put_s((p), (s), sizeof(s) - 1)
int64_t fy__cache_obj_age(const fy_cache_obj_t *o, time_t now);
cache_wait_t *fy__cache_wait_of(cache_ex_t *ce);
/* The calling thread's free list of exchange states (emptied by fy_cache_thread_cleanup). */
cache_ex_t *fy__cache_ce_get(void);
void fy__cache_ce_put(cache_ex_t *ce);
void fy__cache_unwait(cache_ex_t *ce);
void fy__cache_push_layer(cache_ex_t *ce);
bool fy__cache_follow_ready(cache_ex_t *ce);
void fy__cache_on_wait(fy_cache_waiter_t *w);
void fy__cache_on_follow_timeout(fy_timer_t *t);
void fy__cache_serve_step(cache_ex_t *ce);
void fy__cache_serve_start(cache_ex_t *ce, fy_cache_obj_t *o, const char *status);
extern const fy_producer_ops_t fy__cache_serve_producer;

#endif
