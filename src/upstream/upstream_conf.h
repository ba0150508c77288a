/* Typed configuration of upstreams (`upstreams:`): origin servers and how to reach them.
 * Table: upstream/upstream_conf.c. */
#ifndef FY_UPSTREAM_UPSTREAM_CONF_H
#define FY_UPSTREAM_UPSTREAM_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf.h"

enum fy_balance {
    FY_BALANCE_ROUND_ROBIN = 0,
    FY_BALANCE_RANDOM,
    FY_BALANCE_LEAST_REQUESTS,
    FY_BALANCE_LEAST_TIME,
};

/* `sticky:` session affinity: exactly one of the two */
typedef struct fy_sticky_conf {
    char *cookie; /* pin a client by a cookie Ferry sets (an opaque server id) */
    char *header; /* pin by the hash of a request header's value */
} fy_sticky_conf_t;

enum fy_health_type { FY_HEALTH_HTTP, FY_HEALTH_TCP };

/* `health-check:` active probes (HTTP GET over a fresh connection, or just the connection) */
typedef struct fy_health_conf {
    int type;              /* enum fy_health_type, default http */
    char *path;            /* default "/" */
    uint64_t interval_ms;  /* default 5s */
    uint64_t timeout_ms;   /* default 2s */
    int64_t expect_status; /* default 0: any 2xx or 3xx; else exactly this status */
    int64_t fall;          /* consecutive failures that mark a server down, default 3 */
    int64_t rise;          /* consecutive successes that bring it back, default 2 */
} fy_health_conf_t;

typedef struct fy_upstream_server_conf {
    char *url; /* `url`: http:// https:// h2c:// h2:// h3:// HOST:PORT (shorthand: the URL alone) */
    int64_t weight; /* `weight`, default 1 */
    /* resolved while loading */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    bool tls;
    bool h2;         /* h2c:// or h2://: HTTP/2 to this server (multiplexed) */
    bool h3;         /* h3://: HTTP/3 over QUIC to this server (multiplexed, upstream_h3.c) */
    char *host;      /* host part, for SNI and certificate checks */
    char *authority; /* host[:port] as in the URL, for Host when not preserved */
} fy_upstream_server_conf_t;

enum fy_disc_type { FY_DISC_A, FY_DISC_AAAA, FY_DISC_SRV };

/* `discovery:` servers found at run time (upstream/discovery.c) */
typedef struct fy_discovery_conf {
    char *file;          /* watched file of server URLs */
    char *dns;           /* or a DNS name */
    int type;            /* enum fy_disc_type, default A */
    int64_t port;        /* A/AAAA: the servers' port (required there) */
    int scheme;          /* 0 http, 1 https, 2 h2c, 3 h2, 4 h3 */
    int64_t weight;      /* A/AAAA: each server's weight, default 1 */
    uint64_t min_ttl_ms; /* default 1s */
    uint64_t max_ttl_ms; /* default 5m */
    uint64_t timeout_ms; /* `resolve-timeout`, default 5s */
    char *resolver;      /* DNS servers "IP[:PORT],..."; NULL: resolv.conf */
    int64_t max_servers; /* default 32 */
} fy_discovery_conf_t;

/* `circuit-breaker:` per server (upstream/upstream_breaker.h) */
typedef struct fy_breaker_conf {
    int64_t consecutive;        /* `consecutive-failures`, default 5; 0: off */
    int64_t error_rate;         /* `error-rate` percent, default 50; 0: off */
    uint64_t window_ms;         /* default 10s */
    int64_t min_requests;       /* outcomes in the window before the rate counts, default 20 */
    uint64_t open_ms;           /* `open-for`, default 10s */
    uint64_t max_open_ms;       /* `max-open-for`, default 5m: the backoff's cap */
    int64_t half_open_requests; /* trials, default 3 */
    bool on_5xx;                /* `5xx-is-failure`, default true */
} fy_breaker_conf_t;

/* `retry-budget:` per upstream */
typedef struct fy_retry_budget_conf {
    int64_t ratio_permille; /* `ratio`, default 0.2 (200 per mille) */
    int64_t min_per_second; /* default 10 */
    uint64_t window_ms;     /* default 10s */
} fy_retry_budget_conf_t;

/* `hedge:` per upstream: idempotent bodiless GET/HEAD get a second attempt on another server
 * when the first has no response head after `delay`; the first head wins */
typedef struct fy_hedge_conf {
    uint64_t delay_ms; /* default 50ms */
} fy_hedge_conf_t;

typedef struct fy_upstream_conf {
    char *name;                     /* required, unique */
    fy_conf_list_t servers;         /* of fy_upstream_server_conf_t, at least one */
    int balance;                    /* enum fy_balance; default round-robin */
    uint64_t connect_timeout_ms;    /* default 5s: then 502 (or the next server) */
    uint64_t first_byte_timeout_ms; /* default 60s: request sent, no response head: 504 */
    uint64_t idle_timeout_ms;       /* default 60s: no byte either way mid-exchange: abort */
    int64_t keepalive;              /* idle connections kept per server and worker, default 512 */
    uint64_t keepalive_timeout_ms;  /* default 60s */
    int64_t retries;                /* default 1: extra attempts (another server when there is one)
                                       for idempotent bodiless requests that failed before any
                                       response byte */
    uint64_t retry_timeout_ms;      /* default 0 (none): all attempts of a request, in total */
    int64_t max_fails;              /* default 3 consecutive connect errors or 5xx: ejected */
    uint64_t fail_timeout_ms;       /* default 10s: how long an ejected server sits out */
    char *ca;                       /* PEM bundle to verify https origins; default: system store */
    bool insecure;                  /* default false: do not verify origin certificates */
    char *sni;                      /* server name sent and verified; default: the URL's host */
    char *cert;                     /* client certificate (PEM) for mTLS to https origins */
    char *key;                      /* its private key */
    fy_sticky_conf_t *sticky;       /* `sticky`; NULL: no session affinity */
    fy_health_conf_t *health;       /* `health-check`; NULL: no active checks */
    fy_discovery_conf_t *discovery; /* `discovery`; NULL: the servers above, fixed */
    fy_breaker_conf_t *breaker;     /* `circuit-breaker`; NULL: none */
    fy_retry_budget_conf_t *retry_budget; /* `retry-budget`; NULL: only `retries` bounds them */
    fy_hedge_conf_t *hedge;               /* `hedge`; NULL: no hedged requests */
} fy_upstream_conf_t;

extern const fy_conf_directive_t fy_upstream_conf_table[];
/* upstream_breaker_conf.c */
extern const fy_conf_directive_t fy_breaker_conf_table[];
extern const fy_conf_directive_t fy_retry_budget_conf_table[];
extern const fy_conf_directive_t fy_hedge_conf_table[];

/* Parse a server URL (scheme, host, port; no path) into sv's addr, tls, h2, h3, and the host
 * and authority (host[:port] as written) into the caller's buffers. `numeric`: the host must
 * be an IP address (no lookup; discovery files), else it is resolved with getaddrinfo.
 * Returns 0, or -1 with a reason naming the URL in err. Any thread. */
int fy_upstream_url_parse(const char *url, fy_upstream_server_conf_t *sv, bool numeric,
                          char host[256], char auth[256], char *err, size_t errlen);

#endif
