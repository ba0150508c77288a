/* The origin interface: one request/response stream to one server of an upstream, whatever
 * the server speaks (http:// https:// over the h1 client codec and a pooled keep-alive
 * connection; h2c:// h2:// over a multiplexed HTTP/2 session; h3:// over a multiplexed QUIC
 * connection). Pools expose available streams, as HAProxy's muxes do: a pooled h1 connection
 * is a pool of one stream, an h2/h3 connection one with free stream slots. Its owner
 * (handler/proxy.c, and through it the intercepting proxy) never branches on the protocol: what
 * differs on the wire is told by fy_origin_stream_framing().
 *
 * Bodies are lent, for every protocol: on_data's bytes stay valid until the owner consumed all
 * of them (fy_origin_stream_consume), and no more on_data comes before that; on_end may follow
 * while they are unconsumed. (h1 lends from the codec's read buffer; h2 from the connection's read
 * chunk, which stays pinned until consumed; h3 bytes, borrowed by its codec for the callback only,
 * and h2 bytes that arrive while a piece is lent, are copied into a ring bounded by the window.)
 *
 * Thread: a stream belongs to the worker (`w`, `loop`) it was opened on; every call and
 * callback runs on that loop. */
#ifndef FY_UPSTREAM_ORIGIN_H
#define FY_UPSTREAM_ORIGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/loop.h"
#include "h1/h1_client.h"
#include "h1/h1_parse.h"
#include "http/client_stream.h"
#include "upstream/upstream.h"

/* What the owner implements: the client stream callbacks (errors are fy_client_error kinds;
 * read_body and, when set, ref_body pull the request body), plus: */
typedef struct fy_origin_stream_ops {
    fy_client_stream_ops_t c;
    /* fy_origin_stream_open returned 0: a stream slot is ready (err NULL: submit now), or
       none could be had (err: static reason; the stream is closed already). */
    void (*on_open)(void *ud, const char *err);
    /* A call from the loop into the codec returned, after callbacks that fy_origin_stream_busy
       told to wait: act on what they gave now. */
    void (*after_io)(void *ud);
} fy_origin_stream_ops_t;

/* The request to send. */
typedef struct fy_origin_request {
    const fy_headers_t *hs; /* pseudo-headers first, see fy_origin_stream_framing; copied */
    int64_t body_len;       /* 0 none, >0 Content-Length, -1 unknown (pulled through read_body) */
    bool tunnel;            /* Upgrade / extended CONNECT: raw bytes both ways once accepted */
    bool head;              /* HEAD: no response body whatever the head says */
    const fy_h1_limits_t *limits; /* bounds on the response head (borrowed for the call) */
    fy_arena_t *arena;            /* response heads and trailers live here */
} fy_origin_request_t;

/* How the origin's wire differs (so that the owner builds fields without asking which
 * protocol it is). */
typedef struct fy_origin_framing {
    bool lowercase;   /* field names must be lowercase */
    bool te_trailers; /* "te: trailers" goes on (the only TE the protocol carries) */
    bool upgrade;     /* tunnels by Upgrade: a 101 head opens them and the WebSocket key and
                         accept go through; else extended CONNECT (RFC 8441/9220): a 2xx opens
                         them and there is no key */
} fy_origin_framing_t;

struct fy__origin_proto;

/* Embedded in its owner, in zeroed memory; fy_origin_stream_init once, then open / submit / close
 * as often as there are attempts, and fy_origin_stream_free once at the end. Members are the
 * folder's. */
typedef struct fy_origin_stream {
    const struct fy__origin_proto *proto; /* the current attempt's protocol, or NULL */
    const fy_origin_stream_ops_t *ops;    /* borrowed */
    void *ud;
    fy_upstream_t *u;
    fy_loop_t *loop;
    int w, server;
    /* h1: a pooled connection (owned until closed) and the codec (owned until freed) */
    fy_origin_conn_t *oc;
    fy_h1_client_t *c1;
    /* h2 / h3: a held multiplexed connection, the wait for one, our stream on it */
    fy_origin_mux_t *mx;
    fy_origin_mux_waiter_t wait;
    void *st; /* fy_h2_client_stream_t or fy_h3_client_stream_t */
    /* h2: bytes lent in place from the connection's read chunk (pinned until consumed) */
    fy_origin_pin_t *pin;
    /* h2 (when already lending) / h3: received bytes copied here, lent from here */
    char *rb;               /* owned: a pool chunk, or malloc */
    fy_headers_t *trailers; /* on_end's, while it waits for the ring to be lent out */
    int64_t expect;         /* the response's length when known (sizes the ring), else -1 */
    uint32_t rb_cap, rb_head, rb_count, rb_lent; /* bounded by the stream window */
    uint32_t direct_n;                           /* bytes lent in place */
    uint16_t busy;                               /* inside a call from the loop into the codec */
    bool reused; /* the stream is on a pooled connection that had served requests */
    bool rb_pooled;
    bool end_pending; /* on_end waits for the ring's bytes to be lent */
} fy_origin_stream_t;

void fy_origin_stream_init(fy_origin_stream_t *os, const fy_origin_stream_ops_t *ops, void *ud);

/* Get a stream slot on `server` of `u` for worker w: on an idle pooled connection, a session
 * with a free stream, or one being connected. Returns 1 when ready now (submit at once), 0
 * when ops->on_open comes later (never from inside this call), or -1 with *err set (static)
 * when not even a socket could be made. `priority`: h2 waiters of higher priority are served
 * first (a request refused before). */
int fy_origin_stream_open(fy_origin_stream_t *os, fy_upstream_t *u, int w, int server,
                          fy_loop_t *loop, int priority, const char **err);
/* Between a successful open and the close (or a failure reported through on_open). */
static inline bool fy_origin_stream_is_open(const fy_origin_stream_t *os)
{
    return os->proto != NULL;
}
/* After a successful open (on_open without err or 1). */
fy_origin_framing_t fy_origin_stream_framing(const fy_origin_stream_t *os);
/* Whether the opened stream may carry a tunnel (h2: the origin allowed extended CONNECT). */
bool fy_origin_stream_can_tunnel(const fy_origin_stream_t *os);
/* After a successful open: how the connection under the stream was made, µs (-1: a pooled
 * connection, or no TLS). False when not measured (h2/h3 connections are shared). */
bool fy_origin_stream_timing(const fy_origin_stream_t *os, int32_t *connect_us, int32_t *tls_us);
/* Send the request head (and start pulling the body). 0, or -1 when the session cannot take
 * a stream after all (the owner closes it). Callbacks may run from inside. */
int fy_origin_stream_submit(fy_origin_stream_t *os, const fy_origin_request_t *rq);
/* The response's length once its head is known (-1: unknown): sizes the h2/h3 ring. */
void fy_origin_stream_expect(fy_origin_stream_t *os, int64_t content_length);
/* `n` lent bytes were passed on (in order; all of them before the next on_data). on_data
 * and on_end may be called from inside. */
void fy_origin_stream_consume(fy_origin_stream_t *os, size_t n);
/* More request body is available after read_body deferred. Callbacks may run from inside. */
void fy_origin_stream_resume(fy_origin_stream_t *os);
/* Inside a call from the loop into the codec (the owner acts on callbacks in after_io). */
bool fy_origin_stream_busy(const fy_origin_stream_t *os);
/* Request bytes still to go out after a complete response (h1 early responses). */
bool fy_origin_stream_sending(const fy_origin_stream_t *os);
/* Whether any response byte of this attempt arrived (h1: a pooled connection that closed
 * without one was stale). */
bool fy_origin_stream_got_bytes(const fy_origin_stream_t *os);
/* Whether a failure (on_error's kind and code, before or after the response head) counts
 * against the server's health. */
bool fy_origin_stream_blames(const fy_origin_stream_t *os, int kind, uint64_t code,
                             bool after_head);
/* The response is complete: no more callbacks. Returns whether the connection may carry
 * another request (to be passed to close). */
bool fy_origin_stream_finish(fy_origin_stream_t *os);
/* A stream got no response head in time: a multiplexed connection takes no new streams until
 * it proves alive (h2: PING), and is closed once its streams end otherwise. */
void fy_origin_stream_suspect(fy_origin_stream_t *os);
/* The stream's connection is given up now (h3: a health probe timed out on it, and a QUIC
 * connection to a dead origin would live on until its idle timeout); h1/h2: nothing. */
void fy_origin_stream_abandon(fy_origin_stream_t *os);
/* Done with the attempt (safe when nothing is open, and while waiting for on_open): no more
 * callbacks; the connection goes back to its pool when `reusable`, else is closed; an open
 * stream is reset. Lent bytes stay valid until the next open or fy_origin_stream_free. */
void fy_origin_stream_close(fy_origin_stream_t *os, bool reusable);
/* After close: every buffer freed. */
void fy_origin_stream_free(fy_origin_stream_t *os);

#endif
