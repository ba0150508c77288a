/* HTTP/1.1 server codec: the request side. Parse each request head in the read buffer
 * (pipelining: one at a time), build its exchange and dispatch it; the answers the codec gives
 * itself (reject); what happens when an exchange ends (drain the unread body, next request).
 * Thread rules: h1_server_int.h. */
#include "h1/h1_server_int.h"

#define ARENA_FIRST 2048 /* the arena's first block: most requests need no other */

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
    if (c->b->hdrs) return;
    size_t sz = hdrs_size(c);
    if (hdr_pool.size == 0) fy_pool_init(&hdr_pool, sz, 64);
    c->b->hdrs = hdr_pool.size == sz ? fy_pool_get(&hdr_pool) : fy_xmalloc(sz);
}

/* The arena's first block, from a per-thread pool: an idle connection holds none. */
static _Thread_local fy_pool_t arena_pool;

/* What a request in progress needs beyond the connection: the header array and the arena's
 * first block. Taken when a request's first byte is parsed (or a request-less error is
 * answered), given back by idle_release. */
static void req_mem_get(h1_conn_t *c)
{
    fy__h1_busy_get(c);
    hdrs_get(c);
    if (c->b->arena_first) return;
    c->mem_dirty = true;
    if (arena_pool.size == 0) fy_pool_init(&arena_pool, ARENA_FIRST, 64);
    c->b->arena_first = fy_pool_get(&arena_pool);
    fy_arena_init(&c->b->arena, c->b->arena_first, ARENA_FIRST, 4096);
}

static void arena_put(h1_conn_t *c)
{
    fy_arena_free(&c->b->arena);
    if (c->b->arena_first) fy_pool_put(&arena_pool, c->b->arena_first);
    c->b->arena_first = NULL;
    fy_arena_init(&c->b->arena, NULL, 0, 4096);
}

static void hdrs_put(h1_conn_t *c)
{
    if (!c->b->hdrs) return;
    if (hdr_pool.size == hdrs_size(c))
        fy_pool_put(&hdr_pool, c->b->hdrs);
    else
        free(c->b->hdrs);
    c->b->hdrs = NULL;
}

/* The request parts (h1_busy_t), per thread like the header arrays. */
static _Thread_local fy_pool_t busy_pool;

void fy__h1_busy_get(h1_conn_t *c)
{
    if (c->b) return;
    if (busy_pool.size == 0) fy_pool_init(&busy_pool, sizeof(h1_busy_t), 64);
    h1_busy_t *b = fy_pool_get(&busy_pool);
    memset(b, 0, sizeof *b);
    b->file_fd = -1;
    fy_arena_init(&b->arena, NULL, 0, 4096); /* its first block: req_mem_get */
    c->b = b;
    c->mem_dirty = true;
}

void fy__h1_busy_put(h1_conn_t *c)
{
    h1_busy_t *b = c->b;
    if (!b) return;
    hdrs_put(c);
    arena_put(c);
    if (b->fbuf) fy_pool_put(fy_chunk_pool(), b->fbuf);
    fy_pool_put(&busy_pool, b);
    c->b = NULL;
    c->mem_dirty = true;
}

void fy_h1_thread_cleanup(void)
{
    fy_pool_drain(&hdr_pool);
    fy_pool_drain(&arena_pool);
    fy_pool_drain(&busy_pool);
}

size_t fy_h1_thread_cached(void)
{
    return hdr_pool.nfree + arena_pool.nfree + busy_pool.nfree;
}

/* The client speaks HTTP/2 (ALPN h2, or the h2c preface): give the fd, the transport and
 * the bytes read so far to the h2 codec, and go away quietly. */
void fy__h1_handoff_h2(h1_conn_t *c, const fy_h2_upgrade_t *up)
{
    fy_http_ctx_t *ctx = c->ctx;
    fy_transport_t *tls = c->t != &c->sock ? c->t : NULL;
    const char *data = c->rbuf ? c->rbuf + c->rstart : NULL;
    size_t len = c->rbuf ? c->rlen - c->rstart : 0;
    fy_io_set(c->loop, &c->io, 0);
    c->handed_off = true;
    ctx->start_h2(ctx, c->sock.fd, tls, &c->remote.sa, sizeof c->remote, data, len, up);
    c->t = &c->sock;
    c->ex_active = false; /* an upgraded request lives on as h2 stream 1 */
    fy__h1_conn_close(c);
}

/* `Upgrade: h2c` with HTTP2-Settings on a bodiless request, on a listener that serves h2c and
 * with nothing of ours in flight: continue in HTTP/2 (RFC 7540 §3.2). Returns true if the
 * connection was handed over. Anything else about the request keeps it on HTTP/1.1; so does an
 * absolute-form (proxy) request: the upgrade is for the origin, and stream 1 would lose the
 * request's absolute URI (curl --http2 -x sends one). */
static bool try_upgrade_h2c(h1_conn_t *c)
{
    fy_http_ctx_t *ctx = c->ctx;
    if (!c->b->req.conn_upgrade || c->b->ex.req.absolute_form || ctx->is_tls ||
        !(ctx->protocols & FY_PROTO_H2C) || !ctx->start_h2 || c->body_mode != B_NONE ||
        fy__h1_output_pending(c) || c->b->ex.req.version < 11)
        return false;
    const fy_headers_t *hs = &c->b->ex.req.headers;
    const fy_header_t *up = FY_HDR_FIND(hs, "upgrade"), *cn = FY_HDR_FIND(hs, "connection");
    const fy_header_t *st = FY_HDR_FIND(hs, "http2-settings");
    if (!up || !st || !cn || !fy_str_list_has(up->value, "h2c", 3) ||
        !fy_str_list_has(cn->value, "http2-settings", 14))
        return false;
    unsigned char settings[1024];
    int n = fy_base64url_decode(st->value.p, st->value.len, settings, sizeof settings);
    if (n < 0 || n % 6) return false;
    fy_h2_upgrade_t u = {&c->b->ex.req, settings, (size_t)n};
    fy__h1_handoff_h2(c, &u);
    return true;
}

/* ---- request side ---- */

/* An answer that ends the connection: a request the codec cannot read on (parse errors), or a
 * refusal of the protocol stage (ex->refused, http/protocol.h). */
void fy__h1_reject(h1_conn_t *c, int status, const char *why)
{
    fy__h1_busy_get(c);
    c->body_mode = B_NONE;
    if (!c->ex_active) {
        /* a minimal exchange so the error goes through the normal writer and access log */
        req_mem_get(c);
        fy_exchange_t *ex = &c->b->ex;
        memset(ex, 0, sizeof *ex);
        ex->arena = &c->b->arena;
        ex->ctx = c->ctx;
        ex->codec = c;
        ex->sink = &fy__h1_sink;
        ex->remote = &c->remote.sa;
        ex->start_ms = c->loop->now_ms;
        ex->req.version = 11;
        ex->req.method = FY_STR_LIT("-");
        ex->req.target = FY_STR_LIT("-");
        c->ex_active = true;
        c->head_written = c->res_final = c->want_proceed = false;
    }
    c->read_paused = true;
    fy_exchange_refuse(&c->b->ex, status, why);
}

/* The head of a refusal is being written: said in the log, and the connection closed after
 * the response without reading the request's body (the linger drops its bytes). */
void fy__h1_refused(h1_conn_t *c)
{
    char a[64];
    fy_info("client %s: %d %s: %s", fy_sock_addr_str(&c->remote.sa, a, sizeof a),
            c->b->ex.res.status, fy_http_reason(c->b->ex.res.status), c->b->ex.error);
    c->keepalive = false;
    c->body_mode = B_NONE;
    c->read_paused = true;
}

static void begin_exchange(h1_conn_t *c, int headlen)
{
    fy_exchange_t *ex = &c->b->ex;
    fy_h1_req_t *r = &c->b->req;
    memset(ex, 0, sizeof *ex);
    ex->arena = &c->b->arena;
    ex->ctx = c->ctx;
    ex->codec = c;
    ex->sink = &fy__h1_sink;
    ex->remote = &c->remote.sa;
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
    q->headers.v = (fy_header_t *)c->b->hdrs; /* same layout: two slices */
    q->headers.n = r->nheaders;
    /* the rest of the array is room for fields a filter adds (traceparent, transforms) */
    q->headers.cap = (size_t)c->ctx->limits->max_headers;
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
        c->b->body_left = r->content_length;
    } else if (r->body_kind == FY_H1_BODY_CHUNKED) {
        q->content_length = -1;
        c->body_mode = B_CHUNKED;
        fy_h1_chunked_init(&c->b->chunked);
    } else {
        q->content_length = 0;
        c->body_mode = B_NONE;
    }
    c->rstart += (size_t)headlen;
    c->b->body_pos = c->b->body_out = c->rstart;
    if (r->conn_close || (q->version == 10 && !r->conn_keep_alive)) c->keepalive = false;
    if (c->ctx->draining) c->keepalive = false;
}

_Static_assert(sizeof(fy_h1_header_t) == sizeof(fy_header_t), "header layouts");

/* Parse and dispatch as many requests as the buffer holds (pipelining), one at a time. */
void fy__h1_process(h1_conn_t *c)
{
    while (!c->closed && !c->ex_active && !c->lingering) {
        if (c->discarding) return;
        if (!c->rbuf || c->rstart == c->rlen) {
            /* idle: give the buffers back while we wait (all of it: T_IDLE) */
            if (c->rbuf && !fy__h1_output_pending(c)) {
                fy__h1_rbuf_release(c);
                if (c->wbuf && c->wlen == 0) {
                    fy_pool_put(fy_chunk_pool(), c->wbuf);
                    c->wbuf = NULL;
                }
            }
            if (!c->keepalive) {
                if (!fy__h1_output_pending(c)) fy__h1_conn_linger(c);
                return;
            }
            if (c->ctx->draining && !fy__h1_output_pending(c)) {
                fy__h1_conn_close(c);
                return;
            }
            c->read_paused = false;
            if (c->requests == 1 && !fy__h1_output_pending(c)) {
                /* the first response is out: everything back now (see fy__h1_flush) */
                fy__h1_idle_release(c);
                fy__h1_set_timer(c, T_KEEPALIVE);
            } else if (c->requests) {
                fy__h1_set_timer(c, T_IDLE);
            }
            return;
        }
        fy__h1_busy_get(c); /* a request's bytes (pipelined: it was kept) */
        if (!c->keepalive) {
            /* pipelined bytes after a "Connection: close" response are not served */
            if (!fy__h1_output_pending(c)) fy__h1_conn_linger(c);
            return;
        }
        if (c->requests == 0 && c->b->req.scanned == 0 && (c->ctx->protocols & FY_PROTO_H2C) &&
            c->ctx->start_h2 && !c->ctx->is_tls) {
            static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
            size_t have = c->rlen - c->rstart, cmp = have < 24 ? have : 24;
            if (memcmp(c->rbuf + c->rstart, preface, cmp) == 0) {
                if (have < 24) return; /* wait for the whole preface */
                fy__h1_handoff_h2(c, NULL);
                return;
            }
            if (!(c->ctx->protocols & FY_PROTO_H1)) {
                /* an h2c-only listener speaks HTTP/2 from the first byte: the h2 codec answers
                   the invalid preface with GOAWAY PROTOCOL_ERROR (RFC 9113 §3.4), as nginx */
                fy__h1_handoff_h2(c, NULL);
                return;
            }
        }
        if (!(c->ctx->protocols & FY_PROTO_H1) && c->ctx->protocols) {
            /* an h2c-only listener: nothing but the HTTP/2 preface is served */
            fy__h1_reject(c, 505, "HTTP/1.1 is not served on this listener (protocols)");
            return;
        }
        if (c->b->req.scanned == 0) {
            /* a new request: move its first bytes to the front so that its head and body get
               the whole buffer (pipelined leftovers are few bytes) */
            if (c->rstart > 0) {
                memmove(c->rbuf, c->rbuf + c->rstart, c->rlen - c->rstart);
                c->rlen -= c->rstart;
                c->rstart = 0;
            }
            req_mem_get(c);
            fy_h1_req_init(&c->b->req, c->b->hdrs);
        }
        fy_h1_limits_t lim = {c->ctx->limits->max_request_line, c->ctx->limits->max_header_bytes,
                              (size_t)c->ctx->limits->max_headers};
        int r = fy_h1_parse_request(&c->b->req, c->rbuf + c->rstart, c->rlen - c->rstart, &lim);
        if (r == FY_H1_INCOMPLETE) {
            if (c->timer_kind != T_HEADER) fy__h1_set_timer(c, T_HEADER);
            c->read_paused = false;
            /* make room: move the partial head to the front, or grow up to the limit */
            if (c->rlen == c->rcap) {
                if (c->rstart > 0) {
                    memmove(c->rbuf, c->rbuf + c->rstart, c->rlen - c->rstart);
                    c->rlen -= c->rstart;
                    c->rstart = 0;
                    c->b->req.scanned = 0; /* the parser rescans from the moved start */
                } else {
                    size_t ncap = c->rcap * 2;
                    char *nb = malloc(ncap);
                    if (!nb) {
                        fy__h1_conn_close(c);
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
                    c->b->req.scanned = 0;
                }
            }
            return;
        }
        c->b->req.scanned = 0;
        if (r < 0) {
            if (r == FY_H1_EURI_TOO_LONG || r == FY_H1_EHDR_TOO_LARGE || r == FY_H1_ETOO_MANY_HDRS)
                fy_counter_inc(fy_cid_limit[r == FY_H1_EURI_TOO_LONG    ? FY_LIMIT_REQUEST_LINE
                                            : r == FY_H1_EHDR_TOO_LARGE ? FY_LIMIT_HEADER_BYTES
                                                                        : FY_LIMIT_HEADER_COUNT]);
            fy__h1_reject(c, fy_h1_err_status(r), fy_h1_err_str(r));
            return;
        }
        begin_exchange(c, r);
        c->requests++;
        fy_exchange_t *ex = &c->b->ex;
        if (ex->req.method_id == FY_M_CONNECT) {
            /* authority-form (RFC 9112 §3.2.3); the protocol stage refuses it (405) unless a
               forward proxy's handler takes the connection over */
            ex->req.authority = ex->req.target;
            ex->req.path = ex->req.query = FY_STR_NULL;
        } else if (ex->req.target.len == 0 || ex->req.target.p[0] != '/') {
            if (!fy_request_is_asterisk(&ex->req)) { /* the protocol stage answers `OPTIONS *` */
                fy__h1_reject(c, 400, "request-target is not origin-form");
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

void fy__h1_end_exchange(h1_conn_t *c)
{
    fy_exchange_t *ex = &c->b->ex;
    fy_exchange_done(ex);
    c->ex_active = false;
    /* the exchange's memory at its end: its header array and arena (the stream gauges) */
    fy_gauge_raise(fy_cid_stream_mem_max[FY_CPROTO_H1],
                   (c->b->hdrs ? hdrs_size(c) : 0) + fy_arena_bytes(&c->b->arena));
    fy_counters_stream_mem(FY_CPROTO_H1, &c->stream_held, 0);
    fy_arena_reset(&c->b->arena);
    c->head_written = c->res_final = c->want_proceed = false;
    c->read_paused = false; /* the next request (or the close) is ours to read again */
    if (c->body_mode != B_NONE) {
        /* the handler did not read the whole body: drain it to keep the connection */
        if (!c->keepalive) {
            /* not worth draining: close once the response is out (flush lingers) */
            c->body_mode = B_NONE;
            if (!fy__h1_output_pending(c)) fy__h1_conn_linger(c);
            return;
        }
        c->discarding = true;
        c->body_delivered = false;
        c->body_wanted = true;
        c->read_paused = false;
        fy__h1_deliver_body(c);
        if (c->closed || c->body_mode != B_NONE) return;
    }
    c->discarding = false;
    /* the next pipelined request, unless we are inside the read loop (it continues there) */
    if (!c->in_read) {
        c->defer.cb = fy__h1_proceed_cb;
        c->defer.data = c;
        fy_defer(c->loop, &c->defer);
    }
}
