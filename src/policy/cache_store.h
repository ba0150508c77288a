/* The cache's memory tier: objects (a response head and a body that may still be arriving),
 * an index by primary key with Vary variants, size-bounded LRU eviction, and waiters that
 * follow an object another request is fetching (request collapsing).
 *
 * Threads: a zone is shared by every worker. It is split into shards by key hash, each with a
 * mutex held only for index and LRU work (lookup + reference, insert, unlink; never for body
 * bytes). An object's body is appended by one writer (the request fetching it) and read by
 * any number of readers without a lock: the writer publishes the length with a release store
 * after the bytes, readers load it with acquire. Waiters are per worker: a writer wakes the
 * workers that have some through their eventfd, and each worker runs its own waiters. */
#ifndef FY_POLICY_CACHE_STORE_H
#define FY_POLICY_CACHE_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "core/arena.h"
#include "core/list.h"
#include "core/loop.h"
#include "http/exchange.h"
#include "policy/cache_fresh.h"

enum fy_cache_state {
    FY_CACHE_PENDING = 0, /* being fetched; no head yet */
    FY_CACHE_STREAMING,   /* head known, body arriving */
    FY_CACHE_COMPLETE,
    FY_CACHE_PASS,    /* the fetched response is not stored: followers go to the origin */
    FY_CACHE_ABORTED, /* the fetch failed or grew past the size bound mid-body */
};

typedef struct fy_cache_chunk {
    struct fy_cache_chunk *next; /* written before the length that makes it readable */
    size_t cap;
    char data[];
} fy_cache_chunk_t;

typedef struct fy_cache_zone fy_cache_zone_t;

typedef struct fy_cache_obj {
    atomic_uint refs;
    uint64_t hash;
    char *key; /* the primary key (stored right behind the struct) */
    size_t keylen;
    char *vary_names; /* '\n'-joined names (fy_cache_vary_names) or NULL */
    size_t vnlen;
    char *vary_key; /* the storing request's secondary key */
    size_t vklen;
    /* head: written once before the state leaves PENDING */
    int status;
    fy_header_t *hdrs; /* owned (mem) */
    size_t nhdrs;
    fy_cache_fresh_t fresh;
    int64_t age_value;
    time_t date, request_time, response_time;
    fy_str_t etag, last_modified; /* into hdrs; empty when none */
    int64_t content_length;       /* declared by the origin; -1 unknown */
    char *mem;     /* owned: vary, header block (and maybe the first chunk); NULL when they live
                      in `reserve` */
    char *reserve; /* room behind the key in the object's own allocation (fy_cache_begin sizes
                      it by the zone's last head), used once by fy_cache_set_head */
    size_t reserve_cap;
    /* body */
    atomic_int state;
    atomic_bool revalidating; /* a request is revalidating it (stale-while-revalidate) */
    atomic_bool dead;         /* invalidated, purged or replaced: not to be written to disk */
    bool from_disk;           /* loaded from the disk tier (not written back) */
    bool disk_load;           /* made for a disk load (set before it is queued) */
    atomic_size_t body_len;
    fy_cache_chunk_t *first, *tail; /* owned; tail written by the writer only */
    fy_cache_chunk_t *inline_chunk; /* the first chunk when it lives in `mem` */
    size_t tail_used;
    /* waiters */
    atomic_uint nwaiting;
    atomic_uint_fast64_t wait_mask; /* workers with waiters (bit 63: worker >= 63) */
    /* index (under the shard's lock) */
    struct fy_cache_obj *hnext;
    struct fy_cache_obj *lru_prev, *lru_next;
    bool indexed;
    size_t charge;
    uint64_t lru_ms; /* last LRU move (moves are skipped within a second) */
} fy_cache_obj_t;

/* The zone named `name` (created with `size` bytes, or the existing one resized to it), with a
 * reference: a reload's new generation keeps the objects of the old one. Any thread. */
fy_cache_zone_t *fy_cache_zone_get(const char *name, size_t size);
/* Give the zone a disk tier under `dir` (policy/cache_disk.h), or resize the one it has on
 * the same directory; NULL dir: none (an existing one stays until the zone goes). 0, or -1
 * when the directory cannot be used (logged; the zone goes on in memory). Main thread. */
int fy_cache_zone_set_disk(fy_cache_zone_t *z, const char *dir, uint64_t max_bytes, unsigned queue);
/* The zone's disk tier, or NULL. */
struct fy_cache_disk *fy_cache_zone_disk(fy_cache_zone_t *z);
/* The zone's name (owned by z). */
const char *fy_cache_zone_name(const fy_cache_zone_t *z);
/* Call fn for each zone, under the zones' lock (fn must not get or put zones). */
void fy_cache_zone_foreach(void (*fn)(fy_cache_zone_t *z, void *arg), void *arg);
/* Drop a reference; the last frees the zone and its index (objects still read live on). */
void fy_cache_zone_put(fy_cache_zone_t *z);
/* Bytes and objects held (for tests and metrics). */
size_t fy_cache_zone_bytes(fy_cache_zone_t *z);
size_t fy_cache_zone_count(fy_cache_zone_t *z);

/* Look up key: the first variant whose secondary key matches `req_headers` (readable: not
 * PASS/ABORTED), or a PENDING object for the key (*pending true: follow it). Returns it with a
 * reference (release with fy_cache_obj_release), or NULL. `a` holds temporary keys. */
fy_cache_obj_t *fy_cache_lookup(fy_cache_zone_t *z, uint64_t hash, const char *key, size_t keylen,
                                const fy_headers_t *req_headers, fy_arena_t *a, bool *pending);

/* fy_cache_lookup, and when it finds nothing, fy_cache_begin's new PENDING object (*created
 * true), under one lock: a miss that will be stored takes the shard's lock once. */
fy_cache_obj_t *fy_cache_lookup_begin(fy_cache_zone_t *z, uint64_t hash, const char *key,
                                      size_t keylen, const fy_headers_t *req_headers, fy_arena_t *a,
                                      bool *pending, bool *created);
/* Start fetching key: a new PENDING object in the index, with one reference for the caller.
 * When another request started one meanwhile, that one is returned instead (*follow true). */
fy_cache_obj_t *fy_cache_begin(fy_cache_zone_t *z, uint64_t hash, const char *key, size_t keylen,
                               bool *follow);

/* The head arrived and is to be stored: copy status, headers and vary into o, make it
 * STREAMING, replace older objects of the same variant, wake waiters. `vary_names` may be
 * NULL. `body_hint` sizes the first chunk. Returns 0, or -1 when it does not fit (then o is
 * PASS). */
int fy_cache_set_head(fy_cache_zone_t *z, fy_cache_obj_t *o, int status, const fy_headers_t *hs,
                      const char *vary_names, size_t vnlen, const char *vary_key, size_t vklen,
                      size_t max_object);
/* Body bytes of o. 0, or -1 when the object grew past max_object (o is ABORTED). */
int fy_cache_append(fy_cache_zone_t *z, fy_cache_obj_t *o, const char *p, size_t n,
                    size_t max_object);
/* The body is complete. */
void fy_cache_finish(fy_cache_zone_t *z, fy_cache_obj_t *o);
/* The object will not be completed: state PASS or ABORTED, out of the index, waiters woken. */
void fy_cache_abort(fy_cache_zone_t *z, fy_cache_obj_t *o, int state);

/* Insert a complete object made by fy_cache_obj_copy (replaces the same variant). */
void fy_cache_insert(fy_cache_zone_t *z, fy_cache_obj_t *o);
/* A new complete object: o's body with the headers `hs` (a 304's merge, §4.3.4). One
 * reference for the caller. */
fy_cache_obj_t *fy_cache_obj_copy(const fy_cache_obj_t *o, const fy_headers_t *hs);

/* Remove every object of key (all variants), from memory and disk. Returns how many. */
size_t fy_cache_invalidate(fy_cache_zone_t *z, uint64_t hash, const char *key, size_t keylen);
/* Remove objects whose key starts with prefix. Returns how many. */
size_t fy_cache_purge_prefix(fy_cache_zone_t *z, const char *prefix, size_t plen);
/* Remove objects whose Cache-Tag or Surrogate-Key lists `tag`. Returns how many. */
size_t fy_cache_purge_tag(fy_cache_zone_t *z, const char *tag, size_t tlen);

void fy_cache_obj_ref(fy_cache_obj_t *o);
void fy_cache_obj_release(fy_cache_obj_t *o);

/* Read bytes of o at off: points *p at up to the rest of one chunk that is readable now.
 * Returns the length (0: nothing more now). `*chunk`/`*chunk_off` carry the position. */
size_t fy_cache_obj_read(const fy_cache_obj_t *o, size_t off, const fy_cache_chunk_t **chunk,
                         size_t *chunk_off, const char **p);

/* ---- waiters ---- */

typedef struct fy_cache_waiter {
    fy_list_t link;
    fy_cache_obj_t *obj;                   /* borrowed (the waiter's owner holds a reference) */
    void (*cb)(struct fy_cache_waiter *w); /* o may have changed: look; on this worker */
    bool parked;
    int worker;
} fy_cache_waiter_t;

/* Park w on obj (this thread is worker `worker` running `loop`): cb runs on this loop after
 * the object's state or length changes. The caller re-checks the object after parking (a
 * change between its check and the park is not lost: it gets a call). 0, or -errno. */
int fy_cache_wait(fy_loop_t *loop, int worker, fy_cache_waiter_t *w, fy_cache_obj_t *obj);
/* Unpark (idempotent). */
void fy_cache_unwait(fy_cache_waiter_t *w);

#endif
