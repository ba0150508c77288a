/* The `rate-limit:` and `client-limits:` directive tables (policy/ratelimit_conf.h). */
#include "policy/ratelimit_conf.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/cidr_conf.h"

int fy_ratelimit_parse_rate(const char *s, uint64_t *count, uint64_t *period_ms)
{
    uint64_t n = 0;
    const char *p = s;
    if (!isdigit((unsigned char)*p)) return -1;
    for (; isdigit((unsigned char)*p); p++) {
        n = n * 10 + (uint64_t)(*p - '0');
        if (n > 1000000000ull) return -1;
    }
    if (n == 0 || *p++ != '/') return -1;
    uint64_t ms;
    if (!strcmp(p, "s"))
        ms = 1000;
    else if (!strcmp(p, "m") || !strcmp(p, "min"))
        ms = 60000;
    else if (!strcmp(p, "h"))
        ms = 3600000;
    else if (!strcmp(p, "d"))
        ms = 86400000;
    else
        return -1;
    *count = n;
    *period_ms = ms;
    return 0;
}

static int rate_of(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, const char *s, uint64_t *c,
                   uint64_t *ms)
{
    if (fy_ratelimit_parse_rate(s, c, ms) == 0) return 0;
    fy_conf_error(ctx, node, NULL,
                  "'%.40s' is not a rate; expected COUNT/UNIT with UNIT s, m (min), h or d, "
                  "e.g. 10/s",
                  s);
    return -1;
}

static int valid_rate(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_ratelimit_conf_t *c = obj;
    return rate_of(ctx, node, *(char **)field, &c->count, &c->period_ms);
}

static int valid_conn_rate(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_client_limits_conf_t *c = obj;
    return rate_of(ctx, node, *(char **)field, &c->conn_count, &c->conn_period_ms);
}

static int valid_keys(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    const fy_conf_strlist_t *l = field;
    int rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        const char *k = l->v[i];
        bool ok = !strcmp(k, "client-address") || !strcmp(k, "route");
        if (!strncmp(k, "header:", 7) && k[7]) {
            ok = true;
            for (char *c = l->v[i] + 7; *c; c++) {
                if (!(isalnum((unsigned char)*c) || strchr("!#$%&'*+-.^_`|~", *c))) ok = false;
                *c = (char)tolower((unsigned char)*c);
            }
        }
        if (!ok) {
            fy_conf_error(ctx, node->kind == FY_CONF_SEQ && i < node->n ? node->items[i] : node,
                          NULL,
                          "'%.60s' is not a key; expected client-address, route or "
                          "header:NAME",
                          k);
            rc = -1;
        }
    }
    return rc;
}

static int valid_redis_addr(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_ratelimit_redis_conf_t *r = obj;
    const char *s = *(char **)field;
    const char *colon = strrchr(s, ':');
    size_t hl = colon ? (size_t)(colon - s) : 0;
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || hl == 0 || hl >= sizeof r->host || !end || *end || port < 1 || port > 65535) {
        fy_conf_error(ctx, node, NULL, "'%.80s' is not HOST:PORT, e.g. 127.0.0.1:6379", s);
        return -1;
    }
    const char *h = s;
    if (h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    memcpy(r->host, h, hl);
    r->host[hl] = '\0';
    if (!strcmp(r->host, "localhost")) snprintf(r->host, sizeof r->host, "127.0.0.1");
    r->port = (int)port;
    return 0;
}

static const char *const on_error_names[] = {"allow", "deny", NULL};
static const char *const headers_names[] = {"on-reject", "always", NULL};

#define R(f) offsetof(fy_ratelimit_redis_conf_t, f)

static const fy_conf_directive_t redis_table[] = {
    {.key = "address",
     .type = FY_CT_STRING,
     .offset = R(address),
     .required = true,
     .validate = valid_redis_addr,
     .doc = "The Redis server, `HOST:PORT` (numeric address or localhost)."},
    {.key = "lease",
     .type = FY_CT_INT,
     .offset = R(lease),
     .dflt = "0",
     .min = 0,
     .max = 1000000,
     .doc = "Tokens a worker takes from Redis per round trip and spends locally (the request "
            "path waits for Redis only when its lease is spent); 0: burst/50, at least 1. "
            "Tokens leased and not spent by the time they would have refilled are lost, so a "
            "cluster admits between limit - workers x lease and the limit."},
    {.key = "timeout",
     .type = FY_CT_DURATION,
     .offset = R(timeout_ms),
     .dflt = "250ms",
     .min = 1,
     .max = 60000,
     .doc = "A Redis reply later than this counts as Redis down for the waiting requests."},
    {.key = "reconnect",
     .type = FY_CT_DURATION,
     .offset = R(reconnect_ms),
     .dflt = "1s",
     .min = 10,
     .max = 3600000,
     .doc = "Wait between attempts to (re)connect to Redis."},
    {.key = "on-error",
     .type = FY_CT_ENUM,
     .offset = R(on_error),
     .dflt = "allow",
     .enums = on_error_names,
     .doc = "While Redis is down or late: `allow` (fail open: no limit) or `deny` (fail "
            "closed: answer `error-status`). Each transition is logged once and counted "
            "(ferry_policy_ratelimit_redis_down_total)."},
    {.key = "error-status",
     .type = FY_CT_INT,
     .offset = R(error_status),
     .dflt = "503",
     .min = 400,
     .max = 599,
     .doc = "Status of the answer when `on-error: deny` and Redis is down."},
    {.key = "prefix",
     .type = FY_CT_STRING,
     .offset = R(prefix),
     .dflt = "ferry:rl:",
     .doc = "Prefix of the Redis keys (`PREFIX NAME : key hash`)."},
    {.key = NULL},
};

static int check_ratelimit(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_ratelimit_conf_t *c = obj;
    if (c->burst == 0) c->burst = (int64_t)c->count;
    (void)ctx;
    (void)map;
    return 0;
}

#define RL(f) offsetof(fy_ratelimit_conf_t, f)

const fy_conf_directive_t fy_ratelimit_conf_table[] = {
    {.key = "rate",
     .type = FY_CT_STRING,
     .offset = RL(rate),
     .required = true,
     .validate = valid_rate,
     .doc = "Sustained rate per key, `COUNT/UNIT` (s, m, h, d), GCRA: one request every "
            "period/COUNT, with `burst` at once. Example: `rate-limit: {rate: 10/s, burst: 10, "
            "key: [client-address]}`."},
    {.key = "burst",
     .type = FY_CT_INT,
     .offset = RL(burst),
     .dflt = "0",
     .min = 0,
     .max = 1000000000,
     .doc = "Requests a key may make at once (the bucket size); 0: the rate's COUNT."},
    {.key = "key",
     .type = FY_CT_STRLIST,
     .offset = RL(key),
     .dflt = "client-address",
     .validate = valid_keys,
     .doc = "What one limit counts: any combination of `client-address`, `header:NAME` (a "
            "missing header counts as empty; JWT claims copied to headers work here) and "
            "`route` (every client together)."},
    {.key = "name",
     .type = FY_CT_STRING,
     .offset = RL(name),
     .doc = "Policy name in `RateLimit-Policy` and in the Redis keys; default `route-N`. "
            "Instances sharing a Redis limit need the same name."},
    {.key = "trusted-proxies",
     .type = FY_CT_STRLIST,
     .offset = RL(trusted_proxies),
     .validate = fy_cidr_conf_valid_list,
     .doc = "Peers whose `Forwarded` / `X-Forwarded-For` give the client address (as in `cidr`)."},
    {.key = "status",
     .type = FY_CT_INT,
     .offset = RL(status),
     .dflt = "429",
     .min = 400,
     .max = 599,
     .doc = "Status of a rejected request; it carries `Retry-After` and the `RateLimit` and "
            "`RateLimit-Policy` headers (draft-ietf-httpapi-ratelimit-headers-08)."},
    {.key = "max-keys",
     .type = FY_CT_INT,
     .offset = RL(max_keys),
     .dflt = "65536",
     .min = 16,
     .max = 16777216,
     .doc = "Slots of the limit's table, shared by the workers (16 bytes each); when full, the "
            "key that would be allowed again soonest is evicted "
            "(ferry_policy_ratelimit_evictions_total)."},
    {.key = "headers",
     .type = FY_CT_ENUM,
     .offset = RL(headers),
     .dflt = "on-reject",
     .enums = headers_names,
     .doc = "`on-reject`: `RateLimit` and `RateLimit-Policy` on 429s only; `always`: on every "
            "response of the route too, with the remaining burst (`r`) and the seconds until it "
            "is full again (`t`); local limits only (with `redis`, 429s only)."},
    {.key = "redis",
     .type = FY_CT_TABLE_PTR,
     .offset = RL(redis),
     .sub = redis_table,
     .sub_size = sizeof(fy_ratelimit_redis_conf_t),
     .doc = "Share the limit between Ferry instances through Redis (GCRA in a Lua script, "
            "tokens leased per worker); without it the limit is per process."},
    {.key = NULL, .check = check_ratelimit},
};

static int check_client_limits(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_client_limits_conf_t *c = obj;
    if (c->use && (c->connection_rate || c->concurrency)) {
        fy_conf_error(ctx, map, "use", "names a client-limits entry: the limits go there");
        return -1;
    }
    if (!c->use && !c->connection_rate && !c->concurrency) {
        fy_conf_error(ctx, map, NULL, "needs `connection-rate` or `concurrency`%s",
                      c->name ? "" : " (or `use`)");
        return -1;
    }
    if (c->connection_burst == 0) c->connection_burst = (int64_t)c->conn_count;
    return 0;
}

#define CL(f) offsetof(fy_client_limits_conf_t, f)

#define CLIENT_LIMITS                                                                              \
    {.key = "connection-rate",                                                                     \
     .type = FY_CT_STRING,                                                                         \
     .offset = CL(connection_rate),                                                                \
     .validate = valid_conn_rate,                                                                  \
     .doc = "New TCP connections per client address, `COUNT/UNIT` (listeners only: checked at "    \
            "accept; a connection over it is closed at once and counted)."},                       \
        {.key = "connection-burst",                                                                \
         .type = FY_CT_INT,                                                                        \
         .offset = CL(connection_burst),                                                           \
         .dflt = "0",                                                                              \
         .min = 0,                                                                                 \
         .max = 1000000000,                                                                        \
         .doc = "Connections a client may open at once; 0: the rate's COUNT."},                    \
        {.key = "concurrency",                                                                     \
         .type = FY_CT_INT,                                                                        \
         .offset = CL(concurrency),                                                                \
         .dflt = "0",                                                                              \
         .min = 0,                                                                                 \
         .max = 1000000,                                                                           \
         .doc = "Requests in progress per client address (released when the exchange ends); "      \
                "0: no limit. Example: `client-limits: {concurrency: 4}`."},                       \
        {.key = "status",                                                                          \
         .type = FY_CT_INT,                                                                        \
         .offset = CL(status),                                                                     \
         .dflt = "429",                                                                            \
         .min = 400,                                                                               \
         .max = 599,                                                                               \
         .doc = "Status of a request over `concurrency`."},                                        \
    {                                                                                              \
        .key = "max-keys", .type = FY_CT_INT, .offset = CL(max_keys), .dflt = "65536", .min = 16,  \
        .max = 16777216,                                                                           \
        .doc = "Client addresses tracked (per limit, shared by the workers); when full, an idle "  \
               "one is evicted."                                                                   \
    }

const fy_conf_directive_t fy_client_limits_conf_table[] = {
    {.key = "use",
     .type = FY_CT_STRING,
     .offset = CL(use),
     .doc = "The name of a top-level `client-limits` entry; shorthand `client-limits: NAME`."},
    CLIENT_LIMITS,
    {.key = NULL, .check = check_client_limits},
};

const fy_conf_directive_t fy_client_limits_list_conf_table[] = {
    {.key = "name",
     .type = FY_CT_STRING,
     .offset = CL(name),
     .required = true,
     .doc = "What listeners and routes (`client-limits: NAME`) call these limits."},
    CLIENT_LIMITS,
    {.key = NULL, .check = check_client_limits},
};
