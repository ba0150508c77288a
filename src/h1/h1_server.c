/* HTTP/1.1 server codec.
 *
 * One conn = one transport + one embedded exchange (h1 answers requests in order, so pipelined
 * requests wait in the read buffer until the previous response is done).
 *
 * Buffers: `rbuf` holds the request head (the exchange's header slices point into it) and then
 * body bytes; `wbuf` collects response heads and small bodies so that a whole keep-alive
 * response, or several pipelined ones, leave in one write. Large bodies are referenced, not
 * copied (`refs`), and files go out with sendfile on plain sockets. Both buffers go back to
 * the worker's chunk pool when the connection is idle.
 */
#include "h1/h1_server.h"
#include "h1/h1_resp.h"

#include <errno.h>
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
static const char *const timer_names[] = {"handshake",       "header read", "body read",
                                          "keep-alive idle", "send",        "lingering close",
                                          "idle release"};
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
#define DISCARD_MAX (1u << 20) /* unread body we drain to keep the connection; more: close */

typedef struct h1_conn {
    fy_conn_node_t node; /* in ctx->conns */
    fy_io_t io;
    fy_transport_t sock; /* plain transport (also the fd owner) */
    fy_transport_t *t;   /* active transport: &sock or TLS over it */
    fy_http_ctx_t *ctx;
    fy_loop_t *loop;
    struct sockaddr_storage remote;
    fy_timer_t timer;
    int timer_kind;
    fy_defer_t defer;  /* proceed / next request / free, after the callback stack unwinds */
    fy_defer_t rdefer; /* read again: TLS holds decrypted bytes that epoll cannot signal */

    /* read side */
    char *rbuf;
    size_t rcap, rstart, rlen; /* unconsumed bytes are rbuf[rstart, rlen) */
    bool rbuf_heap;            /* grown beyond a chunk: malloc'd */
    char *rbuf_prev;           /* the chunk a body outgrew: the request's head points into it */
    fy_h1_header_t *hdrs;      /* limits->max_headers entries (owned) */
    fy_h1_req_t req;
    bool read_paused; /* not reading from the socket (body backpressure) */

    /* request body */
    int body_mode;
    uint64_t body_left;
    fy_h1_chunked_t chunked;
    size_t body_pos;     /* rbuf offset where unread body bytes start */
    size_t body_out;     /* rbuf offset of decoded bytes handed to the handler, end */
    bool body_wanted;    /* handler asked for body and has not been given any yet */
    bool body_delivered; /* a slice is out at the handler (valid until it asks again) */
    bool discarding;     /* reading and dropping the rest of a body nobody wanted */
    bool continue_sent;

    /* write side */
    char *wbuf;
    size_t wlen, wsent;
    struct iovec refs[MAX_REFS];
    int nrefs;
    int file_fd;
    off_t file_off;
    size_t file_left;
    char *fbuf; /* TLS: file bytes read for the next write */
    size_t flen, fsent;

    /* exchange */
    fy_exchange_t ex;
    fy_arena_t arena;
    bool ex_active;
    bool head_written;
    bool res_chunked;
    bool res_no_body; /* HEAD, 204, 304 */
    bool res_final;   /* handler sent FINAL: exchange ends when the output is flushed */
    bool want_proceed;
    unsigned requests;

    /* connection state */
    bool handshaking;
    bool keepalive;
    bool in_read; /* inside on_readable: flush once at the end */
    bool closed;
    bool lingering;
    bool handed_off;   /* the fd and transport now belong to the h2 codec */
    bool tunnel;       /* 101 sent: raw bytes both ways until either side ends */
    bool in_spurious;  /* readable while paused: EPOLLIN dropped until reading resumes */
    bool peer_eof;     /* the client half-closed (tunnel) */
    void *mitm_tunnel; /* fy_h1_conn_start: copied to every exchange's ex->tunnel */
    void (*mitm_tunnel_free)(void *);
    char *arena_first; /* owned, from arena_pool while a request is in progress */
} h1_conn_t;

#define ARENA_FIRST 2048 /* the arena's first block: most requests need no other */

static void conn_close(h1_conn_t *c);
static void node_drain(fy_conn_node_t *n);
static void node_close(fy_conn_node_t *n);
static void on_io(fy_io_t *io, uint32_t ev);
static void process(h1_conn_t *c);
static void flush(h1_conn_t *c);
static void h1_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state);
static void h1_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state);
static void h1_read_body(fy_exchange_t *ex);
static void deliver_body(h1_conn_t *c);
static void refused(h1_conn_t *c);

static void h1_send_informational(fy_exchange_t *ex, int status, const fy_headers_t *hs);
static int h1_detach(fy_exchange_t *ex, int *fd, char *buf, size_t cap, size_t *len);
static void reread_cb(fy_defer_t *d);

static const fy_sink_ops_t h1_sink = {
    .name = "h1",
    .send = h1_send,
    .send_file = h1_send_file,
    .read_body = h1_read_body,
    .send_informational = h1_send_informational,
    .detach = h1_detach,
};

static void set_timer(h1_conn_t *c, int kind)
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

static void idle_release(h1_conn_t *c);

static void on_timer(fy_timer_t *t)
{
    h1_conn_t *c = t->data;
    if (c->timer_kind == T_IDLE) {
        const fy_http_limits_t *l = c->ctx->limits;
        idle_release(c);
        c->timer_kind = T_KEEPALIVE;
        fy_timer_start(c->loop, &c->timer,
                       l->keepalive_timeout_ms > IDLE_RELEASE_MS
                           ? l->keepalive_timeout_ms - IDLE_RELEASE_MS
                           : 0);
        return;
    }
    if (c->timer_kind != T_LINGER) {
        char a[64];
        fy_info("client %s: %s timeout, closing connection",
                fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a),
                timer_names[c->timer_kind]);
    }
    if (c->ex_active && c->ex.producer && c->ex.producer->stop && !c->res_final)
        c->ex.producer->stop(&c->ex);
    c->ex_active = false;
    conn_close(c);
}

/* ---- buffers ---- */

static void rbuf_get(h1_conn_t *c)
{
    if (c->rbuf) return;
    c->rbuf = fy_pool_get(fy_chunk_pool());
    c->rcap = FY_CHUNK_SIZE;
    c->rstart = c->rlen = 0;
}

static void rbuf_release(h1_conn_t *c)
{
    if (c->rbuf_prev) fy_pool_put(fy_chunk_pool(), c->rbuf_prev);
    c->rbuf_prev = NULL;
    if (!c->rbuf) return;
    if (c->rbuf_heap)
        free(c->rbuf);
    else
        fy_pool_put(fy_chunk_pool(), c->rbuf);
    c->rbuf = NULL;
    c->rbuf_heap = false;
    c->rcap = c->rstart = c->rlen = 0;
}

static void wbuf_get(h1_conn_t *c)
{
    if (c->wbuf) return;
    c->wbuf = fy_pool_get(fy_chunk_pool());
    c->wlen = c->wsent = 0;
}

static bool output_pending(const h1_conn_t *c)
{
    return c->wlen > c->wsent || c->nrefs > 0 || c->file_left > 0 || c->flen > c->fsent;
}

/* The header array of a request in progress (limits.max_headers entries), from a per-thread
 * pool: an idle connection holds none. A listener whose limit differs from the pool's gets
 * malloc'd ones. */
static _Thread_local fy_pool_t hdr_pool;

static size_t hdrs_size(const h1_conn_t *c)
{
    return sizeof(fy_h1_header_t) * (size_t)c->ctx->limits->max_headers;
}

static void hdrs_get(h1_conn_t *c)
{
    if (c->hdrs) return;
    size_t sz = hdrs_size(c);
    if (hdr_pool.size == 0) fy_pool_init(&hdr_pool, sz, 64);
    c->hdrs = hdr_pool.size == sz ? fy_pool_get(&hdr_pool) : fy_xmalloc(sz);
}

/* The arena's first block, from a per-thread pool: an idle connection holds none. */
static _Thread_local fy_pool_t arena_pool;

/* What a request in progress needs beyond the connection: the header array and the arena's
 * first block. Taken when a request's first byte is parsed (or a request-less error is
 * answered), given back by idle_release. */
static void req_mem_get(h1_conn_t *c)
{
    hdrs_get(c);
    if (c->arena_first) return;
    if (arena_pool.size == 0) fy_pool_init(&arena_pool, ARENA_FIRST, 64);
    c->arena_first = fy_pool_get(&arena_pool);
    fy_arena_init(&c->arena, c->arena_first, ARENA_FIRST, 4096);
}

static void arena_put(h1_conn_t *c)
{
    fy_arena_free(&c->arena);
    if (c->arena_first) fy_pool_put(&arena_pool, c->arena_first);
    c->arena_first = NULL;
    fy_arena_init(&c->arena, NULL, 0, 4096);
}

static void hdrs_put(h1_conn_t *c)
{
    if (!c->hdrs) return;
    if (hdr_pool.size == hdrs_size(c))
        fy_pool_put(&hdr_pool, c->hdrs);
    else
        free(c->hdrs);
    c->hdrs = NULL;
}

/* Idle between requests (nothing to write, no request byte buffered, no exchange): give the
 * buffers, the header array and the TLS record buffers back, so that a kept-alive connection
 * holds none while it waits (issue 19: both chunks were kept once a response had been queued
 * from the read loop). Called by the T_IDLE timer. */
static void idle_release(h1_conn_t *c)
{
    if (c->ex_active || c->discarding || c->closed || output_pending(c)) return;
    if (c->rbuf && c->rstart != c->rlen) return;
    if (c->t != &c->sock) fy_tls_transport_idle(c->t);
    rbuf_release(c);
    if (c->wbuf) fy_pool_put(fy_chunk_pool(), c->wbuf);
    c->wbuf = NULL;
    c->wlen = c->wsent = 0;
    if (c->fbuf) fy_pool_put(fy_chunk_pool(), c->fbuf);
    c->fbuf = NULL;
    hdrs_put(c);
    arena_put(c);
}

/* ---- connection life ---- */

int fy_h1_conn_accept(fy_http_ctx_t *ctx, int fd, const struct sockaddr *sa, socklen_t salen)
{
    h1_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return -ENOMEM;
    }
    c->ctx = ctx;
    c->loop = ctx->loop;
    memcpy(&c->remote, sa, salen < sizeof c->remote ? salen : sizeof c->remote);
    fy_sock_transport_init(&c->sock, fd);
    c->t = &c->sock;
    c->file_fd = -1;
    c->keepalive = true;
    fy_timer_init(&c->timer, on_timer, c);
    fy_arena_init(&c->arena, NULL, 0, 4096); /* its first block: req_mem_get */
    c->io.fd = fd;
    c->io.cb = on_io;
    c->io.data = c;
    c->node.drain = node_drain;
    c->node.close = node_close;
    fy_list_insert_tail(&ctx->conns, &c->node.link);
    ctx->nconns++;
    fy_counters_conn_open(FY_CPROTO_H1);
    if (ctx->tls) {
        c->t = fy_tls_transport_new(ctx->tls, fd);
        if (!c->t) {
            c->t = &c->sock;
            conn_close(c);
            return -ENOMEM;
        }
        c->handshaking = true;
        set_timer(c, T_HANDSHAKE);
    } else {
        set_timer(c, T_HEADER);
    }
    if (fy_io_set(c->loop, &c->io, EPOLLIN) < 0) {
        conn_close(c);
        return -EIO;
    }
    /* the client usually sent its first bytes already (TCP_DEFER_ACCEPT is not set):
       wait for readiness anyway; one epoll round-trip is cheaper than a failed read */
    return 0;
}

int fy_h1_conn_start(fy_http_ctx_t *ctx, int fd, fy_transport_t *t, const struct sockaddr *sa,
                     socklen_t salen, void *tunnel, void (*tunnel_free)(void *))
{
    /* the listener's context is plain: accept() would start no handshake */
    int r = fy_h1_conn_accept(ctx, fd, sa, salen);
    if (r < 0) {
        if (t) t->ops->destroy(t);
        if (tunnel_free) tunnel_free(tunnel);
        return r;
    }
    h1_conn_t *c = fy_container_of(ctx->conns.prev, h1_conn_t, node.link);
    if (t) c->t = t;
    c->mitm_tunnel = tunnel;
    c->mitm_tunnel_free = tunnel_free;
    /* the client may have sent its request with its last handshake flight */
    c->rdefer.cb = reread_cb;
    c->rdefer.data = c;
    fy_defer(c->loop, &c->rdefer);
    return 0;
}

/* A CONNECT's connection goes to the handler (handler/mitm.c), as the h2 handoff does. */
static int h1_detach(fy_exchange_t *ex, int *fd, char *buf, size_t cap, size_t *len)
{
    h1_conn_t *c = ex->codec;
    size_t have = c->rbuf ? c->rlen - c->rstart : 0;
    if (c->closed || c->t != &c->sock || output_pending(c) || have > cap || c->head_written)
        return -1;
    if (have) memcpy(buf, c->rbuf + c->rstart, have);
    *len = have;
    *fd = c->sock.fd;
    ex->res.status = 200;
    fy_exchange_done(ex);
    c->ex_active = false;
    c->handed_off = true;
    conn_close(c);
    return 0;
}

static void free_conn(fy_defer_t *d)
{
    h1_conn_t *c = d->data;
    fy_http_ctx_t *ctx = c->ctx;
    arena_put(c);
    hdrs_put(c);
    free(c);
    if (ctx->on_conn_closed) ctx->on_conn_closed(ctx);
}

/* The client speaks HTTP/2 (ALPN h2, or the h2c preface): give the fd, the transport and
 * the bytes read so far to the h2 codec, and go away quietly. */
static void handoff_h2(h1_conn_t *c, const fy_h2_upgrade_t *up)
{
    fy_http_ctx_t *ctx = c->ctx;
    fy_transport_t *tls = c->t != &c->sock ? c->t : NULL;
    const char *data = c->rbuf ? c->rbuf + c->rstart : NULL;
    size_t len = c->rbuf ? c->rlen - c->rstart : 0;
    fy_io_set(c->loop, &c->io, 0);
    c->handed_off = true;
    ctx->start_h2(ctx, c->sock.fd, tls, (struct sockaddr *)&c->remote, sizeof c->remote, data, len,
                  up);
    c->t = &c->sock;
    c->ex_active = false; /* an upgraded request lives on as h2 stream 1 */
    conn_close(c);
}

/* `Upgrade: h2c` with HTTP2-Settings on a bodiless request, on a listener that serves h2c and
 * with nothing of ours in flight: continue in HTTP/2 (RFC 7540 §3.2). Returns true if the
 * connection was handed over. Anything else about the request keeps it on HTTP/1.1; so does an
 * absolute-form (proxy) request: the upgrade is for the origin, and stream 1 would lose the
 * request's absolute URI (curl --http2 -x sends one). */
static bool try_upgrade_h2c(h1_conn_t *c)
{
    fy_http_ctx_t *ctx = c->ctx;
    if (!c->req.conn_upgrade || c->ex.req.absolute_form || ctx->is_tls ||
        !(ctx->protocols & FY_PROTO_H2C) || !ctx->start_h2 || c->body_mode != B_NONE ||
        output_pending(c) || c->ex.req.version < 11)
        return false;
    const fy_headers_t *hs = &c->ex.req.headers;
    const fy_header_t *up = FY_HDR_FIND(hs, "upgrade"), *cn = FY_HDR_FIND(hs, "connection");
    const fy_header_t *st = FY_HDR_FIND(hs, "http2-settings");
    if (!up || !st || !cn || !fy_str_list_has(up->value, "h2c", 3) ||
        !fy_str_list_has(cn->value, "http2-settings", 14))
        return false;
    unsigned char settings[1024];
    int n = fy_base64url_decode(st->value.p, st->value.len, settings, sizeof settings);
    if (n < 0 || n % 6) return false;
    fy_h2_upgrade_t u = {&c->ex.req, settings, (size_t)n};
    handoff_h2(c, &u);
    return true;
}

static void conn_close(h1_conn_t *c)
{
    if (c->closed) return;
    c->closed = true;
    if (c->ex_active && c->ex.producer && c->ex.producer->stop && !c->res_final)
        c->ex.producer->stop(&c->ex);
    if (c->ex_active && c->ex.res.status) {
        c->ex.error = c->ex.error ? c->ex.error : "connection closed";
        fy_exchange_done(&c->ex);
    }
    c->ex_active = false;
    fy_arena_reset(&c->arena);
    fy_timer_stop(c->loop, &c->timer);
    fy_io_set(c->loop, &c->io, 0);
    if (!c->handed_off) {
        if (c->t != &c->sock) c->t->ops->destroy(c->t);
        close(c->sock.fd);
    }
    if (c->mitm_tunnel_free) c->mitm_tunnel_free(c->mitm_tunnel);
    c->mitm_tunnel_free = NULL;
    rbuf_release(c);
    if (c->wbuf) fy_pool_put(fy_chunk_pool(), c->wbuf);
    c->wbuf = NULL;
    if (c->fbuf) fy_pool_put(fy_chunk_pool(), c->fbuf);
    c->fbuf = NULL;
    fy_list_remove(&c->node.link);
    c->ctx->nconns--;
    fy_counters_conn_close(FY_CPROTO_H1);
    fy_defer_cancel(c->loop, &c->defer);
    fy_defer_cancel(c->loop, &c->rdefer);
    c->defer.cb = free_conn;
    c->defer.data = c;
    fy_defer(c->loop, &c->defer);
}

/* Close after the peer has read our last response: half-close, then drain its input for a
 * while, so that a reset does not destroy the response it has not read yet (nginx's
 * lingering close). */
static void conn_linger(h1_conn_t *c)
{
    if (c->closed) return;
    if (c->t->ops->shutdown(c->t) < 0) {
        conn_close(c);
        return;
    }
    c->lingering = true;
    c->read_paused = false;
    fy_io_set(c->loop, &c->io, EPOLLIN);
    set_timer(c, T_LINGER);
}

static void on_readable(h1_conn_t *c);

static void reread_cb(fy_defer_t *d)
{
    h1_conn_t *c = d->data;
    if (!c->closed && !c->read_paused) on_readable(c);
}

static void update_events(h1_conn_t *c)
{
    if (!c->read_paused && !c->handshaking && c->t->ops->pending(c->t)) {
        c->rdefer.cb = reread_cb;
        c->rdefer.data = c;
        fy_defer(c->loop, &c->rdefer);
    }
    uint32_t ev = 0;
    if (c->t->want & FY_WANT_WRITE) ev |= EPOLLOUT;
    if (output_pending(c) && c->t->want == 0) ev |= EPOLLOUT;
    if (!c->read_paused || (c->t->want & FY_WANT_READ && c->handshaking)) {
        ev |= EPOLLIN;
        c->in_spurious = false;
    } else if ((c->io.events & EPOLLIN) && !c->in_spurious) {
        /* paused, but interest is dropped lazily, only once the client actually sends while
           we wait (nginx does the same): an exchange waiting on an origin costs no
           epoll_ctl pair */
        ev |= EPOLLIN;
    }
    if (fy_io_set(c->loop, &c->io, ev) < 0) conn_close(c);
}

/* ---- response serialization ---- */

static char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}
#define PUT_LIT(p, lit) put((p), (lit), sizeof(lit) - 1)

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int i = 0;
    do {
        tmp[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (i) *p++ = tmp[--i];
    return p;
}

static char *put_hex(char *p, uint64_t v)
{
    static const char hx[] = "0123456789abcdef";
    char tmp[20];
    int i = 0;
    do {
        tmp[i++] = hx[v & 15];
        v >>= 4;
    } while (v);
    while (i) *p++ = tmp[--i];
    return p;
}

static size_t wfree(const h1_conn_t *c)
{
    return FY_CHUNK_SIZE - c->wlen;
}

/* Compact the write buffer when the already-sent prefix is in the way. */
static void wbuf_compact(h1_conn_t *c)
{
    if (c->wsent == 0) return;
    memmove(c->wbuf, c->wbuf + c->wsent, c->wlen - c->wsent);
    c->wlen -= c->wsent;
    c->wsent = 0;
}

/* Heads over the write buffer's size are not something a handler should produce: bounded. */
static bool write_head(h1_conn_t *c)
{
    fy_exchange_t *ex = &c->ex;
    fy_response_t *res = &ex->res;
    int status = res->status;
    size_t need = 160;
    for (size_t i = 0; i < res->headers.n; i++)
        need += res->headers.v[i].name.len + res->headers.v[i].value.len + 4;
    wbuf_compact(c);
    if (need > wfree(c)) {
        if (c->wlen == 0) return false; /* the head alone is too big */
        return false;
    }
    if (c->requests + 1 >= (unsigned)c->ctx->limits->keepalive_requests || c->ctx->draining)
        c->keepalive = false;
    if (__builtin_expect(ex->refused, 0)) refused(c);
    /* 101 to an Upgrade request: the connection becomes a tunnel for this exchange */
    bool tunnel = status == 101 && ex->req.protocol.len && c->req.conn_upgrade;
    c->res_no_body = !tunnel && (ex->req.method_id == FY_M_HEAD || status == 204 || status == 304 ||
                                 (status >= 100 && status < 200));
    c->res_chunked = false;
    char *p = c->wbuf + c->wlen;
    p = PUT_LIT(p, "HTTP/1.1 ");
    if (status >= 100 && status <= 999) {
        *p++ = (char)('0' + status / 100);
        *p++ = (char)('0' + status / 10 % 10);
        *p++ = (char)('0' + status % 10);
    }
    *p++ = ' ';
    const char *reason = fy_http_reason(status);
    p = put(p, reason, strlen(reason));
    p = PUT_LIT(p, "\r\nServer: ferry\r\nDate: ");
    p = put(p, fy_http_date(c->loop->now_sec), 29);
    p = PUT_LIT(p, "\r\n");
    if (status == 204 || status == 304 || (status >= 100 && status < 200)) {
        /* no framing headers */
    } else if (res->content_length >= 0) {
        p = PUT_LIT(p, "Content-Length: ");
        p = put_u64(p, (uint64_t)res->content_length);
        p = PUT_LIT(p, "\r\n");
    } else if (ex->req.version >= 11) {
        if (!c->res_no_body) c->res_chunked = true;
        p = PUT_LIT(p, "Transfer-Encoding: chunked\r\n");
    } else {
        c->keepalive = false; /* HTTP/1.0 with unknown length: delimited by close */
    }
    for (size_t i = 0; i < res->headers.n; i++) {
        const fy_header_t *h = &res->headers.v[i];
        if (tunnel && (fy_str_ieq(h->name, "connection", 10) || fy_str_ieq(h->name, "upgrade", 7)))
            continue;
        /* canonical case, except for intercepted traffic, which stays as the origin sent it */
        p = ex->tunnel || c->ctx->forward_proxy ? put(p, h->name.p, h->name.len)
                                                : fy_h1_put_field_name(p, h->name.p, h->name.len);
        p = PUT_LIT(p, ": ");
        p = put(p, h->value.p, h->value.len);
        p = PUT_LIT(p, "\r\n");
    }
    if (tunnel) {
        /* hop-by-hop: ours to write, whatever the handler had */
        p = PUT_LIT(p, "Connection: Upgrade\r\nUpgrade: ");
        p = put(p, ex->req.protocol.p, ex->req.protocol.len);
        p = PUT_LIT(p, "\r\n");
        c->tunnel = true;
        c->keepalive = false;
        c->body_mode = B_TUNNEL;
    } else if (!c->keepalive)
        p = PUT_LIT(p, "Connection: close\r\n");
    else if (ex->req.version == 10)
        p = PUT_LIT(p, "Connection: keep-alive\r\n");
    p = PUT_LIT(p, "\r\n");
    c->wlen = (size_t)(p - c->wbuf);
    c->head_written = true;
    ex->head_sent = true;
    return true;
}

/* Body pieces up to this size are copied into the write buffer (so a head and a small body,
 * or many pipelined responses, leave in one write); larger ones are referenced and written
 * from the handler's buffer with writev (a proxied 64 KiB body is not copied twice). */
#define COPY_MAX 4096

/* Queue body bytes: small pieces copied while they fit in the write buffer, others referenced. */
static bool queue_data(h1_conn_t *c, const struct iovec *bufs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = bufs[i].iov_len;
        if (len == 0) continue;
        if (c->nrefs == 0 && len <= COPY_MAX && len <= wfree(c)) {
            memcpy(c->wbuf + c->wlen, bufs[i].iov_base, len);
            c->wlen += len;
        } else {
            if (c->nrefs == MAX_REFS) return false;
            c->refs[c->nrefs++] = bufs[i];
        }
    }
    return true;
}

/* small framing bytes after references must stay ordered: they become references too */
static bool queue_bytes(h1_conn_t *c, const char *s, size_t len, char *scratch)
{
    struct iovec iov = {(void *)s, len};
    if (c->nrefs == 0) return queue_data(c, &iov, 1);
    memcpy(scratch, s, len);
    iov.iov_base = scratch;
    return queue_data(c, &iov, 1);
}

static void end_exchange(h1_conn_t *c);

static void fail_conn(h1_conn_t *c, const char *why)
{
    if (c->ex_active) c->ex.error = why;
    conn_close(c);
}

static void h1_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state)
{
    h1_conn_t *c = ex->codec;
    if (c->closed || c->res_final) return;
    c->want_proceed = false;
    if (state == FY_SEND_ERROR) {
        /* the response can't be completed: the client must see a truncated message */
        c->keepalive = false;
        fail_conn(c, ex->error ? ex->error : "handler error");
        return;
    }
    wbuf_get(c);
    if (!c->head_written) {
        /* a body nobody will read decides whether the connection can be kept */
        if (c->body_mode != B_NONE && !c->body_delivered && !c->body_wanted) {
            bool nothing_read = c->ex.body_received == 0 && c->rlen == c->body_pos;
            if ((c->ex.req.expect_continue && !c->continue_sent && nothing_read) ||
                (c->body_mode == B_LENGTH && c->body_left > DISCARD_MAX))
                c->keepalive = false;
        }
        if (!write_head(c)) {
            fy_error("response head too large");
            fail_conn(c, "response head too large");
            return;
        }
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += bufs[i].iov_len;
    ex->bytes_sent += total;
    if (!c->res_no_body) {
        char *scratch = fy_arena_alloc(ex->arena, 32);
        if (c->res_chunked && total) {
            char *p = scratch;
            p = put_hex(p, total);
            p = PUT_LIT(p, "\r\n");
            if (!queue_bytes(c, scratch, (size_t)(p - scratch), scratch)) goto overflow;
        }
        if (!queue_data(c, bufs, n)) goto overflow;
        if (c->res_chunked && total) {
            if (!queue_bytes(c, "\r\n", 2, fy_arena_alloc(ex->arena, 16))) goto overflow;
        }
        if (c->res_chunked && state == FY_SEND_FINAL) {
            if (ex->res_trailers.n == 0) {
                if (!queue_bytes(c, "0\r\n\r\n", 5, fy_arena_alloc(ex->arena, 16))) goto overflow;
            } else {
                size_t need = 5;
                for (size_t i = 0; i < ex->res_trailers.n; i++)
                    need += ex->res_trailers.v[i].name.len + ex->res_trailers.v[i].value.len + 4;
                char *t = fy_arena_alloc(ex->arena, need), *p = t;
                p = PUT_LIT(p, "0\r\n");
                for (size_t i = 0; i < ex->res_trailers.n; i++) {
                    const fy_header_t *h = &ex->res_trailers.v[i];
                    p = put(p, h->name.p, h->name.len);
                    p = PUT_LIT(p, ": ");
                    p = put(p, h->value.p, h->value.len);
                    p = PUT_LIT(p, "\r\n");
                }
                p = PUT_LIT(p, "\r\n");
                struct iovec iov = {t, (size_t)(p - t)};
                if (c->nrefs == 0 && iov.iov_len <= wfree(c)) {
                    queue_data(c, &iov, 1);
                } else if (c->nrefs < MAX_REFS) {
                    c->refs[c->nrefs++] = iov;
                } else {
                    goto overflow;
                }
            }
        }
    }
    if (state == FY_SEND_FINAL) {
        c->res_final = true;
        if (c->in_read && c->nrefs == 0 && c->file_left == 0) {
            /* everything is copied into wbuf: the exchange can end now, and the read loop
               goes on with the next pipelined request; one write carries all responses */
            end_exchange(c);
            return;
        }
    } else {
        c->want_proceed = true;
    }
    if (!c->in_read) flush(c);
    return;
overflow:
    fy_error("h1: too many buffers in one send");
    fail_conn(c, "too many buffers in one send");
}

static void h1_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state)
{
    h1_conn_t *c = ex->codec;
    if (c->closed || c->res_final) return;
    if (c->res_chunked || c->res_no_body || len == 0) {
        /* chunked framing of a file, or no body: fall back through the generic path */
        if (c->res_no_body || len == 0) {
            h1_send(ex, NULL, 0, state);
            return;
        }
    }
    c->want_proceed = false;
    wbuf_get(c);
    if (!c->head_written && !write_head(c)) {
        fail_conn(c, "response head too large");
        return;
    }
    if (c->res_no_body) {
        h1_send(ex, NULL, 0, state);
        return;
    }
    if (c->res_chunked) {
        /* files are sent with a known length by our handlers; keep it simple and correct */
        char *s = fy_arena_alloc(ex->arena, 32), *p = s;
        p = put_hex(p, len);
        p = PUT_LIT(p, "\r\n");
        queue_bytes(c, s, (size_t)(p - s), s);
    }
    c->file_fd = fd;
    c->file_off = off;
    c->file_left = len;
    ex->bytes_sent += len;
    if (c->res_chunked) {
        /* the chunk's CRLF and the last chunk follow the file: sent at completion */
        fy_error("h1: chunked file bodies are not supported");
        fail_conn(c, "chunked file body");
        return;
    }
    if (state == FY_SEND_FINAL)
        c->res_final = true;
    else
        c->want_proceed = true;
    if (!c->in_read) flush(c);
}

static void proceed_cb(fy_defer_t *d)
{
    h1_conn_t *c = d->data;
    if (c->closed) return;
    if (c->want_proceed && !output_pending(c) && c->ex.producer && c->ex.producer->proceed) {
        c->want_proceed = false;
        c->ex.producer->proceed(&c->ex);
    } else if (!c->ex_active && !c->read_paused) {
        c->in_read = true; /* batch the responses of pipelined requests into one write */
        process(c);
        c->in_read = false;
        if (c->closed) return;
        if (output_pending(c))
            flush(c);
        else
            update_events(c);
    }
}

/* Write what is queued. Calls back into the exchange through deferred callbacks only. */
static void flush(h1_conn_t *c)
{
    while (output_pending(c)) {
        ssize_t w;
        if (c->wlen > c->wsent || c->nrefs) {
            struct iovec iov[MAX_REFS + 1];
            int n = 0;
            if (c->wlen > c->wsent)
                iov[n++] = (struct iovec){c->wbuf + c->wsent, c->wlen - c->wsent};
            for (int i = 0; i < c->nrefs; i++) iov[n++] = c->refs[i];
            w = c->t->ops->writev(c->t, iov, n);
            if (w > 0) {
                size_t left = (size_t)w;
                size_t a = c->wlen - c->wsent;
                if (left >= a) {
                    left -= a;
                    c->wsent = c->wlen = 0;
                } else {
                    c->wsent += left;
                    left = 0;
                }
                int i = 0;
                while (i < c->nrefs && left >= c->refs[i].iov_len) left -= c->refs[i++].iov_len;
                if (i) {
                    memmove(c->refs, c->refs + i, (size_t)(c->nrefs - i) * sizeof c->refs[0]);
                    c->nrefs -= i;
                }
                if (c->nrefs && left) {
                    c->refs[0].iov_base = (char *)c->refs[0].iov_base + left;
                    c->refs[0].iov_len -= left;
                }
            }
        } else if (c->t->ops->sendfile) {
            w = c->t->ops->sendfile(c->t, c->file_fd, &c->file_off, c->file_left);
            if (w > 0) c->file_left -= (size_t)w;
        } else {
            /* TLS: read the file in chunks and write them */
            if (c->flen == c->fsent) {
                if (!c->fbuf) c->fbuf = fy_pool_get(fy_chunk_pool());
                size_t want = c->file_left < FY_CHUNK_SIZE ? c->file_left : FY_CHUNK_SIZE;
                ssize_t r = pread(c->file_fd, c->fbuf, want, c->file_off);
                if (r <= 0) {
                    fy_error("read file: %s", r < 0 ? strerror(errno) : "file shrank");
                    fail_conn(c, "file read error");
                    return;
                }
                c->flen = (size_t)r;
                c->fsent = 0;
            }
            struct iovec iov = {c->fbuf + c->fsent, c->flen - c->fsent};
            w = c->t->ops->writev(c->t, &iov, 1);
            if (w > 0) {
                c->fsent += (size_t)w;
                if (c->fsent == c->flen) {
                    c->file_off += (off_t)c->flen;
                    c->file_left -= c->flen;
                    c->flen = c->fsent = 0;
                }
            }
        }
        if (w == 0) {
            /* blocked: wait for writability under the send timeout */
            set_timer(c, T_SEND);
            update_events(c);
            return;
        }
        if (w < 0) {
            if (w != FY_EEOF && w != -EPIPE && w != -ECONNRESET)
                fy_info("write to client failed: %s", w == FY_ETLS ? "tls" : strerror((int)-w));
            fail_conn(c, "client write error");
            return;
        }
    }
    c->t->want &= ~FY_WANT_WRITE;
    if (c->file_fd >= 0 && c->file_left == 0) c->file_fd = -1; /* the handler owns the fd */
    if (c->res_final && c->ex_active) {
        end_exchange(c);
        return;
    }
    if (c->want_proceed) {
        c->defer.cb = proceed_cb;
        c->defer.data = c;
        fy_defer(c->loop, &c->defer);
    }
    if (!c->ex_active && !c->discarding && !c->keepalive) {
        conn_linger(c);
        return;
    }
    update_events(c);
}

/* ---- request side ---- */

/* An answer that ends the connection: a request the codec cannot read on (parse errors), or a
 * refusal of the protocol stage (ex->refused, http/protocol.h). */
static void reject(h1_conn_t *c, int status, const char *why)
{
    c->body_mode = B_NONE;
    if (!c->ex_active) {
        /* a minimal exchange so the error goes through the normal writer and access log */
        req_mem_get(c);
        fy_exchange_t *ex = &c->ex;
        memset(ex, 0, sizeof *ex);
        ex->arena = &c->arena;
        ex->ctx = c->ctx;
        ex->codec = c;
        ex->sink = &h1_sink;
        ex->remote = (struct sockaddr *)&c->remote;
        ex->start_ms = c->loop->now_ms;
        ex->req.version = 11;
        ex->req.method = FY_STR_LIT("-");
        ex->req.target = FY_STR_LIT("-");
        c->ex_active = true;
        c->head_written = c->res_final = c->want_proceed = false;
    }
    c->read_paused = true;
    fy_exchange_refuse(&c->ex, status, why);
}

/* The head of a refusal is being written: said in the log, and the connection closed after
 * the response without reading the request's body (the linger drops its bytes). */
static void refused(h1_conn_t *c)
{
    char a[64];
    fy_info("client %s: %d %s: %s", fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a),
            c->ex.res.status, fy_http_reason(c->ex.res.status), c->ex.error);
    c->keepalive = false;
    c->body_mode = B_NONE;
    c->read_paused = true;
}

static void begin_exchange(h1_conn_t *c, int headlen)
{
    fy_exchange_t *ex = &c->ex;
    fy_h1_req_t *r = &c->req;
    memset(ex, 0, sizeof *ex);
    ex->arena = &c->arena;
    ex->ctx = c->ctx;
    ex->codec = c;
    ex->sink = &h1_sink;
    ex->remote = (struct sockaddr *)&c->remote;
    ex->start_ms = c->loop->now_ms;
    c->ex_active = true;
    c->head_written = c->res_final = c->want_proceed = false;
    c->body_wanted = c->body_delivered = c->discarding = c->continue_sent = false;

    fy_request_t *q = &ex->req;
    q->method = fy_str(r->method.p, r->method.len);
    q->method_id = fy_http_method_id(q->method);
    q->version = r->minor_version ? 11 : 10;
    q->scheme = c->ctx->is_tls || c->t->is_tls ? FY_STR_LIT("https") : FY_STR_LIT("http");
    ex->tunnel = c->mitm_tunnel;
    q->authority = fy_str(r->host.p, r->host.len);
    fy_str_t tg = fy_str(r->target.p, r->target.len);
    q->target = tg;
    if (tg.len > 7 && (fy_str_ieq(fy_str(tg.p, 7), "http://", 7) ||
                       (tg.len > 8 && fy_str_ieq(fy_str(tg.p, 8), "https://", 8)))) {
        /* absolute-form: its authority wins over Host (RFC 9112 §3.2.2) */
        const char *s = memchr(tg.p, ':', tg.len) + 3;
        const char *end = tg.p + tg.len;
        const char *slash = s;
        while (slash < end && *slash != '/' && *slash != '?') slash++;
        q->authority = fy_str(s, (size_t)(slash - s));
        q->target = slash < end ? fy_str(slash, (size_t)(end - slash)) : FY_STR_LIT("/");
        q->absolute_form = true;
        if (tg.p[4] == 's' || tg.p[4] == 'S') q->scheme = FY_STR_LIT("https");
    }
    const char *qm = memchr(q->target.p, '?', q->target.len);
    if (qm) {
        q->path = fy_str(q->target.p, (size_t)(qm - q->target.p));
        q->query = fy_str(qm + 1, q->target.len - q->path.len - 1);
    } else {
        q->path = q->target;
        q->query = FY_STR_NULL;
    }
    q->headers.v = (fy_header_t *)c->hdrs; /* same layout: two slices */
    q->headers.n = q->headers.cap = r->nheaders;
    q->expect_continue = r->expect_continue && q->version >= 11;
    if (r->conn_upgrade && q->version >= 11) {
        /* `Connection: upgrade` + `Upgrade: websocket`: a tunnel request, like an extended
           CONNECT on h2 (h2c upgrades are the codec's own business) */
        const fy_header_t *up = FY_HDR_FIND(&q->headers, "upgrade");
        if (up && !fy_str_list_has(up->value, "h2c", 3)) {
            size_t l = 0;
            while (l < up->value.len && up->value.p[l] != ',' && up->value.p[l] != ' ') l++;
            q->protocol = fy_str(up->value.p, l);
        }
    }
    if (r->body_kind == FY_H1_BODY_LENGTH) {
        q->content_length = (int64_t)r->content_length;
        c->body_mode = r->content_length ? B_LENGTH : B_NONE;
        c->body_left = r->content_length;
    } else if (r->body_kind == FY_H1_BODY_CHUNKED) {
        q->content_length = -1;
        c->body_mode = B_CHUNKED;
        fy_h1_chunked_init(&c->chunked);
    } else {
        q->content_length = 0;
        c->body_mode = B_NONE;
    }
    c->rstart += (size_t)headlen;
    c->body_pos = c->body_out = c->rstart;
    if (r->conn_close || (q->version == 10 && !r->conn_keep_alive)) c->keepalive = false;
    if (c->ctx->draining) c->keepalive = false;
}

_Static_assert(sizeof(fy_h1_header_t) == sizeof(fy_header_t), "header layouts");

/* Parse and dispatch as many requests as the buffer holds (pipelining), one at a time. */
static void process(h1_conn_t *c)
{
    while (!c->closed && !c->ex_active && !c->lingering) {
        if (c->discarding) return;
        if (!c->rbuf || c->rstart == c->rlen) {
            /* idle: give the buffers back while we wait (all of it: T_IDLE) */
            if (c->rbuf && !output_pending(c)) {
                rbuf_release(c);
                if (c->wbuf && c->wlen == 0) {
                    fy_pool_put(fy_chunk_pool(), c->wbuf);
                    c->wbuf = NULL;
                }
            }
            if (!c->keepalive) {
                if (!output_pending(c)) conn_linger(c);
                return;
            }
            if (c->ctx->draining && !output_pending(c)) {
                conn_close(c);
                return;
            }
            c->read_paused = false;
            if (c->requests) set_timer(c, T_IDLE);
            return;
        }
        if (!c->keepalive) {
            /* pipelined bytes after a "Connection: close" response are not served */
            if (!output_pending(c)) conn_linger(c);
            return;
        }
        if (c->requests == 0 && c->req.scanned == 0 && (c->ctx->protocols & FY_PROTO_H2C) &&
            c->ctx->start_h2 && !c->ctx->is_tls) {
            static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
            size_t have = c->rlen - c->rstart, cmp = have < 24 ? have : 24;
            if (memcmp(c->rbuf + c->rstart, preface, cmp) == 0) {
                if (have < 24) return; /* wait for the whole preface */
                handoff_h2(c, NULL);
                return;
            }
            if (!(c->ctx->protocols & FY_PROTO_H1)) {
                /* an h2c-only listener speaks HTTP/2 from the first byte: the h2 codec answers
                   the invalid preface with GOAWAY PROTOCOL_ERROR (RFC 9113 §3.4), as nginx */
                handoff_h2(c, NULL);
                return;
            }
        }
        if (!(c->ctx->protocols & FY_PROTO_H1) && c->ctx->protocols) {
            /* an h2c-only listener: nothing but the HTTP/2 preface is served */
            reject(c, 505, "HTTP/1.1 is not served on this listener (protocols)");
            return;
        }
        if (c->req.scanned == 0) {
            /* a new request: move its first bytes to the front so that its head and body get
               the whole buffer (pipelined leftovers are few bytes) */
            if (c->rstart > 0) {
                memmove(c->rbuf, c->rbuf + c->rstart, c->rlen - c->rstart);
                c->rlen -= c->rstart;
                c->rstart = 0;
            }
            req_mem_get(c);
            fy_h1_req_init(&c->req, c->hdrs);
        }
        fy_h1_limits_t lim = {c->ctx->limits->max_request_line, c->ctx->limits->max_header_bytes,
                              (size_t)c->ctx->limits->max_headers};
        int r = fy_h1_parse_request(&c->req, c->rbuf + c->rstart, c->rlen - c->rstart, &lim);
        if (r == FY_H1_INCOMPLETE) {
            if (c->timer_kind != T_HEADER) set_timer(c, T_HEADER);
            c->read_paused = false;
            /* make room: move the partial head to the front, or grow up to the limit */
            if (c->rlen == c->rcap) {
                if (c->rstart > 0) {
                    memmove(c->rbuf, c->rbuf + c->rstart, c->rlen - c->rstart);
                    c->rlen -= c->rstart;
                    c->rstart = 0;
                    c->req.scanned = 0; /* the parser rescans from the moved start */
                } else {
                    size_t ncap = c->rcap * 2;
                    char *nb = malloc(ncap);
                    if (!nb) {
                        conn_close(c);
                        return;
                    }
                    memcpy(nb, c->rbuf, c->rlen);
                    if (c->rbuf_heap)
                        free(c->rbuf);
                    else
                        fy_pool_put(fy_chunk_pool(), c->rbuf);
                    c->rbuf = nb;
                    c->rbuf_heap = true;
                    c->rcap = ncap;
                    c->req.scanned = 0;
                }
            }
            return;
        }
        c->req.scanned = 0;
        if (r < 0) {
            reject(c, fy_h1_err_status(r), fy_h1_err_str(r));
            return;
        }
        begin_exchange(c, r);
        c->requests++;
        fy_exchange_t *ex = &c->ex;
        if (ex->req.method_id == FY_M_CONNECT) {
            /* authority-form (RFC 9112 §3.2.3); the protocol stage refuses it (405) unless a
               forward proxy's handler takes the connection over */
            ex->req.authority = ex->req.target;
            ex->req.path = ex->req.query = FY_STR_NULL;
        } else if (ex->req.target.len == 0 || ex->req.target.p[0] != '/') {
            if (!fy_request_is_asterisk(&ex->req)) { /* the protocol stage answers `OPTIONS *` */
                reject(c, 400, "request-target is not origin-form");
                return;
            }
        } else if (try_upgrade_h2c(c)) {
            return;
        }
        c->read_paused = true; /* the handler pulls the body; pipelined input waits */
        if (c->timer_kind != T_SEND) fy_timer_stop(c->loop, &c->timer);
        fy_exchange_dispatch(ex);
    }
}

static void end_exchange(h1_conn_t *c)
{
    fy_exchange_t *ex = &c->ex;
    fy_exchange_done(ex);
    c->ex_active = false;
    fy_arena_reset(&c->arena);
    c->head_written = c->res_final = c->want_proceed = false;
    c->read_paused = false; /* the next request (or the close) is ours to read again */
    if (c->body_mode != B_NONE) {
        /* the handler did not read the whole body: drain it to keep the connection */
        if (!c->keepalive) {
            /* not worth draining: close once the response is out (flush lingers) */
            c->body_mode = B_NONE;
            if (!output_pending(c)) conn_linger(c);
            return;
        }
        c->discarding = true;
        c->body_delivered = false;
        c->body_wanted = true;
        c->read_paused = false;
        deliver_body(c);
        if (c->closed || c->body_mode != B_NONE) return;
    }
    c->discarding = false;
    /* the next pipelined request, unless we are inside the read loop (it continues there) */
    if (!c->in_read) {
        c->defer.cb = proceed_cb;
        c->defer.data = c;
        fy_defer(c->loop, &c->defer);
    }
}

/* ---- request body ---- */

static void on_chunk_data(void *ud, const char *p, size_t n)
{
    h1_conn_t *c = ud;
    /* compact decoded data in place, in front of the undecoded bytes */
    if (c->rbuf + c->body_out != p) memmove(c->rbuf + c->body_out, p, n);
    c->body_out += n;
}

static void on_trailer(void *ud, fy_h1_str_t name, fy_h1_str_t value)
{
    h1_conn_t *c = ud;
    fy_arena_t *a = &c->arena;
    if (c->discarding) return;
    fy_headers_add(a, &c->ex.req_trailers, "", 0, "", 0);
    fy_header_t *h = &c->ex.req_trailers.v[c->ex.req_trailers.n - 1];
    h->name = fy_str(fy_arena_strndup(a, name.p, name.len), name.len);
    h->value = fy_str(fy_arena_strndup(a, value.p, value.len), value.len);
}

/* A body larger than the read buffer's room is read in slices of BODY_BUF: a proxied 64 KiB
 * upload takes one read and one write to the origin instead of five of each. The request's
 * head (which the exchange's fields point into) stays in the old chunk until the buffers are
 * given back. */
#define BODY_BUF (64 * 1024)

static void grow_for_body(h1_conn_t *c)
{
    char *nb = malloc(BODY_BUF);
    if (!nb) return; /* the chunk still works */
    memcpy(nb, c->rbuf, c->rlen);
    c->rbuf_prev = c->rbuf;
    c->rbuf = nb;
    c->rbuf_heap = true;
    c->rcap = BODY_BUF;
}

/* Hand the next slice of body to the handler, or read more. */
static void deliver_body(h1_conn_t *c)
{
    fy_exchange_t *ex = &c->ex;
    for (;;) {
        if (c->closed || !c->body_wanted) return;
        size_t avail = c->rlen - c->body_pos;
        size_t take = 0;
        bool end = false;
        size_t data_at = c->body_pos;
        if (c->body_mode == B_LENGTH) {
            take = avail < c->body_left ? avail : (size_t)c->body_left;
            c->body_left -= take;
            c->body_pos += take;
            c->body_out = c->body_pos;
            end = c->body_left == 0;
        } else if (c->body_mode == B_TUNNEL) {
            take = avail;
            c->body_pos += take;
            c->body_out = c->body_pos;
            end = c->peer_eof && c->body_pos == c->rlen;
        } else if (c->body_mode == B_CHUNKED) {
            size_t consumed = 0;
            c->body_out = c->body_pos;
            int r = fy_h1_chunked_decode(&c->chunked, c->rbuf + c->body_pos, avail, &consumed,
                                         c->ctx->limits->max_header_bytes, on_chunk_data,
                                         on_trailer, c);
            if (r < 0) {
                c->body_mode = B_NONE;
                if (!c->head_written && !c->discarding) {
                    c->ex.response_started = false;
                    reject(c, 400, fy_h1_err_str(r));
                } else {
                    fail_conn(c, fy_h1_err_str(r));
                }
                return;
            }
            take = c->body_out - c->body_pos;
            c->body_pos += consumed;
            end = r == 1;
        } else {
            end = true;
        }
        ex->body_received += take;
        if (c->body_mode != B_TUNNEL && ex->body_received > c->ctx->limits->max_body) {
            c->body_mode = B_NONE;
            if (!c->head_written && !c->discarding) {
                c->ex.response_started = false;
                fy_http_body_too_large(&c->ex);
            } else {
                fail_conn(c, FY_HTTP_E_BODY_SIZE);
            }
            return;
        }
        if (end) {
            c->body_mode = B_NONE;
            /* bytes after the body belong to the next request: keep them at rstart */
            c->rstart = c->body_pos;
        }
        if (take || end) {
            if (c->discarding) {
                if (end) {
                    c->discarding = false;
                    c->body_wanted = false;
                    c->rstart = c->body_pos;
                    if (!c->in_read) {
                        c->defer.cb = proceed_cb;
                        c->defer.data = c;
                        fy_defer(c->loop, &c->defer);
                    }
                    return;
                }
                continue;
            }
            c->body_wanted = false;
            c->body_delivered = true;
            c->read_paused = true;
            /* the handler holds the data now: its pace is not the client's idleness */
            if (c->timer_kind == T_BODY) fy_timer_stop(c->loop, &c->timer);
            ex->on_body(ex, c->rbuf + data_at, take, end);
            return;
        }
        /* need more bytes from the socket: reuse the space of consumed body bytes */
        if (c->body_pos > c->rstart) {
            memmove(c->rbuf + c->rstart, c->rbuf + c->body_pos, c->rlen - c->body_pos);
            c->rlen -= c->body_pos - c->rstart;
            c->body_pos = c->body_out = c->rstart;
        }
        if (!c->rbuf_heap && !c->discarding && c->body_mode != B_TUNNEL &&
            (c->body_mode == B_CHUNKED || c->body_left > c->rcap - c->rlen))
            grow_for_body(c);
        if (c->rlen == c->rcap) {
            /* a chunk-size line or trailer longer than the buffer's free space */
            fail_conn(c, "chunked framing line too long");
            return;
        }
        c->read_paused = false;
        if (c->body_mode != B_TUNNEL) set_timer(c, T_BODY); /* tunnels idle as they like */
        /* inside the read loop, its end sets the interest once, after it tried to write what
           is queued (here, an early response would ask for EPOLLOUT it never needs) */
        if (!c->in_read) update_events(c);
        return;
    }
}

static void h1_read_body(fy_exchange_t *ex)
{
    h1_conn_t *c = ex->codec;
    if (c->closed) return;
    if (c->body_mode == B_NONE) {
        if (!c->body_delivered || c->body_wanted) {
            /* no body at all, or it ended: report the end once */
            if (c->body_delivered) return;
            c->body_delivered = true;
            ex->on_body(ex, NULL, 0, true);
        }
        return;
    }
    c->body_delivered = false;
    c->body_wanted = true;
    if (ex->req.expect_continue && !c->continue_sent && !c->head_written) {
        c->continue_sent = true;
        wbuf_get(c);
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (c->rlen == c->body_pos && wfree(c) >= sizeof cont) {
            wbuf_compact(c);
            memcpy(c->wbuf + c->wlen, cont, sizeof cont - 1);
            c->wlen += sizeof cont - 1;
            if (!c->in_read) flush(c);
            if (c->closed) return;
        }
    }
    deliver_body(c);
}

static void h1_send_informational(fy_exchange_t *ex, int status, const fy_headers_t *hs)
{
    h1_conn_t *c = ex->codec;
    if (c->closed || c->head_written || ex->req.version < 11 || status < 102 || status > 199)
        return;
    size_t need = 64;
    for (size_t i = 0; i < hs->n; i++) need += hs->v[i].name.len + hs->v[i].value.len + 4;
    wbuf_get(c);
    wbuf_compact(c);
    if (need > wfree(c)) return; /* hints are optional: drop what does not fit */
    char *p = c->wbuf + c->wlen;
    p = PUT_LIT(p, "HTTP/1.1 ");
    p = put_u64(p, (uint64_t)status);
    *p++ = ' ';
    const char *reason = status == 103 ? "Early Hints" : fy_http_reason(status);
    p = put(p, reason, strlen(reason));
    p = PUT_LIT(p, "\r\n");
    for (size_t i = 0; i < hs->n; i++) {
        p = ex->tunnel || c->ctx->forward_proxy
                ? put(p, hs->v[i].name.p, hs->v[i].name.len)
                : fy_h1_put_field_name(p, hs->v[i].name.p, hs->v[i].name.len);
        p = PUT_LIT(p, ": ");
        p = put(p, hs->v[i].value.p, hs->v[i].value.len);
        p = PUT_LIT(p, "\r\n");
    }
    p = PUT_LIT(p, "\r\n");
    c->wlen = (size_t)(p - c->wbuf);
    if (!c->in_read) flush(c);
}

/* ---- events ---- */

static void do_handshake(h1_conn_t *c)
{
    int r = c->t->ops->handshake(c->t);
    if (r == 0) {
        update_events(c);
        return;
    }
    if (r < 0) {
        conn_close(c);
        return;
    }
    c->handshaking = false;
    c->t->want = 0;
    if (c->t->alpn && c->t->alpn[0] == 'h' && c->t->alpn[1] == '2' && c->ctx->start_h2) {
        handoff_h2(c, NULL);
        return;
    }
    set_timer(c, T_HEADER);
    c->read_paused = false;
    update_events(c);
}

/* Drop the rest of an unwanted Content-Length body straight from a plain socket: with
 * MSG_TRUNC, TCP frees the queued bytes without copying them out, so draining an early
 * answered upload costs one call per wake-up instead of a read per 16 KiB. Never more than
 * the body: what follows is the next request. Returns true when the body is done. */
static bool discard_from_socket(h1_conn_t *c)
{
    bool progress = false;
    while (c->body_left) {
        size_t want = c->body_left < (1u << 30) ? (size_t)c->body_left : (1u << 30);
        ssize_t n = recv(c->sock.fd, NULL, want, MSG_TRUNC | MSG_DONTWAIT);
        if (n > 0) {
            c->body_left -= (uint64_t)n;
            progress = true;
            /* less than asked: the queue is empty now; epoll says when more comes */
            if ((size_t)n < want) break;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        conn_close(c); /* the client went away (or reset) before the body's end */
        return false;
    }
    if (c->body_left) {
        if (progress) set_timer(c, T_BODY);
        update_events(c);
        return false;
    }
    c->body_mode = B_NONE;
    c->discarding = false;
    c->body_wanted = false;
    c->rstart = c->body_pos;
    return true;
}

static void on_readable(h1_conn_t *c)
{
    if (c->lingering) {
        /* nothing of it is wanted: discarded in the kernel (MSG_TRUNC), not copied out */
        for (int i = 0; i < 16; i++) {
            ssize_t n = recv(c->sock.fd, NULL, 1u << 20, MSG_TRUNC | MSG_DONTWAIT);
            if (n > 0) continue;
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
            break;
        }
        conn_close(c);
        return;
    }
    if (c->discarding && c->body_mode == B_LENGTH && c->t == &c->sock && c->rbuf &&
        c->body_pos == c->rlen) {
        if (!discard_from_socket(c)) return;
        /* the body is gone: on to the next request, which may already be buffered */
        process(c);
        if (c->closed) return;
    }
    if (c->read_paused && !c->discarding) {
        /* the handler holds the body or a response is in progress: don't read (backpressure),
           but notice a client that went away */
        if (!c->t->want) {
            c->in_spurious = true; /* now drop EPOLLIN until we read again */
            update_events(c);
            return;
        }
    }
    rbuf_get(c);
    c->in_read = true;
    for (int rounds = 0; rounds < 4; rounds++) {
        if (c->rlen == c->rcap) {
            if (c->rstart > 0 && !c->ex_active) {
                memmove(c->rbuf, c->rbuf + c->rstart, c->rlen - c->rstart);
                c->rlen -= c->rstart;
                c->rstart = 0;
                c->req.scanned = 0;
            } else {
                break;
            }
        }
        ssize_t n = c->t->ops->read(c->t, c->rbuf + c->rlen, c->rcap - c->rlen);
        if (n == 0) break;
        if (n == FY_EEOF && c->tunnel && c->ex_active && !c->peer_eof) {
            /* the client ended its side of the tunnel: tell the handler, keep writing */
            c->peer_eof = true;
            if (c->body_wanted) deliver_body(c);
            break;
        }
        if (n < 0) {
            c->in_read = false;
            if (n != FY_EEOF && n != -ECONNRESET) fy_debug("read: %zd", n);
            if (c->ex_active && !c->res_final && c->ex.response_started == false)
                c->ex.error = "client closed connection";
            conn_close(c);
            return;
        }
        c->t->want = 0;
        c->rlen += (size_t)n;
        if (c->ex_active) {
            if (c->body_wanted) deliver_body(c);
            /* the body's end may have finished the exchange with a request behind it */
            if (!c->closed && !c->ex_active && !c->discarding) process(c);
        } else if (c->discarding) {
            deliver_body(c);
            if (!c->closed && !c->discarding) process(c);
        } else {
            process(c);
        }
        if (c->closed) return;
        /* TLS may hold decrypted bytes the socket no longer signals */
        if (!c->t->ops->pending(c->t) || c->read_paused) break;
    }
    c->in_read = false;
    if (output_pending(c))
        flush(c);
    else if (!c->closed)
        update_events(c);
    if (!c->closed && c->res_final && c->ex_active && !output_pending(c)) end_exchange(c);
}

static void on_io(fy_io_t *io, uint32_t ev)
{
    h1_conn_t *c = io->data;
    if (c->closed) return;
    if (c->handshaking) {
        do_handshake(c);
        if (c->closed || c->handshaking) return;
    }
    if (ev & (EPOLLERR)) {
        conn_close(c);
        return;
    }
    if ((ev & EPOLLOUT) && output_pending(c)) {
        c->t->want = 0;
        flush(c);
        if (c->closed) return;
    }
    if (ev & (EPOLLIN | EPOLLHUP)) on_readable(c);
}

/* Graceful stop: a response in progress ends with `Connection: close` (write_head) and then
 * the connection lingers. An idle kept-alive connection is read first: a request already in
 * the socket is answered (with `Connection: close`) rather than reset by a close with unread
 * bytes; with nothing there it is half-closed (FIN) and lingers, so that a request the client
 * sent meanwhile meets a FIN, not a reset. */
static void node_drain(fy_conn_node_t *n)
{
    h1_conn_t *c = fy_container_of(n, h1_conn_t, node);
    c->keepalive = false;
    if (c->closed || c->ex_active || c->lingering || c->handshaking || output_pending(c)) return;
    if (c->rbuf && c->rstart != c->rlen) return; /* part of a request: it gets its answer */
    c->read_paused = false;
    on_readable(c);
    if (c->closed || c->ex_active || c->lingering || output_pending(c)) return;
    if (c->rbuf && c->rstart != c->rlen) return;
    conn_linger(c);
}

static void node_close(fy_conn_node_t *n)
{
    conn_close(fy_container_of(n, h1_conn_t, node));
}
