/* Directive table of `limits:`. */
#include "http/http_conf.h"

#include <stddef.h>

#define H(f) offsetof(fy_http_limits_t, f)
#define KIB 1024
#define MIB (1024 * 1024)
#define SEC 1000
#define HOUR (3600 * 1000)

/* index = enum fy_path_slash */
static const char *const slash_modes[] = {"reject", "keep", "decode", NULL};

const fy_conf_directive_t fy_http_limits_table[] = {
    {.key = "request-line",
     .type = FY_CT_SIZE,
     .offset = H(max_request_line),
     .dflt = "8k",
     .min = 256,
     .max = MIB,
     .doc = "Longest request line (method, target, version); over it: 414."},
    {.key = "header-bytes",
     .type = FY_CT_SIZE,
     .offset = H(max_header_bytes),
     .dflt = "32k",
     .min = KIB,
     .max = 16 * MIB,
     .doc = "Largest request head (all header fields); over it: 431."},
    {.key = "header-count",
     .type = FY_CT_INT,
     .offset = H(max_headers),
     .dflt = "100",
     .min = 1,
     .max = 10000,
     .doc = "Most header fields in a request; over it: 431."},
    {.key = "body-size",
     .type = FY_CT_SIZE,
     .offset = H(max_body),
     .dflt = "16m",
     .min = 0,
     .max = (int64_t)1 << 40,
     .doc = "Largest request body; over it: 413."},
    {.key = "header-timeout",
     .type = FY_CT_DURATION,
     .offset = H(header_timeout_ms),
     .dflt = "10s",
     .min = 100,
     .max = HOUR,
     .doc = "Time for the whole request head to arrive."},
    {.key = "body-timeout",
     .type = FY_CT_DURATION,
     .offset = H(body_timeout_ms),
     .dflt = "30s",
     .min = 100,
     .max = HOUR,
     .doc = "Longest idle gap while reading a request body."},
    {.key = "keepalive-timeout",
     .type = FY_CT_DURATION,
     .offset = H(keepalive_timeout_ms),
     .dflt = "75s",
     .min = 0,
     .max = HOUR,
     .doc = "Idle time allowed between requests on one connection; 0 closes after each."},
    {.key = "tunnel-timeout",
     .type = FY_CT_DURATION,
     .offset = H(tunnel_timeout_ms),
     .dflt = "1h",
     .min = 100,
     .max = 7 * 24 * HOUR,
     .doc = "An open tunnel (a proxied WebSocket or other Upgrade / extended CONNECT) with no "
            "byte either way for this long is closed: a WebSocket gets a Close frame (1001, "
            "going away) on both sides, then `tunnel-close-timeout` to finish the close "
            "handshake; other tunnels are closed. Replaces the upstream's `idle-timeout` once "
            "the tunnel is open (as HAProxy's `timeout tunnel`)."},
    {.key = "tunnel-close-timeout",
     .type = FY_CT_DURATION,
     .offset = H(tunnel_close_timeout_ms),
     .dflt = "5s",
     .min = 100,
     .max = HOUR,
     .doc = "After Ferry sent its Close frames to a WebSocket's two sides (tunnel timeout, "
            "stop): how long the peers get to answer and close before the tunnel is cut."},
    {.key = "send-timeout",
     .type = FY_CT_DURATION,
     .offset = H(send_timeout_ms),
     .dflt = "60s",
     .min = 100,
     .max = HOUR,
     .doc = "Close when the client reads nothing of the response for this long."},
    {.key = "keepalive-requests",
     .type = FY_CT_INT,
     .offset = H(keepalive_requests),
     .dflt = "10000",
     .min = 1,
     .max = 1000000000,
     .doc = "Requests served on one connection before `Connection: close`."},
    {.key = "connections",
     .type = FY_CT_INT,
     .offset = H(max_connections),
     .dflt = "16384",
     .min = 1,
     .max = 10000000,
     .doc = "Most open client connections per worker."},
    {.key = "encoded-slash",
     .type = FY_CT_ENUM,
     .offset = H(encoded_slash),
     .dflt = "reject",
     .enums = slash_modes,
     .doc = "A `%2F` or `%5C` in a request path: `reject` (400), `keep` (stays encoded, is not a "
            "separator, is forwarded as is), or `decode` (becomes `/` or `\\` before dot "
            "segments are removed). Every path is normalised before routes are matched: "
            "unreserved characters decoded, `.` and `..` segments removed (a `..` above the root "
            "is 400), and proxied routes forward the result (see `proxy.forward-path`)."},
    {.key = "merge-slashes",
     .type = FY_CT_BOOL,
     .offset = H(merge_slashes),
     .dflt = "true",
     .doc = "Collapse runs of `/` in request paths before routes are matched (as nginx does), "
            "so `//admin` meets the `/admin` route and its policies."},
    {.key = "body-total-timeout",
     .type = FY_CT_DURATION,
     .offset = H(body_total_timeout_ms),
     .dflt = "10m",
     .min = 0,
     .max = 24 * HOUR,
     .doc = "Longest time a proxied request body may take as a whole (from the request head "
            "to the body's end), whatever its pace; past it the client gets 408 (or the "
            "stream is reset once the response started) and the origin's request is aborted. "
            "0: no bound (`body-timeout` still bounds every idle gap)."},
    {.key = "informational-responses",
     .type = FY_CT_INT,
     .offset = H(max_informational),
     .dflt = "32",
     .min = 1,
     .max = 100000,
     .doc = "Most interim (1xx) responses an origin may send before the final response of "
            "one proxied request; past it the exchange fails with 502."},
    {.key = "connection-memory",
     .type = FY_CT_SIZE,
     .offset = H(max_conn_memory),
     .dflt = "1m",
     .min = 0,
     .max = (int64_t)1 << 34,
     .doc = "Memory budget of one client connection: its buffers, TLS state and codec state "
            "(the bytes `ferry_connection_memory_bytes` counts). Past it the connection stops "
            "being read and is closed, logged as `connection memory budget exceeded` and counted "
            "in `ferry_limit_rejections_total{limit=\"connection-memory\"}`. 0: no budget."},
    {.key = NULL},
};
