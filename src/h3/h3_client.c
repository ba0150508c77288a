/* HTTP/3 client codec (see h3_client.h). Our QPACK decoder advertises no dynamic table, so a
 * response head never blocks; our encoder uses none either. */
#include "h3/h3_client.h"

#include <nghttp3/nghttp3.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/list.h"
#include "core/log.h"
#include "h3/h3_frame.h"
#include "h3/h3_qpack.h"

#define MAX_HEAD 65536 /* a response field section we buffer at most */
#define CTRL_MAX 4096
#define ENC_TABLE_MAX 4096 /* our QPACK encoder's dynamic table, at most */

struct fy_h3_client_stream {
    fy_h3_client_t *c; /* NULL once the connection is gone */
    fy_quic_stream_t *qs;
    const fy_client_stream_ops_t *ops;
    void *ud;
    fy_arena_t *arena;
    fy_h3_frame_rd_t rd;
    uint8_t *hbuf;
    size_t hlen;
    bool skip;
    nghttp3_qpack_stream_context *sctx;
    int phase; /* 0: waiting for the final head, 1: body, 2: trailers seen */
    int status;
    bool bad;
    fy_headers_t hs, trailers;
    bool has_body, body_done, deferred;
    bool finished; /* on_end / on_error delivered */
    bool released;
    fy_list_t link;
};

typedef struct uni {
    int64_t type;
    uint8_t tb[8];
    size_t tn;
    fy_h3_frame_rd_t rd;
    uint8_t fb[CTRL_MAX];
    size_t fn;
} uni_t;

struct fy_h3_client {
    fy_quic_conn_t *qc;
    const fy_h3_client_conn_ops_t *ops;
    void *ud;
    const fy_quic_conf_t *conf;
    nghttp3_qpack_encoder *enc;
    nghttp3_qpack_decoder *dec;
    fy_quic_stream_t *ctrl, *qenc, *qdec;
    bool ready, goaway, closing, owner_closed, got_settings;
    bool peer_ctrl, peer_enc, peer_dec;
    fy_list_t streams;
    size_t nstreams;
};

static void conn_error(fy_h3_client_t *c, uint64_t code, const char *why)
{
    if (c->closing) return;
    c->closing = true;
    fy_info("h3 origin: connection error 0x%llx: %s", (unsigned long long)code, why);
    fy_quic_conn_close(c->qc, code, why);
}

static void frame_hdr(fy_h3_client_t *c, fy_quic_stream_t *qs, uint64_t type, uint64_t len)
{
    uint8_t b[16];
    size_t k = fy_h3_varint_encode(b, type);
    k += fy_h3_varint_encode(b + k, len);
    fy_quic_stream_write(c->qc, qs, b, k);
}

static void stream_free(fy_h3_client_stream_t *s)
{
    if (s->c) {
        fy_list_remove(&s->link);
        s->c->nstreams--;
    }
    if (s->sctx) nghttp3_qpack_stream_context_del(s->sctx);
    free(s->hbuf);
    free(s);
}

static void fail(fy_h3_client_stream_t *s, int kind, uint64_t code, const char *why)
{
    if (s->finished) return;
    s->finished = true;
    if (!s->released) s->ops->on_error(s->ud, kind, code, why);
}

/* ---- request side ---- */

static void write_fields(fy_h3_client_stream_t *s, const fy_headers_t *hs)
{
    fy_h3_client_t *c = s->c;
    nghttp3_nv *nv = malloc((hs->n ? hs->n : 1) * sizeof *nv);
    for (size_t i = 0; i < hs->n; i++)
        nv[i] = (nghttp3_nv){(uint8_t *)hs->v[i].name.p, (uint8_t *)hs->v[i].value.p,
                             hs->v[i].name.len, hs->v[i].value.len, 0};
    nghttp3_buf pb, rb, eb;
    nghttp3_buf_init(&pb);
    nghttp3_buf_init(&rb);
    nghttp3_buf_init(&eb);
    if (nghttp3_qpack_encoder_encode(c->enc, &pb, &rb, &eb, s->qs->id, nv, hs->n) == 0) {
        if (nghttp3_buf_len(&eb) && c->qenc)
            fy_quic_stream_write(c->qc, c->qenc, eb.pos, nghttp3_buf_len(&eb));
        frame_hdr(c, s->qs, FY_H3_HEADERS, nghttp3_buf_len(&pb) + nghttp3_buf_len(&rb));
        fy_quic_stream_write(c->qc, s->qs, pb.pos, nghttp3_buf_len(&pb));
        fy_quic_stream_write(c->qc, s->qs, rb.pos, nghttp3_buf_len(&rb));
    } else {
        conn_error(c, FY_H3_INTERNAL_ERROR, "QPACK encoder failed");
    }
    const nghttp3_mem *mem = nghttp3_mem_default();
    nghttp3_buf_free(&pb, mem);
    nghttp3_buf_free(&rb, mem);
    nghttp3_buf_free(&eb, mem);
    free(nv);
}

static void pump_body(fy_h3_client_stream_t *s)
{
    if (!s->c || !s->qs || !s->has_body || s->body_done || s->released || s->finished) return;
    char buf[16384];
    while (fy_quic_stream_buffered(s->qs) < s->c->conf->send_buffer) {
        const fy_headers_t *tr = NULL;
        ssize_t n = s->ops->read_body(s->ud, buf, sizeof buf, &tr);
        if (n == FY_CLIENT_DEFER) {
            s->deferred = true;
            return;
        }
        if (n < 0) {
            fy_quic_stream_reset(s->c->qc, s->qs, FY_H3_REQUEST_CANCELLED);
            fail(s, FY_CLIENT_CONN, 0, "request body failed");
            return;
        }
        if (n == 0) {
            s->body_done = true;
            if (tr && tr->n) write_fields(s, tr);
            fy_quic_stream_finish(s->c->qc, s->qs);
            return;
        }
        frame_hdr(s->c, s->qs, FY_H3_DATA, (uint64_t)n);
        fy_quic_stream_write(s->c->qc, s->qs, buf, (size_t)n);
    }
}

fy_h3_client_stream_t *fy_h3_client_submit(fy_h3_client_t *c, const fy_headers_t *hs, bool has_body,
                                           fy_arena_t *arena, const fy_client_stream_ops_t *ops,
                                           void *ud)
{
    if (!c->ready || c->goaway || c->closing) return NULL;
    fy_quic_stream_t *qs = fy_quic_open_bidi(c->qc);
    if (!qs) return NULL;
    fy_h3_client_stream_t *s = fy_xcalloc(1, sizeof *s);
    s->c = c;
    s->qs = qs;
    s->ops = ops;
    s->ud = ud;
    s->arena = arena;
    s->has_body = has_body;
    qs->app = s;
    fy_list_insert_tail(&c->streams, &s->link);
    c->nstreams++;
    write_fields(s, hs);
    if (has_body)
        pump_body(s);
    else
        fy_quic_stream_finish(c->qc, qs);
    return s;
}

void fy_h3_client_resume(fy_h3_client_stream_t *s)
{
    if (!s->deferred) return;
    s->deferred = false;
    pump_body(s);
}

void fy_h3_client_consume(fy_h3_client_stream_t *s, size_t n)
{
    if (s->c && s->qs) fy_quic_stream_consumed(s->c->qc, s->qs, n);
}

void fy_h3_client_release(fy_h3_client_stream_t *s)
{
    s->released = true;
    if (s->c && s->qs && !s->finished) {
        fy_quic_stream_reset(s->c->qc, s->qs, FY_H3_REQUEST_CANCELLED);
        fy_quic_stream_stop_reading(s->c->qc, s->qs, FY_H3_REQUEST_CANCELLED);
    }
    s->finished = true;
    if (!s->qs) stream_free(s);
}

bool fy_h3_client_ready(const fy_h3_client_t *c)
{
    return c->ready && !c->goaway && !c->closing;
}

bool fy_h3_client_can_open(fy_h3_client_t *c)
{
    return fy_h3_client_ready(c) && fy_quic_streams_bidi_left(c->qc) > 0;
}

size_t fy_h3_client_nstreams(const fy_h3_client_t *c)
{
    return c->nstreams;
}

/* ---- response side ---- */

static void on_field(void *ud, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
    fy_h3_client_stream_t *s = ud;
    fy_headers_t *dst = s->phase == 1 ? &s->trailers : &s->hs;
    if (nl && n[0] == ':') {
        if (s->phase == 0 && nl == 7 && !memcmp(n, ":status", 7) && vl == 3 && !s->status &&
            v[0] >= '1' && v[0] <= '5' && v[1] >= '0' && v[1] <= '9' && v[2] >= '0' && v[2] <= '9')
            s->status = (v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0');
        else
            s->bad = true;
        return;
    }
    char *name = fy_arena_strndup(s->arena, (const char *)n, nl);
    char *value = fy_arena_strndup(s->arena, (const char *)v, vl);
    fy_headers_add(s->arena, dst, name, nl, value, vl);
}

/* A complete HEADERS frame. Returns -1 when the stream is finished. */
static int head_done(fy_h3_client_stream_t *s, bool end)
{
    fy_h3_client_t *c = s->c;
    if (s->skip) {
        s->skip = false;
        nghttp3_qpack_decoder_cancel_stream(c->dec, s->qs->id);
        fy_quic_stream_reset(c->qc, s->qs, FY_H3_EXCESSIVE_LOAD);
        fail(s, FY_CLIENT_PROTOCOL, 0, "response head too large");
        return -1;
    }
    if (!s->sctx &&
        nghttp3_qpack_stream_context_new(&s->sctx, s->qs->id, nghttp3_mem_default()) != 0) {
        conn_error(c, FY_H3_INTERNAL_ERROR, "out of memory");
        return -1;
    }
    size_t used;
    const char *err = NULL;
    int r = fy_h3_qpack_decode(c->dec, s->sctx, s->hbuf, s->hlen, &used, on_field, s, &err);
    free(s->hbuf);
    s->hbuf = NULL;
    s->hlen = 0;
    if (r != FY_H3_QPACK_DONE) {
        conn_error(c, FY_H3_QPACK_DECOMPRESSION_FAILED,
                   r == FY_H3_QPACK_BLOCKED ? "blocked field section" : err);
        return -1;
    }
    if (s->phase == 1) { /* trailers */
        s->phase = 2;
        return 0;
    }
    if (s->bad || !s->status) {
        fy_quic_stream_reset(c->qc, s->qs, FY_H3_MESSAGE_ERROR);
        fail(s, FY_CLIENT_PROTOCOL, 0, "bad response head");
        return -1;
    }
    int st = s->status;
    fy_headers_t hs = s->hs;
    memset(&s->hs, 0, sizeof s->hs);
    s->status = 0;
    if (st < 200) {
        if (!s->released) s->ops->on_head(s->ud, st, &hs, false);
        return 0;
    }
    s->phase = 1;
    if (!s->released) s->ops->on_head(s->ud, st, &hs, end);
    if (end) {
        s->finished = true;
        if (!s->released) s->ops->on_end(s->ud, &s->trailers);
        return -1;
    }
    return 0;
}

static void response_recv(fy_h3_client_stream_t *s, const uint8_t *p, size_t n, bool fin)
{
    fy_h3_client_t *c = s->c;
    if (s->finished) {
        fy_quic_stream_consumed(c->qc, s->qs, n);
        return;
    }
    while (n && !c->closing && !s->finished) {
        if (!s->rd.have_hdr) {
            size_t k = fy_h3_frame_hdr_feed(&s->rd, p, n);
            fy_quic_stream_consumed(c->qc, s->qs, k);
            p += k;
            n -= k;
            if (!s->rd.have_hdr) break;
            uint64_t t = s->rd.type;
            if (t == FY_H3_HEADERS) {
                if (s->phase == 2) {
                    conn_error(c, FY_H3_FRAME_UNEXPECTED, "HEADERS after trailers");
                    return;
                }
                s->skip = s->rd.len > MAX_HEAD;
                if (!s->skip) s->hbuf = fy_xmalloc(s->rd.len ? s->rd.len : 1);
                s->hlen = 0;
            } else if (t == FY_H3_DATA) {
                if (s->phase != 1) {
                    conn_error(c, FY_H3_FRAME_UNEXPECTED, "DATA outside a response body");
                    return;
                }
            } else if (t == FY_H3_SETTINGS || t == FY_H3_GOAWAY || t == FY_H3_MAX_PUSH_ID ||
                       t == FY_H3_CANCEL_PUSH || t == FY_H3_PUSH_PROMISE ||
                       fy_h3_frame_is_h2_reserved(t)) {
                conn_error(c, FY_H3_FRAME_UNEXPECTED, "frame not allowed on a request stream");
                return;
            }
        } else {
            size_t take = n < s->rd.left ? n : (size_t)s->rd.left;
            if (s->rd.type == FY_H3_DATA) {
                if (!s->released)
                    s->ops->on_data(s->ud, (const char *)p, take);
                else
                    fy_quic_stream_consumed(c->qc, s->qs, take);
            } else {
                if (s->rd.type == FY_H3_HEADERS && !s->skip) {
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
            if (s->rd.type == FY_H3_HEADERS && head_done(s, fin && n == 0) < 0) return;
        }
    }
    if (fin && !s->finished && !c->closing) {
        if (s->rd.have_hdr || s->rd.hn) {
            conn_error(c, FY_H3_FRAME_ERROR, "stream ended inside a frame");
            return;
        }
        s->finished = true;
        if (s->phase == 0) {
            if (!s->released) s->ops->on_error(s->ud, FY_CLIENT_PROTOCOL, 0, "no response head");
        } else if (!s->released) {
            s->ops->on_end(s->ud, &s->trailers);
        }
    }
}

/* ---- control and QPACK streams ---- */

/* our encoder's dynamic table: what the origin's decoder allows, at most ENC_TABLE_MAX */
static uint64_t on_setting(void *ud, uint64_t id, uint64_t v)
{
    fy_h3_client_t *c = ud;
    if (id == FY_H3_SETTINGS_QPACK_MAX_TABLE_CAPACITY)
        nghttp3_qpack_encoder_set_max_dtable_capacity(c->enc,
                                                      v < ENC_TABLE_MAX ? v : ENC_TABLE_MAX);
    if (id == FY_H3_SETTINGS_QPACK_BLOCKED_STREAMS)
        nghttp3_qpack_encoder_set_max_blocked_streams(c->enc, v < 100 ? v : 100);
    return 0;
}

static void control_frame(fy_h3_client_t *c, uni_t *u)
{
    if (u->rd.type == FY_H3_SETTINGS) {
        uint64_t e = fy_h3_settings_parse(u->fb, u->fn, on_setting, c);
        if (e) conn_error(c, e, "bad SETTINGS");
    } else if (u->rd.type == FY_H3_GOAWAY) {
        c->goaway = true;
        if (c->ops->on_goaway) c->ops->on_goaway(c->ud);
    }
}

static void uni_recv(fy_h3_client_t *c, fy_quic_stream_t *qs, const uint8_t *p, size_t n, bool fin)
{
    uni_t *u = qs->app;
    fy_quic_stream_consumed(c->qc, qs, n);
    while (n && u->type < 0) {
        u->tb[u->tn++] = *p++;
        n--;
        uint64_t t;
        if (!fy_h3_varint_decode(u->tb, u->tn, &t)) continue;
        u->type = (int64_t)t;
        if (t == FY_H3_STREAM_PUSH) {
            conn_error(c, FY_H3_ID_ERROR, "push stream without MAX_PUSH_ID");
            return;
        }
        bool *seen = t == FY_H3_STREAM_CONTROL         ? &c->peer_ctrl
                     : t == FY_H3_STREAM_QPACK_ENCODER ? &c->peer_enc
                     : t == FY_H3_STREAM_QPACK_DECODER ? &c->peer_dec
                                                       : NULL;
        if (!seen) {
            fy_quic_stream_stop_reading(c->qc, qs, FY_H3_STREAM_CREATION_ERROR);
        } else if (*seen) {
            conn_error(c, FY_H3_STREAM_CREATION_ERROR, "duplicate critical stream");
            return;
        } else {
            *seen = true;
        }
    }
    if (u->type == FY_H3_STREAM_CONTROL) {
        while (n && !c->closing) {
            if (!u->rd.have_hdr) {
                size_t k = fy_h3_frame_hdr_feed(&u->rd, p, n);
                p += k;
                n -= k;
                u->fn = 0;
                if (!u->rd.have_hdr) break;
                if (!c->got_settings && u->rd.type != FY_H3_SETTINGS) {
                    conn_error(c, FY_H3_MISSING_SETTINGS, "first control frame is not SETTINGS");
                    return;
                }
                if (u->rd.type == FY_H3_SETTINGS && c->got_settings) {
                    conn_error(c, FY_H3_FRAME_UNEXPECTED, "second SETTINGS");
                    return;
                }
                c->got_settings = true;
                if (u->rd.type == FY_H3_DATA || u->rd.type == FY_H3_HEADERS) {
                    conn_error(c, FY_H3_FRAME_UNEXPECTED, "request frame on the control stream");
                    return;
                }
            } else {
                size_t take = n < u->rd.left ? n : (size_t)u->rd.left;
                if (u->fn + take <= CTRL_MAX) memcpy(u->fb + u->fn, p, take);
                u->fn += take;
                p += take;
                n -= take;
                u->rd.left -= take;
            }
            if (u->rd.have_hdr && u->rd.left == 0) {
                u->rd.have_hdr = false;
                if (u->fn <= CTRL_MAX) control_frame(c, u);
            }
        }
    } else if (u->type == FY_H3_STREAM_QPACK_ENCODER && n) {
        if (nghttp3_qpack_decoder_read_encoder(c->dec, p, n) < 0)
            conn_error(c, FY_H3_QPACK_ENCODER_STREAM_ERROR, "bad encoder stream");
    } else if (u->type == FY_H3_STREAM_QPACK_DECODER && n) {
        if (nghttp3_qpack_encoder_read_decoder(c->enc, p, n) < 0)
            conn_error(c, FY_H3_QPACK_DECODER_STREAM_ERROR, "bad decoder stream");
    }
    if (fin && u->type >= 0 && u->type <= 3)
        conn_error(c, FY_H3_CLOSED_CRITICAL_STREAM, "critical stream closed");
}

/* ---- quic app ops ---- */

static void *app_open(fy_quic_conn_t *qc, void *ud)
{
    fy_h3_client_t *c = ud;
    c->ctrl = fy_quic_open_uni(qc);
    c->qenc = fy_quic_open_uni(qc);
    c->qdec = fy_quic_open_uni(qc);
    if (!c->ctrl || !c->qenc || !c->qdec) {
        conn_error(c, FY_H3_STREAM_CREATION_ERROR, "no unidirectional stream credit");
        return c;
    }
    uint8_t b[32], st[16];
    size_t sl = 0, k = 0;
    sl += fy_h3_varint_encode(st + sl, FY_H3_SETTINGS_QPACK_MAX_TABLE_CAPACITY);
    sl += fy_h3_varint_encode(st + sl, 0);
    sl += fy_h3_varint_encode(st + sl, FY_H3_SETTINGS_MAX_FIELD_SECTION_SIZE);
    sl += fy_h3_varint_encode(st + sl, MAX_HEAD);
    k += fy_h3_varint_encode(b + k, FY_H3_STREAM_CONTROL);
    k += fy_h3_varint_encode(b + k, FY_H3_SETTINGS);
    k += fy_h3_varint_encode(b + k, sl);
    memcpy(b + k, st, sl);
    k += sl;
    fy_quic_stream_write(qc, c->ctrl, b, k);
    b[0] = FY_H3_STREAM_QPACK_ENCODER;
    fy_quic_stream_write(qc, c->qenc, b, 1);
    b[0] = FY_H3_STREAM_QPACK_DECODER;
    fy_quic_stream_write(qc, c->qdec, b, 1);
    c->ready = true;
    if (c->ops->on_ready) c->ops->on_ready(c->ud);
    return c;
}

static void app_stream_open(void *app, fy_quic_stream_t *qs)
{
    fy_h3_client_t *c = app;
    if (!(qs->id & 0x2)) { /* a server-opened bidirectional stream: not allowed in HTTP/3 */
        conn_error(c, FY_H3_STREAM_CREATION_ERROR, "server-initiated bidirectional stream");
        return;
    }
    uni_t *u = fy_xcalloc(1, sizeof *u);
    u->type = -1;
    qs->app = u;
}

static bool is_ours_uni(fy_h3_client_t *c, fy_quic_stream_t *qs)
{
    return qs == c->ctrl || qs == c->qenc || qs == c->qdec;
}

static int app_recv(void *app, fy_quic_stream_t *qs, const uint8_t *p, size_t n, bool fin)
{
    fy_h3_client_t *c = app;
    if (c->closing || !qs->app || is_ours_uni(c, qs)) {
        fy_quic_stream_consumed(c->qc, qs, n);
        return 0;
    }
    if (qs->id & 0x2)
        uni_recv(c, qs, p, n, fin);
    else
        response_recv(qs->app, p, n, fin);
    return 0;
}

static void app_reset(void *app, fy_quic_stream_t *qs, uint64_t code)
{
    fy_h3_client_t *c = app;
    if (!qs->app || is_ours_uni(c, qs)) return;
    if (qs->id & 0x2) {
        uni_t *u = qs->app;
        if (u->type >= 0 && u->type <= 3)
            conn_error(c, FY_H3_CLOSED_CRITICAL_STREAM, "critical stream reset");
        return;
    }
    fy_h3_client_stream_t *s = qs->app;
    if (code == FY_H3_REQUEST_REJECTED)
        fail(s, FY_CLIENT_REFUSED, code, "request rejected by the origin");
    else if (!s->finished)
        fail(s, FY_CLIENT_RESET, code, "stream reset by the origin");
}

static void app_acked(void *app, fy_quic_stream_t *qs)
{
    if (qs->id & 0x2) return;
    fy_h3_client_stream_t *s = qs->app;
    if (s && !s->deferred) pump_body(s);
}

static void app_credit(void *app)
{
    fy_h3_client_t *c = app;
    if (c->ops->on_credit) c->ops->on_credit(c->ud);
}

static void app_stream_close(void *app, fy_quic_stream_t *qs, uint64_t code)
{
    fy_h3_client_t *c = app;
    if (!qs->app || is_ours_uni(c, qs)) return;
    if (qs->id & 0x2) {
        free(qs->app);
        qs->app = NULL;
        return;
    }
    fy_h3_client_stream_t *s = qs->app;
    qs->app = NULL;
    s->qs = NULL;
    /* released before: free it here; released from inside on_error: release freed it */
    bool was_released = s->released;
    fail(s, FY_CLIENT_RESET, code, "stream closed");
    if (was_released) stream_free(s);
}

static void app_close(void *app)
{
    fy_h3_client_t *c = app;
    c->closing = true;
    while (!fy_list_empty(&c->streams)) {
        fy_h3_client_stream_t *s = fy_container_of(c->streams.next, fy_h3_client_stream_t, link);
        fy_list_remove(&s->link);
        c->nstreams--;
        s->c = NULL;
        s->qs = NULL;
        bool was_released = s->released;
        fail(s, FY_CLIENT_CONN, 0, "connection closed");
        if (was_released) stream_free(s);
    }
    if (!c->owner_closed && c->ops->on_close) c->ops->on_close(c->ud, "connection closed");
    nghttp3_qpack_encoder_del(c->enc);
    nghttp3_qpack_decoder_del(c->dec);
    free(c);
}

static const fy_quic_app_ops_t h3c_app = {
    .open = app_open,
    .stream_open = app_stream_open,
    .recv = app_recv,
    .reset = app_reset,
    .acked = app_acked,
    .credit = app_credit,
    .stream_close = app_stream_close,
    .close = app_close,
};

fy_h3_client_t *fy_h3_client_connect(fy_loop_t *loop, const struct sockaddr *sa, socklen_t salen,
                                     const fy_quic_client_opts_t *o,
                                     const fy_h3_client_conn_ops_t *ops, void *ud)
{
    fy_h3_client_t *c = fy_xcalloc(1, sizeof *c);
    c->ops = ops;
    c->ud = ud;
    c->conf = o->conf;
    fy_list_init(&c->streams);
    const nghttp3_mem *mem = nghttp3_mem_default();
    if (nghttp3_qpack_encoder_new(&c->enc, ENC_TABLE_MAX, mem) != 0 ||
        nghttp3_qpack_decoder_new(&c->dec, 0, 0, mem) != 0) {
        if (c->enc) nghttp3_qpack_encoder_del(c->enc);
        free(c);
        return NULL;
    }
    c->qc = fy_quic_connect(loop, sa, salen, o, &h3c_app, c);
    if (!c->qc) {
        nghttp3_qpack_encoder_del(c->enc);
        nghttp3_qpack_decoder_del(c->dec);
        free(c);
        return NULL;
    }
    return c;
}

void fy_h3_client_close(fy_h3_client_t *c)
{
    c->owner_closed = true;
    fy_quic_conn_abort(c->qc, FY_H3_NO_ERROR);
}
