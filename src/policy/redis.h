/* Cluster rate limits through Redis (hiredis 0.14, asynchronous, on each worker's own loop).
 *
 * The loop adapter: hiredis asks for read/write interest through redisAsyncContext.ev; we
 * map that onto one fy_io_t on the context's fd and call redisAsyncHandleRead/Write from the
 * loop. hiredis 0.14 has no timeouts in its async API: the limiter times each round trip with
 * a loop timer itself.
 *
 * The limiter: GCRA lives in Redis (one Lua script per round trip: TIME, GET, SET PX, so the
 * clock is Redis's and instances need no synchronised clocks). A worker does not ask per
 * request: it takes a lease of up to `lease` tokens for a key and spends them locally; only a
 * request that finds the lease spent waits (FY_FILTER_WAIT) for the next round trip, and
 * requests arriving for the same key meanwhile wait for that same round trip. The cluster can
 * therefore never admit more than the limit; it admits less by the tokens leased and unspent.
 * While Redis is unreachable, or a reply is later than `timeout`, `on-error` decides (allow or
 * deny), logged once per transition and counted.
 *
 * Threads: a worker touches only its own state (connection, leases); the shared part is
 * refcounted so that a round trip in flight when the config generation goes keeps what it
 * touches. Connections are per worker and per Redis address and live as long as the process
 * (a reload reuses them). */
#ifndef FY_POLICY_REDIS_H
#define FY_POLICY_REDIS_H

#include <stdint.h>

#include "core/loop.h"
#include "http/filter.h"
#include "policy/ratelimit_conf.h"

struct redisAsyncContext;

/* Attach `ac` (not yet attached) to `loop`. 0, or -1 when it already has an adapter. The
 * adapter's memory is freed by hiredis's cleanup hook when the context goes. Loop thread. */
int fy_redis_attach(struct redisAsyncContext *ac, fy_loop_t *loop);

typedef struct fy_rl_redis fy_rl_redis_t;

/* The Redis side of one rate-limit policy: GCRA(t_ns, burst) under `name`, rejecting with
 * `status` (RateLimit-Policy q=burst, w=window_s). NULL after logging. Main thread. */
fy_rl_redis_t *fy__rl_redis_new(const fy_ratelimit_redis_conf_t *rc, const char *name,
                                uint64_t t_ns, uint64_t burst, int status, uint64_t window_s,
                                const char *where);
/* One request of `key`: NEXT (a leased token, or Redis down and failing open), DONE (answered:
 * 429 or the fail-closed status) or WAIT (resumed or answered after the round trip; a client
 * that goes away meanwhile is forgotten through the exchange's arena reset). Worker thread. */
fy_filter_verdict_t fy__rl_redis_take(fy_rl_redis_t *r, fy_exchange_t *ex, uint64_t key);
/* Drop the filter's reference (the rest goes with the last round trip in flight). */
void fy__rl_redis_free(fy_rl_redis_t *r);

#endif
