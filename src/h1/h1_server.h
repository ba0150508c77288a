/* HTTP/1.1 server codec: wire <-> exchange on one client connection (keep-alive, pipelining,
 * chunked in and out, trailers, 100-continue, strict parsing, limits and timeouts).
 *
 * Threads: a connection is served on the worker whose loop `ctx` belongs to; call these from
 * that worker's loop thread only. The codec's files: h1_server.c (connection, I/O),
 * h1_server_req.c (request heads, dispatch), h1_server_body.c (request bodies),
 * h1_server_resp.c (responses); h1_server_int.h joins them. */
#ifndef FY_H1_H1_SERVER_H
#define FY_H1_H1_SERVER_H

#include <sys/socket.h>

#include "http/exchange.h"

/* Serve the accepted, non-blocking socket `fd` (ownership passes to the codec, which closes it
 * on every path). ctx->tls set: TLS handshake first. Returns 0, or -errno when the conn could
 * not be set up (fd already closed). */
int fy_h1_conn_accept(fy_http_ctx_t *ctx, int fd, const struct sockaddr *sa, socklen_t salen);

/* Serve HTTP/1.1 on `fd` over the established transport `t` (ownership of both passes to the
 * codec; `t` may be a finished TLS server transport, or NULL for the plain socket). Every exchange
 * of the conn gets ex->tunnel = tunnel; tunnel_free(tunnel) runs when the conn closes (NULL: none).
 * Used for the decrypted side of an intercepted CONNECT. Returns 0, or -errno (fd, t and tunnel
 * released). */
int fy_h1_conn_start(fy_http_ctx_t *ctx, int fd, fy_transport_t *t, const struct sockaddr *sa,
                     socklen_t salen, void *tunnel, void (*tunnel_free)(void *));

/* Give the calling thread's free request blocks (header arrays, arenas' first blocks) back to
 * malloc: at a worker's exit, once its connections are freed (they are per-thread lists, so
 * nothing else can reach them after the thread ends). */
void fy_h1_thread_cleanup(void);
/* How many free request blocks the calling thread's lists keep (0 after fy_h1_thread_cleanup,
 * and always with -DFY_NO_POOL). */
size_t fy_h1_thread_cached(void);

#endif
