/* HTTP/2 server codec (nghttp2 1.52 for framing and HPACK, driven with mem_recv/mem_send
 * from our loop): streams map to exchanges through the same sink ops as h1, request bodies
 * are flow-controlled by the handler's pace, and abuse (rapid reset, floods, CONTINUATION
 * floods, oversized header lists) is bounded by `http2:` and `limits:`.
 *
 * Threads: a connection is served on the worker whose loop `ctx` belongs to; call these from
 * that worker's loop thread only. The codec's files: h2_server.c (connection, I/O, start),
 * h2_server_sink.c (streams, responses), h2_server_session.c (nghttp2 callbacks),
 * h2_server_scan.c (frame pre-scanner); h2_server_int.h joins them. */
#ifndef FY_H2_H2_SERVER_H
#define FY_H2_H2_SERVER_H

#include <sys/socket.h>

#include "http/exchange.h"

/* Serve HTTP/2 on `fd` (ownership passes here): `tls` is the TLS transport that negotiated
 * ALPN h2 (owned from now on) or NULL for h2c; `data[0..len)` are bytes already read (the
 * client preface and beyond). `upgrade`, if not NULL, is the HTTP/1.1 request that asked for
 * h2c: 101 Switching Protocols goes out first and the request is served as stream 1.
 * Matches fy_http_ctx_t.start_h2. Returns 0 or -errno (the fd
 * and transport are released on failure too). */
int fy_h2_conn_start(fy_http_ctx_t *ctx, int fd, fy_transport_t *tls, const struct sockaddr *sa,
                     socklen_t salen, const char *data, size_t len, const fy_h2_upgrade_t *upgrade);

/* Free the calling worker thread's nghttp2 callbacks, options and stream pool (at exit). */
void fy_h2_thread_cleanup(void);

/* fy_h2_conn_start for the decrypted side of an intercepted CONNECT (handler/mitm.c): `tls`
 * is the finished TLS transport (ALPN h2); every exchange gets ex->tunnel = tunnel, and
 * tunnel_free(tunnel) runs when the conn is freed (or at once when it could not start).
 * Returns 0 or -errno. */
int fy_h2_conn_start_tunnel(fy_http_ctx_t *ctx, int fd, fy_transport_t *tls,
                            const struct sockaddr *sa, socklen_t salen, void *tunnel,
                            void (*tunnel_free)(void *));

#endif
