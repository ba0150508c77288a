/* HTTP/2 origin sessions: per-worker multiplexed connections to h2c:// and h2:// servers
 * (see upstream.h). A session wraps one fy_origin_conn_t (connect, TLS) and one h2 client codec
 * (h2/h2_client.c); it does the codec's I/O. */
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

/* S_SUSPECT: a stream got no response head in time; no new streams until the origin answers
 * a PING (back to S_READY), closed once its last stream ends otherwise. */
enum { S_CONNECTING = 1, S_SETTINGS, S_READY, S_SUSPECT, S_DRAINING, S_CLOSED };

/* Streams we let wait on a session that is still connecting (its limit is unknown yet): our
 * own cap, so that a burst opens no more connections than needed when the origin allows as
 * many; when it allows fewer, the surplus moves on once its SETTINGS arrive. */
#define H2_GUESS_STREAMS FY_H2C_MAX_STREAMS
#define H2_WBUF_SOFT (64u * 1024u)

struct fy_origin_h2 {
    fy_upstream_t *u;
    int w, server;
    fy_loop_t *loop;
    fy_origin_conn_t *oc; /* owned until closed */
    fy_h2_client_t *c;    /* owned */
    fy_origin_h2_t *next, *prev;
    bool linked;
    int state;
    unsigned users; /* exchanges holding the session */
    fy_list_t waiters;
    size_t nwaiters;
    fy_timer_t timer;  /* SETTINGS wait, then idle keep-alive */
    fy_defer_t kick;   /* deferred flush */
    fy_defer_t reap;   /* deferred free */
    fy_defer_t reread; /* TLS holds decrypted bytes that epoll cannot signal */
    uint8_t *wbuf;     /* owned: frames not yet written */
    size_t wlen, wsent, wcap;
    bool want_out;
    bool in_io;
};

static fy_origin_h2_t **slot(fy_upstream_t *u, int w, int server)
{
    return (fy_origin_h2_t **)fy__upstream_h2_slot(u, w, server);
}

static void unlink_session(fy_origin_h2_t *s)
{
    if (!s->linked) return;
    fy_origin_h2_t **head = slot(s->u, s->w, s->server);
    if (s->prev)
        s->prev->next = s->next;
    else
        *head = s->next;
    if (s->next) s->next->prev = s->prev;
    s->next = s->prev = NULL;
    s->linked = false;
}

static void session_free(fy_origin_h2_t *s)
{
    unlink_session(s);
    fy_h2_client_free(s->c, "origin connection closed");
    s->c = NULL;
    free(s->wbuf);
    free(s);
}

static void reap_cb(fy_defer_t *d)
{
    session_free(d->data);
}

static void reap_maybe(fy_origin_h2_t *s)
{
    if (s->state == S_CLOSED && s->users == 0 && !s->reap.queued) {
        fy_defer_cancel(s->loop, &s->kick);
        fy_defer_cancel(s->loop, &s->reread);
        s->reap.cb = reap_cb;
        s->reap.data = s;
        fy_defer(s->loop, &s->reap);
    }
}

static void fail_waiters(fy_origin_h2_t *s, const char *why)
{
    while (!fy_list_empty(&s->waiters)) {
        fy_origin_h2_waiter_t *wt = fy_container_of(s->waiters.next, fy_origin_h2_waiter_t, link);
        fy_list_remove(&wt->link);
        s->nwaiters--;
        wt->s = NULL;
        wt->cb(wt, NULL, why);
    }
}

/* The connection is gone (or being given up): every waiter and stream fails with `why`. */
static void session_close(fy_origin_h2_t *s, const char *why)
{
    if (s->state == S_CLOSED) return;
    /* an idle session the origin closed, or one it drained with GOAWAY: nothing to tell */
    bool quiet =
        (s->state == S_READY || s->state == S_DRAINING || s->state == S_SUSPECT) && s->users == 0;
    s->state = S_CLOSED; /* stays listed (skipped) until freed */
    fy_timer_stop(s->loop, &s->timer);
    if (s->oc) {
        fy_origin_release(s->oc, false);
        s->oc = NULL;
    }
    if (!quiet && why) {
        fy_info("upstream %s: h2 session closed: %s", fy_upstream_conf(s->u)->name, why);
    }
    s->users++; /* hold it while callbacks run */
    fail_waiters(s, why);
    if (s->c) fy_h2_client_fail_all(s->c, why);
    s->users--;
    reap_maybe(s);
}

static void update_events(fy_origin_h2_t *s)
{
    if (!s->oc) return;
    if (fy_origin_want(s->oc, EPOLLIN | (s->want_out ? EPOLLOUT : 0)) < 0)
        session_close(s, "origin socket error");
}

static void flush(fy_origin_h2_t *s)
{
    /* never from inside the codec's input (nghttp2 forbids mem_send there): on_event
       flushes when its input is done */
    if (s->state == S_CLOSED || !s->c || !s->oc || s->in_io) return;
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
    fy_origin_h2_t *s = ud;
    if (s->in_io || s->kick.queued) return; /* on_io flushes at its end */
    s->kick.cb = kick_cb;
    s->kick.data = s;
    fy_defer(s->loop, &s->kick);
}

static size_t capacity(fy_origin_h2_t *s)
{
    if (s->state == S_READY) return fy_h2_client_max_streams(s->c);
    if (s->state == S_CONNECTING || s->state == S_SETTINGS) return H2_GUESS_STREAMS;
    return 0;
}

/* Hand the session to as many waiters as it can take; the others look elsewhere at once
 * (one at a time: any callback may cancel any other waiter). */
static void serve_waiters(fy_origin_h2_t *s)
{
    s->users++; /* held while callbacks run */
    while (!fy_list_empty(&s->waiters)) {
        fy_origin_h2_waiter_t *wt = fy_container_of(s->waiters.next, fy_origin_h2_waiter_t, link);
        fy_list_remove(&wt->link);
        s->nwaiters--;
        wt->s = NULL;
        if (s->state == S_READY && s->users - 1 < fy_h2_client_max_streams(s->c)) {
            s->users++;
            wt->cb(wt, s, NULL);
            continue;
        }
        bool ready = false;
        const char *err = "origin connect failed";
        fy_origin_h2_t *o = fy_origin_h2_acquire(s->u, s->w, s->server, s->loop, wt, &ready, &err);
        if (ready)
            wt->cb(wt, o, NULL);
        else if (!o && !wt->s)
            wt->cb(wt, NULL, err);
    }
    s->users--;
    if (s->state == S_CLOSED)
        reap_maybe(s);
    else if (s->state == S_READY && s->users == 0)
        fy_timer_start(s->loop, &s->timer, fy_upstream_conf(s->u)->keepalive_timeout_ms);
}

static void on_settings(void *ud)
{
    fy_origin_h2_t *s = ud;
    if (s->state != S_SETTINGS) return;
    s->state = S_READY;
    fy_timer_stop(s->loop, &s->timer);
    if (fy_h2_client_max_streams(s->c) == 0) {
        /* SETTINGS_MAX_CONCURRENT_STREAMS 0: nothing can go; another connection would
           say the same, so the waiters fail instead of looping through new connections */
        s->state = S_DRAINING;
        fail_waiters(s, "origin allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0)");
        if (s->users == 0) session_close(s, NULL);
        return;
    }
    serve_waiters(s);
}

static void on_goaway(void *ud)
{
    fy_origin_h2_t *s = ud;
    if (s->state == S_CLOSED) return;
    s->state = S_DRAINING; /* open streams finish; refused ones come back to their owners */
    fail_waiters(s, "origin sent GOAWAY");
}

static void on_ping_ack(void *ud)
{
    fy_origin_h2_t *s = ud;
    if (s->state != S_SUSPECT) return;
    /* the connection is alive: the unanswered stream was the application's doing */
    fy_info("upstream %s: h2 connection answered PING after a first-byte timeout: reused",
            fy_upstream_conf(s->u)->name);
    s->state = S_READY;
}

static const fy_h2_client_conn_ops_t conn_ops = {want_send, on_settings, on_goaway, on_ping_ack};

static void on_timer(fy_timer_t *t)
{
    fy_origin_h2_t *s = t->data;
    if (s->state == S_SETTINGS) {
        session_close(s, "origin sent no HTTP/2 SETTINGS in time");
        return;
    }
    if (s->users == 0) {
        /* idle keep-alive over: say goodbye, then close */
        fy_h2_client_goaway(s->c);
        flush(s);
        session_close(s, NULL);
    }
}

static void reread_cb(fy_defer_t *d);

static void on_event(fy_origin_conn_t *oc, unsigned ev, void *ud)
{
    fy_origin_h2_t *s = ud;
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
        const fy_upstream_conf_t *uc = fy_upstream_conf(s->u);
        s->c = fy_h2_client_new(&conn_ops, s, 65536);
        if (!s->c) {
            session_close(s, "out of memory");
            return;
        }
        s->state = S_SETTINGS;
        fy_timer_start(s->loop, &s->timer, uc->connect_timeout_ms);
        flush(s);
        return;
    }
    s->in_io = true;
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        char *buf = fy_pool_get(fy_chunk_pool());
        for (int i = 0; i < 16 && s->state != S_CLOSED && s->oc; i++) {
            ssize_t n = s->oc->t->ops->read(s->oc->t, buf, FY_CHUNK_SIZE);
            if (n == 0) break;
            if (n < 0) {
                session_close(s, n == FY_EEOF ? "origin closed the connection"
                                              : "reading from the origin failed");
                break;
            }
            if (fy_h2_client_recv(s->c, buf, (size_t)n) < 0) {
                fy_h2_client_goaway(s->c);
                flush(s);
                session_close(s, "HTTP/2 protocol error from the origin");
                break;
            }
        }
        fy_pool_put(fy_chunk_pool(), buf);
        /* the read cap or a short socket read may leave records inside the TLS library: the
           socket will not signal them again (a 256 KiB response lost its last bytes so) */
        if (s->state != S_CLOSED && s->oc && s->oc->t->ops->pending(s->oc->t) &&
            !s->reread.queued) {
            s->reread.cb = reread_cb;
            s->reread.data = s;
            fy_defer(s->loop, &s->reread);
        }
    }
    s->in_io = false;
    if (s->state != S_CLOSED) flush(s);
}

static void reread_cb(fy_defer_t *d)
{
    fy_origin_h2_t *s = d->data;
    if (s->state != S_CLOSED && s->oc) on_event(s->oc, EPOLLIN, s);
}

fy_origin_h2_t *fy_origin_h2_acquire(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                     fy_origin_h2_waiter_t *wt, bool *ready, const char **err)
{
    *ready = false;
    wt->s = NULL;
    fy_origin_h2_t **head = slot(u, w, server);
    fy_origin_h2_t *wait_on = NULL;
    for (fy_origin_h2_t *s = *head; s; s = s->next) {
        if (s->state == S_READY && s->users < capacity(s)) {
            if (s->users == 0) fy_timer_stop(loop, &s->timer);
            s->users++;
            *ready = true;
            return s;
        }
        if ((s->state == S_CONNECTING || s->state == S_SETTINGS) &&
            s->nwaiters < H2_GUESS_STREAMS && !wait_on)
            wait_on = s;
    }
    if (!wait_on) {
        fy_origin_h2_t *s = fy_xcalloc(1, sizeof *s);
        s->u = u;
        s->w = w;
        s->server = server;
        s->loop = loop;
        s->state = S_CONNECTING;
        fy_list_init(&s->waiters);
        fy_timer_init(&s->timer, on_timer, s);
        s->oc = fy_origin_connect(u, w, server, loop, on_event, s, err);
        if (!s->oc) {
            free(s);
            return NULL;
        }
        s->next = *head;
        if (*head) (*head)->prev = s;
        *head = s;
        s->linked = true;
        wait_on = s;
    }
    /* by priority, then arrival: walk back over the waiters of lower priority */
    fy_list_t *after = wait_on->waiters.prev;
    while (after != &wait_on->waiters &&
           fy_container_of(after, fy_origin_h2_waiter_t, link)->priority < wt->priority)
        after = after->prev;
    fy_list_insert_tail(after->next, &wt->link); /* i.e. right after `after` */
    wait_on->nwaiters++;
    wt->s = wait_on;
    return NULL;
}

void fy_origin_h2_cancel_wait(fy_origin_h2_waiter_t *wt)
{
    if (!wt->s) return;
    fy_list_remove(&wt->link);
    wt->s->nwaiters--;
    wt->s = NULL;
}

fy_h2_client_t *fy_origin_h2_client(fy_origin_h2_t *s)
{
    return s->c;
}

void fy_origin_h2_release(fy_origin_h2_t *s)
{
    s->users--;
    if (s->users > 0) return;
    if (s->state == S_CLOSED) {
        reap_maybe(s);
        return;
    }
    if (s->state == S_DRAINING) {
        flush(s);
        session_close(s, NULL);
        return;
    }
    if (s->state == S_SUSPECT) {
        /* no PING answer while its streams ran: given up */
        fy_info("upstream %s: h2 connection closed: a stream went unanswered and so did PING",
                fy_upstream_conf(s->u)->name);
        fy_h2_client_goaway(s->c);
        flush(s);
        session_close(s, NULL);
        return;
    }
    if (s->state != S_READY) return;
    /* idle: keep up to `keepalive` idle sessions per server */
    size_t idle = 0;
    for (fy_origin_h2_t *o = *slot(s->u, s->w, s->server); o; o = o->next)
        if (o->state == S_READY && o->users == 0) idle++;
    if (idle > (size_t)fy_upstream_conf(s->u)->keepalive) {
        fy_h2_client_goaway(s->c);
        flush(s);
        session_close(s, NULL);
        return;
    }
    fy_timer_start(s->loop, &s->timer, fy_upstream_conf(s->u)->keepalive_timeout_ms);
}

void fy_origin_h2_suspect(fy_origin_h2_t *s)
{
    if (s->state != S_READY) return;
    s->state = S_SUSPECT;
    fy_h2_client_ping(s->c);
}

size_t fy_origin_h2_count(fy_upstream_t *u, int w, int server)
{
    size_t n = 0;
    for (fy_origin_h2_t *s = *slot(u, w, server); s; s = s->next) n++;
    return n;
}

void fy__upstream_h2_worker_close(fy_upstream_t *u, int w)
{
    size_t n = fy_upstream_nservers(u);
    for (size_t i = 0; i < n; i++) {
        fy_origin_h2_t **head = slot(u, w, (int)i);
        while (*head) {
            fy_origin_h2_t *s = *head;
            fy_timer_stop(s->loop, &s->timer);
            fy_defer_cancel(s->loop, &s->kick);
            fy_defer_cancel(s->loop, &s->reap);
            fy_defer_cancel(s->loop, &s->reread);
            if (s->oc) fy__origin_close_now(s->oc);
            s->oc = NULL;
            s->state = S_CLOSED;
            fail_waiters(s, "worker exit");
            if (s->users == 0)
                session_free(s);
            else
                unlink_session(s); /* still held: its owner frees nothing; cannot happen */
        }
    }
}
