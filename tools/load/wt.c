/* ferry-load over WebTransport (wt://host:port/path): each connection (-c) opens --sessions
 * WebTransport sessions (extended CONNECT, :protocol webtransport) on one QUIC connection
 * (ferry's loop and quic/quic.h, as h3.c), each session keeps -m bidirectional streams busy:
 * a stream sends --size bytes of a pattern and FIN, the echo is verified byte for byte, and its
 * round trip is one "request" in the report (latency from the stream's open to the echo's
 * FIN). --datagram-rate R sends R datagrams/s per session of --datagram-size bytes, verified
 * when they come back; their counts (sent, echoed, bad) are printed after the report. A
 * session refused (not 200) counts a status error with its class. */
#include <nghttp3/nghttp3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/loop.h"
#include "fl.h"
#include "h3/h3_frame.h"
#include "h3/h3_qpack.h"
#include "h3/h3_wt.h"
#include "h3/h3_wt_client.h"
#include "quic/quic.h"

enum { KIND_SESSION = 1, KIND_DATA = 2, KIND_UNI_IN = 3 };

typedef struct wt_sess wt_sess_t;

typedef struct wt_str {
    wt_sess_t *ss;
    fy_quic_stream_t *qs;
    uint64_t t0, sent, got;
    uint8_t seed;
    bool busy, bad;
    bool reset_sent, stop_sent; /* --wt-fault reset-stream / stop-sending: done */
    bool reset_due;             /* stop-sending: the server's RESET_STREAM came; end when sent */
    struct uni_in *in;          /* --wt-uni: the server's stream carrying the echo */
} wt_str_t;

/* --wt-uni: a server uni stream: its prefix (0x54 + session id), then the echo of the client
 * stream whose pattern seed its first byte gives (pat(seed, 0) = seed * 13 + 3). */
typedef struct uni_in {
    fy__wtc_prefix_t pre;
    wt_str_t *st; /* matched (NULL before, and after the stream ended) */
} uni_in_t;

struct wt_sess {
    struct wt_conn *wc;
    fy_quic_stream_t *cs; /* the CONNECT stream */
    fy_h3_frame_rd_t rd;
    uint8_t hb[2048];
    size_t hn;
    bool ready, done;
    int status;
    uint64_t t0;
    wt_str_t *strs;
    uint8_t next_seed;
    nghttp3_qpack_stream_context *sctx;
    fy_wt_capsule_rd_t caps; /* the server's capsules (DATA frames on the CONNECT stream) */
};

typedef struct wt_conn {
    fl_conn_t *fc;
    fy_quic_conn_t *qc;
    wt_sess_t *sess;
    nghttp3_qpack_encoder *enc;
    nghttp3_qpack_decoder *dec;
    fy_timer_t dg, retry, late; /* late: --wt-fault late-settings */
    fy_timer_t uni_credit;      /* --wt-uni: no callback tells of uni stream credit: poll */
    double dg_due;
    bool open;
} wt_conn_t;

typedef struct wt_worker {
    fl_worker_t *w;
    fy_loop_t loop;
    fy_quic_conf_t conf;
    wt_conn_t *wcs;
    fy_timer_t tick;
} wt_worker_t;

static __thread wt_worker_t *ww;
static uint64_t dg_sent, dg_echoed, dg_bad; /* atomics: every worker adds */
static uint64_t peer_close = (uint64_t)-1;  /* the last CONNECTION_CLOSE code the server sent */
static uint64_t first_reset = (uint64_t)-1; /* the first RESET_STREAM code the server sent */
static uint64_t drains;                     /* DRAIN_WEBTRANSPORT_SESSION capsules received */
#define FAULT_CODE (0x52e4a40fa8dbull + 7)  /* WebTransport code 7 as an HTTP/3 code */

static bool stopping(void)
{
    fl_worker_t *w = ww->w;
    return w->stopping || w->now >= w->end || (w->budget && w->finished >= w->budget);
}

static uint8_t pat(uint8_t seed, uint64_t i)
{
    return (uint8_t)((i * 7 + seed * 13 + 3) & 0xff);
}

static void stream_end(wt_str_t *s, int err);

static void pump_stream(wt_str_t *s)
{
    wt_conn_t *wc = s->ss->wc;
    uint8_t buf[16384];
    /* close-mid-stream: half the bytes and no FIN, so no echo can complete before the close;
       reset-stream: half the bytes, then RESET_STREAM (the echo's reset ends the stream) */
    bool half = fl_cfg.wt_fault == 2 || fl_cfg.wt_fault == 5;
    uint64_t size = half ? fl_cfg.echo_size / 2 : fl_cfg.echo_size;
    while (s->sent < size && fy_quic_stream_buffered(s->qs) < 256 * 1024) {
        size_t n = size - s->sent < sizeof buf ? size - s->sent : sizeof buf;
        for (size_t i = 0; i < n; i++) buf[i] = pat(s->seed, s->sent + i);
        fy_quic_stream_write(wc->qc, s->qs, buf, n);
        s->sent += n;
    }
    if (s->sent == fl_cfg.echo_size) fy_quic_stream_finish(wc->qc, s->qs);
    /* reset-stream: once those bytes were acknowledged (a reset drops what is still queued,
       which would leave the server a stream without its WebTransport prefix) */
    if (fl_cfg.wt_fault == 5 && s->sent == size && !s->reset_sent &&
        fy_quic_stream_buffered(s->qs) == 0) {
        s->reset_sent = true;
        fy_quic_stream_reset(wc->qc, s->qs, FAULT_CODE);
    }
    if (s->reset_due && s->sent == fl_cfg.echo_size) stream_end(s, FL_ERR_RESET);
}

static void start_streams(wt_sess_t *ss)
{
    fl_worker_t *w = ww->w;
    if (fl_cfg.wt_datagrams_only) return;
    for (int i = 0; i < fl_cfg.streams && ss->ready && !stopping(); i++) {
        wt_str_t *s = &ss->strs[i];
        if (s->busy) continue;
        if (w->budget && w->issued >= w->budget) return;
        fy_quic_stream_t *qs =
            fl_cfg.wt_uni ? fy_quic_open_uni(ss->wc->qc) : fy_quic_open_bidi(ss->wc->qc);
        if (!qs) { /* credit comes back (ops->credit; for uni streams: polled) */
            if (fl_cfg.wt_uni && !fy_timer_is_active(&ss->wc->uni_credit))
                fy_timer_start(&ww->loop, &ss->wc->uni_credit, 2);
            return;
        }
        memset(s, 0, sizeof *s);
        s->ss = ss;
        s->qs = qs;
        s->busy = true;
        s->seed = ss->next_seed++;
        s->t0 = fl_now_ns();
        qs->app = s;
        qs->app_kind = KIND_DATA;
        uint8_t b[16];
        size_t k = fy_h3_varint_encode(b, fl_cfg.wt_uni ? 0x54 : 0x41);
        uint64_t sid = (uint64_t)ss->cs->id + (fl_cfg.wt_fault == 1 ? 4 * 1000 : 0);
        k += fy_h3_varint_encode(b + k, sid);
        fy_quic_stream_write(ss->wc->qc, qs, b, k);
        ss->wc->fc->inflight++;
        w->issued++;
        pump_stream(s);
    }
}

static void stream_end(wt_str_t *s, int err)
{
    if (!s->busy) return;
    s->busy = false;
    if (s->qs) s->qs->app = NULL;
    s->qs = NULL;
    if (s->in) s->in->st = NULL;
    s->in = NULL;
    fl_finish(s->ss->wc->fc, s->t0, 200, s->got, err);
    if (!stopping()) start_streams(s->ss);
}

static void send_datagrams(wt_conn_t *wc)
{
    double per_ms = fl_cfg.wt_datagram_rate / 1000.0;
    wc->dg_due += per_ms * 10; /* the timer runs every 10 ms */
    size_t sz = fl_cfg.wt_datagram_size < 16 ? 16 : fl_cfg.wt_datagram_size;
    uint8_t b[1500];
    if (sz > sizeof b - 8) sz = sizeof b - 8;
    while (wc->dg_due >= 1) {
        wc->dg_due -= 1;
        for (int k = 0; k < fl_cfg.wt_sessions; k++) {
            wt_sess_t *ss = &wc->sess[k];
            if (!ss->ready) continue;
            size_t h = fy_h3_varint_encode(b, (uint64_t)ss->cs->id / 4);
            uint64_t t = fl_now_ns();
            memcpy(b + h, &t, 8);
            for (size_t i = 8; i < sz; i++) b[h + i] = pat(0, i);
            if (fy_quic_send_datagram(wc->qc, b, h + sz) == 0)
                __atomic_add_fetch(&dg_sent, 1, __ATOMIC_RELAXED);
        }
    }
}

static void on_dg_timer(fy_timer_t *t)
{
    wt_conn_t *wc = t->data;
    if (!wc->open || stopping()) return;
    send_datagrams(wc);
    fy_timer_start(&ww->loop, t, 10);
}

static void on_field(void *ud, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
    wt_sess_t *ss = ud;
    if (nl == 7 && !memcmp(n, ":status", 7) && vl == 3)
        ss->status = (v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0');
}

static void session_head(wt_sess_t *ss)
{
    wt_conn_t *wc = ss->wc;
    size_t used = 0;
    const char *err = NULL;
    if (!ss->sctx) nghttp3_qpack_stream_context_new(&ss->sctx, ss->cs->id, nghttp3_mem_default());
    int r = fy_h3_qpack_decode(wc->dec, ss->sctx, ss->hb, ss->hn, &used, on_field, ss, &err);
    fl_worker_t *w = ww->w;
    if (r != FY_H3_QPACK_DONE || ss->status != 200) {
        ss->done = true;
        int st = ss->status;
        w->st.status[st >= 100 && st < 600 ? st / 100 : 0]++;
        fl_count_error(wc->fc, r != FY_H3_QPACK_DONE ? FL_ERR_PARSE : FL_ERR_STATUS, 1);
        return;
    }
    ss->ready = true;
    w->st.status[2]++;
    start_streams(ss);
    if (fl_cfg.wt_fault == 2) { /* close the session (code 42) with its streams still open */
        uint8_t b[32];
        size_t k = fy_h3_varint_encode(b, 0x0);
        k += fy_h3_varint_encode(b + k, 2 + 1 + 4 + 3);
        k += fy_h3_varint_encode(b + k, 0x2843);
        k += fy_h3_varint_encode(b + k, 4 + 3);
        memcpy(b + k,
               "\0\0\0\x2a"
               "mid",
               7);
        fy_quic_stream_write(wc->qc, ss->cs, b, k + 7);
        fy_quic_stream_finish(wc->qc, ss->cs);
    }
    if (fl_cfg.wt_fault == 7) { /* DRAIN_WEBTRANSPORT_SESSION in a DATA frame */
        uint8_t b[16], cap[8];
        size_t n = fy_h3_varint_encode(cap, FY_WT_CAPSULE_DRAIN);
        n += fy_h3_varint_encode(cap + n, 0);
        size_t k = fy_h3_varint_encode(b, 0x0);
        k += fy_h3_varint_encode(b + k, n);
        memcpy(b + k, cap, n);
        fy_quic_stream_write(wc->qc, ss->cs, b, k + n);
    }
    if (fl_cfg.wt_fault == 3) /* an HTTP Datagram without its quarter stream id */
        fy_quic_send_datagram(wc->qc, "", 0);
}

static void session_recv(wt_sess_t *ss, const uint8_t *p, size_t n)
{
    while (n && !ss->done) {
        if (!ss->rd.have_hdr) {
            size_t k = fy_h3_frame_hdr_feed(&ss->rd, p, n);
            p += k;
            n -= k;
            if (!ss->rd.have_hdr) break;
            ss->hn = 0;
            if (ss->rd.type == 0x1 && ss->rd.len > sizeof ss->hb) {
                ss->done = true;
                fl_count_error(ss->wc->fc, FL_ERR_PARSE, 1);
                return;
            }
        } else {
            size_t take = n < ss->rd.left ? n : (size_t)ss->rd.left;
            if (ss->rd.type == 0x1) memcpy(ss->hb + ss->hn, p, take), ss->hn += take;
            for (size_t off = 0; ss->rd.type == 0x0 && ss->ready && off < take;) {
                fy_wt_capsule_ev_t ev;
                off += fy_wt_capsule_feed(&ss->caps, p + off, take - off, &ev);
                if (ev.kind == 2) __atomic_add_fetch(&drains, 1, __ATOMIC_RELAXED);
                if (ev.kind == -1) break;
            }
            p += take;
            n -= take;
            ss->rd.left -= take;
        }
        if (ss->rd.have_hdr && ss->rd.left == 0) {
            ss->rd.have_hdr = false;
            if (ss->rd.type == 0x1 && !ss->ready) session_head(ss);
        }
    }
}

/* ---- quic app ops ---- */

static void open_session(wt_conn_t *wc, wt_sess_t *ss)
{
    fy_quic_stream_t *qs = fy_quic_open_bidi(wc->qc);
    if (!qs) {
        ss->done = true;
        fl_count_error(wc->fc, FL_ERR_RESET, 1);
        return;
    }
    ss->cs = qs;
    qs->app = ss;
    qs->app_kind = KIND_SESSION;
    ss->t0 = fl_now_ns();
    const char *path = fl_cfg.urls[0].path;
    nghttp3_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"CONNECT", 7, 7, 0},
        {(uint8_t *)":protocol", (uint8_t *)"webtransport", 9, 12, 0},
        {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
        {(uint8_t *)":authority", (uint8_t *)fl_cfg.authority, 10, strlen(fl_cfg.authority), 0},
        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
        {(uint8_t *)"origin", (uint8_t *)"https://ferry-load", 6, 18, 0},
    };
    nghttp3_buf pb, rb, eb;
    nghttp3_buf_init(&pb);
    nghttp3_buf_init(&rb);
    nghttp3_buf_init(&eb);
    nghttp3_qpack_encoder_encode(wc->enc, &pb, &rb, &eb, qs->id, nv, sizeof nv / sizeof nv[0]);
    uint8_t h[16];
    size_t k = fy_h3_varint_encode(h, 0x1);
    k += fy_h3_varint_encode(h + k, nghttp3_buf_len(&pb) + nghttp3_buf_len(&rb));
    fy_quic_stream_write(wc->qc, qs, h, k);
    fy_quic_stream_write(wc->qc, qs, pb.pos, nghttp3_buf_len(&pb));
    fy_quic_stream_write(wc->qc, qs, rb.pos, nghttp3_buf_len(&rb));
    const nghttp3_mem *mem = nghttp3_mem_default();
    nghttp3_buf_free(&pb, mem);
    nghttp3_buf_free(&rb, mem);
    nghttp3_buf_free(&eb, mem);
}

static void send_settings(wt_conn_t *wc)
{
    fy_quic_conn_t *qc = wc->qc;
    fy_quic_stream_t *ctrl = fy_quic_open_uni(qc);
    if (ctrl) {
        uint8_t st[64], b[80];
        size_t sl = 0;
        sl += fy_h3_varint_encode(st + sl, 0x33); /* H3_DATAGRAM */
        sl += fy_h3_varint_encode(st + sl, 1);
        sl += fy_h3_varint_encode(st + sl, 0x2b603742); /* ENABLE_WEBTRANSPORT (draft-02) */
        sl += fy_h3_varint_encode(st + sl, 1);
        sl += fy_h3_varint_encode(st + sl, 0x14e9cd29); /* WT_MAX_SESSIONS */
        sl += fy_h3_varint_encode(st + sl, 1);
        size_t k = fy_h3_varint_encode(b, 0x0);
        k += fy_h3_varint_encode(b + k, 0x4);
        k += fy_h3_varint_encode(b + k, sl);
        memcpy(b + k, st, sl);
        fy_quic_stream_write(qc, ctrl, b, k + sl);
    }
}

static void on_late(fy_timer_t *t)
{
    wt_conn_t *wc = t->data;
    if (wc->open) send_settings(wc);
}

static void *app_open(fy_quic_conn_t *qc, void *ud)
{
    wt_conn_t *wc = ud;
    wc->qc = qc;
    wc->open = true;
    wc->fc->w->st.connects++;
    wc->fc->ever_ready = true;
    if (fl_cfg.wt_fault == 4) /* the CONNECTs go first, SETTINGS 50 ms later */
        fy_timer_start(&ww->loop, &wc->late, 50);
    else
        send_settings(wc);
    for (int k = 0; k < fl_cfg.wt_sessions; k++) open_session(wc, &wc->sess[k]);
    if (fl_cfg.wt_datagram_rate > 0) fy_timer_start(&ww->loop, &wc->dg, 10);
    return wc;
}

static void app_stream_open(void *app, fy_quic_stream_t *s)
{
    (void)app;
    s->app = NULL; /* the server's control/QPACK streams: read and ignored */
    if (fl_cfg.wt_uni && (s->id & 3) == 3) {
        s->app = calloc(1, sizeof(uni_in_t));
        s->app_kind = KIND_UNI_IN;
    }
}

/* --wt-uni: bytes of a server uni stream; returns the stream they echo (NULL: not yet known,
 * or not an echo), with p and n moved past the prefix. */
static wt_str_t *uni_in_recv(wt_conn_t *wc, uni_in_t *u, const uint8_t **p, size_t *n)
{
    size_t k = fy__wtc_prefix_feed(&u->pre, FY_WT_STREAM_UNI, *p, *n);
    *p += k, *n -= k;
    if (u->pre.state != 1 || u->st) return u->st;
    if (!*n) return NULL;
    uint8_t seed = (uint8_t)((uint8_t)((*p)[0] - 3) * 197); /* 197 = 13^-1 mod 256 */
    for (int k2 = 0; k2 < fl_cfg.wt_sessions; k2++) {
        wt_sess_t *ss = &wc->sess[k2];
        if (!ss->cs || (uint64_t)ss->cs->id != u->pre.sid) continue;
        for (int i = 0; i < fl_cfg.streams; i++) {
            wt_str_t *st = &ss->strs[i];
            if (st->busy && !st->in && st->seed == seed && st->got == 0) {
                st->in = u;
                u->st = st;
                return st;
            }
        }
    }
    u->pre.state = -1; /* an answer for no stream of ours: counted as a bad body */
    fl_count_error(wc->fc, FL_ERR_BODY, 1);
    return NULL;
}

static int app_recv(void *app, fy_quic_stream_t *s, const uint8_t *p, size_t n, bool fin)
{
    wt_conn_t *wc = app;
    fy_quic_stream_consumed(wc->qc, s, n);
    wc->fc->w->st.bytes += n;
    if (!s->app) return 0;
    if (s->app_kind == KIND_SESSION) {
        session_recv(s->app, p, n);
        return 0;
    }
    wt_str_t *st = s->app;
    if (s->app_kind == KIND_UNI_IN && !(st = uni_in_recv(wc, s->app, &p, &n))) return 0;
    if (st->stop_sent) return 0; /* what still comes after our STOP_SENDING */
    if (fl_cfg.wt_fault == 6 && st->got + n >= 65536) {
        st->stop_sent = true;
        fy_quic_stream_stop_reading(wc->qc, s, FAULT_CODE);
    }
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(st->seed, st->got + i)) st->bad = true;
    st->got += n;
    if (fin) stream_end(st, st->bad || st->got != fl_cfg.echo_size ? FL_ERR_BODY : -1);
    return 0;
}

static void app_reset(void *app, fy_quic_stream_t *s, uint64_t code)
{
    (void)app;
    uint64_t none = (uint64_t)-1;
    __atomic_compare_exchange_n(&first_reset, &none, code, false, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    if (s->app && s->app_kind == KIND_UNI_IN) {
        uni_in_t *u = s->app;
        if (u->st) stream_end(u->st, FL_ERR_RESET);
        return;
    }
    if (!s->app || s->app_kind != KIND_DATA) return;
    wt_str_t *st = s->app;
    /* stop-sending: the server's RESET_STREAM answers our STOP_SENDING; the bytes still to
       send go on (the server's side of the test needs them), the stream ends after them. A
       code 0 is the server's own STOP_SENDING: nothing more can be sent. */
    if (fl_cfg.wt_fault == 6 && code && st->sent < fl_cfg.echo_size) {
        st->reset_due = true;
        return;
    }
    stream_end(st, FL_ERR_RESET);
}

static void app_acked(void *app, fy_quic_stream_t *s)
{
    (void)app;
    wt_str_t *st = s->app;
    if (st && s->app_kind == KIND_DATA && st->busy && st->sent < fl_cfg.echo_size &&
        !st->reset_sent)
        pump_stream(st);
}

static void app_stream_close(void *app, fy_quic_stream_t *s, uint64_t code)
{
    (void)app;
    (void)code;
    if (!s->app) return;
    if (s->app_kind == KIND_UNI_IN) {
        uni_in_t *u = s->app;
        if (u->st) stream_end(u->st, FL_ERR_RESET); /* closed before its FIN came */
        free(u);
    } else if (s->app_kind == KIND_DATA) {
        wt_str_t *st = s->app;
        st->qs = NULL;
        /* --wt-uni: our stream is done once sent and acknowledged (code 0); the echo comes
           apart. A code: it was reset (the server's STOP_SENDING, answered by QUIC) */
        if (!fl_cfg.wt_uni || code) stream_end(st, FL_ERR_RESET);
    } else {
        wt_sess_t *ss = s->app;
        ss->cs = NULL;
        ss->ready = false;
        ss->done = true;
    }
    s->app = NULL;
}

static void app_datagram(void *app, const uint8_t *p, size_t n)
{
    wt_conn_t *wc = app;
    uint64_t q;
    size_t h = fy_h3_varint_decode(p, n, &q);
    size_t sz = fl_cfg.wt_datagram_size < 16 ? 16 : fl_cfg.wt_datagram_size;
    if (!h || n - h < 8) {
        __atomic_add_fetch(&dg_bad, 1, __ATOMIC_RELAXED);
        return;
    }
    bool ok = n - h == sz;
    for (size_t i = 8; ok && i < sz; i++) ok = p[h + i] == pat(0, i);
    __atomic_add_fetch(ok ? &dg_echoed : &dg_bad, 1, __ATOMIC_RELAXED);
    if (fl_cfg.wt_datagrams_only && ok) { /* one round trip, timed from its own timestamp */
        uint64_t t;
        memcpy(&t, p + h, 8);
        wc->fc->inflight++; /* fl_finish takes one off: datagrams are never "in flight" */
        fl_finish(wc->fc, t, 200, sz, -1);
    }
}

static void app_credit(void *app)
{
    wt_conn_t *wc = app;
    for (int k = 0; k < fl_cfg.wt_sessions; k++)
        if (wc->sess[k].ready) start_streams(&wc->sess[k]);
}

static void conn_start(wt_conn_t *wc);

static void on_uni_credit(fy_timer_t *t)
{
    wt_conn_t *wc = t->data;
    if (wc->open) app_credit(wc);
}

static void on_retry(fy_timer_t *t)
{
    conn_start(t->data);
}

static void app_close(void *app)
{
    wt_conn_t *wc = app;
    uint64_t code;
    bool is_app;
    if (fy_quic_conn_peer_close(wc->qc, &code, &is_app) && is_app)
        __atomic_store_n(&peer_close, code, __ATOMIC_RELAXED);
    for (int k = 0; k < fl_cfg.wt_sessions; k++) wc->sess[k].ready = false;
    wc->open = false;
    wc->qc = NULL;
    if (fl_cfg.wt_fault) { /* a fault run ends with its connection */
        ww->w->stopping = true;
        fy_loop_stop(&ww->loop);
    }
    fy_timer_stop(&ww->loop, &wc->dg);
}

static const fy_quic_app_ops_t wt_ops = {
    .open = app_open,
    .stream_open = app_stream_open,
    .recv = app_recv,
    .reset = app_reset,
    .acked = app_acked,
    .stream_close = app_stream_close,
    .datagram = app_datagram,
    .credit = app_credit,
    .close = app_close,
};

static void conn_start(wt_conn_t *wc)
{
    if (stopping()) return;
    for (int k = 0; k < fl_cfg.wt_sessions; k++) {
        wt_sess_t *ss = &wc->sess[k];
        if (ss->sctx) nghttp3_qpack_stream_context_del(ss->sctx);
        wt_str_t *strs = ss->strs;
        memset(ss, 0, sizeof *ss);
        ss->wc = wc;
        ss->strs = strs;
    }
    fy_quic_client_opts_t o = {
        .conf = &ww->conf, .sni = fl_cfg.host, .insecure = fl_cfg.insecure, .name = "ferry-load"};
    if (!fy_quic_connect(&ww->loop, (struct sockaddr *)&fl_cfg.addr, fl_cfg.addrlen, &o, &wt_ops,
                         wc)) {
        fl_count_error(wc->fc, FL_ERR_CONNECT, 1);
        fy_timer_start(&ww->loop, &wc->retry, 100);
    }
}

static void on_tick(fy_timer_t *t)
{
    fl_worker_t *w = ww->w;
    w->now = fl_now_ns();
    if (stopping()) {
        fy_loop_stop(&ww->loop);
        return;
    }
    fy_timer_start(&ww->loop, t, 10);
}

void *fl_wt_worker_run(fl_worker_t *w)
{
    wt_worker_t self = {.w = w};
    ww = &self;
    self.conf = (fy_quic_conf_t){.cc = FY_QUIC_CC_CUBIC,
                                 .idle_timeout_ms = 30000,
                                 .handshake_timeout_ms = (uint64_t)(fl_cfg.timeout * 1000),
                                 .max_streams = 100,
                                 .stream_window = 1 << 20,
                                 .connection_window = 16 << 20,
                                 .send_buffer = 256 * 1024,
                                 .max_datagram_size = 1500,
                                 .max_connections = 1};
    if (self.conf.handshake_timeout_ms == 0) self.conf.handshake_timeout_ms = 10000;
    if (fy_loop_init(&self.loop) < 0) return NULL;
    self.wcs = calloc((size_t)w->nconns, sizeof *self.wcs);
    const nghttp3_mem *mem = nghttp3_mem_default();
    for (int i = 0; i < w->nconns; i++) {
        wt_conn_t *wc = &self.wcs[i];
        wc->fc = &w->conns[i];
        wc->fc->w = w;
        wc->fc->fd = -1;
        wc->sess = calloc((size_t)fl_cfg.wt_sessions, sizeof *wc->sess);
        for (int k = 0; k < fl_cfg.wt_sessions; k++)
            wc->sess[k].strs = calloc((size_t)fl_cfg.streams, sizeof(wt_str_t));
        nghttp3_qpack_encoder_new(&wc->enc, 0, mem);
        nghttp3_qpack_decoder_new(&wc->dec, 0, 0, mem);
        fy_timer_init(&wc->dg, on_dg_timer, wc);
        fy_timer_init(&wc->retry, on_retry, wc);
        fy_timer_init(&wc->late, on_late, wc);
        fy_timer_init(&wc->uni_credit, on_uni_credit, wc);
    }
    while ((w->now = fl_now_ns()) < w->t0) {
        struct timespec ts = {0, (long)(w->t0 - w->now)};
        nanosleep(&ts, NULL);
    }
    fy_loop_update_time(&self.loop);
    for (int i = 0; i < w->nconns; i++) conn_start(&self.wcs[i]);
    fy_timer_init(&self.tick, on_tick, NULL);
    fy_timer_start(&self.loop, &self.tick, 10);
    fy_loop_run(&self.loop);
    w->now = fl_now_ns();
    w->finish_ns = w->now < w->end ? w->now : w->end;
    w->stopping = true;
    fy_timer_stop(&self.loop, &self.tick);
    for (int i = 0; i < w->nconns; i++) {
        wt_conn_t *wc = &self.wcs[i];
        fy_timer_stop(&self.loop, &wc->retry);
        fy_timer_stop(&self.loop, &wc->dg);
        fy_timer_stop(&self.loop, &wc->late);
        fy_timer_stop(&self.loop, &wc->uni_credit);
        if (wc->qc) fy_quic_conn_abort(wc->qc, 0x100);
    }
    fy_defer_t *d; /* the closes' deferred frees */
    while ((d = self.loop.defer_head)) {
        self.loop.defer_head = d->next;
        if (!self.loop.defer_head) self.loop.defer_tail = &self.loop.defer_head;
        d->queued = false;
        d->cb(d);
    }
    for (int i = 0; i < w->nconns; i++) {
        wt_conn_t *wc = &self.wcs[i];
        for (int k = 0; k < fl_cfg.wt_sessions; k++) {
            if (wc->sess[k].sctx) nghttp3_qpack_stream_context_del(wc->sess[k].sctx);
            free(wc->sess[k].strs);
        }
        free(wc->sess);
        nghttp3_qpack_encoder_del(wc->enc);
        nghttp3_qpack_decoder_del(wc->dec);
    }
    free(self.wcs);
    fy_loop_destroy(&self.loop);
    return NULL;
}

void fl_wt_report(bool json)
{
    unsigned long long s = __atomic_load_n(&dg_sent, __ATOMIC_RELAXED),
                       e = __atomic_load_n(&dg_echoed, __ATOMIC_RELAXED),
                       b = __atomic_load_n(&dg_bad, __ATOMIC_RELAXED);
    long long pc = (long long)__atomic_load_n(&peer_close, __ATOMIC_RELAXED),
              lr = (long long)__atomic_load_n(&first_reset, __ATOMIC_RELAXED);
    if (json)
        printf("{\"datagrams\": {\"sent\": %llu, \"echoed\": %llu, \"bad\": %llu, \"lost\": "
               "%llu}, \"peer_close_code\": %lld, \"first_reset_code\": %lld, \"drains\": "
               "%llu}\n",
               s, e, b, s > e + b ? s - e - b : 0, pc, lr,
               (unsigned long long)__atomic_load_n(&drains, __ATOMIC_RELAXED));
    else
        printf("  datagrams     sent %llu, echoed %llu, bad %llu, lost %llu\n", s, e, b,
               s > e + b ? s - e - b : 0);
}
