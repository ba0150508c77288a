/* HTTP/3 server codec: control and QPACK streams, request streams as exchanges. */
#include "h3/h3_server.h"
#include "h3/h3_server_int.h"

#define ENC_TABLE_MAX 4096 /* our QPACK encoder's dynamic table, at most */

void fy__h3_conn_error(h3_conn_t *c, uint64_t code, const char *why)
{
    if (c->closing) return;
    c->closing = true;
    char a[64];
    fy_info("client %s: h3 connection error 0x%llx: %s",
            fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), (unsigned long long)code,
            why);
    fy_quic_conn_close(c->qc, code, why);
}

int fy__h3_qwrite(h3_conn_t *c, fy_quic_stream_t *s, const void *p, size_t n)
{
    return fy_quic_stream_write(c->qc, s, p, n);
}

void fy__h3_write_frame_hdr(h3_conn_t *c, fy_quic_stream_t *s, uint64_t type, uint64_t len)
{
    uint8_t b[16];
    size_t k = fy_h3_varint_encode(b, type);
    k += fy_h3_varint_encode(b + k, len);
    fy__h3_qwrite(c, s, b, k);
}

void fy__h3_flush_decoder(h3_conn_t *c)
{
    size_t len = nghttp3_qpack_decoder_get_decoder_streamlen(c->dec);
    if (!len || !c->qdec) return;
    uint8_t stack[256];
    uint8_t *tmp = len <= sizeof stack ? stack : fy_xmalloc(len);
    nghttp3_buf b = {tmp, tmp + len, tmp, tmp};
    nghttp3_qpack_decoder_write_decoder(c->dec, &b);
    fy__h3_qwrite(c, c->qdec, b.pos, (size_t)(b.last - b.pos));
    if (tmp != stack) free(tmp);
}

/* ---- request side ---- */

static fy_pool_t *stream_pool(void)
{
    static __thread fy_pool_t pool;
    if (!pool.size) fy_pool_init(&pool, sizeof(h3_stream_t), 256);
    return &pool;
}

void fy_h3_thread_cleanup(void)
{
    fy_pool_drain(stream_pool());
}

static h3_stream_t *stream_new(h3_conn_t *c, fy_quic_stream_t *qs)
{
    h3_stream_t *s = fy_pool_get(stream_pool());
    memset(s, 0, offsetof(h3_stream_t, arena_first));
    s->c = c;
    s->qs = qs;
    s->file_fd = -1;
    fy_list_init(&s->blink);
    fy_arena_init(&s->arena, s->arena_first, sizeof s->arena_first, 4096);
    fy_exchange_t *ex = &s->ex;
    ex->arena = &s->arena;
    ex->ctx = c->ctx;
    ex->codec = s;
    ex->sink = &fy__h3_sink;
    ex->remote = (struct sockaddr *)&c->remote;
    ex->start_ms = c->ctx->loop->now_ms;
    ex->req.version = 30;
    ex->stream_id = (uint32_t)qs->id;
    ex->req.scheme = FY_STR_LIT("https");
    ex->req.content_length = -1;
    fy_list_insert_tail(&c->streams, &s->link);
    c->nstreams++;
    fy_gauge_add(fy_cid_streams_active[FY_CPROTO_H3], 1);
    qs->app = s;
    return s;
}

void fy__h3_stream_free(h3_stream_t *s)
{
    h3_conn_t *c = s->c;
    fy_defer_cancel(c->ctx->loop, &s->defer);
    if (s->blocked) {
        fy_list_remove(&s->blink);
        c->nblocked--;
    }
    if (s->sctx) nghttp3_qpack_stream_context_del(s->sctx);
    fy_list_remove(&s->link);
    c->nstreams--;
    fy_gauge_add(fy_cid_streams_active[FY_CPROTO_H3], -1);
    fy_arena_free(&s->arena);
    free(s->pend);
    free(s->body);
    fy_pool_put(stream_pool(), s);
    if (c->nstreams == 0 && c->goaway && !c->closing) {
        c->closing = true;
        fy_quic_conn_close(c->qc, FY_H3_NO_ERROR, NULL);
    }
}

/* ---- control and QPACK streams ---- */

static uint64_t on_setting(void *ud, uint64_t id, uint64_t v)
{
    h3_conn_t *c = ud;
    if (id == FY_H3_SETTINGS_ENABLE_CONNECT_PROTOCOL && v > 1) return FY_H3_SETTINGS_ERROR;
    if (id == FY_H3_SETTINGS_H3_DATAGRAM && v > 1) return FY_H3_SETTINGS_ERROR;
    uint64_t wte = fy_h3_wt_on_setting(c->wt, id, v);
    if (wte) return wte;
    /* our encoder's dynamic table: what the client's decoder allows, at most ENC_TABLE_MAX
       (MAX_FIELD_SECTION_SIZE is advisory) */
    if (id == FY_H3_SETTINGS_QPACK_MAX_TABLE_CAPACITY)
        nghttp3_qpack_encoder_set_max_dtable_capacity(c->enc,
                                                      v < ENC_TABLE_MAX ? v : ENC_TABLE_MAX);
    if (id == FY_H3_SETTINGS_QPACK_BLOCKED_STREAMS)
        nghttp3_qpack_encoder_set_max_blocked_streams(c->enc, v < 100 ? v : 100);
    return 0;
}

static void control_frame(h3_conn_t *c, h3_uni_t *u)
{
    if (u->rd.type == FY_H3_SETTINGS) {
        uint64_t e = fy_h3_settings_parse(u->fb, u->fn, on_setting, c);
        if (e)
            fy__h3_conn_error(c, e, "bad SETTINGS");
        else
            fy_h3_wt_settings_done(c->wt); /* sessions that waited for them */
    } else if (u->rd.type == FY_H3_GOAWAY) {
        uint64_t id;
        if (fy_h3_varint_decode(u->fb, u->fn, &id) != u->fn || u->fn == 0)
            fy__h3_conn_error(c, FY_H3_FRAME_ERROR, "bad GOAWAY");
        /* a client's GOAWAY limits pushes, which we never send */
    } else if (u->rd.type == FY_H3_MAX_PUSH_ID || u->rd.type == FY_H3_CANCEL_PUSH) {
        uint64_t id;
        if (fy_h3_varint_decode(u->fb, u->fn, &id) != u->fn || u->fn == 0)
            fy__h3_conn_error(c, FY_H3_FRAME_ERROR, "bad push frame");
    }
}

static void control_recv(h3_conn_t *c, h3_uni_t *u, fy_quic_stream_t *qs, const uint8_t *p,
                         size_t n)
{
    while (n && !c->closing) {
        if (!u->rd.have_hdr) {
            size_t k = fy_h3_frame_hdr_feed(&u->rd, p, n);
            p += k;
            n -= k;
            if (!u->rd.have_hdr) break;
            uint64_t t = u->rd.type;
            u->fn = 0;
            if (!c->got_settings && t != FY_H3_SETTINGS) {
                fy__h3_conn_error(c, FY_H3_MISSING_SETTINGS, "first control frame is not SETTINGS");
                return;
            }
            if (t == FY_H3_SETTINGS && c->got_settings) {
                fy__h3_conn_error(c, FY_H3_FRAME_UNEXPECTED, "second SETTINGS");
                return;
            }
            if (t == FY_H3_SETTINGS) c->got_settings = true;
            if (t == FY_H3_DATA || t == FY_H3_HEADERS || t == FY_H3_PUSH_PROMISE ||
                fy_h3_frame_is_h2_reserved(t)) {
                fy__h3_conn_error(c, FY_H3_FRAME_UNEXPECTED, "request frame on the control stream");
                return;
            }
            bool known = t == FY_H3_SETTINGS || t == FY_H3_GOAWAY || t == FY_H3_MAX_PUSH_ID ||
                         t == FY_H3_CANCEL_PUSH;
            if (known && u->rd.len > CTRL_FRAME_MAX) {
                fy__h3_conn_error(c, FY_H3_EXCESSIVE_LOAD, "control frame too large");
                return;
            }
        } else {
            size_t take = n < u->rd.left ? n : (size_t)u->rd.left;
            if (u->fn + take <= CTRL_FRAME_MAX) {
                memcpy(u->fb + u->fn, p, take);
                u->fn += take;
            }
            p += take;
            n -= take;
            u->rd.left -= take;
        }
        if (u->rd.have_hdr && u->rd.left == 0) {
            u->rd.have_hdr = false;
            control_frame(c, u);
        }
    }
}

static void uni_recv(h3_conn_t *c, fy_quic_stream_t *qs, const uint8_t *p, size_t n, bool fin)
{
    h3_uni_t *u = qs->app;
    if (u->type < 0) {
        while (n && u->type < 0) {
            u->tb[u->tn++] = *p++;
            n--;
            fy_quic_stream_consumed(c->qc, qs, 1);
            uint64_t t;
            if (fy_h3_varint_decode(u->tb, u->tn, &t)) {
                u->type = (int64_t)t;
                if (t == FY_WT_STREAM_UNI) { /* WebTransport: h3_wt.c's from now on */
                    free(u);
                    fy_h3_wt_uni(c->wt, qs, p, n, fin);
                    return;
                }
                if (t == FY_H3_STREAM_CONTROL || t == FY_H3_STREAM_QPACK_ENCODER ||
                    t == FY_H3_STREAM_QPACK_DECODER) {
                    bool *seen = t == FY_H3_STREAM_CONTROL         ? &c->peer_ctrl
                                 : t == FY_H3_STREAM_QPACK_ENCODER ? &c->peer_enc
                                                                   : &c->peer_dec;
                    if (*seen) {
                        fy__h3_conn_error(c, FY_H3_STREAM_CREATION_ERROR,
                                          "duplicate critical stream");
                        return;
                    }
                    *seen = true;
                } else if (t == FY_H3_STREAM_PUSH) {
                    fy__h3_conn_error(c, FY_H3_STREAM_CREATION_ERROR, "push stream from a client");
                    return;
                } else { /* unknown or reserved type: ignored (RFC 9114 §6.2.3) */
                    u->ignore = true;
                    fy_quic_stream_stop_reading(c->qc, qs, FY_H3_STREAM_CREATION_ERROR);
                }
            }
        }
    }
    fy_quic_stream_consumed(c->qc, qs, n); /* nothing here waits on a handler */
    if (u->type < 0 || u->ignore) return;
    if (n) {
        if (u->type == FY_H3_STREAM_CONTROL) {
            control_recv(c, u, qs, p, n);
        } else if (u->type == FY_H3_STREAM_QPACK_ENCODER) {
            nghttp3_ssize r = nghttp3_qpack_decoder_read_encoder(c->dec, p, n);
            if (r < 0) {
                fy__h3_conn_error(c, FY_H3_QPACK_ENCODER_STREAM_ERROR, nghttp3_strerror((int)r));
                return;
            }
            fy__h3_flush_decoder(c); /* Insert Count Increment */
            fy__h3_unblock_streams(c);
        } else if (u->type == FY_H3_STREAM_QPACK_DECODER) {
            nghttp3_ssize r = nghttp3_qpack_encoder_read_decoder(c->enc, p, n);
            if (r < 0) {
                fy__h3_conn_error(c, FY_H3_QPACK_DECODER_STREAM_ERROR, nghttp3_strerror((int)r));
                return;
            }
        }
    }
    if (fin) fy__h3_conn_error(c, FY_H3_CLOSED_CRITICAL_STREAM, "critical stream closed");
}

/* ---- quic app ops ---- */

static bool is_uni(int64_t id)
{
    return id & 0x2;
}

static void conn_node_drain(fy_conn_node_t *n)
{
    h3_conn_t *c = fy_container_of(n, h3_conn_t, node);
    if (c->closing || c->goaway) return;
    c->goaway = true;
    /* requests up to the highest id seen are served; later ones are rejected */
    uint64_t id = c->max_bidi < 0 ? 0 : (uint64_t)c->max_bidi + 4;
    uint8_t b[8];
    size_t k = fy_h3_varint_encode(b, id);
    fy__h3_write_frame_hdr(c, c->ctrl, FY_H3_GOAWAY, k);
    fy__h3_qwrite(c, c->ctrl, b, k);
    fy_h3_wt_drain(c->wt);
    if (c->nstreams == 0) {
        c->closing = true;
        fy_quic_conn_close(c->qc, FY_H3_NO_ERROR, NULL);
    }
}

static void conn_node_close(fy_conn_node_t *n)
{
    h3_conn_t *c = fy_container_of(n, h3_conn_t, node);
    c->closing = true;
    fy_quic_conn_abort(c->qc, FY_H3_NO_ERROR);
}

static void *app_open(fy_quic_conn_t *qc, void *ud)
{
    fy_http_ctx_t *ctx = ud;
    const fy_quic_conf_t *conf = fy_quic_conn_conf(qc);
    h3_conn_t *c = fy_xcalloc(1, sizeof *c);
    c->qc = qc;
    c->ctx = ctx;
    c->conf = conf;
    c->max_bidi = -1;
    c->wt = fy_h3_wt_new(qc, ctx->loop, conf);
    const struct sockaddr *ra = fy_quic_conn_remote(qc);
    memcpy(&c->remote, ra,
           ra->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    fy_list_init(&c->streams);
    fy_list_init(&c->blocked);
    const nghttp3_mem *mem = nghttp3_mem_default();
    if (nghttp3_qpack_encoder_new(&c->enc, ENC_TABLE_MAX, mem) != 0 ||
        nghttp3_qpack_decoder_new(&c->dec, (size_t)conf->qpack_table_capacity,
                                  (size_t)conf->qpack_blocked_streams, mem) != 0) {
        if (c->enc) nghttp3_qpack_encoder_del(c->enc);
        free(c);
        return NULL;
    }
    nghttp3_qpack_decoder_set_max_concurrent_streams(c->dec, (size_t)conf->max_streams + 8);
    c->ctrl = fy_quic_open_uni(qc);
    c->qenc = fy_quic_open_uni(qc);
    c->qdec = fy_quic_open_uni(qc);
    c->node.drain = conn_node_drain;
    c->node.close = conn_node_close;
    fy_list_insert_tail(&ctx->conns, &c->node.link);
    ctx->nconns++;
    fy_counters_conn_open(FY_CPROTO_H3);
    if (!c->ctrl || !c->qenc || !c->qdec) {
        fy__h3_conn_error(c, FY_H3_STREAM_CREATION_ERROR, "no unidirectional stream credit");
        return c;
    }
    c->ctrl->app = NULL;
    c->qenc->app = NULL;
    c->qdec->app = NULL;
    uint8_t b[160];
    size_t k = fy_h3_varint_encode(b, FY_H3_STREAM_CONTROL);
    uint8_t st[128];
    size_t sl = 0;
    sl += fy_h3_varint_encode(st + sl, FY_H3_SETTINGS_QPACK_MAX_TABLE_CAPACITY);
    sl += fy_h3_varint_encode(st + sl, conf->qpack_table_capacity);
    sl += fy_h3_varint_encode(st + sl, FY_H3_SETTINGS_QPACK_BLOCKED_STREAMS);
    sl += fy_h3_varint_encode(st + sl, (uint64_t)conf->qpack_blocked_streams);
    sl += fy_h3_varint_encode(st + sl, FY_H3_SETTINGS_MAX_FIELD_SECTION_SIZE);
    sl += fy_h3_varint_encode(st + sl, (uint64_t)ctx->limits->max_header_bytes);
    sl += fy_h3_varint_encode(st + sl, FY_H3_SETTINGS_ENABLE_CONNECT_PROTOCOL);
    sl += fy_h3_varint_encode(st + sl, 1);
    if (conf->max_datagram_size) {
        sl += fy_h3_varint_encode(st + sl, FY_H3_SETTINGS_H3_DATAGRAM);
        sl += fy_h3_varint_encode(st + sl, 1);
    }
    sl += fy_h3_wt_settings(conf, st + sl);
    k += fy_h3_varint_encode(b + k, FY_H3_SETTINGS);
    k += fy_h3_varint_encode(b + k, sl);
    memcpy(b + k, st, sl);
    k += sl;
    fy__h3_qwrite(c, c->ctrl, b, k);
    b[0] = FY_H3_STREAM_QPACK_ENCODER;
    fy__h3_qwrite(c, c->qenc, b, 1);
    b[0] = FY_H3_STREAM_QPACK_DECODER;
    fy__h3_qwrite(c, c->qdec, b, 1);
    if (ctx->draining) conn_node_drain(&c->node);
    return c;
}

static void app_stream_open(void *app, fy_quic_stream_t *qs)
{
    h3_conn_t *c = app;
    if (is_uni(qs->id)) {
        h3_uni_t *u = fy_xcalloc(1, sizeof *u);
        u->type = -1;
        qs->app = u;
        return;
    }
    if (c->goaway) { /* after GOAWAY: not processed, the client may retry it elsewhere */
        qs->app = NULL;
        fy_quic_stream_reset(c->qc, qs, FY_H3_REQUEST_REJECTED);
        fy_quic_stream_stop_reading(c->qc, qs, FY_H3_REQUEST_REJECTED);
        return;
    }
    if (qs->id > c->max_bidi) c->max_bidi = qs->id;
    stream_new(c, qs);
}

static int app_recv(void *app, fy_quic_stream_t *qs, const uint8_t *p, size_t n, bool fin)
{
    h3_conn_t *c = app;
    if (c->closing) return 0;
    if (qs->app_kind == FY_H3_APP_WT) {
        fy_h3_wt_recv(c->wt, qs, p, n, fin);
        return 0;
    }
    if (is_uni(qs->id)) {
        if (!qs->app) { /* one of ours: clients cannot send on it */
            fy_quic_stream_consumed(c->qc, qs, n);
            return 0;
        }
        uni_recv(c, qs, p, n, fin);
        return 0;
    }
    h3_stream_t *s = qs->app;
    if (!s) {
        fy_quic_stream_consumed(c->qc, qs, n);
        return 0;
    }
    fy__h3_request_recv(s, p, n, fin);
    return 0;
}

static void app_reset(void *app, fy_quic_stream_t *qs, uint64_t code)
{
    h3_conn_t *c = app;
    if (qs->app_kind == FY_H3_APP_WT) {
        fy_h3_wt_reset(c->wt, qs, code);
        return;
    }
    if (is_uni(qs->id)) {
        h3_uni_t *u = qs->app;
        if (u && !u->ignore && u->type >= 0)
            fy__h3_conn_error(c, FY_H3_CLOSED_CRITICAL_STREAM, "critical stream reset");
        return;
    }
    h3_stream_t *s = qs->app;
    if (!s || s->peer_gone) return;
    s->peer_gone = true;
    if (!s->ex_done) {
        if (!s->ex.error) s->ex.error = "stream reset by client";
        if (s->ex.producer && s->ex.producer->stop && s->ex.response_started)
            s->ex.producer->stop(&s->ex);
        fy__h3_abort_stream(s, FY_H3_REQUEST_CANCELLED);
    }
}

static void app_acked(void *app, fy_quic_stream_t *qs)
{
    if (qs->app_kind == FY_H3_APP_WT) {
        fy_h3_wt_acked(((h3_conn_t *)app)->wt, qs);
        return;
    }
    if (is_uni(qs->id)) return;
    h3_stream_t *s = qs->app;
    if (s) fy__h3_progress(s);
}

static void app_stream_close(void *app, fy_quic_stream_t *qs, uint64_t code)
{
    if (qs->app_kind == FY_H3_APP_WT) {
        fy_h3_wt_stream_close(((h3_conn_t *)app)->wt, qs);
        return;
    }
    if (is_uni(qs->id)) {
        free(qs->app);
        qs->app = NULL;
        return;
    }
    h3_stream_t *s = qs->app;
    if (!s) return;
    qs->app = NULL;
    s->qs = NULL;
    if (!s->ex_done) {
        if (!s->ex.error) s->ex.error = "stream closed";
        if (s->ex.producer && s->ex.producer->stop && s->ex.response_started)
            s->ex.producer->stop(&s->ex);
        fy__h3_stream_done(s); /* frees */
    } else {
        fy__h3_stream_free(s);
    }
}

static void app_close(void *app)
{
    h3_conn_t *c = app;
    fy_http_ctx_t *ctx = c->ctx;
    /* QUIC closed every stream first (app_stream_close) */
    while (!fy_list_empty(&c->streams)) {
        h3_stream_t *s = fy_container_of(c->streams.next, h3_stream_t, link);
        s->qs = NULL;
        s->ex_done = true;
        fy__h3_stream_free(s);
    }
    fy_h3_wt_free(c->wt);
    nghttp3_qpack_encoder_del(c->enc);
    nghttp3_qpack_decoder_del(c->dec);
    const nghttp3_mem *mem = nghttp3_mem_default();
    nghttp3_buf_free(&c->pb, mem);
    nghttp3_buf_free(&c->rb, mem);
    nghttp3_buf_free(&c->eb, mem);
    fy_list_remove(&c->node.link);
    ctx->nconns--;
    fy_counters_conn_close(FY_CPROTO_H3);
    free(c);
    if (ctx->on_conn_closed) ctx->on_conn_closed(ctx);
}

static void app_datagram(void *app, const uint8_t *p, size_t n)
{
    h3_conn_t *c = app;
    if (!c->closing) fy_h3_wt_datagram(c->wt, p, n);
}

fy_h3_wt_t *fy_h3_exchange_wt(fy_exchange_t *ex, int64_t *stream_id)
{
    if (ex->sink != &fy__h3_sink) return NULL;
    h3_stream_t *s = ex->codec;
    if (!s->qs) return NULL;
    *stream_id = s->qs->id;
    return s->c->wt;
}

static const fy_quic_app_ops_t h3_app = {
    .open = app_open,
    .stream_open = app_stream_open,
    .recv = app_recv,
    .reset = app_reset,
    .acked = app_acked,
    .stream_close = app_stream_close,
    .datagram = app_datagram,
    .close = app_close,
};

fy_quic_endpoint_t *fy_h3_endpoint_start(fy_http_ctx_t *ctx, fy_quic_server_t *qs, int fd)
{
    return fy_quic_endpoint_new(ctx->loop, qs, fd, &h3_app, ctx);
}

void fy_h3_endpoint_set_ctx(fy_quic_endpoint_t *ep, fy_http_ctx_t *ctx)
{
    fy_quic_endpoint_set_ud(ep, ctx);
}

void fy_h3_endpoint_drain(fy_quic_endpoint_t *ep)
{
    fy_quic_endpoint_stop_accepting(ep);
}
