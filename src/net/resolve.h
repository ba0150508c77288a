/* Host name resolution on the asking worker's own loop: a c-ares channel per worker (net/dns.c,
 * made on its first query, on its thread; it reads resolv.conf and /etc/hosts), a bounded
 * cache of answers shared by the workers (each kept for its record's TTL, at most `ttl`), and
 * a per-query timeout. Literal addresses and cache hits are answered at once. */
#ifndef FY_NET_RESOLVE_H
#define FY_NET_RESOLVE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/loop.h"

typedef struct fy_resolver fy_resolver_t;
typedef struct fy_dns_query fy_dns_query_t;

typedef struct fy_resolve_req fy_resolve_req_t;
/* The answer: addr/len (port set) or, with addr NULL, err naming the host and the failure
 * ("cannot resolve NAME: Name or service not known", "... timed out after 5000 ms"). Both
 * point into the request and live until it is reused. */
typedef void (*fy_resolve_cb)(fy_resolve_req_t *q, const struct sockaddr *addr, socklen_t len,
                              const char *err);

/* Caller-owned (embedded in a tunnel, an exchange's arena...); opaque past cb/data. */
struct fy_resolve_req {
    fy_resolve_cb cb;
    void *data;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char err[400];
    /* internal */
    fy_resolver_t *r;
    fy_loop_t *loop;
    fy_dns_query_t *job;
    fy_timer_t timer;
    int port;
    char host[256]; /* lowercased name being resolved */
};

/* At most `cache_max` cached names, each kept for its record's TTL bounded by `ttl_ms`, queries
 * given up after `timeout_ms`, for `nworkers` workers. `nthreads` is ignored (the resolver
 * threads are gone; the `resolver-threads` key still parses). */
fy_resolver_t *fy_resolver_new(int nworkers, int nthreads, size_t cache_max, uint64_t ttl_ms,
                               uint64_t timeout_ms);
/* After every worker closed its side: shutdown never waits for a slow DNS server. */
void fy_resolver_free(fy_resolver_t *r);
/* On worker w's thread, before its loop goes: pending queries of w are dropped silently. */
void fy_resolver_worker_close(fy_resolver_t *r, int w);

/* Resolve `host` for worker `w` (on its thread and loop). Returns 1 with q->addr/addrlen set
 * (literal or cached: q->cb is not called), 0 when pending (q->cb comes later, never from
 * inside this call), -1 with q->err set (cb not called) when the query cannot even start. */
int fy_resolve(fy_resolver_t *r, int w, fy_loop_t *loop, const char *host, int port,
               fy_resolve_req_t *q);
/* Drop a pending query (no callback). Safe on a request that is not pending. */
void fy_resolve_cancel(fy_resolve_req_t *q);

/* Cached names (tests, metrics). */
size_t fy_resolver_cached(fy_resolver_t *r);

#endif
