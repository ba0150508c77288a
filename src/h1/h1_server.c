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
#include "h1/h1_server_int.h"

static const char *const timer_names[] = {"handshake",       "header read", "body read",
                                          "keep-alive idle", "send",        "lingering close",
                                          "idle release"};
static void node_drain(fy_conn_node_t *n);
static void node_close(fy_conn_node_t *n);
static void on_io(fy_io_t *io, uint32_t ev);
static void reread_cb(fy_defer_t *d);

static void on_timer(fy_timer_t *t)
{
    h1_conn_t *c = t->data;
    if (c->timer_kind == T_IDLE) {
        const fy_http_limits_t *l = c->ctx->limits;
        fy__h1_idle_release(c);
        c->timer_kind = T_KEEPALIVE;
        fy_timer_start(c->loop, &c->timer,
                       l->keepalive_timeout_ms > IDLE_RELEASE_MS
                           ? l->keepalive_timeout_ms - IDLE_RELEASE_MS
                           : 0);
        return;
    }
    if (c->timer_kind == T_HEADER)
        fy_counter_inc(fy_cid_limit[FY_LIMIT_HEADER_TIMEOUT]);
    else if (c->timer_kind == T_BODY)
        fy_counter_inc(fy_cid_limit[FY_LIMIT_BODY_TIMEOUT]);
    else if (c->timer_kind == T_SEND)
        fy_counter_inc(fy_cid_limit[FY_LIMIT_SEND_TIMEOUT]);
    if (c->timer_kind != T_LINGER) {
        char a[64];
        fy_info("client %s: %s timeout, closing connection",
                fy_sock_addr_str(&c->remote.sa, a, sizeof a), timer_names[c->timer_kind]);
    }
    if (c->ex_active && c->b->ex.producer && c->b->ex.producer->stop && !c->res_final)
        c->b->ex.producer->stop(&c->b->ex);
    c->ex_active = false;
    fy__h1_conn_close(c);
}

/* ---- buffers ---- */

static void rbuf_get(h1_conn_t *c)
{
    if (c->rbuf) return;
    c->rbuf = fy_pool_get(fy_chunk_pool());
    c->mem_dirty = true;
    c->rcap = FY_CHUNK_SIZE;
    c->rstart = c->rlen = 0;
}

void fy__h1_rbuf_release(h1_conn_t *c)
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

/* Idle between requests (nothing to write, no request byte buffered, no exchange): give the
 * buffers, the header array and the TLS record buffers back, so that a kept-alive connection
 * holds none while it waits (issue 19: both chunks were kept once a response had been queued
 * from the read loop). Called by the T_IDLE timer. */
void fy__h1_idle_release(h1_conn_t *c)
{
    if (c->ex_active || c->discarding || c->closed || fy__h1_output_pending(c)) return;
    if (c->rbuf && c->rstart != c->rlen) return;
    if (c->t != &c->sock) fy_tls_transport_idle(c->t);
    fy__h1_rbuf_release(c);
    if (c->wbuf) fy_pool_put(fy_chunk_pool(), c->wbuf);
    c->wbuf = NULL;
    c->wlen = c->wsent = 0;
    fy__h1_busy_put(c);
    fy__h1_mem_sync(c);
}

bool fy__h1_mem_sync(h1_conn_t *c)
{
    if (c->closed) return false; /* its count went at the close */
    c->mem_dirty = false;
    size_t ex = 0;
    const h1_busy_t *b = c->b;
    if (b) {
        ex = sizeof *b + fy_arena_bytes(&b->arena) + (b->fbuf ? FY_CHUNK_SIZE : 0);
        if (b->hdrs) ex += sizeof(fy_h1_header_t) * (size_t)c->ctx->limits->max_headers;
    }
    size_t n = sizeof *c + ex + (c->rbuf ? c->rcap : 0) + (c->rbuf_prev ? FY_CHUNK_SIZE : 0) +
               (c->wbuf ? FY_CHUNK_SIZE : 0);
    if (c->t != &c->sock) n += fy_tls_transport_mem(c->t);
    if (n == c->mem_held) return false; /* a busy keep-alive connection: the same as last time */
    fy_counters_conn_mem(FY_CPROTO_H1, &c->mem_held, n);
    fy_counters_stream_mem(FY_CPROTO_H1, &c->stream_held, c->ex_active ? ex : 0);
    uint64_t max = c->ctx->limits->max_conn_memory;
    if (!max || n <= max) return false;
    char a[64];
    fy_warn("client %s: connection memory budget exceeded (%zu bytes held, connection-memory "
            "%llu): closing",
            fy_sock_addr_str(&c->remote.sa, a, sizeof a), n, (unsigned long long)max);
    fy_counter_inc(fy_cid_limit_conn_memory);
    c->read_paused = true; /* nothing more is read; what is queued goes in the close */
    if (c->ex_active && !c->res_final) c->b->ex.error = "connection memory budget exceeded";
    fy__h1_conn_close(c);
    return true;
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
    if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)
        memcpy(&c->remote, sa, salen < sizeof c->remote ? salen : sizeof c->remote);
    else
        c->remote.sa.sa_family = sa->sa_family;
    fy_sock_transport_init(&c->sock, fd);
    c->t = &c->sock;
    c->keepalive = true;
    fy_timer_init(&c->timer, on_timer, c);
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
            fy__h1_conn_close(c);
            return -ENOMEM;
        }
        c->handshaking = true;
        fy__h1_set_timer(c, T_HANDSHAKE);
    } else {
        fy__h1_set_timer(c, T_HEADER);
    }
    if (fy_io_set(c->loop, &c->io, EPOLLIN) < 0) {
        fy__h1_conn_close(c);
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
int fy__h1_detach(fy_exchange_t *ex, int *fd, char *buf, size_t cap, size_t *len)
{
    h1_conn_t *c = ex->codec;
    size_t have = c->rbuf ? c->rlen - c->rstart : 0;
    if (c->closed || c->t != &c->sock || fy__h1_output_pending(c) || have > cap || c->head_written)
        return -1;
    if (have) memcpy(buf, c->rbuf + c->rstart, have);
    *len = have;
    *fd = c->sock.fd;
    ex->res.status = 200;
    fy_exchange_done(ex);
    c->ex_active = false;
    c->handed_off = true;
    fy__h1_conn_close(c);
    return 0;
}

static void free_conn(fy_defer_t *d)
{
    h1_conn_t *c = d->data;
    fy_http_ctx_t *ctx = c->ctx;
    fy__h1_busy_put(c);
    free(c);
    if (ctx->on_conn_closed) ctx->on_conn_closed(ctx);
}

void fy__h1_conn_close(h1_conn_t *c)
{
    if (c->closed) return;
    c->closed = true;
    if (c->ex_active && c->b->ex.producer && c->b->ex.producer->stop && !c->res_final)
        c->b->ex.producer->stop(&c->b->ex);
    if (c->ex_active && c->b->ex.res.status) {
        c->b->ex.error = c->b->ex.error ? c->b->ex.error : "connection closed";
        fy_exchange_done(&c->b->ex);
    }
    c->ex_active = false;
    if (c->b) fy_arena_reset(&c->b->arena);
    fy_timer_stop(c->loop, &c->timer);
    fy_io_set(c->loop, &c->io, 0);
    if (!c->handed_off) {
        if (c->t != &c->sock) c->t->ops->destroy(c->t);
        close(c->sock.fd);
    }
    if (c->mitm_tunnel_free) c->mitm_tunnel_free(c->mitm_tunnel);
    c->mitm_tunnel_free = NULL;
    fy__h1_rbuf_release(c);
    if (c->wbuf) fy_pool_put(fy_chunk_pool(), c->wbuf);
    c->wbuf = NULL;
    if (c->b && c->b->fbuf) fy_pool_put(fy_chunk_pool(), c->b->fbuf);
    if (c->b) c->b->fbuf = NULL;
    fy_list_remove(&c->node.link);
    c->ctx->nconns--;
    fy_counters_conn_close(FY_CPROTO_H1);
    fy_counters_conn_mem(FY_CPROTO_H1, &c->mem_held, 0);
    fy_counters_stream_mem(FY_CPROTO_H1, &c->stream_held, 0);
    fy_defer_cancel(c->loop, &c->defer);
    fy_defer_cancel(c->loop, &c->rdefer);
    c->defer.cb = free_conn;
    c->defer.data = c;
    fy_defer(c->loop, &c->defer);
}

/* Close after the peer has read our last response: half-close, then drain its input for a
 * while, so that a reset does not destroy the response it has not read yet (nginx's
 * lingering close). */
void fy__h1_conn_linger(h1_conn_t *c)
{
    if (c->closed) return;
    if (c->t->ops->shutdown(c->t) < 0) {
        fy__h1_conn_close(c);
        return;
    }
    c->lingering = true;
    c->read_paused = false;
    fy_io_set(c->loop, &c->io, EPOLLIN);
    fy__h1_set_timer(c, T_LINGER);
}

static void on_readable(h1_conn_t *c);

static void reread_cb(fy_defer_t *d)
{
    h1_conn_t *c = d->data;
    if (!c->closed && !c->read_paused) on_readable(c);
}

void fy__h1_update_events(h1_conn_t *c)
{
    if (!c->read_paused && !c->handshaking && c->t->ops->pending(c->t)) {
        c->rdefer.cb = reread_cb;
        c->rdefer.data = c;
        fy_defer(c->loop, &c->rdefer);
    }
    uint32_t ev = 0;
    if (c->t->want & FY_WANT_WRITE) ev |= EPOLLOUT;
    if (fy__h1_output_pending(c) && c->t->want == 0) ev |= EPOLLOUT;
    if (!c->read_paused || (c->t->want & FY_WANT_READ && c->handshaking)) {
        ev |= EPOLLIN;
        c->in_spurious = false;
    } else if ((c->io.events & EPOLLIN) && !c->in_spurious) {
        /* paused, but interest is dropped lazily, only once the client actually sends while
           we wait (nginx does the same): an exchange waiting on an origin costs no
           epoll_ctl pair */
        ev |= EPOLLIN;
    }
    if (fy_io_set(c->loop, &c->io, ev) < 0) fy__h1_conn_close(c);
}

/* ---- events ---- */

static void do_handshake(h1_conn_t *c)
{
    int r = c->t->ops->handshake(c->t);
    if (r == 0) {
        fy__h1_update_events(c);
        return;
    }
    if (r < 0) {
        fy__h1_conn_close(c);
        return;
    }
    c->handshaking = false;
    c->t->want = 0;
    if (c->t->alpn && c->t->alpn[0] == 'h' && c->t->alpn[1] == '2' && c->ctx->start_h2) {
        fy__h1_handoff_h2(c, NULL);
        return;
    }
    fy__h1_set_timer(c, T_HEADER);
    c->read_paused = false;
    if (fy__h1_mem_sync(c)) return;
    fy__h1_update_events(c);
}

/* Drop the rest of an unwanted Content-Length body straight from a plain socket: with
 * MSG_TRUNC, TCP frees the queued bytes without copying them out, so draining an early
 * answered upload costs one call per wake-up instead of a read per 16 KiB. Never more than
 * the body: what follows is the next request. Returns true when the body is done. */
static bool discard_from_socket(h1_conn_t *c)
{
    bool progress = false;
    while (c->b->body_left) {
        size_t want = c->b->body_left < (1u << 30) ? (size_t)c->b->body_left : (1u << 30);
        ssize_t n = recv(c->sock.fd, NULL, want, MSG_TRUNC | MSG_DONTWAIT);
        if (n > 0) {
            c->b->body_left -= (uint64_t)n;
            progress = true;
            /* less than asked: the queue is empty now; epoll says when more comes */
            if ((size_t)n < want) break;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        fy__h1_conn_close(c); /* the client went away (or reset) before the body's end */
        return false;
    }
    if (c->b->body_left) {
        if (progress) fy__h1_set_timer(c, T_BODY);
        fy__h1_update_events(c);
        return false;
    }
    c->body_mode = B_NONE;
    c->discarding = false;
    c->body_wanted = false;
    c->rstart = c->b->body_pos;
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
        fy__h1_conn_close(c);
        return;
    }
    if (c->discarding && c->body_mode == B_LENGTH && c->t == &c->sock && c->rbuf &&
        c->b->body_pos == c->rlen) {
        if (!discard_from_socket(c)) return;
        /* the body is gone: on to the next request, which may already be buffered */
        fy__h1_process(c);
        if (c->closed) return;
    }
    if (c->read_paused && !c->discarding) {
        /* the handler holds the body or a response is in progress: don't read (backpressure),
           but notice a client that went away */
        if (!c->t->want) {
            c->in_spurious = true; /* now drop EPOLLIN until we read again */
            fy__h1_update_events(c);
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
                c->b->req.scanned = 0;
            } else {
                break;
            }
        }
        ssize_t n = c->t->ops->read(c->t, c->rbuf + c->rlen, c->rcap - c->rlen);
        if (n == 0) break;
        if (n == FY_EEOF && c->tunnel && c->ex_active && !c->peer_eof) {
            /* the client ended its side of the tunnel: tell the handler, keep writing */
            c->peer_eof = true;
            if (c->body_wanted) fy__h1_deliver_body(c);
            break;
        }
        if (n < 0) {
            c->in_read = false;
            if (n != FY_EEOF && n != -ECONNRESET) fy_debug("read: %zd", n);
            if (c->ex_active && !c->res_final && c->b->ex.response_started == false)
                c->b->ex.error = "client closed connection";
            fy__h1_conn_close(c);
            return;
        }
        c->t->want = 0;
        c->rlen += (size_t)n;
        if (!c->b) fy__h1_busy_get(c); /* a request's first bytes: its part (h1_busy_t) */
        if (c->ex_active) {
            if (c->body_wanted) fy__h1_deliver_body(c);
            /* the body's end may have finished the exchange with a request behind it */
            if (!c->closed && !c->ex_active && !c->discarding) fy__h1_process(c);
        } else if (c->discarding) {
            fy__h1_deliver_body(c);
            if (!c->closed && !c->discarding) fy__h1_process(c);
        } else {
            fy__h1_process(c);
        }
        if (c->closed) return;
        /* TLS may hold decrypted bytes the socket no longer signals */
        if (!c->t->ops->pending(c->t) || c->read_paused) break;
    }
    c->in_read = false;
    /* a wake that read nothing into an idle-released connection: no buffer to keep */
    if (__builtin_expect(!c->b, 0) && c->rbuf && c->rstart == c->rlen) {
        fy__h1_rbuf_release(c);
        c->mem_dirty = true;
    }
    /* (a busy keep-alive connection took nothing new: nothing to count) */
    if ((c->mem_dirty || (c->b && c->b->arena.head)) && fy__h1_mem_sync(c)) return;
    if (fy__h1_output_pending(c))
        fy__h1_flush(c);
    else if (!c->closed)
        fy__h1_update_events(c);
    if (!c->closed && c->ex_active && c->res_final && !fy__h1_output_pending(c))
        fy__h1_end_exchange(c);
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
        fy__h1_conn_close(c);
        return;
    }
    if ((ev & EPOLLOUT) && fy__h1_output_pending(c)) {
        c->t->want = 0;
        fy__h1_flush(c);
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
    if (c->closed || c->ex_active || c->lingering || c->handshaking || fy__h1_output_pending(c))
        return;
    if (c->rbuf && c->rstart != c->rlen) return; /* part of a request: it gets its answer */
    c->read_paused = false;
    on_readable(c);
    if (c->closed || c->ex_active || c->lingering || fy__h1_output_pending(c)) return;
    if (c->rbuf && c->rstart != c->rlen) return;
    fy__h1_conn_linger(c);
}

static void node_close(fy_conn_node_t *n)
{
    fy__h1_conn_close(fy_container_of(n, h1_conn_t, node));
}
