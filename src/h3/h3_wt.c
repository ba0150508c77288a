/* WebTransport over HTTP/3: sessions, their streams and datagrams, capsules. */
#include "h3/h3_wt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/list.h"
#include "core/log.h"
#include "core/loop.h"
#include "h3/h3_frame.h"
#include "http/handler.h"
#include "http/router.h"

#define WT_CODE_FIRST 0x52e4a40fa8dbull
#define WT_CODE_LAST 0x52e5ac983162ull

uint64_t fy_wt_code_to_h3(uint32_t code)
{
    return WT_CODE_FIRST + code + code / 0x1e;
}

int64_t fy_wt_code_from_h3(uint64_t h3)
{
    if (h3 < WT_CODE_FIRST || h3 > WT_CODE_LAST) return -1;
    if ((h3 - 0x21) % 0x1f == 0) return -1; /* a reserved (GREASE) codepoint */
    uint64_t shifted = h3 - WT_CODE_FIRST;
    return (int64_t)(shifted - shifted / 0x1f);
}

/* ---- capsules ---- */

size_t fy_wt_capsule_feed(fy_wt_capsule_rd_t *rd, const uint8_t *p, size_t n,
                          fy_wt_capsule_ev_t *ev)
{
    size_t used = 0;
    ev->kind = 0;
    while (used < n) {
        if (!rd->have_hdr) {
            while (used < n && !rd->have_hdr) {
                if (rd->hn >= sizeof rd->hb) {
                    ev->kind = -1;
                    ev->why = "bad capsule header";
                    return used;
                }
                rd->hb[rd->hn++] = p[used++];
                uint64_t t, l;
                size_t a = fy_h3_varint_decode(rd->hb, rd->hn, &t);
                if (!a) continue;
                size_t b = fy_h3_varint_decode(rd->hb + a, rd->hn - a, &l);
                if (!b) continue;
                rd->have_hdr = true;
                rd->type = t;
                rd->len = rd->left = l;
                rd->pn = 0;
                rd->hn = 0;
                if ((t == FY_WT_CAPSULE_CLOSE && (l < 4 || l > 4 + FY_WT_CLOSE_REASON_MAX)) ||
                    (t == FY_WT_CAPSULE_DRAIN && l != 0)) {
                    ev->kind = -1;
                    ev->why = t == FY_WT_CAPSULE_CLOSE
                                  ? "CLOSE_WEBTRANSPORT_SESSION with a bad length"
                                  : "DRAIN_WEBTRANSPORT_SESSION with a payload";
                    return used;
                }
            }
            if (!rd->have_hdr) break;
        }
        size_t take = n - used < rd->left ? n - used : (size_t)rd->left;
        if (rd->type == FY_WT_CAPSULE_CLOSE) {
            memcpy(rd->pay + rd->pn, p + used, take);
            rd->pn += take;
        }
        used += take;
        rd->left -= take;
        if (rd->left == 0) {
            rd->have_hdr = false;
            if (rd->type == FY_WT_CAPSULE_CLOSE) {
                ev->kind = 1;
                ev->code = (uint32_t)rd->pay[0] << 24 | (uint32_t)rd->pay[1] << 16 |
                           (uint32_t)rd->pay[2] << 8 | rd->pay[3];
                ev->reason = (const char *)rd->pay + 4;
                ev->reason_len = rd->pn - 4;
                return used;
            }
            if (rd->type == FY_WT_CAPSULE_DRAIN) {
                ev->kind = 2;
                return used;
            }
        }
    }
    return used;
}

size_t fy_wt_capsule_close(uint8_t *b, uint32_t code, const char *reason, size_t rlen)
{
    if (rlen > FY_WT_CLOSE_REASON_MAX) rlen = FY_WT_CLOSE_REASON_MAX;
    size_t k = fy_h3_varint_encode(b, FY_WT_CAPSULE_CLOSE);
    k += fy_h3_varint_encode(b + k, 4 + rlen);
    b[k++] = (uint8_t)(code >> 24);
    b[k++] = (uint8_t)(code >> 16);
    b[k++] = (uint8_t)(code >> 8);
    b[k++] = (uint8_t)code;
    if (rlen) memcpy(b + k, reason, rlen);
    return k + rlen;
}

/* ---- state ---- */

struct fy_h3_wt {
    fy_quic_conn_t *qc;
    fy_loop_t *loop;
    const fy_quic_conf_t *conf;
    fy_list_t sessions;
    size_t nsessions;
    fy_list_t orphans; /* streams refused or whose session went: wait for QUIC to close them */
    bool peer_datagram, peer_wt, got_settings;
};

struct fy_wt_session {
    fy_list_t link;
    fy_h3_wt_t *w;
    fy_exchange_t *ex;
    int64_t id;
    const fy_wt_ops_t *ops;
    void *ud;
    fy_list_t streams;
    size_t npeer; /* peer-opened streams open */
    fy_wt_capsule_rd_t caps;
    bool closing;
    bool waiting;                       /* accepted before the client's SETTINGS: no 200 sent yet */
    bool drained;                       /* our DRAIN capsule went */
    uint64_t dg_in, dg_out, dg_dropped; /* datagrams received, sent, refused by a full queue */
};

struct fy_wt_stream {
    fy_list_t link;
    fy_h3_wt_t *w;
    fy_wt_session_t *ss; /* NULL: orphan */
    fy_quic_stream_t *qs;
    void *ud;
    bool uni, local;
    bool have_sid; /* uni: the session id was read */
    uint8_t sb[8];
    size_t sn;
    uint8_t *buf; /* received and not yet used by the handler (at most one stream window) */
    size_t len, cap;
    bool fin, fin_given, reset_seen, counted;
    bool stop_seen;    /* the peer's STOP_SENDING was reported */
    bool sent_reset;   /* fy_wt_stream_reset_send: our sending side is reset (or will be) */
    uint64_t reset_h3; /* nonzero: the RESET_STREAM waits for the queued bytes' ACK */
    bool stopped;      /* fy_wt_stream_stop: what still arrives is dropped */
    fy_defer_t defer;
};

fy_h3_wt_t *fy_h3_wt_new(fy_quic_conn_t *qc, fy_loop_t *loop, const fy_quic_conf_t *conf)
{
    fy_h3_wt_t *w = fy_xcalloc(1, sizeof *w);
    w->qc = qc;
    w->loop = loop;
    w->conf = conf;
    fy_list_init(&w->sessions);
    fy_list_init(&w->orphans);
    return w;
}

size_t fy_h3_wt_settings(const fy_quic_conf_t *conf, uint8_t *p)
{
    size_t k = 0;
    if (!conf->max_datagram_size) return 0; /* WebTransport needs HTTP Datagrams */
    uint64_t ms = (uint64_t)conf->wt_max_sessions;
    k += fy_h3_varint_encode(p + k, FY_H3_SETTINGS_H3_DATAGRAM_04);
    k += fy_h3_varint_encode(p + k, 1);
    k += fy_h3_varint_encode(p + k, FY_WT_SETTINGS_DRAFT02);
    k += fy_h3_varint_encode(p + k, 1);
    k += fy_h3_varint_encode(p + k, FY_WT_SETTINGS_MAX_SESSIONS_07);
    k += fy_h3_varint_encode(p + k, ms);
    k += fy_h3_varint_encode(p + k, FY_WT_SETTINGS_MAX_SESSIONS);
    k += fy_h3_varint_encode(p + k, ms);
    return k;
}

uint64_t fy_h3_wt_on_setting(fy_h3_wt_t *w, uint64_t id, uint64_t v)
{
    if (id == FY_H3_SETTINGS_H3_DATAGRAM || id == FY_H3_SETTINGS_H3_DATAGRAM_04) {
        if (v > 1) return FY_H3_SETTINGS_ERROR;
        w->peer_datagram |= v == 1;
    }
    if ((id == FY_WT_SETTINGS_DRAFT02 && v) || (id == FY_WT_SETTINGS_MAX_SESSIONS_07 && v) ||
        (id == FY_WT_SETTINGS_MAX_SESSIONS && v))
        w->peer_wt = true;
    return 0;
}

/* ---- streams ---- */

/* Credit used bytes back: to the stream and the connection, or (the stream is closed in QUIC
 * with bytes still buffered here) to the connection alone, else its window would shrink. */
static void stream_credit(fy_wt_stream_t *st, size_t n)
{
    if (!n) return;
    if (st->qs)
        fy_quic_stream_consumed(st->w->qc, st->qs, n);
    else
        fy_quic_conn_consumed(st->w->qc, n);
}

static void orphan(fy_wt_stream_t *st, uint64_t h3code)
{
    fy_wt_session_t *ss = st->ss;
    fy_list_remove(&st->link); /* from its session's list, or from the orphans */
    fy_list_insert_tail(&st->w->orphans, &st->link);
    if (ss) {
        if (st->counted) ss->npeer--;
        st->ss = NULL;
        if (ss->ops->stream_gone) ss->ops->stream_gone(ss->ud, st);
    }
    fy_defer_cancel(st->w->loop, &st->defer);
    stream_credit(st, st->len);
    st->len = 0;
    st->reset_h3 = 0;
    if (st->qs) {
        if (!(st->uni && !st->local)) fy_quic_stream_reset(st->w->qc, st->qs, h3code);
        if (!(st->uni && st->local)) fy_quic_stream_stop_reading(st->w->qc, st->qs, h3code);
    }
}

static void stream_free(fy_wt_stream_t *st)
{
    fy_list_remove(&st->link);
    fy_defer_cancel(st->w->loop, &st->defer);
    free(st->buf);
    free(st);
}

/* Hand the handler what it has not used, then the FIN. */
static void deliver(fy_wt_stream_t *st, const uint8_t *p, size_t n, bool fin)
{
    fy_wt_session_t *ss = st->ss;
    if (!ss || st->stopped) {
        stream_credit(st, n);
        return;
    }
    if (fin) st->fin = true;
    if (st->len) { /* older bytes first: queue these behind them */
        if (st->len + n > st->cap) {
            orphan(st, FY_H3_INTERNAL_ERROR); /* the peer broke flow control */
            return;
        }
        if (n) memcpy(st->buf + st->len, p, n);
        st->len += n;
        return;
    }
    size_t used = n || (st->fin && !st->fin_given) ? ss->ops->data(ss->ud, st, p, n, st->fin) : 0;
    if (used > n) used = n;
    if (used == n && st->fin) st->fin_given = true;
    stream_credit(st, used);
    if (used < n && st->ss) {
        if (!st->buf) {
            st->cap = st->w->conf->stream_window;
            st->buf = fy_xmalloc(st->cap);
        }
        if (n - used > st->cap) {
            orphan(st, FY_H3_INTERNAL_ERROR);
            return;
        }
        memcpy(st->buf, p + used, n - used);
        st->len = n - used;
    }
}

static void stream_gone(fy_wt_stream_t *st);

static void resume_cb(fy_defer_t *d)
{
    fy_wt_stream_t *st = d->data;
    fy_wt_session_t *ss = st->ss;
    if (!ss || st->stopped || (!st->len && (!st->fin || st->fin_given))) return;
    size_t n = st->len;
    size_t used = ss->ops->data(ss->ud, st, st->buf, n, st->fin);
    if (!st->ss) return;
    if (used > n) used = n;
    if (used == n && st->fin) st->fin_given = true;
    memmove(st->buf, st->buf + used, n - used);
    st->len = n - used;
    stream_credit(st, used);
    if (!st->qs && !st->len && (!st->fin || st->fin_given)) stream_gone(st); /* QUIC closed it */
}

void fy_wt_stream_resume(fy_wt_stream_t *st)
{
    if (!st->ss) return;
    st->defer.cb = resume_cb;
    st->defer.data = st;
    fy_defer(st->w->loop, &st->defer);
}

static fy_wt_session_t *find_session(fy_h3_wt_t *w, uint64_t id)
{
    for (fy_list_t *l = w->sessions.next; l != &w->sessions; l = l->next) {
        fy_wt_session_t *ss = fy_container_of(l, fy_wt_session_t, link);
        if ((uint64_t)ss->id == id && !ss->closing && !ss->waiting) return ss;
    }
    return NULL;
}

/* The stream's session id is known: join the session, or be refused. */
static void attach(fy_wt_stream_t *st, uint64_t sid)
{
    fy_h3_wt_t *w = st->w;
    fy_wt_session_t *ss = find_session(w, sid);
    if (!ss) {
        fy_info("h3 stream %lld: WebTransport stream for unknown session %llu: refused",
                (long long)st->qs->id, (unsigned long long)sid);
        orphan(st, FY_WT_BUFFERED_STREAM_REJECTED);
        return;
    }
    if (ss->npeer >= (size_t)w->conf->wt_max_streams) {
        fy_info("h3 stream %lld: WebTransport session %lld has quic.webtransport-max-streams "
                "(%lld) streams open: refused",
                (long long)st->qs->id, (long long)ss->id, (long long)w->conf->wt_max_streams);
        orphan(st, FY_WT_BUFFERED_STREAM_REJECTED);
        return;
    }
    fy_list_remove(&st->link);
    fy_list_insert_tail(&ss->streams, &st->link);
    st->ss = ss;
    st->counted = true;
    ss->npeer++;
    if (ss->ops->stream) ss->ops->stream(ss->ud, st);
}

static fy_wt_stream_t *stream_new(fy_h3_wt_t *w, fy_quic_stream_t *qs, bool uni, bool local)
{
    fy_wt_stream_t *st = fy_xcalloc(1, sizeof *st);
    st->w = w;
    st->qs = qs;
    st->uni = uni;
    st->local = local;
    fy_list_init(&st->link);
    fy_list_insert_tail(&w->orphans, &st->link);
    qs->app = st;
    qs->app_kind = FY_H3_APP_WT;
    return st;
}

void fy_h3_wt_bidi(fy_h3_wt_t *w, fy_quic_stream_t *qs, uint64_t session_id, const uint8_t *p,
                   size_t n, bool fin)
{
    fy_wt_stream_t *st = stream_new(w, qs, false, false);
    st->have_sid = true;
    attach(st, session_id);
    if (n || fin) deliver(st, p, n, fin);
}

void fy_h3_wt_uni(fy_h3_wt_t *w, fy_quic_stream_t *qs, const uint8_t *p, size_t n, bool fin)
{
    stream_new(w, qs, true, false);
    fy_h3_wt_recv(w, qs, p, n, fin);
}

void fy_h3_wt_recv(fy_h3_wt_t *w, fy_quic_stream_t *qs, const uint8_t *p, size_t n, bool fin)
{
    fy_wt_stream_t *st = qs->app;
    if (!st) {
        fy_quic_stream_consumed(w->qc, qs, n);
        return;
    }
    if (!st->have_sid) {
        while (n && !st->have_sid) {
            st->sb[st->sn++] = *p++;
            n--;
            stream_credit(st, 1);
            uint64_t sid;
            if (fy_h3_varint_decode(st->sb, st->sn, &sid)) {
                st->have_sid = true;
                attach(st, sid);
            }
        }
        if (!st->have_sid) {
            if (fin) orphan(st, FY_H3_GENERAL_PROTOCOL_ERROR);
            return;
        }
    }
    deliver(st, p, n, fin);
}

/* The QUIC layer reports the peer's RESET_STREAM with its code and the peer's STOP_SENDING as
 * code 0 (ngtcp2 0.12 keeps that code to itself; 0 is no HTTP/3 error code). */
void fy_h3_wt_reset(fy_h3_wt_t *w, fy_quic_stream_t *qs, uint64_t code)
{
    (void)w;
    fy_wt_stream_t *st = qs->app;
    if (!st || !st->ss) return;
    fy_wt_session_t *ss = st->ss;
    if (code == 0 && ss->ops->stop) {
        if (st->stop_seen) return;
        st->stop_seen = true;
        ss->ops->stop(ss->ud, st, -1);
        return;
    }
    if (st->reset_seen) return;
    st->reset_seen = true;
    if (code && ss->ops->stop) { /* RESET_STREAM: what is still buffered of it is void */
        fy_defer_cancel(st->w->loop, &st->defer);
        stream_credit(st, st->len);
        st->len = 0;
    }
    if (ss->ops->reset) ss->ops->reset(ss->ud, st, fy_wt_code_from_h3(code));
}

void fy_h3_wt_acked(fy_h3_wt_t *w, fy_quic_stream_t *qs)
{
    (void)w;
    fy_wt_stream_t *st = qs->app;
    if (st && st->reset_h3 && fy_quic_stream_buffered(qs) == 0) {
        uint64_t h3 = st->reset_h3;
        st->reset_h3 = 0;
        fy_quic_stream_reset(w->qc, qs, h3);
        return;
    }
    if (st && st->ss && st->ss->ops->writable) st->ss->ops->writable(st->ss->ud, st);
}

void fy_h3_wt_stream_close(fy_h3_wt_t *w, fy_quic_stream_t *qs)
{
    (void)w;
    fy_wt_stream_t *st = qs->app;
    qs->app = NULL;
    if (!st) return;
    st->qs = NULL;
    /* everything arrived and everything we sent was acknowledged, but the handler has not
       used all the bytes yet (a proxy waiting for room on the other side): the stream stays
       until it has (resume_cb) */
    if (st->ss && !st->stopped && (st->len || (st->fin && !st->fin_given))) return;
    stream_gone(st);
}

static void stream_gone(fy_wt_stream_t *st)
{
    fy_wt_session_t *ss = st->ss;
    if (ss) {
        if (st->counted) ss->npeer--;
        st->ss = NULL;
        if (ss->ops->stream_gone) ss->ops->stream_gone(ss->ud, st);
    }
    stream_free(st);
}

/* ---- sessions ---- */

static void session_free(fy_wt_session_t *ss, bool tell, uint32_t code, const char *r, size_t rl)
{
    ss->closing = true;
    if (ss->dg_in || ss->dg_out || ss->dg_dropped)
        fy_info("h3 stream %lld: WebTransport session ends: datagrams received %llu, sent %llu, "
                "dropped %llu (send queue full)",
                (long long)ss->id, (unsigned long long)ss->dg_in, (unsigned long long)ss->dg_out,
                (unsigned long long)ss->dg_dropped);
    while (!fy_list_empty(&ss->streams)) {
        fy_wt_stream_t *st = fy_container_of(ss->streams.next, fy_wt_stream_t, link);
        orphan(st, FY_WT_SESSION_GONE);
    }
    if (tell && ss->ops->close) ss->ops->close(ss->ud, code, r, rl);
    fy_list_remove(&ss->link);
    ss->w->nsessions--;
    free(ss);
}

static void sess_proceed(fy_exchange_t *ex)
{
    (void)ex; /* capsules are small and rare: nothing waits for the CONNECT stream's room */
}

static void sess_stop(fy_exchange_t *ex)
{
    fy_wt_session_t *ss = ex->handler_data;
    if (!ss) return;
    ex->handler_data = NULL;
    ss->ex = NULL;
    session_free(ss, true, 0, "gone", 4);
}

static const fy_producer_ops_t sess_producer = {sess_proceed, sess_stop};

static void sess_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    fy_wt_session_t *ss = ex->handler_data;
    if (!ss) return;
    const uint8_t *q = (const uint8_t *)p;
    while (n) {
        fy_wt_capsule_ev_t ev;
        size_t k = fy_wt_capsule_feed(&ss->caps, q, n, &ev);
        q += k;
        n -= k;
        if (ev.kind == -1) {
            fy_info("h3 stream %lld: WebTransport session: %s", (long long)ss->id, ev.why);
            ex->handler_data = NULL;
            session_free(ss, true, 0, "malformed capsule", 17);
            fy_exchange_send(ex, NULL, 0, FY_SEND_ERROR);
            return;
        }
        if (ev.kind == 1) { /* the peer closed: answer with our FIN */
            ex->handler_data = NULL;
            session_free(ss, true, ev.code, ev.reason, ev.reason_len);
            fy_exchange_send(ex, NULL, 0, FY_SEND_FINAL);
            return;
        }
        if (ev.kind == 2) {
            fy_debug("h3 stream %lld: DRAIN_WEBTRANSPORT_SESSION", (long long)ss->id);
            if (ss->ops->drain) ss->ops->drain(ss->ud, ss);
            if (ex->handler_data != ss) return; /* the handler closed it */
        }
    }
    if (end) {
        ex->handler_data = NULL;
        session_free(ss, true, 0, "", 0);
        fy_exchange_send(ex, NULL, 0, FY_SEND_FINAL);
        return;
    }
    fy_exchange_read_body(ex, sess_body);
}

/* The 200 and the start of the capsule stream. */
static void session_answer(fy_wt_session_t *ss)
{
    fy_exchange_t *ex = ss->ex;
    ex->res.status = 200;
    ex->res.content_length = -1;
    if (FY_HDR_FIND(&ex->req.headers, "sec-webtransport-http3-draft02"))
        FY_HDR_ADD(ex->arena, &ex->res.headers, "sec-webtransport-http3-draft", "draft02", 7);
    fy_exchange_send(ex, NULL, 0, FY_SEND_MORE);
    if (ex->handler_data == ss) fy_exchange_read_body(ex, sess_body);
}

fy_wt_session_t *fy_wt_accept(fy_exchange_t *ex, const fy_wt_ops_t *ops, void *ud)
{
    int64_t sid = -1;
    fy_h3_wt_t *w = fy_h3_exchange_wt(ex, &sid);
    if (!w || !fy_str_eq(ex->req.protocol, "webtransport", 12)) {
        fy_exchange_fail(ex, 400, "WebTransport needs an extended CONNECT over HTTP/3");
        return NULL;
    }
    if (w->got_settings && (!w->peer_datagram || !w->conf->max_datagram_size)) {
        fy_exchange_fail(ex, 400, "WebTransport without HTTP Datagrams negotiated");
        return NULL;
    }
    if (w->nsessions >= (size_t)w->conf->wt_max_sessions) {
        fy_exchange_fail(ex, 429, "over quic.webtransport-max-sessions");
        return NULL;
    }
    fy_wt_session_t *ss = fy_xcalloc(1, sizeof *ss);
    ss->w = w;
    ss->ex = ex;
    ss->id = sid;
    ss->ops = ops;
    ss->ud = ud;
    fy_list_init(&ss->streams);
    fy_list_insert_tail(&w->sessions, &ss->link);
    w->nsessions++;
    ex->handler_data = ss;
    fy_exchange_start_response(ex, &sess_producer); /* `stop` tells if the client goes */
    if (!w->got_settings) {
        ss->waiting = true;
        return ss;
    }
    session_answer(ss);
    return ex->handler_data == ss ? ss : NULL;
}

void fy_h3_wt_settings_done(fy_h3_wt_t *w)
{
    w->got_settings = true;
    fy_list_t *l = w->sessions.next;
    while (l != &w->sessions) {
        fy_wt_session_t *ss = fy_container_of(l, fy_wt_session_t, link);
        l = l->next;
        if (!ss->waiting) continue;
        ss->waiting = false;
        fy_exchange_t *ex = ss->ex;
        if (!w->peer_datagram || !w->conf->max_datagram_size) {
            ex->handler_data = NULL;
            session_free(ss, true, 0, "no HTTP Datagrams", 17);
            fy_exchange_fail(ex, 400, "WebTransport without HTTP Datagrams negotiated");
            continue;
        }
        session_answer(ss);
    }
}

void fy_wt_session_close(fy_wt_session_t *ss, uint32_t code, const char *reason, size_t rlen)
{
    fy_exchange_t *ex = ss->ex;
    if (ss->waiting) { /* never answered: refuse it instead */
        session_free(ss, false, 0, NULL, 0);
        if (ex) {
            ex->handler_data = NULL;
            fy_exchange_fail(ex, 503, "WebTransport session closed before it was answered");
        }
        return;
    }
    session_free(ss, false, 0, NULL, 0);
    if (!ex) return;
    ex->handler_data = NULL;
    uint8_t b[16 + 4 + FY_WT_CLOSE_REASON_MAX];
    size_t k = fy_wt_capsule_close(b, code, reason, rlen);
    struct iovec iov = {b, k};
    fy_exchange_send(ex, &iov, 1, FY_SEND_FINAL);
}

int fy_wt_send_datagram(fy_wt_session_t *ss, const void *p, size_t n)
{
    uint8_t b[65536 + 8];
    size_t k = fy_h3_varint_encode(b, (uint64_t)ss->id / 4);
    if (n > sizeof b - k) return -EMSGSIZE;
    if (n) memcpy(b + k, p, n);
    int r = fy_quic_send_datagram(ss->w->qc, b, k + n);
    if (r == 0)
        ss->dg_out++;
    else if (r == -EAGAIN)
        ss->dg_dropped++;
    return r;
}

static fy_wt_stream_t *open_local(fy_wt_session_t *ss, bool uni)
{
    if (ss->closing || ss->waiting) return NULL;
    fy_quic_stream_t *qs = uni ? fy_quic_open_uni(ss->w->qc) : fy_quic_open_bidi(ss->w->qc);
    if (!qs) return NULL;
    fy_wt_stream_t *st = stream_new(ss->w, qs, uni, true);
    st->have_sid = true;
    fy_list_remove(&st->link);
    fy_list_insert_tail(&ss->streams, &st->link);
    st->ss = ss;
    uint8_t b[16];
    size_t k = fy_h3_varint_encode(b, uni ? FY_WT_STREAM_UNI : FY_WT_STREAM_BIDI);
    k += fy_h3_varint_encode(b + k, (uint64_t)ss->id);
    fy_quic_stream_write(ss->w->qc, qs, b, k);
    return st;
}

fy_wt_stream_t *fy_wt_open_uni(fy_wt_session_t *ss)
{
    return open_local(ss, true);
}

fy_wt_stream_t *fy_wt_open_bidi(fy_wt_session_t *ss)
{
    return open_local(ss, false);
}

void fy_h3_wt_datagram(fy_h3_wt_t *w, const uint8_t *p, size_t n)
{
    uint64_t q;
    size_t k = fy_h3_varint_decode(p, n, &q);
    if (!k) {
        fy_info("h3 connection error 0x33: HTTP Datagram without a quarter stream id");
        fy_quic_conn_close(w->qc, FY_H3_DATAGRAM_ERROR, "HTTP Datagram without a stream id");
        return;
    }
    if (q > (FY_H3_VARINT_MAX >> 2)) {
        fy_quic_conn_close(w->qc, FY_H3_DATAGRAM_ERROR, "HTTP Datagram stream id too large");
        return;
    }
    fy_wt_session_t *ss = find_session(w, q * 4);
    if (!ss || !ss->ops->datagram) return; /* no such session (yet): dropped (RFC 9297 §5) */
    ss->dg_in++;
    ss->ops->datagram(ss->ud, ss, p + k, n - k);
}

bool fy_h3_wt_refuse(fy_exchange_t *ex)
{
    if (!fy_str_eq(ex->req.protocol, "webtransport", 12)) return false;
    const fy_route_t *r = fy_router_match(ex->ctx->router, ex);
    if (!r) {
        fy_exchange_fail(ex, 404, "no route for the WebTransport session");
        return true;
    }
    if (strcmp(r->handler->ops->name, "webtransport") != 0) {
        fy_exchange_fail(ex, 501, "the route does not serve WebTransport");
        return true;
    }
    return false;
}

void fy_h3_wt_drain(fy_h3_wt_t *w)
{
    for (fy_list_t *l = w->sessions.next; l != &w->sessions; l = l->next) {
        fy_wt_session_drain(fy_container_of(l, fy_wt_session_t, link));
    }
}

void fy_wt_session_drain(fy_wt_session_t *ss)
{
    if (!ss->ex || ss->waiting || ss->closing || ss->drained) return;
    ss->drained = true;
    uint8_t b[8];
    size_t k = fy_h3_varint_encode(b, FY_WT_CAPSULE_DRAIN);
    k += fy_h3_varint_encode(b + k, 0);
    struct iovec iov = {b, k};
    fy_exchange_send(ss->ex, &iov, 1, FY_SEND_MORE);
}

void fy_h3_wt_free(fy_h3_wt_t *w)
{
    if (!w) return;
    while (!fy_list_empty(&w->sessions)) {
        fy_wt_session_t *ss = fy_container_of(w->sessions.next, fy_wt_session_t, link);
        if (ss->ex) ss->ex->handler_data = NULL;
        session_free(ss, true, 0, "gone", 4);
    }
    while (!fy_list_empty(&w->orphans)) {
        fy_wt_stream_t *st = fy_container_of(w->orphans.next, fy_wt_stream_t, link);
        if (st->qs) {
            st->qs->app = NULL;
            st->qs->app_kind = 0;
        }
        stream_free(st);
    }
    free(w);
}

/* ---- stream API ---- */

bool fy_wt_stream_is_uni(const fy_wt_stream_t *st)
{
    return st->uni;
}
fy_wt_session_t *fy_wt_stream_session(const fy_wt_stream_t *st)
{
    return st->ss;
}
bool fy_wt_stream_is_local(const fy_wt_stream_t *st)
{
    return st->local;
}
void fy_wt_stream_set_ud(fy_wt_stream_t *st, void *ud)
{
    st->ud = ud;
}
void *fy_wt_stream_ud(const fy_wt_stream_t *st)
{
    return st->ud;
}

int fy_wt_stream_write(fy_wt_stream_t *st, const void *p, size_t n)
{
    if (!st->qs || !st->ss || st->sent_reset || (st->uni && !st->local)) return -EPIPE;
    return fy_quic_stream_write(st->w->qc, st->qs, p, n);
}

void fy_wt_stream_finish(fy_wt_stream_t *st)
{
    if (st->qs && !st->sent_reset && !(st->uni && !st->local))
        fy_quic_stream_finish(st->w->qc, st->qs);
}

size_t fy_wt_stream_buffered(const fy_wt_stream_t *st)
{
    return st->qs ? fy_quic_stream_buffered(st->qs) : 0;
}

size_t fy_wt_send_buffer(const fy_wt_stream_t *st)
{
    return st->w->conf->send_buffer;
}

void fy_wt_stream_reset(fy_wt_stream_t *st, uint32_t code)
{
    if (!st->ss) return;
    orphan(st, fy_wt_code_to_h3(code));
}

void fy_wt_stream_reset_send(fy_wt_stream_t *st, uint32_t code)
{
    if (!st->ss || !st->qs || st->sent_reset || (st->uni && !st->local)) return;
    st->sent_reset = true;
    /* a reset drops what QUIC has not sent yet: if that were our stream's prefix (0x41/0x54
       + session id), the peer could not tell whose stream the RESET_STREAM ends. So it waits
       for what is queued to be acknowledged (fy_h3_wt_acked). */
    if (fy_quic_stream_buffered(st->qs)) {
        st->reset_h3 = fy_wt_code_to_h3(code);
        return;
    }
    fy_quic_stream_reset(st->w->qc, st->qs, fy_wt_code_to_h3(code));
}

void fy_wt_stream_stop(fy_wt_stream_t *st, uint32_t code)
{
    if (!st->ss || !st->qs || st->stopped || (st->uni && st->local)) return;
    st->stopped = true;
    fy_defer_cancel(st->w->loop, &st->defer);
    stream_credit(st, st->len);
    st->len = 0;
    fy_quic_stream_stop_reading(st->w->qc, st->qs, fy_wt_code_to_h3(code));
}
