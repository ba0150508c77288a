/* HTTP/2 origin connections (h2c://, h2://): the protocol table of the multiplexed pool
 * (upstream_mux.c). A connection wraps one fy_origin_conn_t (connect, TLS) and one h2 client
 * codec (h2/h2_client.c); this file does the codec's I/O. */
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "core/alloc.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/pool.h"
#include "h2/h2_client.h"
#include "net/sock.h"
#include "upstream/upstream_int.h"
#include "upstream/upstream_mux.h"

/* Streams we let wait on a connection that is still connecting (its limit is unknown yet): our
 * own cap, so that a burst opens no more connections than needed when the origin allows as
 * many; when it allows fewer, the surplus moves on once its SETTINGS arrive. */
#define H2_GUESS_STREAMS FY_H2C_MAX_STREAMS
#define H2_WBUF_SOFT (64u * 1024u)

typedef struct h2conn {
    fy_origin_mux_t m;    /* first: the pool's part */
    fy_origin_conn_t *oc; /* owned until closed */
    fy_h2_client_t *c;    /* owned */
    fy_defer_t kick;      /* deferred flush */
    fy_defer_t reread;    /* TLS holds decrypted bytes that epoll cannot signal */
    uint8_t *wbuf;        /* owned: frames not yet written */
    size_t wlen, wsent, wcap;
    bool want_out;
    bool in_io;
    char *rbuf;            /* the chunk fy_h2_client_recv is reading, while it does */
    fy_origin_pin_t *rpin; /* its pin, once a stream kept some of its bytes */
} h2conn_t;

/* A read chunk whose DATA payloads streams keep past the read (origin.h lends them): the
 * connection reads into a fresh chunk meanwhile, and the last unpin frees this one. The pin
 * lives in the chunk's last bytes, which are never read into. */
struct fy_origin_pin {
    unsigned refs;
    bool orphan; /* the connection let go of the chunk: the last unpin frees it */
    char *buf;   /* the chunk (owned once orphaned) */
};
#define H2_READ_CAP (FY_CHUNK_SIZE - 64)
_Static_assert(sizeof(fy_origin_pin_t) <= 64, "the pin fits after the read bytes");

static h2conn_t *H(fy_origin_mux_t *m)
{
    return (h2conn_t *)m;
}

static void session_close(h2conn_t *s, const char *why)
{
    fy__mux_close(&s->m, why, true);
}

static const fy_h2_client_conn_ops_t conn_ops;

static void update_events(h2conn_t *s)
{
    if (!s->oc) return;
    if (fy_origin_want(s->oc, EPOLLIN | (s->want_out ? EPOLLOUT : 0)) < 0)
        session_close(s, "origin socket error");
}

static void flush(h2conn_t *s)
{
    /* never from inside the codec's input (nghttp2 forbids mem_send there): on_event
       flushes when its input is done */
    if (s->m.state == M_CLOSED || !s->c || !s->oc || s->in_io) return;
    for (;;) {
        while (s->wsent < s->wlen) {
            struct iovec iov = {s->wbuf + s->wsent, s->wlen - s->wsent};
            ssize_t w = s->oc->t->ops->writev(s->oc->t, &iov, 1);
            if (w == 0) {
                s->want_out = true;
                update_events(s);
                return;
            }
            if (w < 0) {
                session_close(s, "writing to the origin failed");
                return;
            }
            s->wsent += (size_t)w;
        }
        s->wlen = s->wsent = 0;
        while (s->wlen < H2_WBUF_SOFT) {
            const uint8_t *d;
            ssize_t n = fy_h2_client_send(s->c, &d);
            if (n < 0) {
                session_close(s, "HTTP/2 session error");
                return;
            }
            if (n == 0) break;
            if (s->wlen + (size_t)n > s->wcap) {
                size_t cap = s->wcap ? s->wcap : 16384;
                while (cap < s->wlen + (size_t)n) cap *= 2;
                s->wbuf = fy_xrealloc(s->wbuf, cap);
                s->wcap = cap;
            }
            memcpy(s->wbuf + s->wlen, d, (size_t)n);
            s->wlen += (size_t)n;
        }
        if (s->wlen == 0) break;
    }
    s->want_out = false;
    if (!fy_h2_client_alive(s->c)) {
        session_close(s, "origin ended the HTTP/2 session");
        return;
    }
    update_events(s);
}

static void kick_cb(fy_defer_t *d)
{
    flush(d->data);
}

static void want_send(void *ud)
{
    h2conn_t *s = ud;
    if (s->in_io || s->kick.queued) return; /* on_io flushes at its end */
    s->kick.cb = kick_cb;
    s->kick.data = s;
    fy_defer(s->m.loop, &s->kick);
}

static void reread_cb(fy_defer_t *d);

static void on_event(fy_origin_conn_t *oc, unsigned ev, void *ud)
{
    h2conn_t *s = ud;
    if (ev & FY_ORIGIN_ERROR) {
        s->oc = NULL; /* already closed by upstream.c */
        session_close(s, oc->error ? oc->error : "origin connect failed");
        return;
    }
    if (ev & FY_ORIGIN_READY) {
        if (oc->t->is_tls && (!oc->t->alpn || strcmp(oc->t->alpn, "h2") != 0)) {
            session_close(s, "origin did not negotiate HTTP/2 (ALPN h2)");
            return;
        }
        s->c = fy_h2_client_new(&conn_ops, s, 65536);
        if (!s->c) {
            session_close(s, "out of memory");
            return;
        }
        fy__mux_handshake(&s->m, fy_upstream_conf(s->m.u)->connect_timeout_ms);
        flush(s);
        return;
    }
    s->in_io = true;
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        char *buf = fy_pool_get(fy_chunk_pool());
        for (int i = 0; i < 16 && s->m.state != M_CLOSED && s->oc; i++) {
            ssize_t n = s->oc->t->ops->read(s->oc->t, buf, H2_READ_CAP);
            if (n == 0) break;
            if (n < 0) {
                session_close(s, n == FY_EEOF ? "origin closed the connection"
                                              : "reading from the origin failed");
                break;
            }
            s->rbuf = buf;
            int rc = fy_h2_client_recv(s->c, buf, (size_t)n);
            s->rbuf = NULL;
            if (s->rpin) { /* streams hold bytes of this chunk: theirs until the last unpin */
                if (s->rpin->refs) {
                    s->rpin->orphan = true;
                    buf = fy_pool_get(fy_chunk_pool());
                } /* else all consumed already: read on into it */
                s->rpin = NULL;
            }
            if (rc < 0) {
                fy_h2_client_goaway(s->c);
                flush(s);
                session_close(s, "HTTP/2 protocol error from the origin");
                break;
            }
        }
        fy_pool_put(fy_chunk_pool(), buf);
        /* the read cap or a short socket read may leave records inside the TLS library: the
           socket will not signal them again (a 256 KiB response lost its last bytes so) */
        if (s->m.state != M_CLOSED && s->oc && s->oc->t->ops->pending(s->oc->t) &&
            !s->reread.queued) {
            s->reread.cb = reread_cb;
            s->reread.data = s;
            fy_defer(s->m.loop, &s->reread);
        }
    }
    s->in_io = false;
    if (s->m.state != M_CLOSED) flush(s);
}

static void reread_cb(fy_defer_t *d)
{
    h2conn_t *s = d->data;
    if (s->m.state != M_CLOSED && s->oc) on_event(s->oc, EPOLLIN, s);
}

static void on_settings(void *ud)
{
    h2conn_t *s = ud;
    if (s->m.state != M_HANDSHAKE) return;
    if (fy_h2_client_max_streams(s->c) == 0) {
        /* SETTINGS_MAX_CONCURRENT_STREAMS 0: nothing can go; another connection would
           say the same, so the waiters fail instead of looping through new connections */
        fy_timer_stop(s->m.loop, &s->m.timer);
        s->m.state = M_DRAINING;
        fy__mux_fail_waiters(&s->m, "origin allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0)");
        if (s->m.users == 0) session_close(s, NULL);
        return;
    }
    fy__mux_ready(&s->m);
}

static void on_goaway(void *ud)
{
    fy__mux_goaway(&((h2conn_t *)ud)->m);
}

static void on_ping_ack(void *ud)
{
    fy__mux_alive(&((h2conn_t *)ud)->m);
}

static const fy_h2_client_conn_ops_t conn_ops = {want_send, on_settings, on_goaway, on_ping_ack};

/* ---- the table ---- */

static fy_origin_mux_t *h2_connect(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                   const char **err)
{
    h2conn_t *s = fy_xcalloc(1, sizeof *s);
    fy__mux_init(&s->m, &fy__mux_h2, u, w, server, loop);
    s->oc = fy_origin_connect(u, w, server, loop, on_event, s, err);
    if (!s->oc) {
        free(s);
        return NULL;
    }
    return &s->m;
}

static size_t h2_max_streams(fy_origin_mux_t *m)
{
    return fy_h2_client_max_streams(H(m)->c);
}

static bool h2_can_open(fy_origin_mux_t *m)
{
    (void)m;
    return true; /* the stream limit is all there is */
}

static bool h2_ping(fy_origin_mux_t *m)
{
    fy_h2_client_ping(H(m)->c);
    return true;
}

static void h2_flush(fy_origin_mux_t *m)
{
    flush(H(m));
}

static void h2_goaway(fy_origin_mux_t *m)
{
    if (H(m)->c) fy_h2_client_goaway(H(m)->c);
    flush(H(m));
}

static void h2_shutdown(fy_origin_mux_t *m, const char *why, bool ours)
{
    (void)ours;
    h2conn_t *s = H(m);
    if (s->oc) {
        fy_origin_release(s->oc, false);
        s->oc = NULL;
    }
    if (s->c) fy_h2_client_fail_all(s->c, why);
}

static void h2_cancel(fy_origin_mux_t *m)
{
    fy_defer_cancel(m->loop, &H(m)->kick);
    fy_defer_cancel(m->loop, &H(m)->reread);
}

static void h2_close_now(fy_origin_mux_t *m)
{
    h2conn_t *s = H(m);
    if (s->oc) fy__origin_close_now(s->oc);
    s->oc = NULL;
}

static void h2_destroy(fy_origin_mux_t *m)
{
    h2conn_t *s = H(m);
    fy_h2_client_free(s->c, "origin connection closed");
    free(s->wbuf);
    free(s);
}

const fy__mux_proto_t fy__mux_h2 = {
    .name = "h2",
    .guess_streams = H2_GUESS_STREAMS,
    .retire_on_down = false,
    .handshake_timeout = "origin sent no HTTP/2 SETTINGS in time",
    .connect = h2_connect,
    .max_streams = h2_max_streams,
    .can_open = h2_can_open,
    .ping = h2_ping,
    .flush = h2_flush,
    .goaway = h2_goaway,
    .shutdown = h2_shutdown,
    .cancel = h2_cancel,
    .close_now = h2_close_now,
    .destroy = h2_destroy,
};

fy_origin_pin_t *fy_origin_mux_pin(fy_origin_mux_t *m)
{
    if (m->proto != &fy__mux_h2) return NULL;
    h2conn_t *s = H(m);
    if (!s->rbuf) return NULL;
    if (!s->rpin) {
        s->rpin = (fy_origin_pin_t *)(void *)(s->rbuf + H2_READ_CAP);
        *s->rpin = (fy_origin_pin_t){0, false, s->rbuf};
    }
    s->rpin->refs++;
    return s->rpin;
}

void fy_origin_mux_unpin(fy_origin_pin_t *p)
{
    if (--p->refs || !p->orphan) return;  /* (not orphaned: the reading connection frees it) */
    fy_pool_put(fy_chunk_pool(), p->buf); /* the pin with it */
}

fy_h2_client_t *fy_origin_mux_h2(fy_origin_mux_t *m)
{
    return m->proto == &fy__mux_h2 ? H(m)->c : NULL;
}
