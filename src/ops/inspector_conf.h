/* Typed config of the inspector (`inspector:` top level, and a route's `capture:`). Tables:
 * ops/inspector_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_OPS_INSPECTOR_CONF_H
#define FY_OPS_INSPECTOR_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf.h"

typedef struct fy_inspector_conf {
    char *dir;                        /* `dir`: the capture store; default DATA-DIR/inspector */
    uint64_t max_size;                /* `max-size`: segments kept (ring), default 256m */
    uint64_t max_age_ms;              /* `max-age`: 0 = no age bound, default 24h */
    uint64_t segment_size;            /* `segment-size`: default 16m (at most max-size/4) */
    uint64_t body_cap;                /* `body-cap`: body bytes kept per direction, 1m */
    bool redact;                      /* `redact`: default true */
    fy_conf_strlist_t redact_headers; /* `redact-headers`: more header names */
    fy_conf_strlist_t redact_json;    /* `redact-json`: JSON member names in bodies */
    char *address;                    /* `address`: UI and API, default 127.0.0.1:9902 */
    struct sockaddr_storage addr;     /* listen, parsed */
    socklen_t addrlen;
    char *token;                    /* `token`: required as Bearer / ?token= when set */
    int64_t queue;                  /* `queue`: flows waiting for the store writer */
    uint64_t queue_bytes;           /* `queue-bytes`: bytes waiting for the writer */
    bool intercepted;               /* `intercepted`: store every intercepted flow, default true */
    int64_t max_clients;            /* `max-clients`: UI/API connections at once */
    uint64_t replay_timeout_ms;     /* `replay-timeout`: a replayed request's whole exchange */
    uint64_t breakpoint_timeout_ms; /* `breakpoint-timeout`: a held request then goes on */
} fy_inspector_conf_t;

/* A route's `capture:` (reverse-proxy flight recorder): a flow is stored when it was sampled,
 * or when it matches one of the conditions that are set. */
typedef struct fy_capture_route_conf {
    int64_t sample_percent;  /* `sample-percent`: -1 (default): 100 when no condition is set,
                                else 0 */
    int64_t status_min;      /* `status-min`: 0 = unset */
    uint64_t slower_than_ms; /* `slower-than`: 0 = unset */
    char *header;            /* `header`: a request or response header present */
    bool bodies;             /* `bodies`: keep bodies, default true */
} fy_capture_route_conf_t;

extern const fy_conf_directive_t fy_inspector_conf_table[];
extern const fy_conf_directive_t fy_capture_route_conf_table[];

/* "127.0.0.1:9902", "[::1]:9902" (numeric host, port 1..65535). 0 or -1. */
int fy_inspector_parse_addr(const char *s, struct sockaddr_storage *out, socklen_t *len);

#endif
