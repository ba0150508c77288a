/* Typed HTTP limits and timeouts (`limits:`), shared by every server codec.
 * Table: http/http_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_HTTP_HTTP_CONF_H
#define FY_HTTP_HTTP_CONF_H

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"

typedef struct fy_http_limits {
    uint64_t max_request_line;     /* `request-line`, default 8k; over it: 414 */
    uint64_t max_header_bytes;     /* `header-bytes`, default 32k; over it: 431 */
    int64_t max_headers;           /* `header-count`, default 100; over it: 431 */
    uint64_t max_body;             /* `body-size`, default 16m; over it: 413 */
    uint64_t header_timeout_ms;    /* `header-timeout`, default 10s: whole head must arrive */
    uint64_t body_timeout_ms;      /* `body-timeout`, default 30s: idle gap while reading a body */
    uint64_t keepalive_timeout_ms; /* `keepalive-timeout`, default 75s: idle between requests */
    uint64_t tunnel_timeout_ms;    /* tunnel-timeout: an open tunnel (WebSocket) idle both ways */
    uint64_t tunnel_close_timeout_ms; /* tunnel-close-timeout: the WebSocket close handshake */
    uint64_t send_timeout_ms;   /* `send-timeout`, default 60s: client not reading the response */
    int64_t keepalive_requests; /* `keepalive-requests`, default 10000; then Connection: close */
    int64_t max_connections;    /* `connections`, default 16384 per worker */
    int encoded_slash;          /* `encoded-slash`, enum fy_path_slash, default reject (400) */
    bool merge_slashes;         /* `merge-slashes`, default true: "//" -> "/" in paths */
    uint64_t body_total_timeout_ms; /* `body-total-timeout`, default 10m: a proxied body whole */
    int64_t max_informational;      /* `informational-responses`, default 32 per proxied request */
    uint64_t max_conn_memory;       /* `connection-memory`, default 1m; 0: no budget */
} fy_http_limits_t;

extern const fy_conf_directive_t fy_http_limits_table[];

#endif
