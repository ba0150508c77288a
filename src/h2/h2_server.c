/* HTTP/2 server codec.
 *
 * nghttp2 owns framing, HPACK, flow control and stream states; the RFC 9113 §8 request
 * checks (pseudo-headers, connection-specific fields, content-length vs DATA) are ours
 * (h2_check.c, nghttp2's HTTP messaging is off); we feed it with
 * nghttp2_session_mem_recv and drain it with nghttp2_session_mem_send into one write buffer,
 * so a burst of responses leaves in one write.
 *
 * A stream is an exchange. Response bodies: the handler's buffers are referenced, not copied
 * by nghttp2 (NGHTTP2_DATA_FLAG_NO_COPY): on plain TCP send_data writes the 9-byte frame
 * header and a large payload from the handler's memory straight to the socket together with
 * the frames queued before it; over TLS (and for small payloads) the frame is copied once into
 * the write buffer. Only what the socket did not take is copied, so no reference outlives the
 * callback. Then `proceed` is called. Files are pread straight into the frame. Request bodies:
 * DATA the handler is waiting for are lent to it where they lie in the read buffer (which is
 * refcounted; reading goes on into a fresh one); others are copied into a per-stream buffer no
 * larger than the stream window. WINDOW_UPDATE is sent only as the handler consumes them
 * (automatic window updates are off): a slow handler stalls only its own stream.
 *
 * Protocol errors get their answer whatever the timing: a request body still coming after the
 * response is complete is drained within the stream window (h2_stream_t.draining), not reset
 * at once, so nghttp2 goes on checking it; and feed() scans frame headers on their way to
 * nghttp2 for what it does not check on streams it has closed or never saw (frame_head).
 */
#include "h2/h2_server.h"
#include "h2/h2_server_int.h"

static void conn_close(h2_conn_t *c);
static void conn_flush(h2_conn_t *c);
static void reread_cb(fy_defer_t *d);

/* No stream open: the keep-alive timeout starts. Its first IDLE_RELEASE_MS end in
 * on_timer's release of the TLS record buffers (issue 19), not at every stream's end: a busy
 * connection would take them again at once, for ~400 instructions per request. */
#define IDLE_RELEASE_MS 10
void fy__h2_arm_keepalive(h2_conn_t *c)
{
    uint64_t ka = c->ctx->limits->keepalive_timeout_ms;
    c->timer_idle = true;
    fy_timer_start(c->loop, &c->timer, ka < IDLE_RELEASE_MS ? ka : IDLE_RELEASE_MS);
}

void fy__h2_schedule_flush(h2_conn_t *c)
{
    if (!c->in_io && !c->closed) fy_defer(c->loop, &c->flush_defer);
}

static void flush_cb(fy_defer_t *d)
{
    h2_conn_t *c = d->data;
    if (!c->closed) conn_flush(c);
}

static fy_pool_t *rbuf_pool(void)
{
    static __thread fy_pool_t pool;
    if (!pool.size) fy_pool_init(&pool, sizeof(h2_rbuf_t), 16);
    return &pool;
}

static h2_rbuf_t *rbuf_get(void)
{
    h2_rbuf_t *b = fy_pool_get(rbuf_pool());
    b->refs = 1;
    return b;
}

void fy__h2_rbuf_release(h2_rbuf_t *b)
{
    if (--b->refs == 0) fy_pool_put(rbuf_pool(), b);
}

/* ---- connection ---- */

/* What this connection holds now (ferry_connection_memory_bytes, limits.connection-memory):
 * itself, the nghttp2 session's blocks, the write and read buffers, TLS. */
static size_t mem_now(const h2_conn_t *c)
{
    return sizeof *c + fy_h2_mem_held(&c->mem) + (c->wbuf ? c->wcap : 0) +
           (c->rbuf ? sizeof *c->rbuf : 0) + fy_tls_transport_mem(c->t);
}

/* A stream's bytes: its pooled struct, arena blocks past the inline one, the body buffer. */
static size_t stream_mem(const h2_stream_t *s)
{
    return sizeof *s - sizeof s->arena_first + fy_arena_bytes(&s->arena) +
           (s->body ? s->body_cap : 0);
}

/* The connection's bytes with its streams', and each stream's own gauge. */
static void mem_sync(h2_conn_t *c)
{
    size_t st = 0;
    for (fy_list_t *l = c->streams.next; l != &c->streams; l = l->next) {
        h2_stream_t *s = fy_container_of(l, h2_stream_t, link);
        size_t b = stream_mem(s);
        st += b;
        fy_counters_stream_mem(FY_CPROTO_H2, &s->mem_held, b);
    }
    fy_counters_conn_mem(FY_CPROTO_H2, &c->mem_held, mem_now(c) + st);
}

/* Past limits.connection-memory: read no more, say why (GOAWAY ENHANCE_YOUR_CALM), close. */
static bool over_budget(h2_conn_t *c)
{
    uint64_t max = c->ctx->limits->max_conn_memory;
    if (!max || c->mem_held <= max) return false;
    char a[64];
    fy_warn("client %s: h2: connection memory budget exceeded (%zu bytes held, "
            "connection-memory %llu): closing",
            fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), c->mem_held,
            (unsigned long long)max);
    fy_counter_inc(fy_cid_limit_conn_memory);
    fy_io_set(c->loop, &c->io, 0); /* read-paused */
    if (!c->goaway) nghttp2_session_terminate_session(c->ng, NGHTTP2_ENHANCE_YOUR_CALM);
    c->goaway = true;
    const uint8_t *d;
    ssize_t n = nghttp2_session_mem_send(c->ng, &d);
    if (n > 0) {
        struct iovec iov = {(void *)d, (size_t)n};
        c->t->ops->writev(c->t, &iov, 1); /* best effort: the GOAWAY, if the socket takes it */
    }
    conn_close(c);
    return true;
}

static void on_timer(fy_timer_t *t)
{
    h2_conn_t *c = t->data;
    /* the keep-alive timer, left running when a stream opened (fy__h2_stream_new): streams
       are open, so there is no keep-alive timeout; the last one's end arms it again */
    if (!c->timer_send && c->nstreams) return;
    if (c->timer_idle && !c->timer_send) {
        /* idle for IDLE_RELEASE_MS: OpenSSL's record buffers go (wbuf went at the last flush,
           rbuf after each read), then the rest of the keep-alive timeout */
        uint64_t ka = c->ctx->limits->keepalive_timeout_ms;
        c->timer_idle = false;
        if (c->nstreams == 0 && c->wlen == c->wsent) {
            fy_tls_transport_idle(c->t);
            /* nghttp2's frame buffer: its pages, while no frame is in it */
            if (!nghttp2_session_want_write(c->ng)) fy_h2_mem_trim(&c->mem);
            mem_sync(c);
        }
        fy_timer_start(c->loop, &c->timer, ka > IDLE_RELEASE_MS ? ka - IDLE_RELEASE_MS : 0);
        return;
    }
    char a[64];
    fy_info("client %s: h2 %s timeout, closing connection",
            fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a),
            c->timer_send ? "send" : "keep-alive idle");
    if (!c->timer_send && !c->goaway) {
        /* idle: say goodbye properly, then close */
        nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->ng), NGHTTP2_NO_ERROR,
                              NULL, 0);
        c->goaway = true;
        conn_flush(c);
        if (!c->closed) conn_close(c);
        return;
    }
    conn_close(c);
}

static void free_conn(fy_defer_t *d)
{
    h2_conn_t *c = d->data;
    fy_http_ctx_t *ctx = c->ctx;
    if (c->mitm_tunnel_free) c->mitm_tunnel_free(c->mitm_tunnel);
    free(c);
    if (ctx->on_conn_closed) ctx->on_conn_closed(ctx);
}

static void conn_close(h2_conn_t *c)
{
    if (c->closed) return;
    c->closed = true;
    /* streams still running: their handlers stop; memory goes with the session */
    while (!fy_list_empty(&c->streams)) {
        h2_stream_t *s = fy_container_of(c->streams.next, h2_stream_t, link);
        s->closed = true;
        if (!s->ex_done) {
            if (!s->ex.error) s->ex.error = "connection closed";
            if (s->ex.producer && s->ex.producer->stop && s->ex.response_started)
                s->ex.producer->stop(&s->ex);
            s->ex_done = true;
            if (s->ex.res.status) fy_exchange_done(&s->ex);
        }
        fy__h2_stream_free(s);
    }
    nghttp2_session_del(c->ng);
    c->ng = NULL;
    fy_counters_conn_mem(FY_CPROTO_H2, &c->mem_held, 0);
    fy_timer_stop(c->loop, &c->timer);
    fy_io_set(c->loop, &c->io, 0);
    if (c->t != &c->sock) c->t->ops->destroy(c->t);
    close(c->sock.fd);
    if (c->rbuf) fy__h2_rbuf_release(c->rbuf);
    if (c->wbuf) fy__h2_wbuf_free(c);
    fy_list_remove(&c->node.link);
    c->ctx->nconns--;
    fy_counters_conn_close(FY_CPROTO_H2);
    fy_defer_cancel(c->loop, &c->flush_defer);
    fy_defer_cancel(c->loop, &c->reread);
    c->free_defer.cb = free_conn;
    c->free_defer.data = c;
    fy_defer(c->loop, &c->free_defer);
}

static void update_events(h2_conn_t *c)
{
    uint32_t ev = EPOLLIN;
    if (c->wlen > c->wsent || (c->t->want & FY_WANT_WRITE)) ev |= EPOLLOUT;
    if (fy_io_set(c->loop, &c->io, ev) < 0) conn_close(c);
}

/* Pull frames from nghttp2 into wbuf and write them; stops when the socket is full. */
static void conn_flush(h2_conn_t *c)
{
    bool drained = false;
    c->wblocked = false;
    for (;;) {
        while (c->wlen > c->wsent) {
            struct iovec iov = {c->wbuf + c->wsent, c->wlen - c->wsent};
            /* send_data just found the transport full: no write that would only fail */
            ssize_t w = c->wblocked ? 0 : c->t->ops->writev(c->t, &iov, 1);
            if (w == 0) {
                c->timer_send = true;
                c->timer_idle = false;
                fy_timer_start(c->loop, &c->timer, c->ctx->limits->send_timeout_ms);
                update_events(c);
                return;
            }
            if (w < 0) {
                conn_close(c);
                return;
            }
            c->wsent += (size_t)w;
        }
        c->wlen = c->wsent = 0;
        if (c->timer_send) {
            c->timer_send = false;
            if (c->nstreams)
                fy_timer_stop(c->loop, &c->timer);
            else
                fy__h2_arm_keepalive(c);
        }
        if (drained) break; /* nghttp2 had nothing more last time: no empty round */
        /* large DATA frames are written by send_data during mem_send; the rest is copied */
        while (c->wlen - c->wsent < WBUF_SOFT && !c->wblocked) {
            const uint8_t *d;
            ssize_t n = nghttp2_session_mem_send(c->ng, &d);
            if (n < 0) {
                if (!c->werr) fy_info("h2: %s", nghttp2_strerror((int)n));
                conn_close(c);
                return;
            }
            if (n == 0) {
                drained = !c->wblocked && !c->wfull;
                c->wfull = false;
                break;
            }
            fy__h2_wbuf_put(c, d, (size_t)n);
        }
        if (c->wlen == c->wsent) break;
    }
    /* all written and no stream open: an idle connection holds no write buffer */
    if (c->wbuf && c->nstreams == 0) fy__h2_wbuf_free(c);
    if (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng)) {
        conn_close(c);
        return;
    }
    if (c->ctx->draining && c->nstreams == 0 && c->goaway) {
        conn_close(c);
        return;
    }
    update_events(c);
}

int fy__h2_feed_ng(h2_conn_t *c, const char *data, size_t len)
{
    if (len == 0) return 0;
    ssize_t r = nghttp2_session_mem_recv(c->ng, (const uint8_t *)data, len);
    if (r < 0) {
        char a[64];
        fy_info("client %s: h2: %s", fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a),
                nghttp2_strerror((int)r));
        /* a GOAWAY naming the error, unless nghttp2 queued one (then this does nothing):
           an invalid preface is a connection error PROTOCOL_ERROR (RFC 9113 §3.4) */
        uint32_t code = r == NGHTTP2_ERR_BAD_CLIENT_MAGIC ? NGHTTP2_PROTOCOL_ERROR
                        : r == NGHTTP2_ERR_FLOODED        ? NGHTTP2_ENHANCE_YOUR_CALM
                                                          : NGHTTP2_INTERNAL_ERROR;
        nghttp2_session_terminate_session(c->ng, code);
        c->goaway = true;
        return -1;
    }
    return 0;
}

static void on_io(fy_io_t *io, uint32_t ev)
{
    h2_conn_t *c = io->data;
    if (c->closed) return;
    c->in_io = true;
    fy_h2_mem_wake(&c->mem);
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        for (int i = 0; i < 8; i++) {
            if (!c->rbuf) c->rbuf = rbuf_get();
            ssize_t n = c->t->ops->read(c->t, c->rbuf->data, FY_CHUNK_SIZE);
            if (n == 0) break;
            if (n < 0) {
                c->in_io = false;
                conn_close(c);
                return;
            }
            c->t->want = 0;
            if (fy__h2_feed(c, c->rbuf->data, (size_t)n) < 0) {
                /* a GOAWAY is queued (feed_ng): send it, then close. What the socket does not
                   take now goes on EPOLLOUT: conn_flush closes once it is out (nghttp2 wants
                   neither to read nor to write then, and ignores what still arrives), and
                   the send timeout bounds the wait */
                c->in_io = false;
                conn_flush(c);
                if (!c->closed && c->wlen == c->wsent) conn_close(c);
                return;
            }
            if (c->closed) return;
            mem_sync(c);
            if (over_budget(c)) return;
            if (c->rbuf->refs > 1) {
                /* a handler holds a slice of it: the next read goes to another buffer */
                fy__h2_rbuf_release(c->rbuf);
                c->rbuf = NULL;
            }
            if ((size_t)n < FY_CHUNK_SIZE && !c->t->ops->pending(c->t)) break;
        }
        if (c->rbuf) {
            fy__h2_rbuf_release(c->rbuf);
            c->rbuf = NULL;
        }
        if (c->t->ops->pending(c->t)) fy_defer(c->loop, &c->reread);
    }
    c->in_io = false;
    if (!c->closed) conn_flush(c);
    if (!c->closed) mem_sync(c);
}

static void reread_cb(fy_defer_t *d)
{
    h2_conn_t *c = d->data;
    if (!c->closed) on_io(&c->io, EPOLLIN);
}

static void node_drain(fy_conn_node_t *n)
{
    h2_conn_t *c = fy_container_of(n, h2_conn_t, node);
    if (c->closed) return;
    if (!c->goaway) {
        nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->ng), NGHTTP2_NO_ERROR,
                              NULL, 0);
        c->goaway = true;
    }
    conn_flush(c);
}

static void node_close(fy_conn_node_t *n)
{
    conn_close(fy_container_of(n, h2_conn_t, node));
}

/* nghttp2 callbacks and options, made once per worker thread */
static __thread nghttp2_session_callbacks *cbs;
static __thread nghttp2_option *opt;

void fy_h2_thread_cleanup(void)
{
    if (cbs) nghttp2_session_callbacks_del(cbs);
    if (opt) nghttp2_option_del(opt);
    cbs = NULL;
    opt = NULL;
    fy_pool_drain(fy__h2_stream_pool());
    fy_pool_drain(rbuf_pool());
    fy_h2_client_thread_cleanup();
}

/* h2c upgrade: 101 first, then the HTTP/1.1 request is stream 1 (half-closed remote). */
static int start_upgraded(h2_conn_t *c, const fy_h2_upgrade_t *up)
{
    const fy_request_t *q = up->req;
    int r = nghttp2_session_upgrade2(c->ng, up->settings, up->settings_len,
                                     q->method_id == FY_M_HEAD, NULL);
    if (r != 0) {
        fy_info("h2c upgrade refused: %s", nghttp2_strerror(r));
        return -1;
    }
    static const char sw[] = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                             "Upgrade: h2c\r\n\r\n";
    fy__h2_wbuf_put(c, sw, sizeof sw - 1);
    h2_stream_t *s = fy__h2_stream_new(c, 1);
    c->max_sid = 1;
    fy_request_t *d = &s->ex.req;
    d->method = fy__h2_hdup(s, (const uint8_t *)q->method.p, q->method.len);
    d->method_id = q->method_id;
    d->target = fy__h2_hdup(s, (const uint8_t *)q->target.p, q->target.len);
    d->authority = fy__h2_hdup(s, (const uint8_t *)q->authority.p, q->authority.len);
    for (size_t i = 0; i < q->headers.n; i++) {
        fy_str_t n = q->headers.v[i].name;
        /* the upgrade's own hop-by-hop fields stay behind */
        if (fy_str_ieq(n, "connection", 10) || fy_str_ieq(n, "upgrade", 7) ||
            fy_str_ieq(n, "http2-settings", 14) || fy_str_ieq(n, "keep-alive", 10))
            continue;
        fy_str_t nn = fy__h2_hdup(s, (const uint8_t *)n.p, n.len);
        fy_str_t v =
            fy__h2_hdup(s, (const uint8_t *)q->headers.v[i].value.p, q->headers.v[i].value.len);
        fy_headers_add(&s->arena, &d->headers, nn.p, nn.len, v.p, v.len);
    }
    c->in_io = true;
    fy__h2_dispatch(s, true);
    c->in_io = false;
    return 0;
}

/* nghttp2 allocates through h2_mem.c (counted, its frame buffer trimmed when idle); sanitizer
 * builds see every block either way. */

int fy_h2_conn_start(fy_http_ctx_t *ctx, int fd, fy_transport_t *tls, const struct sockaddr *sa,
                     socklen_t salen, const char *data, size_t len, const fy_h2_upgrade_t *upgrade)
{
    const fy_h2_conf_t *conf = ctx->h2conf;
    if (!cbs) {
        nghttp2_session_callbacks_new(&cbs);
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, fy__h2_on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback2(cbs, fy__h2_on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, fy__h2_on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, fy__h2_on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, fy__h2_on_stream_close);
        nghttp2_session_callbacks_set_send_data_callback(cbs, fy__h2_send_data);
        nghttp2_option_new(&opt);
        nghttp2_option_set_no_auto_window_update(opt, 1);
        /* RFC 9113 §8 checks are ours (h2_check.c, on fields we read anyway): nghttp2's cost
           ~900 instructions per request */
        nghttp2_option_set_no_http_messaging(opt, 1);
        /* backstop only: our own budget (on_frame_recv) answers ENHANCE_YOUR_CALM first */
        nghttp2_option_set_stream_reset_rate_limit(opt, (uint64_t)conf->reset_burst * 2 + 16,
                                                   (uint64_t)conf->reset_rate * 2 + 16);
        nghttp2_option_set_max_continuations(opt, (size_t)conf->max_continuations);
        nghttp2_option_set_max_outbound_ack(opt, (size_t)conf->max_glitches);
        nghttp2_option_set_max_settings(opt, 32);
    }
    h2_conn_t *c = calloc(1, sizeof *c);
    if (!c) goto fail;
    c->ctx = ctx;
    c->conf = conf;
    c->loop = ctx->loop;
    memcpy(&c->remote, sa, salen < sizeof c->remote ? salen : sizeof c->remote);
    fy_sock_transport_init(&c->sock, fd);
    c->t = tls ? tls : &c->sock;
    fy_list_init(&c->streams);
    fy_timer_init(&c->timer, on_timer, c);
    c->flush_defer.cb = flush_cb;
    c->flush_defer.data = c;
    c->io.fd = fd;
    c->io.cb = on_io;
    c->io.data = c;
    c->node.drain = node_drain;
    c->node.close = node_close;
    c->rst_tokens = (double)conf->reset_burst;
    c->rst_at = ctx->loop->now_ms;
    c->reread.cb = reread_cb;
    c->reread.data = c;
    c->scan_magic = 24; /* the client magic comes first, also after an h2c upgrade */
    fy_h2_mem_init(&c->mem);
    if (nghttp2_session_server_new3(&c->ng, cbs, c, opt, &c->mem.mem) != 0) {
        free(c);
        c = NULL;
        goto fail;
    }
    fy_list_insert_tail(&ctx->conns, &c->node.link);
    ctx->nconns++;
    fy_counters_conn_open(FY_CPROTO_H2);
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)conf->max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)conf->initial_window_size},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, (uint32_t)conf->max_frame_size},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)ctx->limits->max_header_bytes},
        {NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1},
        /* RFC 9113 §5.3.2: no RFC 7540 priority tree, whose upkeep (dependencies, closed
           streams kept for it) cost ~190 instructions per request */
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
    nghttp2_session_set_local_window_size(c->ng, NGHTTP2_FLAG_NONE, 0,
                                          (int32_t)conf->connection_window_size);
    fy__h2_arm_keepalive(c);
    mem_sync(c);
    if (upgrade && start_upgraded(c, upgrade) < 0) {
        conn_close(c);
        return -EPROTO;
    }
    if (fy_io_set(c->loop, &c->io, EPOLLIN) < 0) {
        conn_close(c);
        return -EIO;
    }
    if (ctx->draining) node_drain(&c->node);
    if (c->closed) return 0;
    c->in_io = true;
    if (len && fy__h2_feed(c, data, len) < 0) {
        c->in_io = false;
        conn_flush(c); /* as in on_io */
        if (!c->closed && c->wlen == c->wsent) conn_close(c);
        return 0;
    }
    c->in_io = false;
    if (!c->closed) conn_flush(c);
    return 0;
fail:
    if (tls) tls->ops->destroy(tls);
    close(fd);
    return -ENOMEM;
}

int fy_h2_conn_start_tunnel(fy_http_ctx_t *ctx, int fd, fy_transport_t *tls,
                            const struct sockaddr *sa, socklen_t salen, void *tunnel,
                            void (*tunnel_free)(void *))
{
    fy_list_t *tail = ctx->conns.prev;
    int r = fy_h2_conn_start(ctx, fd, tls, sa, salen, NULL, 0, NULL);
    if (r < 0 || ctx->conns.prev == tail) {
        /* not started, or already closed again: nothing will free the tunnel but us */
        if (tunnel_free) tunnel_free(tunnel);
        return r < 0 ? r : -EPROTO;
    }
    h2_conn_t *c = fy_container_of(ctx->conns.prev, h2_conn_t, node.link);
    c->mitm_tunnel = tunnel;
    c->mitm_tunnel_free = tunnel_free;
    return 0;
}
