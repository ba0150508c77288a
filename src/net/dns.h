/* DNS on a worker's event loop (c-ares): one channel per loop, its sockets watched by the loop
 * (the socket-state callback registers them), its retransmits driven by one loop timer set
 * from ares_timeout. Address queries (A and/or AAAA, through ares_getaddrinfo, which also reads
 * /etc/hosts) come back with each record's TTL; SRV queries with the answer's smallest TTL.
 * Used by the interception resolver (net/resolve.c) and upstream discovery
 * (upstream/discovery.c). Nothing here is thread-safe: a channel belongs to its loop's thread. */
#ifndef FY_NET_DNS_H
#define FY_NET_DNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/loop.h"

typedef struct fy_dns fy_dns_t;
typedef struct fy_dns_query fy_dns_query_t;

#define FY_DNS_ADDRS_MAX 32 /* addresses kept from one answer */
#define FY_DNS_SRV_MAX 32   /* SRV records kept from one answer */
#define FY_DNS_NAME_MAX 256

typedef struct fy_dns_opts {
    const char *servers; /* "IP[:PORT],..." (ares_set_servers_ports_csv); NULL: resolv.conf */
    uint64_t timeout_ms; /* first try's timeout (c-ares doubles it per round); 0: resolv.conf */
    int tries;           /* rounds over the servers; 0: resolv.conf */
} fy_dns_opts_t;

typedef struct fy_dns_addr {
    struct sockaddr_storage addr; /* port 0 */
    socklen_t len;
    uint32_t ttl; /* seconds, as the record said (hosts-file answers: 0) */
} fy_dns_addr_t;

typedef struct fy_dns_srv {
    char target[FY_DNS_NAME_MAX];
    uint16_t priority, weight, port;
} fy_dns_srv_t;

/* The answer: status 0 with n records (n may be 0 only for SRV: an empty answer), or a
 * negative status with `err` ("NAME: Domain name not found", "NAME: Timeout while contacting
 * DNS servers"). ttl is the smallest record TTL (SRV; for addresses each record has its own).
 * Every pointer lives until the callback returns. The callback may start and cancel
 * queries, but must not free the channel. */
typedef void (*fy_dns_addr_cb)(void *ud, int status, const fy_dns_addr_t *v, size_t n,
                               const char *err);
typedef void (*fy_dns_srv_cb)(void *ud, int status, const fy_dns_srv_t *v, size_t n, uint32_t ttl,
                              const char *err);

/* A channel on `loop`. Returns NULL with a reason in err (bad server list, c-ares init). */
fy_dns_t *fy_dns_new(fy_loop_t *loop, const fy_dns_opts_t *o, char *err, size_t errlen);
/* Pending queries are dropped (no callbacks). On the loop's thread. */
void fy_dns_free(fy_dns_t *d);

/* Addresses of `name` for `family` (AF_INET, AF_INET6 or AF_UNSPEC for both). Returns a handle
 * valid until the callback or fy_dns_cancel; the callback always comes later from the loop,
 * never from inside this call. NULL only when out of memory. */
fy_dns_query_t *fy_dns_addrinfo(fy_dns_t *d, const char *name, int family, fy_dns_addr_cb cb,
                                void *ud);
/* SRV records of `name` (e.g. "_http._tcp.example.com"), same contract. */
fy_dns_query_t *fy_dns_srv(fy_dns_t *d, const char *name, fy_dns_srv_cb cb, void *ud);
/* No callback for this query (it may still be on the wire). Only before its callback ran:
 * the handle is freed once the callback returns. */
void fy_dns_cancel(fy_dns_query_t *q);
/* Queries started and not yet answered or cancelled (tests). */
size_t fy_dns_pending(const fy_dns_t *d);

/* The smallest TTL of the answer section of a DNS message (`msg`, `len` bytes), or -1 when it
 * is malformed or has no answer. Exposed for the fuzz driver. */
int64_t fy_dns_answer_ttl(const unsigned char *msg, size_t len);

#endif
