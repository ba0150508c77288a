/* Reverse proxy handler: glue between an exchange (from any client codec: h1, h1+TLS, h2c, h2)
 * and an origin from an upstream: HTTP/1.1 (plain or TLS) from its pool of idle connections,
 * or HTTP/2 (h2c prior knowledge or TLS with ALPN h2) as one stream on a shared session
 * (upstream/upstream_h2.c, h2/h2_client.c). Bodies stream both ways with
 * backpressure (the origin is read only as fast as the client takes the response, and the
 * client's body is pulled only as fast as the origin takes it); hop-by-hop headers are
 * removed; X-Forwarded-* added; connect errors are retried on another server for idempotent
 * bodiless requests; connect/first-byte/idle timeouts map to 502/504. */
#ifndef FY_HANDLER_PROXY_H
#define FY_HANDLER_PROXY_H

#include "handler/proxy_conf.h"
#include "http/handler.h"
#include "upstream/upstream.h"

/* `conf` and `up` are borrowed and must outlive the handler. */
fy_handler_t *fy_proxy_handler_new(const fy_proxy_conf_t *conf, fy_upstream_t *up);

/* Graceful stop, on a worker's thread: every WebSocket tunnel this thread's proxy exchanges
 * hold gets a Close frame (1001, going away) on both sides, as soon as each direction is
 * between two frames; the origin's close then ends the exchange (or, after
 * `limits.tunnel-close-timeout`, the tunnel is cut). Other tunnels are left to the drain
 * deadline. Not re-entrant with the handler. */
void fy_proxy_drain(void);

#endif
