/* Rate limits (policy/ratelimit_conf.h): the `rate-limit:` filter (stage limit), GCRA per key
 * in a fixed-size table shared by every worker of the process (lock-free: CAS on 16-byte slots,
 * bounded probing, eviction of the key that would be allowed again soonest), or through Redis
 * (policy/redis.h) for a limit shared by several instances; and the `client-limits:` filter
 * (stage access): concurrent requests per client address (released when the exchange's arena
 * is reset) plus the connection-rate check that server.c makes at accept.
 *
 * GCRA: each key keeps a theoretical arrival time (TAT). With emission interval T =
 * period / count and burst B, a request at `now` is allowed when max(TAT, now) + T - now <=
 * B * T, and then TAT becomes max(TAT, now) + T; a fresh key admits exactly B requests at once.
 * Rejected requests do not move TAT. Times are the worker loop's cached clock (ms) in ns. */
#ifndef FY_POLICY_RATELIMIT_H
#define FY_POLICY_RATELIMIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "http/filter.h"
#include "policy/ratelimit_conf.h"

/* ---- the shared GCRA table ---- */

typedef struct fy_rl_table fy_rl_table_t;

/* A table of at least `slots` slots (rounded up to a power of two). Aborts on OOM (config
 * time). */
fy_rl_table_t *fy_rl_table_new(size_t slots);
void fy_rl_table_free(fy_rl_table_t *t);

typedef struct fy_rl_result {
    bool allowed;
    bool evicted;     /* a live key had to give up its slot */
    uint64_t wait_ns; /* rejected: until one request is allowed again; allowed: until the key
                         is back to a full burst */
} fy_rl_result_t;

/* The table's random seed: keys given to it must be hashed with it (the slot index is the
 * key's low bits), so that a client cannot choose keys that crowd one probe window. */
uint64_t fy_rl_table_seed(const fy_rl_table_t *t);

/* One request of `key` (a 64-bit hash keyed with the table's seed) at `now_ns` under GCRA(t_ns,
 * burst). Thread-safe, lock-free. */
fy_rl_result_t fy_rl_take(fy_rl_table_t *t, uint64_t key, uint64_t now_ns, uint64_t t_ns,
                          uint64_t burst);

/* Concurrency counters share the table type (8-byte slots packing a 40-bit key and a 24-bit
 * count). Take one unit of `key` if fewer than `max` are held: the slot to give back with
 * fy_rl_conc_release, or NULL when `max` are held. *untracked is set (and a non-NULL dummy is
 * not returned: the result is NULL with *untracked true) when every slot of the key's window
 * is held by other keys: the caller lets the request through. */
_Atomic uint64_t *fy_rl_conc_acquire(fy_rl_table_t *t, uint64_t key, uint64_t max, bool *untracked);
void fy_rl_conc_release(_Atomic uint64_t *slot);

/* 64-bit hash of n bytes, seeded (FNV-1a and a murmur3 finaliser): the same on every instance
 * for the same seed (Redis keys use seed 0). */
uint64_t fy_rl_hash(uint64_t seed, const void *p, size_t n);
/* The same for one address (two murmur3 finalisers; faster than fy_rl_hash on 16 bytes). */
struct fy_ip;
uint64_t fy_rl_ip_key(uint64_t seed, const struct fy_ip *ip);

/* ---- the filters ---- */

/* The `rate-limit:` filter of `conf` (borrowed: it must outlive the filter, as the config
 * generation does); `name` is the default policy name ("route-3"), `where` names it in logs.
 * NULL after logging (Redis conf unusable). */
fy_filter_t *fy_ratelimit_filter_new(const fy_ratelimit_conf_t *conf, const char *name,
                                     const char *where);
/* The `client-limits:` filter: concurrency per request, and the connection rate that
 * fy_client_limits_admit applies at accept (listeners). */
fy_filter_t *fy_client_limits_filter_new(const fy_client_limits_conf_t *conf, const char *where);
/* A new TCP connection from `sa` at `now_ms` on a listener whose filters are `chain` (NULL:
 * none): false (counted) when a client-limits filter in it says the client opens connections
 * faster than its connection-rate; the caller closes it. Thread-safe. */
bool fy_client_limits_admit(const fy_filter_chain_t *chain, const struct sockaddr *sa,
                            uint64_t now_ms);

/* Folder-internal: answer a rejected request (status, Retry-After, RateLimit, RateLimit-Policy
 * of draft-ietf-httpapi-ratelimit-headers-08). */
void fy__ratelimit_reject(fy_exchange_t *ex, int status, const char *policy, uint64_t quota,
                          uint64_t window_s, uint64_t wait_ns);

#endif
