/* HTTP/2 client codec (origins): one nghttp2 client session per origin connection, carrying
 * many exchanges (streams) at once. The codec does no I/O and knows no loop: its owner
 * (upstream/upstream_h2.c) feeds it the origin's bytes (fy_h2_client_recv), drains what it has
 * to send (fy_h2_client_send), and is asked through `want_send` to do so soon after a call that
 * queued frames outside of those two (consume, resume, cancel).
 *
 * Flow control is the backpressure: automatic WINDOW_UPDATEs are off; a stream's response
 * bytes are acknowledged only when its owner calls fy_h2_client_consume (after the client side
 * took them), so at most FY_H2C_STREAM_WINDOW unconsumed bytes are ever delivered per stream.
 * Request bodies are pulled through `read_body`, which may answer FY_CLIENT_DEFER (then
 * fy_h2_client_resume when more is there). */
#ifndef FY_H2_H2_CLIENT_H
#define FY_H2_H2_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/arena.h"
#include "http/client_stream.h"
#include "http/exchange.h"

/* Per-stream receive window we advertise: the bound on response bytes buffered per stream. */
#define FY_H2C_STREAM_WINDOW (256u * 1024u)
/* Streams we open on one connection at most, whatever the origin allows. */
#define FY_H2C_MAX_STREAMS 256u
/* Connection receive window: every stream's window at once (64 MiB), so that slow clients
   holding their streams' windows never starve the other streams of the connection. Memory
   stays bounded per stream (the stream window), not by this. */
#define FY_H2C_CONN_WINDOW (FY_H2C_MAX_STREAMS * FY_H2C_STREAM_WINDOW)
typedef struct fy_h2_client fy_h2_client_t;
typedef struct fy_h2_client_stream fy_h2_client_stream_t;

/* Streams use http/client_stream.h's ops and errors: FY_CLIENT_RESET (RST_STREAM, its code),
 * FY_CLIENT_REFUSED (REFUSED_STREAM or beyond a GOAWAY's last stream), FY_CLIENT_CONN (the
 * connection failed or closed, or a protocol error), FY_CLIENT_PROTOCOL (bad status, head).
 * Every callback may be called from inside fy_h2_client_recv/send; on_data's bytes are
 * borrowed for the call; read_body is used (ref_body is not). */

/* The connection's owner. */
typedef struct fy_h2_client_conn_ops {
    void (*want_send)(void *ud);   /* frames are queued: call fy_h2_client_send soon */
    void (*on_settings)(void *ud); /* the origin's first SETTINGS arrived: streams may go */
    void (*on_goaway)(void *ud);   /* the origin is going away: open no new streams */
    void (*on_ping_ack)(void *ud); /* the origin answered our PING (fy_h2_client_ping); may be
                                      NULL */
} fy_h2_client_conn_ops_t;

/* A session, with our SETTINGS queued. NULL on OOM. */
fy_h2_client_t *fy_h2_client_new(const fy_h2_client_conn_ops_t *ops, void *ud,
                                 uint32_t max_header_list);
/* Fail every open stream (on_error FY_CLIENT_CONN with `why`) and free. `why` is static. */
void fy_h2_client_free(fy_h2_client_t *c, const char *why);
/* Fail every open stream with `why` now, keep the session (dead) until freed. */
void fy_h2_client_fail_all(fy_h2_client_t *c, const char *why);

/* Origin bytes in. Returns 0, or -1 on a connection-fatal error (then call fail_all). */
int fy_h2_client_recv(fy_h2_client_t *c, const char *p, size_t n);
/* Frames out: the next serialized bytes (borrowed until the next call), 0 when nothing is
   queued, <0 on a fatal error. */
ssize_t fy_h2_client_send(fy_h2_client_t *c, const uint8_t **data);
/* Whether the session has anything left to do (nghttp2 want_read/want_write). */
bool fy_h2_client_alive(const fy_h2_client_t *c);

/* Open a stream: `hs` are the request's fields, pseudo-headers first (":method", ":scheme",
 * ":authority", ":path", optional ":protocol"), names lowercase; copied. `has_body`: the body
 * comes from ops->read_body, else END_STREAM on HEADERS. Returns the stream handle, owned by
 * the caller until fy_h2_client_release, or NULL when the session cannot take a stream. */
fy_h2_client_stream_t *fy_h2_client_submit(fy_h2_client_t *c, const fy_headers_t *hs, bool has_body,
                                           fy_arena_t *arena, const fy_client_stream_ops_t *ops,
                                           void *ud);
/* `n` response bytes of the stream were passed on: open the windows for as many. */
void fy_h2_client_consume(fy_h2_client_stream_t *s, size_t n);
/* More request body is available for a stream whose read_body deferred. */
void fy_h2_client_resume(fy_h2_client_stream_t *s);
/* The owner is done with the stream: no more callbacks; RST_STREAM(CANCEL) if it is still
   open; bytes delivered but never consumed are given back to the connection window. Must be
   called exactly once per submitted stream, before the client is freed. */
void fy_h2_client_release(fy_h2_client_stream_t *s);

/* Streams open on the session, and how many the origin allows (min with our cap). */
size_t fy_h2_client_nstreams(const fy_h2_client_t *c);
size_t fy_h2_client_max_streams(const fy_h2_client_t *c);
/* The origin announced SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441 extended CONNECT). */
bool fy_h2_client_can_connect_protocol(const fy_h2_client_t *c);
/* Queue a PING (want_send follows); its ACK comes through on_ping_ack. */
void fy_h2_client_ping(fy_h2_client_t *c);
/* Send GOAWAY (NO_ERROR) before closing an idle connection. */
void fy_h2_client_goaway(fy_h2_client_t *c);

void fy_h2_client_thread_cleanup(void);

#endif
