/* WebTransport client sessions to h3:// origins (the proxy's origin side). */
#include "h3/h3_wt_client.h"

#include <errno.h>
#include <nghttp3/nghttp3.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/list.h"
#include "core/log.h"
#include "core/loop.h"
#include "h3/h3_frame.h"
#include "h3/h3_qpack.h"
#include "h3/h3_wt.h"

#define HEAD_MAX 4096     /* the origin's response field section */
#define LINGER_MS 1000    /* after our CLOSE capsule: wait this long for its ACK at most */
#define CLOSE_CODE 0x100u /* H3_NO_ERROR */

enum { S_CONNECTING, S_HEAD, S_OPEN, S_ENDED };

struct fy_wtc {
    fy_loop_t *loop;
    fy_quic_conn_t *qc; /* NULL once the connection is gone */
    const fy_quic_conf_t *conf;
    const fy_wtc_ops_t *ops;
    void *ud;
    char *authority, *path, *origin; /* owned */
    nghttp3_qpack_encoder *enc;
    nghttp3_qpack_decoder *dec;
    nghttp3_qpack_stream_context *sctx;
    fy_quic_stream_t *cs; /* the CONNECT stream */
    fy_h3_frame_rd_t rd;
    uint8_t hb[HEAD_MAX];
    size_t hn;
    int status;
    fy_wt_capsule_rd_t caps;
    int state;
    bool drained; /* our DRAIN capsule went */
    bool dead;    /* the owner closed: no callbacks; freed when the connection is gone */
    fy_list_t streams;
    fy_timer_t linger;
    fy_defer_t free_defer;
};

struct fy_wtc_stream {
    fy_list_t link; /* c->streams */
    fy_wtc_t *c;
    fy_quic_stream_t *qs; /* NULL once QUIC closed it */
    void *ud;
    bool uni, local;
    bool wt;              /* peer stream: its prefix said WebTransport (else read and ignored) */
    fy__wtc_prefix_t pre; /* peer stream: its prefix (pre.state 0 while reading it) */
    bool orphan;          /* the owner no longer sees it (reset, or the session ended) */
    uint8_t *buf;         /* received, not yet used by the owner (at most one stream window) */
    size_t len, cap;
    bool fin, fin_given, reset_seen;
    bool stop_seen;    /* the origin's STOP_SENDING was reported */
    bool sent_reset;   /* fy_wtc_stream_reset_send: our sending side is reset (or will be) */
    uint64_t reset_h3; /* nonzero: the RESET_STREAM waits for the queued bytes' ACK */
    bool stopped;      /* fy_wtc_stream_stop: what still arrives is dropped */
    fy_defer_t defer;
};

/* ---- streams ---- */

static fy_wtc_stream_t *stream_new(fy_wtc_t *c, fy_quic_stream_t *qs, bool uni, bool local)
{
    fy_wtc_stream_t *st = fy_xcalloc(1, sizeof *st);
    st->c = c;
    st->qs = qs;
    st->uni = uni;
    st->local = local;
    st->pre.state = local ? 1 : 0;
    fy_list_insert_tail(&c->streams, &st->link);
    qs->app = st;
    return st;
}

static void stream_free(fy_wtc_stream_t *st)
{
    fy_list_remove(&st->link);
    fy_defer_cancel(st->c->loop, &st->defer);
    if (st->qs) st->qs->app = NULL;
    free(st->buf);
    free(st);
}

static bool can_send(const fy_wtc_stream_t *st)
{
    return !st->uni || st->local;
}

static bool can_recv(const fy_wtc_stream_t *st)
{
    return !st->uni || !st->local;
}

static void credit(fy_wtc_stream_t *st, size_t n);

/* The owner stops seeing `st`: reset what is still open of it; `tell`: stream_gone. */
static void orphan(fy_wtc_stream_t *st, uint64_t h3code, bool tell)
{
    fy_wtc_t *c = st->c;
    if (st->orphan) return;
    st->orphan = true;
    st->reset_h3 = 0;
    fy_defer_cancel(c->loop, &st->defer);
    credit(st, st->len);
    if (st->qs && c->qc) {
        if (can_send(st)) fy_quic_stream_reset(c->qc, st->qs, h3code);
        if (can_recv(st)) fy_quic_stream_stop_reading(c->qc, st->qs, h3code);
    }
    st->len = 0;
    if (tell && st->wt && !c->dead && c->ops->stream_gone) c->ops->stream_gone(c->ud, st);
}

/* Used bytes back to the stream and the connection; to the connection alone once QUIC closed
 * the stream (bytes of it still buffered here are used later). */
static void credit(fy_wtc_stream_t *st, size_t n)
{
    if (!st->c->qc || !n) return;
    if (st->qs)
        fy_quic_stream_consumed(st->c->qc, st->qs, n);
    else
        fy_quic_conn_consumed(st->c->qc, n);
}

static void deliver(fy_wtc_stream_t *st, const uint8_t *p, size_t n, bool fin)
{
    fy_wtc_t *c = st->c;
    if (st->orphan || st->stopped || c->dead || c->state != S_OPEN) {
        credit(st, n);
        return;
    }
    if (fin) st->fin = true;
    if (st->len) {
        if (st->len + n > st->cap) {
            orphan(st, FY_H3_INTERNAL_ERROR, true); /* the origin broke flow control */
            return;
        }
        if (n) memcpy(st->buf + st->len, p, n);
        st->len += n;
        return;
    }
    size_t used = n || (st->fin && !st->fin_given) ? c->ops->data(c->ud, st, p, n, st->fin) : 0;
    if (used > n) used = n;
    if (used == n && st->fin) st->fin_given = true;
    credit(st, used);
    if (used < n && !st->orphan && !c->dead) {
        if (!st->buf) {
            st->cap = c->conf->stream_window;
            st->buf = fy_xmalloc(st->cap);
        }
        if (n - used > st->cap) {
            orphan(st, FY_H3_INTERNAL_ERROR, true);
            return;
        }
        memcpy(st->buf, p + used, n - used);
        st->len = n - used;
    }
}

static void resume_cb(fy_defer_t *d)
{
    fy_wtc_stream_t *st = d->data;
    fy_wtc_t *c = st->c;
    if (st->orphan || st->stopped || c->dead || (!st->len && (!st->fin || st->fin_given))) return;
    size_t n = st->len;
    size_t used = c->ops->data(c->ud, st, st->buf, n, st->fin);
    if (st->orphan || c->dead) return;
    if (used > n) used = n;
    if (used == n && st->fin) st->fin_given = true;
    memmove(st->buf, st->buf + used, n - used);
    st->len = n - used;
    credit(st, used);
    if (!st->qs && !st->len && (!st->fin || st->fin_given)) { /* QUIC closed it before */
        st->orphan = true;
        if (c->ops->stream_gone) c->ops->stream_gone(c->ud, st);
        stream_free(st);
    }
}

/* ---- wire pieces ---- */

size_t fy__wtc_prefix_feed(fy__wtc_prefix_t *pr, uint64_t want, const uint8_t *p, size_t n)
{
    size_t used = 0;
    while (pr->state == 0 && used < n) {
        pr->sb[pr->sn++] = p[used++];
        uint64_t v;
        if (!fy_h3_varint_decode(pr->sb, pr->sn, &v)) continue;
        pr->sn = 0;
        if (!pr->have_type) {
            pr->have_type = true;
            pr->type = v;
            if (v != want) pr->state = -1;
            continue;
        }
        pr->sid = v;
        pr->state = 1;
    }
    return used;
}

size_t fy__wtc_settings(uint8_t *b)
{
    uint8_t st[48];
    size_t sl = 0;
    sl += fy_h3_varint_encode(st + sl, FY_H3_SETTINGS_H3_DATAGRAM);
    sl += fy_h3_varint_encode(st + sl, 1);
    sl += fy_h3_varint_encode(st + sl, FY_H3_SETTINGS_H3_DATAGRAM_04);
    sl += fy_h3_varint_encode(st + sl, 1);
    sl += fy_h3_varint_encode(st + sl, FY_WT_SETTINGS_DRAFT02);
    sl += fy_h3_varint_encode(st + sl, 1);
    sl += fy_h3_varint_encode(st + sl, FY_WT_SETTINGS_MAX_SESSIONS);
    sl += fy_h3_varint_encode(st + sl, 1);
    size_t k = fy_h3_varint_encode(b, FY_H3_STREAM_CONTROL);
    k += fy_h3_varint_encode(b + k, FY_H3_SETTINGS);
    k += fy_h3_varint_encode(b + k, sl);
    memcpy(b + k, st, sl);
    return k + sl;
}

size_t fy__wtc_stream_head(uint8_t *b, bool uni, uint64_t sid)
{
    size_t k = fy_h3_varint_encode(b, uni ? FY_WT_STREAM_UNI : FY_WT_STREAM_BIDI);
    return k + fy_h3_varint_encode(b + k, sid);
}

size_t fy__wtc_close_frame(uint8_t *b, uint32_t code, const char *reason, size_t rlen)
{
    uint8_t cap[16 + 4 + FY_WT_CLOSE_REASON_MAX];
    size_t n = fy_wt_capsule_close(cap, code, reason, rlen);
    size_t k = fy_h3_varint_encode(b, FY_H3_DATA);
    k += fy_h3_varint_encode(b + k, n);
    memcpy(b + k, cap, n);
    return k + n;
}

size_t fy__wtc_drain_frame(uint8_t *b)
{
    uint8_t cap[8];
    size_t n = fy_h3_varint_encode(cap, FY_WT_CAPSULE_DRAIN);
    n += fy_h3_varint_encode(cap + n, 0);
    size_t k = fy_h3_varint_encode(b, FY_H3_DATA);
    k += fy_h3_varint_encode(b + k, n);
    memcpy(b + k, cap, n);
    return k + n;
}

size_t fy__wtc_datagram(uint8_t *b, size_t cap, uint64_t sid, const void *p, size_t n)
{
    uint8_t q[8];
    size_t k = fy_h3_varint_encode(q, sid / 4);
    if (k + n > cap) return 0;
    memcpy(b, q, k);
    if (n) memcpy(b + k, p, n);
    return k + n;
}

size_t fy__wtc_datagram_of(const uint8_t *p, size_t n, uint64_t sid)
{
    uint64_t q;
    size_t k = fy_h3_varint_decode(p, n, &q);
    return k && q * 4 == sid ? k : 0;
}

/* A peer stream's prefix: bidi 0x41 + session id, uni 0x54 + session id (other uni types:
 * control and QPACK streams, read and ignored). Returns the bytes it took. */
static size_t read_prefix(fy_wtc_stream_t *st, const uint8_t *p, size_t n)
{
    fy_wtc_t *c = st->c;
    if (st->pre.state != 0) return 0; /* read before (or a stream of ours) */
    size_t used =
        fy__wtc_prefix_feed(&st->pre, st->uni ? FY_WT_STREAM_UNI : FY_WT_STREAM_BIDI, p, n);
    if (st->pre.state == -1) { /* control/QPACK/unknown: ignored */
        st->orphan = true;
        return used;
    }
    if (st->pre.state == 0) return used;
    if (!c->cs || st->pre.sid != (uint64_t)c->cs->id || c->state != S_OPEN || c->dead) {
        st->orphan = true;
        if (st->qs && c->qc) {
            if (!st->uni) fy_quic_stream_reset(c->qc, st->qs, FY_WT_BUFFERED_STREAM_REJECTED);
            fy_quic_stream_stop_reading(c->qc, st->qs, FY_WT_BUFFERED_STREAM_REJECTED);
        }
        return used;
    }
    st->wt = true;
    if (c->ops->stream) c->ops->stream(c->ud, st);
    return used;
}

/* ---- the session ---- */

static void end_session(fy_wtc_t *c, uint32_t code, const char *reason, size_t rlen)
{
    if (c->state == S_ENDED || c->dead) return;
    bool was_open = c->state == S_OPEN;
    int st = c->state;
    c->state = S_ENDED;
    for (fy_list_t *l = c->streams.next; l != &c->streams;) {
        fy_wtc_stream_t *s = fy_container_of(l, fy_wtc_stream_t, link);
        l = l->next;
        orphan(s, FY_WT_SESSION_GONE, true);
        if (c->dead) return;
    }
    if (was_open) {
        if (c->ops->close) c->ops->close(c->ud, code, reason, rlen);
    } else if (st != S_ENDED && c->ops->ready) {
        c->ops->ready(c->ud, 0);
    }
}

static void on_field(void *ud, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
    fy_wtc_t *c = ud;
    if (nl == 7 && !memcmp(n, ":status", 7) && vl == 3)
        c->status = (v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0');
}

static void head_done(fy_wtc_t *c)
{
    size_t used = 0;
    const char *err = NULL;
    if (!c->sctx) nghttp3_qpack_stream_context_new(&c->sctx, c->cs->id, nghttp3_mem_default());
    int r = fy_h3_qpack_decode(c->dec, c->sctx, c->hb, c->hn, &used, on_field, c, &err);
    if (r != FY_H3_QPACK_DONE) c->status = 502;
    if (c->status >= 100 && c->status < 200) { /* interim: the real head follows */
        c->status = 0;
        return;
    }
    c->state = c->status == 200 ? S_OPEN : S_ENDED;
    if (c->ops->ready) c->ops->ready(c->ud, c->status ? c->status : 502);
}

/* The CONNECT stream: HEADERS, then DATA frames carrying capsules. */
static void session_recv(fy_wtc_t *c, const uint8_t *p, size_t n)
{
    while (n && !c->dead && c->state != S_ENDED) {
        if (!c->rd.have_hdr) {
            size_t k = fy_h3_frame_hdr_feed(&c->rd, p, n);
            p += k;
            n -= k;
            if (!c->rd.have_hdr) break;
            c->hn = 0;
            if (c->rd.type == FY_H3_HEADERS && c->rd.len > sizeof c->hb) {
                fy_info("webtransport upstream: response head over %d bytes", HEAD_MAX);
                end_session(c, 0, "bad response", 12);
                return;
            }
        } else {
            size_t take = n < c->rd.left ? n : (size_t)c->rd.left;
            if (c->rd.type == FY_H3_HEADERS && c->state == S_HEAD) {
                memcpy(c->hb + c->hn, p, take);
                c->hn += take;
            } else if (c->rd.type == FY_H3_DATA && c->state == S_OPEN) {
                size_t off = 0;
                while (off < take) {
                    fy_wt_capsule_ev_t ev;
                    off += fy_wt_capsule_feed(&c->caps, p + off, take - off, &ev);
                    if (ev.kind == 1) {
                        end_session(c, ev.code, ev.reason, ev.reason_len);
                        return;
                    }
                    if (ev.kind == -1) {
                        end_session(c, 0, "malformed capsule", 17);
                        return;
                    }
                    if (ev.kind == 2 && c->ops->drain) {
                        c->ops->drain(c->ud);
                        if (c->dead) return;
                    }
                }
            }
            p += take;
            n -= take;
            c->rd.left -= take;
        }
        if (c->rd.have_hdr && c->rd.left == 0) {
            c->rd.have_hdr = false;
            if (c->rd.type == FY_H3_HEADERS && c->state == S_HEAD) head_done(c);
        }
    }
}

static void send_settings(fy_wtc_t *c)
{
    fy_quic_stream_t *ctrl = fy_quic_open_uni(c->qc);
    if (!ctrl) return;
    uint8_t b[64];
    fy_quic_stream_write(c->qc, ctrl, b, fy__wtc_settings(b));
}

static void nv_add(nghttp3_nv *nv, size_t *n, const char *k, const char *v)
{
    nv[*n] = (nghttp3_nv){(uint8_t *)k, (uint8_t *)v, strlen(k), strlen(v), 0};
    (*n)++;
}

static bool send_connect(fy_wtc_t *c)
{
    fy_quic_stream_t *qs = fy_quic_open_bidi(c->qc);
    if (!qs) return false;
    c->cs = qs;
    qs->app = NULL;
    nghttp3_nv nv[6];
    size_t nn = 0;
    nv_add(nv, &nn, ":method", "CONNECT");
    nv_add(nv, &nn, ":protocol", "webtransport");
    nv_add(nv, &nn, ":scheme", "https");
    nv_add(nv, &nn, ":authority", c->authority);
    nv_add(nv, &nn, ":path", c->path);
    if (c->origin) nv_add(nv, &nn, "origin", c->origin);
    nghttp3_buf pb, rb, eb;
    nghttp3_buf_init(&pb);
    nghttp3_buf_init(&rb);
    nghttp3_buf_init(&eb);
    const nghttp3_mem *mem = nghttp3_mem_default();
    int r = nghttp3_qpack_encoder_encode(c->enc, &pb, &rb, &eb, qs->id, nv, nn);
    if (r == 0) {
        uint8_t h[16];
        size_t k = fy_h3_varint_encode(h, FY_H3_HEADERS);
        k += fy_h3_varint_encode(h + k, nghttp3_buf_len(&pb) + nghttp3_buf_len(&rb));
        fy_quic_stream_write(c->qc, qs, h, k);
        fy_quic_stream_write(c->qc, qs, pb.pos, nghttp3_buf_len(&pb));
        fy_quic_stream_write(c->qc, qs, rb.pos, nghttp3_buf_len(&rb));
    }
    nghttp3_buf_free(&pb, mem);
    nghttp3_buf_free(&rb, mem);
    nghttp3_buf_free(&eb, mem);
    return r == 0;
}

static void free_now(fy_wtc_t *c)
{
    while (!fy_list_empty(&c->streams))
        stream_free(fy_container_of(c->streams.next, fy_wtc_stream_t, link));
    fy_timer_stop(c->loop, &c->linger);
    fy_defer_cancel(c->loop, &c->free_defer);
    if (c->sctx) nghttp3_qpack_stream_context_del(c->sctx);
    nghttp3_qpack_encoder_del(c->enc);
    nghttp3_qpack_decoder_del(c->dec);
    free(c->authority);
    free(c->path);
    free(c->origin);
    free(c);
}

static void free_cb(fy_defer_t *d)
{
    free_now(d->data);
}

static void on_linger(fy_timer_t *t)
{
    fy_wtc_t *c = t->data;
    if (c->qc) fy_quic_conn_close(c->qc, CLOSE_CODE, NULL);
}

/* ---- quic app ops ---- */

static void *app_open(fy_quic_conn_t *qc, void *ud)
{
    fy_wtc_t *c = ud;
    c->qc = qc;
    if (c->dead) { /* closed while connecting: app_close frees */
        fy_quic_conn_close(qc, CLOSE_CODE, NULL);
        return c;
    }
    send_settings(c);
    if (!send_connect(c)) { /* no stream credit at all: app_close reports ready(0) */
        fy_quic_conn_close(qc, CLOSE_CODE, NULL);
        return c;
    }
    c->state = S_HEAD;
    return c;
}

static void app_stream_open(void *app, fy_quic_stream_t *s)
{
    fy_wtc_t *c = app;
    s->app = NULL;
    if (c->dead) return;
    stream_new(c, s, (s->id & 2) != 0, false);
}

static int app_recv(void *app, fy_quic_stream_t *s, const uint8_t *p, size_t n, bool fin)
{
    fy_wtc_t *c = app;
    if (s == c->cs) {
        fy_quic_stream_consumed(c->qc, s, n);
        if (!c->dead) session_recv(c, p, n);
        if (fin && !c->dead) end_session(c, 0, "", 0);
        return 0;
    }
    fy_wtc_stream_t *st = s->app;
    if (!st || c->dead) {
        fy_quic_stream_consumed(c->qc, s, n);
        return 0;
    }
    size_t k = read_prefix(st, p, n);
    credit(st, k);
    if (st->pre.state != 1 || !st->wt || st->orphan) {
        credit(st, n - k);
        return 0;
    }
    deliver(st, p + k, n - k, fin);
    return 0;
}

static void app_reset(void *app, fy_quic_stream_t *s, uint64_t code)
{
    fy_wtc_t *c = app;
    if (c->dead) return;
    if (s == c->cs) {
        end_session(c, 0, "gone", 4);
        return;
    }
    /* as fy_h3_wt_reset: code 0 is the origin's STOP_SENDING, another its RESET_STREAM */
    fy_wtc_stream_t *st = s->app;
    if (!st || !st->wt || st->orphan) return;
    if (code == 0 && c->ops->stop) {
        if (st->stop_seen) return;
        st->stop_seen = true;
        c->ops->stop(c->ud, st, -1);
        return;
    }
    if (st->reset_seen) return;
    st->reset_seen = true;
    if (code && c->ops->stop) { /* RESET_STREAM: what is still buffered of it is void */
        fy_defer_cancel(c->loop, &st->defer);
        credit(st, st->len);
        st->len = 0;
    }
    if (c->ops->reset) c->ops->reset(c->ud, st, fy_wt_code_from_h3(code));
}

static void app_acked(void *app, fy_quic_stream_t *s)
{
    fy_wtc_t *c = app;
    if (s == c->cs) {
        if (c->dead && fy_quic_stream_buffered(s) == 0) fy_quic_conn_close(c->qc, CLOSE_CODE, NULL);
        return;
    }
    fy_wtc_stream_t *st = s->app;
    if (st && st->reset_h3 && c->qc && fy_quic_stream_buffered(s) == 0) {
        uint64_t h3 = st->reset_h3;
        st->reset_h3 = 0;
        fy_quic_stream_reset(c->qc, s, h3);
        return;
    }
    if (st && st->wt && !st->orphan && !c->dead && c->ops->writable) c->ops->writable(c->ud, st);
}

static void app_stream_close(void *app, fy_quic_stream_t *s, uint64_t code)
{
    (void)code;
    fy_wtc_t *c = app;
    if (s == c->cs) {
        c->cs = NULL;
        if (!c->dead) end_session(c, 0, "gone", 4);
        return;
    }
    fy_wtc_stream_t *st = s->app;
    if (!st) return;
    st->qs = NULL;
    s->app = NULL;
    /* all received and all sent, but the owner has not used every byte yet: it stays until
       it has (resume_cb) */
    if (!st->orphan && !st->stopped && st->wt && !c->dead &&
        (st->len || (st->fin && !st->fin_given)))
        return;
    if (!st->orphan) {
        st->orphan = true;
        if (st->wt && !c->dead && c->ops->stream_gone) c->ops->stream_gone(c->ud, st);
    }
    stream_free(st);
}

static void app_datagram(void *app, const uint8_t *p, size_t n)
{
    fy_wtc_t *c = app;
    if (c->dead || c->state != S_OPEN || !c->cs) return;
    size_t k = fy__wtc_datagram_of(p, n, (uint64_t)c->cs->id);
    if (!k) return;
    if (c->ops->datagram) c->ops->datagram(c->ud, p + k, n - k);
}

static void app_close(void *app)
{
    fy_wtc_t *c = app;
    c->qc = NULL;
    c->cs = NULL;
    for (fy_list_t *l = c->streams.next; l != &c->streams; l = l->next)
        fy_container_of(l, fy_wtc_stream_t, link)->qs = NULL;
    if (c->dead) {
        free_now(c);
        return;
    }
    end_session(c, 0, "gone", 4);
}

static const fy_quic_app_ops_t quic_ops = {
    .open = app_open,
    .stream_open = app_stream_open,
    .recv = app_recv,
    .reset = app_reset,
    .acked = app_acked,
    .stream_close = app_stream_close,
    .datagram = app_datagram,
    .close = app_close,
};

/* ---- API ---- */

fy_wtc_t *fy_wtc_connect(fy_loop_t *loop, const struct sockaddr *sa, socklen_t salen,
                         const fy_quic_client_opts_t *o, const char *authority, const char *path,
                         const char *origin, const fy_wtc_ops_t *ops, void *ud)
{
    fy_wtc_t *c = fy_xcalloc(1, sizeof *c);
    c->loop = loop;
    c->conf = o->conf;
    c->ops = ops;
    c->ud = ud;
    c->authority = fy_xstrdup(authority);
    c->path = fy_xstrdup(path);
    c->origin = origin ? fy_xstrdup(origin) : NULL;
    fy_list_init(&c->streams);
    fy_timer_init(&c->linger, on_linger, c);
    c->free_defer.cb = free_cb;
    c->free_defer.data = c;
    const nghttp3_mem *mem = nghttp3_mem_default();
    nghttp3_qpack_encoder_new(&c->enc, 0, mem);
    nghttp3_qpack_decoder_new(&c->dec, 0, 0, mem);
    c->qc = fy_quic_connect(loop, sa, salen, o, &quic_ops, c);
    if (!c->qc) {
        free_now(c);
        return NULL;
    }
    return c;
}

void fy_wtc_close(fy_wtc_t *c, uint32_t code, const char *reason, size_t rlen)
{
    if (c->dead) return;
    bool open = c->state == S_OPEN;
    c->dead = true;
    for (fy_list_t *l = c->streams.next; l != &c->streams; l = l->next)
        orphan(fy_container_of(l, fy_wtc_stream_t, link), FY_WT_SESSION_GONE, false);
    if (!c->qc) { /* connection already gone (or never made) */
        fy_defer(c->loop, &c->free_defer);
        return;
    }
    if (open && c->cs) {
        uint8_t f[32 + FY_WT_CLOSE_REASON_MAX];
        fy_quic_stream_write(c->qc, c->cs, f, fy__wtc_close_frame(f, code, reason, rlen));
        fy_quic_stream_finish(c->qc, c->cs);
        fy_timer_start(c->loop, &c->linger, LINGER_MS);
        return;
    }
    fy_quic_conn_close(c->qc, CLOSE_CODE, NULL);
}

void fy_wtc_drain(fy_wtc_t *c)
{
    if (c->dead || c->drained || c->state != S_OPEN || !c->qc || !c->cs) return;
    c->drained = true;
    uint8_t b[16];
    fy_quic_stream_write(c->qc, c->cs, b, fy__wtc_drain_frame(b));
}

int fy_wtc_send_datagram(fy_wtc_t *c, const void *p, size_t n)
{
    if (c->dead || c->state != S_OPEN || !c->qc || !c->cs) return -ENOTSUP;
    uint8_t b[1500];
    size_t k = fy__wtc_datagram(b, sizeof b, (uint64_t)c->cs->id, p, n);
    if (!k) return -EMSGSIZE;
    return fy_quic_send_datagram(c->qc, b, k);
}

fy_wtc_stream_t *fy_wtc_open(fy_wtc_t *c, bool uni)
{
    if (c->dead || c->state != S_OPEN || !c->qc || !c->cs) return NULL;
    fy_quic_stream_t *qs = uni ? fy_quic_open_uni(c->qc) : fy_quic_open_bidi(c->qc);
    if (!qs) return NULL;
    fy_wtc_stream_t *st = stream_new(c, qs, uni, true);
    st->wt = true;
    uint8_t b[16];
    fy_quic_stream_write(c->qc, qs, b, fy__wtc_stream_head(b, uni, (uint64_t)c->cs->id));
    return st;
}

bool fy_wtc_stream_is_uni(const fy_wtc_stream_t *st)
{
    return st->uni;
}

void fy_wtc_stream_set_ud(fy_wtc_stream_t *st, void *ud)
{
    st->ud = ud;
}

void *fy_wtc_stream_ud(const fy_wtc_stream_t *st)
{
    return st->ud;
}

int fy_wtc_stream_write(fy_wtc_stream_t *st, const void *p, size_t n)
{
    if (st->orphan || st->sent_reset || !st->qs || !st->c->qc || !can_send(st)) return -EPIPE;
    return fy_quic_stream_write(st->c->qc, st->qs, p, n);
}

void fy_wtc_stream_finish(fy_wtc_stream_t *st)
{
    if (!st->orphan && !st->sent_reset && st->qs && st->c->qc && can_send(st))
        fy_quic_stream_finish(st->c->qc, st->qs);
}

size_t fy_wtc_stream_buffered(const fy_wtc_stream_t *st)
{
    return st->qs ? fy_quic_stream_buffered(st->qs) : 0;
}

size_t fy_wtc_send_buffer(const fy_wtc_stream_t *st)
{
    return st->c->conf->send_buffer;
}

void fy_wtc_stream_resume(fy_wtc_stream_t *st)
{
    if (st->orphan || st->c->dead) return;
    st->defer.cb = resume_cb;
    st->defer.data = st;
    fy_defer(st->c->loop, &st->defer);
}

void fy_wtc_stream_reset(fy_wtc_stream_t *st, uint32_t code)
{
    orphan(st, fy_wt_code_to_h3(code), true);
}

void fy_wtc_stream_reset_send(fy_wtc_stream_t *st, uint32_t code)
{
    if (st->orphan || st->sent_reset || !st->qs || !st->c->qc || !can_send(st)) return;
    st->sent_reset = true;
    /* as fy_wt_stream_reset_send: not before the queued bytes (the prefix) were acknowledged */
    if (fy_quic_stream_buffered(st->qs)) {
        st->reset_h3 = fy_wt_code_to_h3(code);
        return;
    }
    fy_quic_stream_reset(st->c->qc, st->qs, fy_wt_code_to_h3(code));
}

void fy_wtc_stream_stop(fy_wtc_stream_t *st, uint32_t code)
{
    if (st->orphan || st->stopped || !st->qs || !st->c->qc || !can_recv(st)) return;
    st->stopped = true;
    fy_defer_cancel(st->c->loop, &st->defer);
    credit(st, st->len);
    st->len = 0;
    fy_quic_stream_stop_reading(st->c->qc, st->qs, fy_wt_code_to_h3(code));
}
