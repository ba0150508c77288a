/* HTTP/3 server codec: control and QPACK streams, request streams as exchanges. */
#include "h3/h3_server.h"

#include <errno.h>
#include <nghttp3/nghttp3.h>
#include <stddef.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/counters.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/pool.h"
#include "h3/h3_frame.h"
#include "h3/h3_qpack.h"
#include "h3/h3_wt.h"
#include "net/sock.h"

#define CTRL_FRAME_MAX 4096 /* SETTINGS/GOAWAY/... payloads we buffer on the control stream */
#define FILE_PIECE 65536    /* DATA frame size when sending files */
#define ENC_TABLE_MAX 4096  /* our QPACK encoder's dynamic table, at most */

typedef struct h3_conn h3_conn_t;

typedef struct h3_stream {
    fy_exchange_t ex;
    fy_arena_t arena;
    h3_conn_t *c;
    fy_quic_stream_t *qs; /* NULL once QUIC closed it */
    fy_h3_frame_rd_t rd;
    int phase; /* 0: want HEADERS, 1: body (DATA, trailers), 2: after trailers */
    uint8_t *hbuf;
    size_t hlen, hoff, hcap; /* HEADERS payload being collected / decoded */
    bool skip_headers;       /* that payload is over the limit: skipped, then 431 */
    nghttp3_qpack_stream_context *sctx;
    bool blocked; /* waiting for the QPACK encoder stream */
    uint8_t *pend;
    size_t pend_len, pend_cap; /* bytes received while blocked */
    bool pend_fin;
    fy_list_t blink;
    size_t hdr_bytes;
    bool hdr_too_large, saw_regular;
    const char *malformed; /* why the field section is malformed (RFC 9114 §4.1.2), or NULL */
    unsigned pseudo_seen;  /* PSEUDO_* bits */
    fy_str_t host;         /* the Host field's value (host_seen) */
    bool host_seen;
    bool dispatched, fin_recv, peer_gone;
    /* response */
    bool head_written, final, ex_done, want_proceed, finished;
    int file_fd;
    off_t file_off;
    size_t file_left;
    /* request body */
    char *body;
    size_t body_cap, body_len, body_given;
    bool body_end, body_wanted, end_delivered;
    fy_defer_t defer;
    fy_list_t link;
    _Alignas(16) char arena_first[1024];
} h3_stream_t;

typedef struct h3_uni {
    int64_t type; /* -1 until read */
    uint8_t tb[8];
    size_t tn;
    fy_h3_frame_rd_t rd;
    uint8_t fb[CTRL_FRAME_MAX];
    size_t fn;
    bool ignore;
} h3_uni_t;

struct h3_conn {
    fy_conn_node_t node;
    fy_quic_conn_t *qc;
    fy_http_ctx_t *ctx;
    const fy_quic_conf_t *conf;
    struct sockaddr_storage remote;
    nghttp3_qpack_encoder *enc;
    nghttp3_qpack_decoder *dec;
    fy_quic_stream_t *ctrl, *qenc, *qdec;
    bool peer_ctrl, peer_enc, peer_dec, got_settings;
    bool closing, goaway;
    int64_t max_bidi; /* highest request stream id seen */
    fy_list_t streams;
    size_t nstreams;
    fy_list_t blocked;
    size_t nblocked;        /* streams on `blocked`: at most quic.qpack-blocked-streams */
    nghttp3_buf pb, rb, eb; /* QPACK encoder output, reused for every field section */
    fy_h3_wt_t *wt;         /* WebTransport sessions and streams (h3_wt.c) */
};

static void conn_error(h3_conn_t *c, uint64_t code, const char *why)
{
    if (c->closing) return;
    c->closing = true;
    char a[64];
    fy_info("client %s: h3 connection error 0x%llx: %s",
            fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), (unsigned long long)code,
            why);
    fy_quic_conn_close(c->qc, code, why);
}

static int qwrite(h3_conn_t *c, fy_quic_stream_t *s, const void *p, size_t n)
{
    return fy_quic_stream_write(c->qc, s, p, n);
}

static void write_frame_hdr(h3_conn_t *c, fy_quic_stream_t *s, uint64_t type, uint64_t len)
{
    uint8_t b[16];
    size_t k = fy_h3_varint_encode(b, type);
    k += fy_h3_varint_encode(b + k, len);
    qwrite(c, s, b, k);
}

static void flush_decoder(h3_conn_t *c)
{
    size_t len = nghttp3_qpack_decoder_get_decoder_streamlen(c->dec);
    if (!len || !c->qdec) return;
    uint8_t stack[256];
    uint8_t *tmp = len <= sizeof stack ? stack : fy_xmalloc(len);
    nghttp3_buf b = {tmp, tmp + len, tmp, tmp};
    nghttp3_qpack_decoder_write_decoder(c->dec, &b);
    qwrite(c, c->qdec, b.pos, (size_t)(b.last - b.pos));
    if (tmp != stack) free(tmp);
}

/* ---- response side ---- */

static void stream_free(h3_stream_t *s);

static void stream_done(h3_stream_t *s)
{
    if (s->ex_done) return;
    s->ex_done = true;
    h3_conn_t *c = s->c;
    if (s->ex.res.status) fy_exchange_done(&s->ex);
    /* a request body nobody will read: stop it (RFC 9114 §4.1.2) and give its credit back */
    if (s->qs && !s->fin_recv && !s->peer_gone)
        fy_quic_stream_stop_reading(c->qc, s->qs, FY_H3_NO_ERROR);
    if (s->qs && s->body_len) fy_quic_stream_consumed(c->qc, s->qs, s->body_len);
    s->body_len = s->body_given = 0;
    if (!s->qs) stream_free(s);
}

static void proceed_cb(fy_defer_t *d)
{
    h3_stream_t *s = d->data;
    if (!s->qs || s->ex_done || !s->want_proceed) return;
    s->want_proceed = false;
    if (s->ex.producer && s->ex.producer->proceed) s->ex.producer->proceed(&s->ex);
}

static bool is_conn_specific(fy_str_t n)
{
    return fy_str_ieq(n, "connection", 10) || fy_str_ieq(n, "keep-alive", 10) ||
           fy_str_ieq(n, "transfer-encoding", 17) || fy_str_ieq(n, "upgrade", 7) ||
           fy_str_ieq(n, "proxy-connection", 16);
}

static char *lower_dup(h3_stream_t *s, fy_str_t n)
{
    char *d = fy_arena_alloc(&s->arena, n.len + 1);
    for (size_t i = 0; i < n.len; i++) d[i] = fy_lower(n.p[i]);
    d[n.len] = 0;
    return d;
}

/* Encode a field section and queue it as one HEADERS frame. */
static void write_headers(h3_stream_t *s, nghttp3_nv *nv, size_t n)
{
    h3_conn_t *c = s->c;
    nghttp3_buf_reset(&c->pb);
    nghttp3_buf_reset(&c->rb);
    nghttp3_buf_reset(&c->eb);
    int r = nghttp3_qpack_encoder_encode(c->enc, &c->pb, &c->rb, &c->eb, s->qs->id, nv, n);
    if (r != 0) {
        conn_error(c, FY_H3_INTERNAL_ERROR, "QPACK encoder failed");
        return;
    }
    if (nghttp3_buf_len(&c->eb) && c->qenc) qwrite(c, c->qenc, c->eb.pos, nghttp3_buf_len(&c->eb));
    write_frame_hdr(c, s->qs, FY_H3_HEADERS, nghttp3_buf_len(&c->pb) + nghttp3_buf_len(&c->rb));
    qwrite(c, s->qs, c->pb.pos, nghttp3_buf_len(&c->pb));
    qwrite(c, s->qs, c->rb.pos, nghttp3_buf_len(&c->rb));
}

#define NV(n, v, vl) ((nghttp3_nv){(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), 0})

static void write_head(h3_stream_t *s, int status, const fy_headers_t *hs, bool final_head)
{
    fy_exchange_t *ex = &s->ex;
    size_t n = hs->n + 4;
    nghttp3_nv *nv = fy_arena_alloc(&s->arena, n * sizeof *nv);
    size_t k = 0;
    char *st = fy_arena_alloc(&s->arena, 4);
    st[0] = (char)('0' + status / 100 % 10);
    st[1] = (char)('0' + status / 10 % 10);
    st[2] = (char)('0' + status % 10);
    nv[k++] = NV(":status", st, 3);
    if (final_head) {
        nv[k++] = NV("server", "ferry", 5);
        nv[k++] = NV("date", fy_http_date(s->c->ctx->loop->now_sec), 29);
        if (ex->res.content_length >= 0 && status != 204 && status != 304) {
            char *cl = fy_arena_alloc(&s->arena, 24);
            int l = snprintf(cl, 24, "%lld", (long long)ex->res.content_length);
            nv[k++] = (nghttp3_nv){(uint8_t *)"content-length", (uint8_t *)cl, 14, (size_t)l, 0};
        }
    }
    for (size_t i = 0; i < hs->n; i++) {
        const fy_header_t *h = &hs->v[i];
        if (is_conn_specific(h->name)) continue;
        nv[k++] = (nghttp3_nv){(uint8_t *)lower_dup(s, h->name), (uint8_t *)h->value.p, h->name.len,
                               h->value.len, 0};
    }
    write_headers(s, nv, k);
}

static void finish(h3_stream_t *s)
{
    if (s->finished) return;
    s->finished = true;
    if (s->ex.res_trailers.n && s->ex.req.method_id != FY_M_HEAD) {
        const fy_headers_t *t = &s->ex.res_trailers;
        nghttp3_nv *nv = fy_arena_alloc(&s->arena, t->n * sizeof *nv);
        for (size_t i = 0; i < t->n; i++)
            nv[i] = (nghttp3_nv){(uint8_t *)lower_dup(s, t->v[i].name), (uint8_t *)t->v[i].value.p,
                                 t->v[i].name.len, t->v[i].value.len, 0};
        write_headers(s, nv, t->n);
    }
    fy_quic_stream_finish(s->c->qc, s->qs);
    stream_done(s);
}

/* Queue file bytes while the stream's queue has room. */
static int pump_file(h3_stream_t *s)
{
    h3_conn_t *c = s->c;
    while (s->file_left && fy_quic_stream_buffered(s->qs) < c->conf->send_buffer) {
        if (fy_quic_stream_is_write_closed(s->qs)) return -1;
        size_t piece = s->file_left < FILE_PIECE ? s->file_left : FILE_PIECE;
        write_frame_hdr(c, s->qs, FY_H3_DATA, piece);
        while (piece) {
            size_t avail;
            uint8_t *d = fy_quic_stream_wbuf(c->qc, s->qs, &avail);
            size_t want = piece < avail ? piece : avail;
            ssize_t r = pread(s->file_fd, d, want, s->file_off);
            if (r <= 0) {
                fy_error("h3: read file: %s", r < 0 ? strerror(errno) : "file shrank");
                return -1;
            }
            fy_quic_stream_commit(c->qc, s->qs, (size_t)r);
            s->file_off += r;
            s->file_left -= (size_t)r;
            piece -= (size_t)r;
        }
    }
    return 0;
}

static void abort_stream(h3_stream_t *s, uint64_t code)
{
    if (s->qs && !s->finished) {
        s->finished = true;
        fy_quic_stream_reset(s->c->qc, s->qs, code);
    }
    stream_done(s);
}

/* After a send or an acknowledgement: more file, the end, or the next `proceed`. */
static void progress(h3_stream_t *s)
{
    if (!s->qs || s->ex_done) return;
    if (s->file_left && pump_file(s) < 0) {
        abort_stream(s, FY_H3_INTERNAL_ERROR);
        return;
    }
    if (s->file_left) return;
    if (s->final) {
        finish(s);
        return;
    }
    if (s->want_proceed && fy_quic_stream_buffered(s->qs) < s->c->conf->send_buffer) {
        s->defer.cb = proceed_cb;
        s->defer.data = s;
        fy_defer(s->c->ctx->loop, &s->defer);
    }
}

static void h3_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state)
{
    h3_stream_t *s = ex->codec;
    if (s->ex_done || s->final) return;
    if (!s->qs || s->peer_gone) {
        if (state != FY_SEND_MORE) stream_done(s);
        return;
    }
    if (state == FY_SEND_ERROR) {
        abort_stream(s, FY_H3_INTERNAL_ERROR);
        return;
    }
    bool head_only =
        ex->req.method_id == FY_M_HEAD || ex->res.status == 204 || ex->res.status == 304;
    if (!s->head_written) {
        write_head(s, ex->res.status, &ex->res.headers, true);
        s->head_written = true;
        ex->head_sent = true;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += bufs[i].iov_len;
    if (total && !head_only) {
        write_frame_hdr(s->c, s->qs, FY_H3_DATA, total);
        for (size_t i = 0; i < n; i++) qwrite(s->c, s->qs, bufs[i].iov_base, bufs[i].iov_len);
    }
    ex->bytes_sent += total;
    if (state == FY_SEND_FINAL)
        s->final = true;
    else
        s->want_proceed = true;
    progress(s);
}

static void h3_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state)
{
    h3_stream_t *s = ex->codec;
    if (s->ex_done || s->final) return;
    if (ex->req.method_id == FY_M_HEAD || len == 0 || ex->res.status == 204 ||
        ex->res.status == 304) {
        h3_send(ex, NULL, 0, state);
        return;
    }
    s->file_fd = fd;
    s->file_off = off;
    s->file_left = len;
    ex->bytes_sent += len;
    h3_send(ex, NULL, 0, state);
}

static void deliver_body(h3_stream_t *s)
{
    if (!s->body_wanted || !s->qs || s->ex_done) return;
    size_t avail = s->body_len - s->body_given;
    if (avail == 0 && !s->body_end) return;
    s->body_wanted = false;
    size_t at = s->body_given;
    s->body_given = s->body_len;
    if (s->body_end) s->end_delivered = true;
    s->ex.on_body(&s->ex, s->body ? s->body + at : NULL, avail, s->body_end);
}

static void h3_read_body(fy_exchange_t *ex)
{
    h3_stream_t *s = ex->codec;
    if (!s->qs) return;
    if (s->body_given) {
        size_t given = s->body_given;
        memmove(s->body, s->body + given, s->body_len - given);
        s->body_len -= given;
        s->body_given = 0;
        fy_quic_stream_consumed(s->c->qc, s->qs, given);
    }
    if (s->end_delivered) return;
    s->body_wanted = true;
    deliver_body(s);
}

static void h3_send_informational(fy_exchange_t *ex, int status, const fy_headers_t *hs)
{
    h3_stream_t *s = ex->codec;
    if (!s->qs || s->ex_done || s->head_written || status < 102 || status > 199) return;
    /* copies: the caller's strings live for this call only */
    fy_headers_t cp = {0};
    for (size_t i = 0; i < hs->n; i++) {
        char *v = fy_arena_strndup(&s->arena, hs->v[i].value.p, hs->v[i].value.len);
        fy_headers_add(&s->arena, &cp, hs->v[i].name.p, hs->v[i].name.len, v, hs->v[i].value.len);
    }
    write_head(s, status, &cp, false);
}

static const fy_sink_ops_t h3_sink = {
    .name = "h3",
    .send = h3_send,
    .send_file = h3_send_file,
    .read_body = h3_read_body,
    .send_informational = h3_send_informational,
};

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
    ex->sink = &h3_sink;
    ex->remote = (struct sockaddr *)&c->remote;
    ex->start_ms = c->ctx->loop->now_ms;
    ex->req.version = 30;
    ex->req.scheme = FY_STR_LIT("https");
    ex->req.content_length = -1;
    fy_list_insert_tail(&c->streams, &s->link);
    c->nstreams++;
    fy_gauge_add(fy_cid_streams_active[FY_CPROTO_H3], 1);
    qs->app = s;
    return s;
}

static void stream_free(h3_stream_t *s)
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

static fy_str_t hdup(h3_stream_t *s, const uint8_t *p, size_t n)
{
    return fy_str(fy_arena_strndup(&s->arena, (const char *)p, n), n);
}

enum {
    PSEUDO_METHOD = 1,
    PSEUDO_SCHEME = 2,
    PSEUDO_AUTHORITY = 4,
    PSEUDO_PATH = 8,
    PSEUDO_PROTOCOL = 16,
};

/* Record the first reason a request's field section is malformed. */
static void bad(h3_stream_t *s, const char *why)
{
    if (!s->malformed) s->malformed = why;
}

static void on_field(h3_stream_t *s, nghttp3_vec name, nghttp3_vec value)
{
    s->hdr_bytes += name.len + value.len + 32;
    if ((uint64_t)s->hdr_bytes > (uint64_t)s->c->ctx->limits->max_header_bytes) {
        s->hdr_too_large = true;
        return;
    }
    fy_request_t *q = &s->ex.req;
    for (size_t i = 0; i < name.len; i++)
        if (name.base[i] >= 'A' && name.base[i] <= 'Z') bad(s, "upper-case field name");
    if (s->phase == 1) { /* trailers: no pseudo-headers */
        if (name.len && name.base[0] == ':') {
            bad(s, "pseudo-header field in trailers");
            return;
        }
        fy_str_t n = hdup(s, name.base, name.len), v = hdup(s, value.base, value.len);
        fy_headers_add(&s->arena, &s->ex.req_trailers, n.p, n.len, v.p, v.len);
        return;
    }
    if (name.len && name.base[0] == ':') {
        if (s->saw_regular) bad(s, "pseudo-header field after a regular field");
        fy_str_t v = hdup(s, value.base, value.len);
        fy_str_t *dst = NULL;
        unsigned bit;
        if (name.len == 7 && !memcmp(name.base, ":method", 7)) {
            dst = &q->method;
            bit = PSEUDO_METHOD;
        } else if (name.len == 5 && !memcmp(name.base, ":path", 5)) {
            dst = &q->target;
            bit = PSEUDO_PATH;
        } else if (name.len == 10 && !memcmp(name.base, ":authority", 10)) {
            dst = &q->authority;
            bit = PSEUDO_AUTHORITY;
        } else if (name.len == 7 && !memcmp(name.base, ":scheme", 7)) {
            dst = &q->scheme;
            bit = PSEUDO_SCHEME;
            if (!fy_str_eq(v, "https", 5) && !fy_str_eq(v, "http", 4))
                bad(s, ":scheme other than http or https");
        } else if (name.len == 9 && !memcmp(name.base, ":protocol", 9)) {
            dst = &q->protocol;
            bit = PSEUDO_PROTOCOL;
        } else {
            bad(s, "unknown or response pseudo-header field");
            return;
        }
        if (s->pseudo_seen & bit) bad(s, "duplicated pseudo-header field");
        s->pseudo_seen |= bit;
        *dst = v;
        if (dst == &q->method) q->method_id = fy_http_method_id(v);
        return;
    }
    s->saw_regular = true;
    if ((int64_t)q->headers.n >= s->c->ctx->limits->max_headers) {
        s->hdr_too_large = true;
        return;
    }
    fy_str_t n = hdup(s, name.base, name.len), v = hdup(s, value.base, value.len);
    if (is_conn_specific(n) || (fy_str_ieq(n, "te", 2) && !fy_str_eq(v, "trailers", 8)))
        bad(s, "connection-specific field");
    if (fy_str_ieq(n, "host", 4)) {
        if (s->host_seen) bad(s, "more than one Host field");
        s->host_seen = true;
        s->host = v;
    }
    if (fy_str_ieq(n, "content-length", 14)) {
        int64_t cl = 0;
        if (v.len == 0 || v.len > 18) bad(s, "bad content-length");
        for (size_t i = 0; i < v.len; i++) {
            if (v.p[i] < '0' || v.p[i] > '9') bad(s, "bad content-length");
            cl = cl * 10 + (v.p[i] - '0');
        }
        if (q->content_length >= 0 && q->content_length != cl)
            bad(s, "content-length fields that differ");
        q->content_length = cl;
    }
    fy_headers_add(&s->arena, &q->headers, n.p, n.len, v.p, v.len);
}

static void on_field_cb(void *ud, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
    on_field(ud, (nghttp3_vec){(uint8_t *)n, nl}, (nghttp3_vec){(uint8_t *)v, vl});
}

static void dispatch(h3_stream_t *s)
{
    fy_exchange_t *ex = &s->ex;
    fy_request_t *q = &ex->req;
    h3_conn_t *c = s->c;
    s->dispatched = true;
    s->phase = 1;
    if (s->hdr_too_large) {
        fy_exchange_fail(ex, 431, "request header section over limits");
        return;
    }
    bool connect = q->method_id == FY_M_CONNECT;
    unsigned ps = s->pseudo_seen;
    /* RFC 9114 §4.3.1 (and RFC 9220 for :protocol) */
    if (!(ps & PSEUDO_METHOD) || q->method.len == 0)
        bad(s, "no :method");
    else if (!connect && !(ps & PSEUDO_SCHEME))
        bad(s, "no :scheme");
    else if (!connect && (!(ps & PSEUDO_PATH) || q->target.len == 0))
        bad(s, "no :path");
    else if (connect && !(ps & PSEUDO_PROTOCOL) && (ps & (PSEUDO_SCHEME | PSEUDO_PATH)))
        bad(s, "CONNECT with :scheme or :path");
    else if ((ps & PSEUDO_PROTOCOL) && !connect)
        bad(s, ":protocol without CONNECT");
    else if ((ps & PSEUDO_AUTHORITY) && q->authority.len == 0)
        bad(s, "empty :authority");
    else if (s->host_seen && s->host.len == 0)
        bad(s, "empty Host");
    else if ((ps & PSEUDO_AUTHORITY) && s->host_seen &&
             !fy_str_eq(q->authority, s->host.p, s->host.len))
        bad(s, ":authority and Host differ");
    else if (connect && !(ps & PSEUDO_AUTHORITY))
        bad(s, "CONNECT without :authority");
    else if (!(ps & PSEUDO_AUTHORITY) && !s->host_seen)
        bad(s, "neither :authority nor Host");
    if (s->malformed) {
        /* RFC 9114 §4.1.2: a malformed request is a stream error H3_MESSAGE_ERROR */
        char a[64];
        fy_info("client %s: h3 stream %lld: malformed request (%s): H3_MESSAGE_ERROR",
                fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), (long long)s->qs->id,
                s->malformed);
        if (!s->fin_recv && !s->peer_gone)
            fy_quic_stream_stop_reading(c->qc, s->qs, FY_H3_MESSAGE_ERROR);
        abort_stream(s, FY_H3_MESSAGE_ERROR);
        return;
    }
    if (!(ps & PSEUDO_AUTHORITY)) q->authority = s->host;
    if (connect) {
        if (q->protocol.len == 0) {
            fy_exchange_fail(ex, 405, "CONNECT is not served on this listener");
            return;
        }
        /* extended CONNECT (RFC 9220): a tunnel exchange; the handler answers 2xx and the
           DATA frames both ways are the tunnel */
        if (q->scheme.len == 0 || q->target.len == 0 || q->authority.len == 0) {
            fy_exchange_fail(ex, 400, "extended CONNECT without :scheme, :path or :authority");
            return;
        }
        q->content_length = -1;
    }
    const char *qm = memchr(q->target.p, '?', q->target.len);
    if (qm) {
        q->path = fy_str(q->target.p, (size_t)(qm - q->target.p));
        q->query = fy_str(qm + 1, q->target.len - q->path.len - 1);
    } else {
        q->path = q->target;
    }
    if (q->path.len == 0 || q->path.p[0] != '/') {
        if (q->method_id == FY_M_OPTIONS && fy_str_eq(q->target, "*", 1)) {
            FY_HDR_ADD(ex->arena, &ex->res.headers, "allow", "GET, HEAD, POST, OPTIONS", 24);
            fy_exchange_respond(ex, 204, NULL, NULL, 0);
            return;
        }
        fy_exchange_fail(ex, 400, "bad :path");
        return;
    }
    if (!connect && s->fin_recv && s->rd.hn == 0 && !s->rd.have_hdr && q->content_length < 0)
        q->content_length = 0;
    if (q->content_length > 0 && (uint64_t)q->content_length > c->ctx->limits->max_body) {
        fy_exchange_fail(ex, 413, "content-length over limits.body-size");
        return;
    }
    if (connect && fy_h3_wt_refuse(ex)) return; /* :protocol webtransport, route without it */
    fy_exchange_dispatch(ex);
}

/* Decode the collected HEADERS payload. Returns 0 done, 1 blocked, -1 connection error. */
static int decode_headers(h3_stream_t *s)
{
    h3_conn_t *c = s->c;
    if (!s->sctx &&
        nghttp3_qpack_stream_context_new(&s->sctx, s->qs->id, nghttp3_mem_default()) != 0) {
        conn_error(c, FY_H3_INTERNAL_ERROR, "out of memory");
        return -1;
    }
    size_t used = 0;
    const char *err = NULL;
    int r = fy_h3_qpack_decode(c->dec, s->sctx, s->hbuf + s->hoff, s->hlen - s->hoff, &used,
                               on_field_cb, s, &err);
    s->hoff += used;
    if (r == FY_H3_QPACK_ERROR) {
        conn_error(c, FY_H3_QPACK_DECOMPRESSION_FAILED, err);
        return -1;
    }
    if (r == FY_H3_QPACK_BLOCKED) {
        if (!s->blocked) {
            /* RFC 9204 §2.1.2: more blocked streams than we allowed is a connection error */
            if (c->nblocked >= (size_t)c->conf->qpack_blocked_streams) {
                conn_error(c, FY_H3_QPACK_DECOMPRESSION_FAILED,
                           "more streams blocked on the QPACK encoder stream than "
                           "quic.qpack-blocked-streams");
                return -1;
            }
            c->nblocked++;
            s->blocked = true;
            fy_list_insert_tail(&c->blocked, &s->blink);
        }
        return 1;
    }
    flush_decoder(c);
    s->hbuf = NULL; /* arena memory */
    s->hlen = s->hoff = s->hcap = 0;
    return 0;
}

/* A complete HEADERS frame: the request head or trailers. Returns -1 if the connection or
 * stream is gone. */
static int headers_done(h3_stream_t *s)
{
    if (s->skip_headers) {
        s->skip_headers = false;
        nghttp3_qpack_decoder_cancel_stream(s->c->dec, s->qs->id);
        if (s->phase == 0) {
            s->hdr_too_large = true;
            dispatch(s);
        } else {
            abort_stream(s, FY_H3_EXCESSIVE_LOAD);
        }
        return 0;
    }
    int r = decode_headers(s);
    if (r != 0) return r;
    if (s->phase == 0) {
        dispatch(s);
    } else {
        s->phase = 2; /* trailers end the body */
        if (s->malformed && !s->ex_done) abort_stream(s, FY_H3_MESSAGE_ERROR);
    }
    return 0;
}

static void body_data(h3_stream_t *s, const uint8_t *p, size_t n)
{
    h3_conn_t *c = s->c;
    s->ex.body_received += n;
    if (s->ex_done) {
        fy_quic_stream_consumed(c->qc, s->qs, n);
        return;
    }
    if (s->ex.req.content_length >= 0 && s->ex.body_received > (uint64_t)s->ex.req.content_length) {
        fy_quic_stream_consumed(c->qc, s->qs, n);
        if (!s->ex.response_started)
            fy_exchange_fail(&s->ex, 400, "DATA beyond content-length");
        else
            abort_stream(s, FY_H3_MESSAGE_ERROR);
        return;
    }
    if (s->ex.body_received > c->ctx->limits->max_body) {
        fy_quic_stream_consumed(c->qc, s->qs, n);
        if (!s->ex.response_started)
            fy_exchange_fail(&s->ex, 413, "request body over limits.body-size");
        else
            abort_stream(s, FY_H3_REQUEST_CANCELLED);
        return;
    }
    if (!s->body) {
        /* at most one stream window is ever unconsumed (the peer cannot send more) */
        s->body_cap = c->conf->stream_window;
        s->body = fy_xmalloc(s->body_cap);
    }
    if (s->body_len + n > s->body_cap) { /* the peer broke flow control: ngtcp2 stops that */
        abort_stream(s, FY_H3_INTERNAL_ERROR);
        return;
    }
    memcpy(s->body + s->body_len, p, n);
    s->body_len += n;
    deliver_body(s);
}

static void request_end(h3_stream_t *s)
{
    if (s->rd.have_hdr || s->rd.hn) {
        conn_error(s->c, FY_H3_FRAME_ERROR, "request stream ended inside a frame");
        return;
    }
    if (!s->dispatched) {
        abort_stream(s, FY_H3_REQUEST_INCOMPLETE);
        return;
    }
    if (s->ex.req.content_length >= 0 &&
        s->ex.body_received != (uint64_t)s->ex.req.content_length && !s->ex_done) {
        if (!s->ex.response_started)
            fy_exchange_fail(&s->ex, 400, "request body shorter than content-length");
        else
            abort_stream(s, FY_H3_MESSAGE_ERROR);
        return;
    }
    s->body_end = true;
    deliver_body(s);
}

static void stash(h3_stream_t *s, const uint8_t *p, size_t n, bool fin)
{
    if (s->pend_len + n > s->pend_cap) {
        size_t cap = s->pend_cap ? s->pend_cap * 2 : 4096;
        while (cap < s->pend_len + n) cap *= 2;
        s->pend = fy_xrealloc(s->pend, cap);
        s->pend_cap = cap;
    }
    if (n) memcpy(s->pend + s->pend_len, p, n); /* n == 0: only a FIN (pend may be NULL) */
    s->pend_len += n;
    s->pend_fin |= fin;
}

/* Request stream bytes, in order. Flow-control credit: frame headers and HEADERS payloads at
 * once, DATA payloads when the handler consumed them. */
static void request_recv(h3_stream_t *s, const uint8_t *p, size_t n, bool fin)
{
    h3_conn_t *c = s->c;
    if (s->blocked) {
        stash(s, p, n, fin);
        return;
    }
    while (n && s->qs && !c->closing) {
        if (!s->rd.have_hdr) {
            size_t k = fy_h3_frame_hdr_feed(&s->rd, p, n);
            fy_quic_stream_consumed(c->qc, s->qs, k);
            p += k;
            n -= k;
            if (!s->rd.have_hdr) break;
            uint64_t t = s->rd.type;
            if (t == FY_WT_STREAM_BIDI && s->phase == 0 && !s->dispatched) {
                /* WebTransport bidi stream: 0x41 + session id (read as a frame header) */
                fy_quic_stream_t *qs = s->qs;
                uint64_t sid = s->rd.len;
                s->qs = NULL;
                s->ex_done = true;
                stream_free(s);
                fy_h3_wt_bidi(c->wt, qs, sid, p, n, fin);
                return;
            }
            if (t == FY_H3_HEADERS) {
                if (s->phase == 2) {
                    conn_error(c, FY_H3_FRAME_UNEXPECTED, "HEADERS after trailers");
                    return;
                }
                if (s->rd.len > (uint64_t)c->ctx->limits->max_header_bytes) {
                    s->skip_headers = true;
                } else {
                    s->hcap = s->rd.len ? s->rd.len : 1;
                    s->hbuf = fy_arena_alloc(&s->arena, s->hcap); /* <= header-bytes */
                    s->hlen = s->hoff = 0;
                }
            } else if (t == FY_H3_DATA) {
                if (s->phase != 1) {
                    conn_error(c, FY_H3_FRAME_UNEXPECTED,
                               s->phase == 0 ? "DATA before HEADERS" : "DATA after trailers");
                    return;
                }
            } else if (t == FY_H3_SETTINGS || t == FY_H3_GOAWAY || t == FY_H3_MAX_PUSH_ID ||
                       t == FY_H3_CANCEL_PUSH || t == FY_H3_PUSH_PROMISE ||
                       fy_h3_frame_is_h2_reserved(t)) {
                conn_error(c, FY_H3_FRAME_UNEXPECTED, "control frame on a request stream");
                return;
            }
        } else {
            size_t take = n < s->rd.left ? n : (size_t)s->rd.left;
            if (s->rd.type == FY_H3_DATA) {
                body_data(s, p, take);
            } else {
                if (s->rd.type == FY_H3_HEADERS && !s->skip_headers) {
                    memcpy(s->hbuf + s->hlen, p, take);
                    s->hlen += take;
                }
                fy_quic_stream_consumed(c->qc, s->qs, take);
            }
            p += take;
            n -= take;
            s->rd.left -= take;
        }
        if (s->rd.have_hdr && s->rd.left == 0) {
            s->rd.have_hdr = false;
            if (s->rd.type == FY_H3_HEADERS) {
                if (n == 0 && fin) s->fin_recv = true; /* dispatch knows there is no body */
                int r = headers_done(s);
                if (r < 0) return;
                if (r == 1) {
                    stash(s, p, n, fin);
                    return;
                }
            }
        }
    }
    if (fin && s->qs && !c->closing) {
        s->fin_recv = true;
        request_end(s);
    }
}

static void unblock_streams(h3_conn_t *c)
{
    uint64_t icnt = nghttp3_qpack_decoder_get_icnt(c->dec);
    fy_list_t *l = c->blocked.next;
    while (l != &c->blocked && !c->closing) {
        h3_stream_t *s = fy_container_of(l, h3_stream_t, blink);
        l = l->next;
        if (nghttp3_qpack_stream_context_get_ricnt(s->sctx) > icnt) continue;
        fy_list_remove(&s->blink);
        s->blocked = false;
        c->nblocked--;
        int r = decode_headers(s);
        if (r < 0) return;
        if (r == 1) continue;
        if (s->phase == 0) {
            if (!s->pend_len && s->pend_fin) s->fin_recv = true;
            dispatch(s);
        } else {
            s->phase = 2;
        }
        uint8_t *p = s->pend;
        size_t n = s->pend_len;
        bool fin = s->pend_fin;
        s->pend = NULL;
        s->pend_len = s->pend_cap = 0;
        s->pend_fin = false;
        if (s->qs && (n || fin)) request_recv(s, p, n, fin);
        free(p);
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
            conn_error(c, e, "bad SETTINGS");
        else
            fy_h3_wt_settings_done(c->wt); /* sessions that waited for them */
    } else if (u->rd.type == FY_H3_GOAWAY) {
        uint64_t id;
        if (fy_h3_varint_decode(u->fb, u->fn, &id) != u->fn || u->fn == 0)
            conn_error(c, FY_H3_FRAME_ERROR, "bad GOAWAY");
        /* a client's GOAWAY limits pushes, which we never send */
    } else if (u->rd.type == FY_H3_MAX_PUSH_ID || u->rd.type == FY_H3_CANCEL_PUSH) {
        uint64_t id;
        if (fy_h3_varint_decode(u->fb, u->fn, &id) != u->fn || u->fn == 0)
            conn_error(c, FY_H3_FRAME_ERROR, "bad push frame");
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
                conn_error(c, FY_H3_MISSING_SETTINGS, "first control frame is not SETTINGS");
                return;
            }
            if (t == FY_H3_SETTINGS && c->got_settings) {
                conn_error(c, FY_H3_FRAME_UNEXPECTED, "second SETTINGS");
                return;
            }
            if (t == FY_H3_SETTINGS) c->got_settings = true;
            if (t == FY_H3_DATA || t == FY_H3_HEADERS || t == FY_H3_PUSH_PROMISE ||
                fy_h3_frame_is_h2_reserved(t)) {
                conn_error(c, FY_H3_FRAME_UNEXPECTED, "request frame on the control stream");
                return;
            }
            bool known = t == FY_H3_SETTINGS || t == FY_H3_GOAWAY || t == FY_H3_MAX_PUSH_ID ||
                         t == FY_H3_CANCEL_PUSH;
            if (known && u->rd.len > CTRL_FRAME_MAX) {
                conn_error(c, FY_H3_EXCESSIVE_LOAD, "control frame too large");
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
                        conn_error(c, FY_H3_STREAM_CREATION_ERROR, "duplicate critical stream");
                        return;
                    }
                    *seen = true;
                } else if (t == FY_H3_STREAM_PUSH) {
                    conn_error(c, FY_H3_STREAM_CREATION_ERROR, "push stream from a client");
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
                conn_error(c, FY_H3_QPACK_ENCODER_STREAM_ERROR, nghttp3_strerror((int)r));
                return;
            }
            flush_decoder(c); /* Insert Count Increment */
            unblock_streams(c);
        } else if (u->type == FY_H3_STREAM_QPACK_DECODER) {
            nghttp3_ssize r = nghttp3_qpack_encoder_read_decoder(c->enc, p, n);
            if (r < 0) {
                conn_error(c, FY_H3_QPACK_DECODER_STREAM_ERROR, nghttp3_strerror((int)r));
                return;
            }
        }
    }
    if (fin) conn_error(c, FY_H3_CLOSED_CRITICAL_STREAM, "critical stream closed");
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
    write_frame_hdr(c, c->ctrl, FY_H3_GOAWAY, k);
    qwrite(c, c->ctrl, b, k);
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
        conn_error(c, FY_H3_STREAM_CREATION_ERROR, "no unidirectional stream credit");
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
    qwrite(c, c->ctrl, b, k);
    b[0] = FY_H3_STREAM_QPACK_ENCODER;
    qwrite(c, c->qenc, b, 1);
    b[0] = FY_H3_STREAM_QPACK_DECODER;
    qwrite(c, c->qdec, b, 1);
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
    request_recv(s, p, n, fin);
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
            conn_error(c, FY_H3_CLOSED_CRITICAL_STREAM, "critical stream reset");
        return;
    }
    h3_stream_t *s = qs->app;
    if (!s || s->peer_gone) return;
    s->peer_gone = true;
    if (!s->ex_done) {
        if (!s->ex.error) s->ex.error = "stream reset by client";
        if (s->ex.producer && s->ex.producer->stop && s->ex.response_started)
            s->ex.producer->stop(&s->ex);
        abort_stream(s, FY_H3_REQUEST_CANCELLED);
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
    if (s) progress(s);
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
        stream_done(s); /* frees */
    } else {
        stream_free(s);
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
        stream_free(s);
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
    if (ex->sink != &h3_sink) return NULL;
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
