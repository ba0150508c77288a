/* HTTP/3 server codec: the response side. The sink (h3_sink): HEADERS encoded with QPACK,
 * DATA frames from the handler's buffers or a file, interim responses, stream ends and aborts,
 * and request bodies handed to the handler as it asks. Thread rules: h3_server_int.h. */
#include "h3/h3_server_int.h"

#define FILE_PIECE 65536 /* DATA frame size when sending files */

void fy__h3_stream_done(h3_stream_t *s)
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
    if (!s->qs) fy__h3_stream_free(s);
}

static void proceed_cb(fy_defer_t *d)
{
    h3_stream_t *s = d->data;
    if (!s->qs || s->ex_done || !s->want_proceed) return;
    s->want_proceed = false;
    if (s->ex.producer && s->ex.producer->proceed) s->ex.producer->proceed(&s->ex);
}

bool fy__h3_is_conn_specific(fy_str_t n)
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
        fy__h3_conn_error(c, FY_H3_INTERNAL_ERROR, "QPACK encoder failed");
        return;
    }
    if (nghttp3_buf_len(&c->eb) && c->qenc)
        fy__h3_qwrite(c, c->qenc, c->eb.pos, nghttp3_buf_len(&c->eb));
    fy__h3_write_frame_hdr(c, s->qs, FY_H3_HEADERS,
                           nghttp3_buf_len(&c->pb) + nghttp3_buf_len(&c->rb));
    fy__h3_qwrite(c, s->qs, c->pb.pos, nghttp3_buf_len(&c->pb));
    fy__h3_qwrite(c, s->qs, c->rb.pos, nghttp3_buf_len(&c->rb));
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
        if (fy__h3_is_conn_specific(h->name)) continue;
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
    fy__h3_stream_done(s);
}

/* Queue file bytes while the stream's queue has room. */
static int pump_file(h3_stream_t *s)
{
    h3_conn_t *c = s->c;
    while (s->file_left && fy_quic_stream_buffered(s->qs) < c->conf->send_buffer) {
        if (fy_quic_stream_is_write_closed(s->qs)) return -1;
        size_t piece = s->file_left < FILE_PIECE ? s->file_left : FILE_PIECE;
        fy__h3_write_frame_hdr(c, s->qs, FY_H3_DATA, piece);
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

void fy__h3_abort_stream(h3_stream_t *s, uint64_t code)
{
    if (s->qs && !s->finished) {
        s->finished = true;
        fy_quic_stream_reset(s->c->qc, s->qs, code);
    }
    fy__h3_stream_done(s);
}

/* After a send or an acknowledgement: more file, the end, or the next `proceed`. */
void fy__h3_progress(h3_stream_t *s)
{
    if (!s->qs || s->ex_done) return;
    if (s->file_left && pump_file(s) < 0) {
        fy__h3_abort_stream(s, FY_H3_INTERNAL_ERROR);
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
        if (state != FY_SEND_MORE) fy__h3_stream_done(s);
        return;
    }
    if (state == FY_SEND_ERROR) {
        fy__h3_abort_stream(s, FY_H3_INTERNAL_ERROR);
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
        fy__h3_write_frame_hdr(s->c, s->qs, FY_H3_DATA, total);
        for (size_t i = 0; i < n; i++)
            fy__h3_qwrite(s->c, s->qs, bufs[i].iov_base, bufs[i].iov_len);
    }
    ex->bytes_sent += total;
    if (state == FY_SEND_FINAL)
        s->final = true;
    else
        s->want_proceed = true;
    fy__h3_progress(s);
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

void fy__h3_deliver_body(h3_stream_t *s)
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
    fy__h3_deliver_body(s);
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

const fy_sink_ops_t fy__h3_sink = {
    .name = "h3",
    .send = h3_send,
    .send_file = h3_send_file,
    .read_body = h3_read_body,
    .send_informational = h3_send_informational,
};
