/* Ad-hoc origins for the intercepting proxy: upstreams made on demand, one per
 * (tls, h2, host, port, sni, insecure) key and worker, so that intercepted exchanges reuse the
 * ordinary connect / TLS / keep-alive pool code of upstream.c. Per-worker tables: no locks.
 * Bounded: at most `max` origins per worker; past that the least recently used one without
 * requests in flight is dropped (its idle connections closed). */
#ifndef FY_UPSTREAM_UPSTREAM_DYN_H
#define FY_UPSTREAM_UPSTREAM_DYN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include "upstream/upstream.h"

typedef struct fy_upstream_dyn fy_upstream_dyn_t;

typedef struct fy_upstream_dyn_entry {
    fy_upstream_t *up; /* owned by the table */
    void *user;        /* the caller's (e.g. a proxy handler over `up`); freed by user_free */
    int inflight;      /* maintained by the caller: entries in use are never evicted */
} fy_upstream_dyn_entry_t;

/* `ca`: PEM bundle to verify https origins (NULL: system store), borrowed.
 * `user_free` releases entry->user when an entry goes. */
fy_upstream_dyn_t *fy_upstream_dyn_new(int nworkers, size_t max, const char *ca,
                                       uint64_t connect_timeout_ms, void (*user_free)(void *));
/* After every worker is done with it (fy_upstream_dyn_worker_close ran on each). */
void fy_upstream_dyn_free(fy_upstream_dyn_t *d);

/* The entry for worker `w` and this origin (made most recent), or NULL when there is none.
 * `sni` NULL: the host. `h2` (with tls): the origin is reached over HTTP/2 (an h2:// server:
 * multiplexed sessions). */
fy_upstream_dyn_entry_t *fy_upstream_dyn_find(fy_upstream_dyn_t *d, int w, const char *host,
                                              int port, bool tls, bool h2, const char *sni,
                                              bool insecure);
/* Make the entry for this origin at `addr` (resolved by the caller, off the worker thread:
 * net/resolve.h), evicting the least recently used idle one when `max` are there. NULL with
 * *err (static) when every one of `max` entries is in use or TLS setup failed. */
fy_upstream_dyn_entry_t *fy_upstream_dyn_add(fy_upstream_dyn_t *d, int w, const char *host,
                                             int port, bool tls, bool h2, const char *sni,
                                             bool insecure, const struct sockaddr *addr,
                                             socklen_t addrlen, const char **err);
/* Close worker w's entries and their pooled connections (on that worker's thread). */
void fy_upstream_dyn_worker_close(fy_upstream_dyn_t *d, int w);
/* Entries of worker w (tests, metrics). */
size_t fy_upstream_dyn_count(const fy_upstream_dyn_t *d, int w);

#endif
