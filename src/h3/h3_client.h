/* HTTP/3 client codec (h3:// origins): one QUIC connection (quic/quic.h, GnuTLS client
 * session, ALPN h3) carrying many exchanges at once, on our framing and nghttp3's QPACK. The
 * stream interface mirrors the h2 client codec's so that the proxy can drive both the same way:
 * response bytes are credited back to the origin (QUIC flow control) only when the owner calls
 * fy_h3_client_consume; request bodies are pulled through `read_body` (FY_CLIENT_DEFER, then
 * fy_h3_client_resume).
 *
 * Unlike the h2 codec this one does its own I/O (QUIC owns its UDP socket and timers), so
 * there is no recv/send pair: everything happens on the loop given at connect.
 * Threads: a client connection and its streams live on one worker thread (the one whose loop
 * owns the QUIC socket). */
#ifndef FY_H3_H3_CLIENT_H
#define FY_H3_H3_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "core/arena.h"
#include "http/client_stream.h"
#include "http/exchange.h"
#include "quic/quic.h"

typedef struct fy_h3_client fy_h3_client_t;
typedef struct fy_h3_client_stream fy_h3_client_stream_t;

/* Streams use http/client_stream.h's ops and errors (FY_CLIENT_REFUSED: H3_REQUEST_REJECTED
 * or beyond a GOAWAY; code: the H3 error code, or 0). Callbacks run from the loop; on_data's
 * bytes are borrowed for the call; read_body is used (ref_body is not). */

typedef struct fy_h3_client_conn_ops {
    void (*on_ready)(void *ud);                  /* handshake done: streams may be submitted */
    void (*on_credit)(void *ud);                 /* the origin allows more streams */
    void (*on_goaway)(void *ud);                 /* open no new streams */
    void (*on_close)(void *ud, const char *why); /* the connection is gone (streams failed first) */
} fy_h3_client_conn_ops_t;

/* Start a connection to `sa`; `o` as for fy_quic_connect (borrowed for the call; o->conf for
 * the connection's life). NULL if it could not start (logged). */
fy_h3_client_t *fy_h3_client_connect(fy_loop_t *loop, const struct sockaddr *sa, socklen_t salen,
                                     const fy_quic_client_opts_t *o,
                                     const fy_h3_client_conn_ops_t *ops, void *ud);
/* Close the connection: open streams get on_error(FY_CLIENT_CONN); on_close is not called. */
void fy_h3_client_close(fy_h3_client_t *c);

/* Open a request: `hs` pseudo-headers first (":method", ":scheme", ":authority", ":path",
 * optional ":protocol"), lowercase names; copied. `has_body`: pulled through read_body.
 * Returns the stream (owned by the caller until fy_h3_client_release), or NULL when the
 * connection is not ready, going away or out of stream credit. */
fy_h3_client_stream_t *fy_h3_client_submit(fy_h3_client_t *c, const fy_headers_t *hs, bool has_body,
                                           fy_arena_t *arena, const fy_client_stream_ops_t *ops,
                                           void *ud);
void fy_h3_client_consume(fy_h3_client_stream_t *s, size_t n);
void fy_h3_client_resume(fy_h3_client_stream_t *s);
/* The owner is done: no more callbacks; the stream is cancelled if still open. Exactly once
 * per submitted stream. */
void fy_h3_client_release(fy_h3_client_stream_t *s);

bool fy_h3_client_ready(const fy_h3_client_t *c);
/* Ready and the server's MAX_STREAMS leaves a bidirectional stream to open now (QUIC stream
 * credit comes back only when the server has seen a stream fully closed, which can be later
 * than the owner's release: ops->on_credit tells when more arrives). */
bool fy_h3_client_can_open(fy_h3_client_t *c);
size_t fy_h3_client_nstreams(const fy_h3_client_t *c);

#endif
