/* Typed configuration of the rate-limit policies (tables: policy/ratelimit_conf.c):
 * `rate-limit:` per route (GCRA per key, local to the process or shared through Redis) and
 * `client-limits:` (connection rate at accept and concurrent requests per client address),
 * per route inline or by name, per listener by name (top-level `client-limits:` list).
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_POLICY_RATELIMIT_CONF_H
#define FY_POLICY_RATELIMIT_CONF_H

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"

enum fy_ratelimit_on_error { FY_RL_FAIL_OPEN = 0, FY_RL_FAIL_CLOSED = 1 };
enum fy_ratelimit_headers { FY_RL_HEADERS_ON_REJECT = 0, FY_RL_HEADERS_ALWAYS = 1 };

typedef struct fy_ratelimit_redis_conf {
    char *address;         /* `address`: HOST:PORT of the Redis server (numeric or localhost) */
    char host[64];         /* derived from address */
    int port;              /* derived */
    int64_t lease;         /* `lease`: tokens taken per round trip; 0 = auto */
    uint64_t timeout_ms;   /* `timeout`: a reply later than this means Redis is down */
    uint64_t reconnect_ms; /* `reconnect`: wait between connection attempts */
    int on_error;          /* `on-error`: enum fy_ratelimit_on_error */
    int64_t error_status;  /* `error-status`: answer when closed and Redis is down (503) */
    char *prefix;          /* `prefix`: of every key ferry writes */
} fy_ratelimit_redis_conf_t;

typedef struct fy_ratelimit_conf {
    char *name;                        /* `name`: in RateLimit-Policy and the Redis keys */
    char *rate;                        /* `rate`: "10/s", "600/m", "1/min", "100/h", "1000/d" */
    uint64_t count, period_ms;         /* derived from rate */
    int64_t burst;                     /* `burst`: requests at once; 0 = the rate's count */
    fy_conf_strlist_t key;             /* `key`: client-address, header:NAME, route */
    fy_conf_strlist_t trusted_proxies; /* `trusted-proxies`: for the client address */
    int64_t status;                    /* `status`: 429 */
    int64_t max_keys;                  /* `max-keys`: slots of the shared table */
    int headers;                       /* `headers`: enum fy_ratelimit_headers */
    fy_ratelimit_redis_conf_t *redis;  /* `redis`: cluster limit, or NULL (local) */
} fy_ratelimit_conf_t;

typedef struct fy_client_limits_conf {
    char *name;                          /* `name` (top-level list entries) */
    char *use;                           /* `use` (routes): a named entry instead */
    char *connection_rate;               /* `connection-rate`: new connections per client */
    uint64_t conn_count, conn_period_ms; /* derived */
    int64_t connection_burst;            /* `connection-burst`: 0 = the rate's count */
    int64_t concurrency; /* `concurrency`: requests in progress per client; 0 = off */
    int64_t status;      /* `status`: answer over concurrency (429) */
    int64_t max_keys;    /* `max-keys`: slots of the shared tables */
} fy_client_limits_conf_t;

extern const fy_conf_directive_t fy_ratelimit_conf_table[];
extern const fy_conf_directive_t fy_client_limits_conf_table[];      /* inline (routes) */
extern const fy_conf_directive_t fy_client_limits_list_conf_table[]; /* named (top level) */

/* "10/s" -> 10, 1000 ms. Units s, m, min, h, d; count 1..10^9. 0 or -1. */
int fy_ratelimit_parse_rate(const char *s, uint64_t *count, uint64_t *period_ms);

#endif
