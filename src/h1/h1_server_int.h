/* Internals shared by the h1 server codec's files (h1_server.c: connection, buffers, timers
 * and I/O; h1_server_req.c: request heads and dispatch; h1_server_body.c: request bodies;
 * h1_server_resp.c: the response side). Not for use outside src/h1/.
 *
 * Thread rules: a connection (h1_conn_t) and its exchange belong to the worker whose loop
 * accepted it; every function here runs on that worker's loop thread, and none may be called
 * from another thread. The buffer pools are per thread. */
#ifndef FY_H1_H1_SERVER_INT_H
#define FY_H1_H1_SERVER_INT_H

#include "h1/h1_server.h"
#include "h1/h1_resp.h"
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/counters.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/pool.h"
#include "h1/h1_parse.h"
#include "http/protocol.h"
#include "net/listener_conf.h"
#include "net/sock.h"
#include "tls/tls.h"

enum timer_kind { T_HANDSHAKE, T_HEADER, T_BODY, T_KEEPALIVE, T_SEND, T_LINGER, T_IDLE };
/* A kept-alive connection that has waited this long for its next request gives back its
 * buffers, header array and TLS record buffers, then waits out the rest of the keep-alive
 * timeout. Not at once: a busy client's next request would take them all again, and a
 * sequential keep-alive request would pay ~6% (h1) to release and retake them. */
#define IDLE_RELEASE_MS 10

enum body_mode {
    B_NONE = 0, /* no (more) request body */
    B_LENGTH,   /* Content-Length bytes left in body_left */
    B_CHUNKED,  /* chunked decoder running */
    B_TUNNEL,   /* after 101: every byte until the client ends its side */
};

#define MAX_REFS 8
#define LINGER_MS 2000

/* What a request in progress needs beyond the connection (issue 19: an idle kept-alive
 * connection holds only its h1_conn_t): the parser, the exchange, body and response state.
 * From a per-thread pool (h1_server_req.c): taken when a request's first bytes are read, given
 * back with the buffers by idle_release (or at the close). Pipelined bytes keep it. */
typedef struct h1_busy {
    fy_h1_header_t *hdrs; /* limits->max_headers entries (pooled) */
    fy_h1_req_t req;

    /* request body */
    uint64_t body_left;
    fy_h1_chunked_t chunked;
    size_t body_pos; /* rbuf offset where unread body bytes start */
    size_t body_out; /* rbuf offset of decoded bytes handed to the handler, end */

    /* response: body references and file (their counts, on the hot path, are in h1_conn_t) */
    struct iovec refs[MAX_REFS];
    int file_fd;
    off_t file_off;
    char *fbuf; /* TLS: file bytes read for the next write */
    fy_exchange_t ex;
    fy_arena_t arena;
    char *arena_first; /* owned, from arena_pool while a request is in progress */
} h1_busy_t;

/* The peer's address: inet or inet6 (an accepted TCP connection); any other family keeps only
 * its sa_family. */
typedef union h1_addr {
    struct sockaddr sa;
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
} h1_addr_t;

/* The idle core: what a kept-alive connection holds between requests. */
typedef struct h1_conn {
    fy_conn_node_t node; /* in ctx->conns */
    fy_io_t io;
    fy_transport_t sock; /* plain transport (also the fd owner) */
    fy_transport_t *t;   /* active transport: &sock or TLS over it */
    fy_http_ctx_t *ctx;
    fy_loop_t *loop;
    h1_busy_t *b; /* the request in progress (NULL: idle, see h1_busy_t) */
    fy_timer_t timer;
    fy_defer_t defer;  /* proceed / next request / free, after the callback stack unwinds */
    fy_defer_t rdefer; /* read again: TLS holds decrypted bytes that epoll cannot signal */

    /* read side */
    char *rbuf;
    size_t rcap, rstart, rlen; /* unconsumed bytes are rbuf[rstart, rlen) */
    char *rbuf_prev;           /* the chunk a body outgrew: the request's head points into it */

    /* write side (what the hot path tests of the request part's output is kept here: one
       pointer less to follow per check) */
    char *wbuf;
    size_t wlen, wsent;
    size_t file_left;   /* of b->file_fd */
    size_t flen, fsent; /* of b->fbuf */
    int nrefs;          /* of b->refs */
    int body_mode;      /* enum body_mode of the request in progress */

    void *mitm_tunnel; /* fy_h1_conn_start: copied to every exchange's ex->tunnel */
    void (*mitm_tunnel_free)(void *);
    size_t mem_held;    /* what ferry_connection_memory_bytes has of this connection */
    size_t stream_held; /* ... and ferry_stream_memory_bytes of its exchange */
    unsigned requests;
    h1_addr_t remote;
    unsigned char timer_kind;

    /* connection state */
    bool rbuf_heap;   /* grown beyond a chunk: malloc'd */
    bool read_paused; /* not reading from the socket (body backpressure) */
    bool discarding;  /* reading and dropping the rest of a body nobody wanted */
    bool ex_active;   /* an exchange is in progress (then b is set) */
    bool handshaking;
    bool keepalive;
    bool in_read; /* inside on_readable: flush once at the end */
    bool closed;
    bool lingering;
    bool handed_off;  /* the fd and transport now belong to the h2 codec */
    bool tunnel;      /* 101 sent: raw bytes both ways until either side ends */
    bool in_spurious; /* readable while paused: EPOLLIN dropped until reading resumes */
    bool peer_eof;    /* the client half-closed (tunnel) */
    bool mem_dirty;   /* a buffer was taken since the last fy__h1_mem_sync */
    /* the exchange in progress (meaningful while b is set) */
    bool body_wanted;    /* handler asked for body and has not been given any yet */
    bool body_delivered; /* a slice is out at the handler (valid until it asks again) */
    bool continue_sent;
    bool head_written;
    bool res_chunked;
    bool res_no_body; /* HEAD, 204, 304 */
    bool res_final;   /* handler sent FINAL: exchange ends when the output is flushed */
    bool want_proceed;
} h1_conn_t;

/* Take the connection's request part (h1_busy_t) if it has none. */
void fy__h1_busy_get(h1_conn_t *c);
/* Give it back with what it holds (header array, arena, file buffer). */
void fy__h1_busy_put(h1_conn_t *c);

/* Count what the connection holds now (buffers, header array, arena, TLS) in the memory
 * gauges; past limits.connection-memory it is read-paused and closed (returns true then). */
bool fy__h1_mem_sync(h1_conn_t *c);

static inline void fy__h1_set_timer(h1_conn_t *c, int kind)
{
    const fy_http_limits_t *l = c->ctx->limits;
    uint64_t ms;
    switch (kind) {
    case T_HANDSHAKE:
        ms = fy_tls_ctx_handshake_timeout(c->ctx->tls);
        break;
    case T_HEADER:
        ms = l->header_timeout_ms;
        break;
    case T_BODY:
        ms = l->body_timeout_ms;
        break;
    case T_KEEPALIVE:
        ms = l->keepalive_timeout_ms;
        break;
    case T_IDLE:
        ms = l->keepalive_timeout_ms < IDLE_RELEASE_MS ? l->keepalive_timeout_ms : IDLE_RELEASE_MS;
        break;
    case T_SEND:
        ms = l->send_timeout_ms;
        break;
    default:
        ms = LINGER_MS;
        break;
    }
    c->timer_kind = kind;
    fy_timer_start(c->loop, &c->timer, ms);
}

static inline void fy__h1_wbuf_get(h1_conn_t *c)
{
    if (c->wbuf) return;
    c->wbuf = fy_pool_get(fy_chunk_pool());
    c->wlen = c->wsent = 0;
    c->mem_dirty = true;
}

static inline bool fy__h1_output_pending(const h1_conn_t *c)
{
    return c->wlen > c->wsent || c->nrefs > 0 || c->file_left > 0 || c->flen > c->fsent;
}

static inline size_t fy__h1_wfree(const h1_conn_t *c)
{
    return FY_CHUNK_SIZE - c->wlen;
}

/* ---- shared between the h1_server*.c files ---- */

extern const fy_sink_ops_t fy__h1_sink;
void fy__h1_rbuf_release(h1_conn_t *c);
int fy__h1_detach(fy_exchange_t *ex, int *fd, char *buf, size_t cap, size_t *len);
void fy__h1_handoff_h2(h1_conn_t *c, const fy_h2_upgrade_t *up);
/* Idle between requests (nothing to write, no request byte buffered, no exchange): give the
 * buffers, the request part and the TLS record buffers back (else nothing). */
void fy__h1_idle_release(h1_conn_t *c);
void fy__h1_conn_close(h1_conn_t *c);
void fy__h1_conn_linger(h1_conn_t *c);
void fy__h1_update_events(h1_conn_t *c);
void fy__h1_wbuf_compact(h1_conn_t *c);
void fy__h1_fail_conn(h1_conn_t *c, const char *why);
void fy__h1_proceed_cb(fy_defer_t *d);
void fy__h1_flush(h1_conn_t *c);
void fy__h1_reject(h1_conn_t *c, int status, const char *why);
void fy__h1_refused(h1_conn_t *c);
void fy__h1_process(h1_conn_t *c);
void fy__h1_end_exchange(h1_conn_t *c);
void fy__h1_deliver_body(h1_conn_t *c);
void fy__h1_read_body(fy_exchange_t *ex);

#endif
