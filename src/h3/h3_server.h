/* HTTP/3 server codec (RFC 9114) on our own framing (h3_frame.h) and nghttp3's QPACK
 * encoder/decoder, over the QUIC endpoint of quic/quic.h. Like the h1 and h2 codecs it fills
 * fy_exchange_t, dispatches it and implements the sink; every request stream is one exchange.
 *
 * Backpressure: response bytes are queued in the QUIC stream until acknowledged; the handler's
 * `proceed` runs only while fewer than `quic.send-buffer` bytes are queued. Request bodies are
 * credited back to the client (QUIC flow control) only as the handler consumes them.
 *
 * Threads: an endpoint and its connections belong to the worker whose loop `ctx` belongs to;
 * call these from that worker's loop thread only. The codec's files: h3_server.c (QUIC
 * application callbacks, control/QPACK streams), h3_server_req.c (request streams),
 * h3_server_resp.c (responses); h3_server_int.h joins them. */
#ifndef FY_H3_H3_SERVER_H
#define FY_H3_H3_SERVER_H

#include "http/exchange.h"
#include "quic/quic.h"

/* Serve HTTP/3 for `ctx` (one listener on one worker) on the UDP socket `fd` (taken over).
 * Connections join ctx->conns (drain/close work on them like on h1/h2 ones). Returns the
 * endpoint, or NULL. */
fy_quic_endpoint_t *fy_h3_endpoint_start(fy_http_ctx_t *ctx, fy_quic_server_t *qs, int fd);

/* Graceful shutdown of the endpoint: no new connections (existing ones get GOAWAY through
 * fy_http_ctx_drain). */
void fy_h3_endpoint_drain(fy_quic_endpoint_t *ep);
/* Connections accepted from now on belong to `ctx` (a reload); open ones keep theirs. */
void fy_h3_endpoint_set_ctx(fy_quic_endpoint_t *ep, fy_http_ctx_t *ctx);

/* Free the calling worker's cached stream objects (at worker exit). */
void fy_h3_thread_cleanup(void);

#endif
