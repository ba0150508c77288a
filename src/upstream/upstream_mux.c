/* The multiplexed-connection pool of h2c:// h2:// h3:// servers (upstream_mux.h), written once
 * for both protocols. */
#include "upstream/upstream_mux.h"

#include <stdlib.h>

#include "core/log.h"
#include "upstream/upstream_int.h"
#include "upstream/upstream_state.h"

/* upstream_mux_test.c defines FY__MUX_PROTO_OF to run the pool over a fake table */
#ifndef FY__MUX_PROTO_OF
#define FY__MUX_PROTO_OF proto_of
static const fy__mux_proto_t *proto_of(fy_upstream_t *u, int server)
{
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(u)->servers.v)[server];
    return sv->h3 ? &fy__mux_h3 : &fy__mux_h2;
}
#endif

static fy_origin_mux_t **slot(fy_upstream_t *u, int w, int server)
{
    return (fy_origin_mux_t **)(FY__MUX_PROTO_OF(u, server) == &fy__mux_h3
                                    ? fy__upstream_h3_slot(u, w, server)
                                    : fy__upstream_h2_slot(u, w, server));
}

static void unlink_mux(fy_origin_mux_t *m)
{
    if (!m->linked) return;
    fy_origin_mux_t **head = slot(m->u, m->w, m->server);
    if (m->prev)
        m->prev->next = m->next;
    else
        *head = m->next;
    if (m->next) m->next->prev = m->prev;
    m->next = m->prev = NULL;
    m->linked = false;
}

/* the connection's memory goes; an h3 one was a pool connection of its own (h2 ones are
 * counted by the TCP connection they wrap) */
static void mux_destroy(fy_origin_mux_t *m)
{
    if (m->proto == &fy__mux_h3) fy__upstream_gauge(m->u->conn_ids, m->server, -1);
    m->proto->destroy(m);
}

static void waiters_add(fy_origin_mux_t *m, int d)
{
    m->nwaiters += (size_t)(ssize_t)d;
    fy__upstream_gauge(m->u->wait_ids, m->server, d);
}

static void reap_cb(fy_defer_t *d)
{
    fy_origin_mux_t *m = d->data;
    unlink_mux(m);
    mux_destroy(m);
}

static void reap_maybe(fy_origin_mux_t *m)
{
    if (m->state == M_CLOSED && m->users == 0 && !m->reap.queued) {
        m->proto->cancel(m);
        m->reap.cb = reap_cb;
        m->reap.data = m;
        fy_defer(m->loop, &m->reap);
    }
}

void fy__mux_fail_waiters(fy_origin_mux_t *m, const char *why)
{
    while (!fy_list_empty(&m->waiters)) {
        fy_origin_mux_waiter_t *wt = fy_container_of(m->waiters.next, fy_origin_mux_waiter_t, link);
        fy_list_remove(&wt->link);
        waiters_add(m, -1);
        wt->m = NULL;
        wt->cb(wt, NULL, why);
    }
}

void fy__mux_close(fy_origin_mux_t *m, const char *why, bool ours)
{
    if (m->state == M_CLOSED) return;
    /* an idle connection the origin closed, or one it drained with GOAWAY: nothing to tell */
    bool quiet =
        (m->state == M_READY || m->state == M_DRAINING || m->state == M_SUSPECT) && m->users == 0;
    m->state = M_CLOSED; /* stays listed (skipped) until freed */
    fy_timer_stop(m->loop, &m->timer);
    if (!quiet && why)
        fy_info("upstream %s: %s connection closed: %s", fy_upstream_conf(m->u)->name,
                m->proto->name, why);
    m->users++; /* held while callbacks run */
    fy__mux_fail_waiters(m, why);
    m->proto->shutdown(m, why, ours);
    m->users--;
    reap_maybe(m);
}

/* While ready: room for another stream by our count (the protocol's credit is asked apart). */
static size_t capacity(fy_origin_mux_t *m)
{
    if (m->state == M_READY) return m->proto->max_streams(m);
    if (m->state == M_CONNECTING || m->state == M_HANDSHAKE) return m->proto->guess_streams;
    return 0;
}

/* Hand the connection to as many waiters as it can take; the others look elsewhere at once
 * (one at a time: any callback may cancel any other waiter). */
static void serve_waiters(fy_origin_mux_t *m)
{
    m->users++; /* held while callbacks run */
    while (!fy_list_empty(&m->waiters)) {
        fy_origin_mux_waiter_t *wt = fy_container_of(m->waiters.next, fy_origin_mux_waiter_t, link);
        if (m->state == M_READY && m->users - 1 < m->proto->max_streams(m)) {
            /* out of stream credit (h3 MAX_STREAMS): the rest wait here for more */
            if (!m->proto->can_open(m)) break;
            fy_list_remove(&wt->link);
            waiters_add(m, -1);
            wt->m = NULL;
            m->users++;
            wt->cb(wt, m, NULL);
            continue;
        }
        fy_list_remove(&wt->link);
        waiters_add(m, -1);
        wt->m = NULL;
        bool ready = false;
        const char *err = "origin connect failed";
        fy_origin_mux_t *o =
            fy_origin_mux_acquire(m->u, m->w, m->server, m->loop, wt, &ready, &err);
        if (ready)
            wt->cb(wt, o, NULL);
        else if (!o && !wt->m)
            wt->cb(wt, NULL, err);
    }
    m->users--;
    if (m->state == M_CLOSED)
        reap_maybe(m);
    else if (m->state == M_READY && m->users == 0 && m->nwaiters == 0)
        fy_timer_start(m->loop, &m->timer, fy_upstream_conf(m->u)->keepalive_timeout_ms);
}

void fy__mux_handshake(fy_origin_mux_t *m, uint64_t timeout_ms)
{
    m->state = M_HANDSHAKE;
    fy_timer_start(m->loop, &m->timer, timeout_ms);
}

void fy__mux_ready(fy_origin_mux_t *m)
{
    if (m->state != M_CONNECTING && m->state != M_HANDSHAKE) return;
    m->state = M_READY;
    fy_timer_stop(m->loop, &m->timer);
    serve_waiters(m);
}

void fy__mux_credit(fy_origin_mux_t *m)
{
    if (m->state == M_READY && m->nwaiters) serve_waiters(m);
}

void fy__mux_goaway(fy_origin_mux_t *m)
{
    if (m->state == M_CLOSED) return;
    m->state = M_DRAINING; /* open streams finish; refused ones come back to their owners */
    fy__mux_fail_waiters(m, "origin sent GOAWAY");
}

void fy__mux_alive(fy_origin_mux_t *m)
{
    if (m->state != M_SUSPECT) return;
    /* the connection is alive: the unanswered stream was the application's doing */
    fy_info("upstream %s: %s connection answered PING after a first-byte timeout: reused",
            fy_upstream_conf(m->u)->name, m->proto->name);
    m->state = M_READY;
}

static void on_timer(fy_timer_t *t)
{
    fy_origin_mux_t *m = t->data;
    if (m->state == M_HANDSHAKE) {
        fy__mux_close(m, m->proto->handshake_timeout, true);
        return;
    }
    if (m->state != M_CLOSED && m->users == 0 && m->nwaiters == 0) {
        /* idle keep-alive over (or drained while idle): say goodbye, then close */
        m->proto->goaway(m);
        fy__mux_close(m, NULL, true);
    }
}

fy_origin_mux_t *fy_origin_mux_acquire(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                       fy_origin_mux_waiter_t *wt, bool *ready, const char **err)
{
    *ready = false;
    wt->m = NULL;
    const fy__mux_proto_t *p = FY__MUX_PROTO_OF(u, server);
    fy_origin_mux_t **head = slot(u, w, server);
    fy_origin_mux_t *wait_on = NULL;
    unsigned downs = fy__upstream_downs(u, server);
    for (fy_origin_mux_t *m = *head, *next; m; m = next) {
        next = m->next;
        if (p->retire_on_down && m->downs != downs) {
            /* the health checker found the origin down since this connection was made: not
               reused; idle, it is closed now */
            if (m->state == M_READY) {
                m->state = M_DRAINING; /* its streams finish; the last release closes it */
                if (m->users == 0) fy__mux_close(m, NULL, true);
            }
            continue; /* (a connecting one still serves its waiters, but takes no more) */
        }
        if (m->state == M_READY && m->users < capacity(m)) {
            /* Our users count drops when a request is done, but h3 stream credit comes back
               only after the server has seen the stream closed: with none left, wait on this
               connection for more rather than fail the submit. */
            if (p->can_open(m)) {
                if (m->users == 0) fy_timer_stop(loop, &m->timer);
                m->users++;
                *ready = true;
                return m;
            }
            if (m->nwaiters < p->guess_streams && !wait_on) wait_on = m;
            continue;
        }
        if ((m->state == M_CONNECTING || m->state == M_HANDSHAKE) &&
            m->nwaiters < p->guess_streams && !wait_on)
            wait_on = m;
    }
    if (!wait_on) {
        fy__upstream_mux_touch(u, w, loop); /* discovery: this worker sweeps from now on */
        fy_origin_mux_t *m = p->connect(u, w, server, loop, err);
        if (!m) return NULL;
        if (p == &fy__mux_h3) fy__upstream_gauge(u->conn_ids, server, 1);
        m->next = *head;
        if (*head) (*head)->prev = m;
        *head = m;
        m->linked = true;
        wait_on = m;
    }
    if (wait_on->state == M_READY) fy_timer_stop(loop, &wait_on->timer);
    /* by priority, then arrival: walk back over the waiters of lower priority */
    fy_list_t *after = wait_on->waiters.prev;
    while (after != &wait_on->waiters &&
           fy_container_of(after, fy_origin_mux_waiter_t, link)->priority < wt->priority)
        after = after->prev;
    fy_list_insert_tail(after->next, &wt->link); /* i.e. right after `after` */
    waiters_add(wait_on, 1);
    wt->m = wait_on;
    return NULL;
}

void fy__mux_init(fy_origin_mux_t *m, const fy__mux_proto_t *p, fy_upstream_t *u, int w, int server,
                  fy_loop_t *loop)
{
    m->proto = p;
    m->u = u;
    m->w = w;
    m->server = server;
    m->loop = loop;
    m->state = M_CONNECTING;
    m->downs = fy__upstream_downs(u, server);
    fy_list_init(&m->waiters);
    fy_timer_init(&m->timer, on_timer, m);
}

void fy_origin_mux_cancel_wait(fy_origin_mux_waiter_t *wt)
{
    if (!wt->m) return;
    fy_list_remove(&wt->link);
    waiters_add(wt->m, -1);
    wt->m = NULL;
}

void fy_origin_mux_release(fy_origin_mux_t *m)
{
    m->users--;
    if (m->users > 0) return;
    if (m->state == M_CLOSED) {
        reap_maybe(m);
        return;
    }
    if (m->state == M_DRAINING) {
        m->proto->flush(m);
        fy__mux_close(m, NULL, true);
        return;
    }
    if (m->state == M_SUSPECT) {
        /* no PING answer while its streams ran: given up */
        fy_info("upstream %s: %s connection closed: a stream went unanswered and so did PING",
                fy_upstream_conf(m->u)->name, m->proto->name);
        m->proto->goaway(m);
        fy__mux_close(m, NULL, true);
        return;
    }
    if (m->state != M_READY) return;
    if (m->nwaiters) return;                  /* requests wait for its stream credit */
    if (fy__upstream_gone(m->u, m->server)) { /* discovery dropped the server: drained */
        m->proto->goaway(m);
        fy__mux_close(m, NULL, true);
        return;
    }
    /* idle: keep up to `keepalive` idle connections per server */
    size_t idle = 0;
    for (fy_origin_mux_t *o = *slot(m->u, m->w, m->server); o; o = o->next)
        if (o->state == M_READY && o->users == 0) idle++;
    if (idle > (size_t)fy_upstream_conf(m->u)->keepalive) {
        m->proto->goaway(m);
        fy__mux_close(m, NULL, true);
        return;
    }
    fy_timer_start(m->loop, &m->timer, fy_upstream_conf(m->u)->keepalive_timeout_ms);
}

void fy_origin_mux_suspect(fy_origin_mux_t *m)
{
    if (m->state != M_READY) return;
    if (m->proto->ping(m)) {
        m->state = M_SUSPECT;
        return;
    }
    /* no PING of ours (QUIC keeps itself alive: its PINGs and ACKs are the library's): an
       unanswered stream is the application's, so the connection takes no new ones and
       closes after its last */
    fy_info("upstream %s: %s connection takes no new streams after a first-byte timeout",
            fy_upstream_conf(m->u)->name, m->proto->name);
    m->state = M_DRAINING;
    if (m->nwaiters) serve_waiters(m); /* those waiting for its stream credit go elsewhere */
}

void fy_origin_mux_abandon(fy_origin_mux_t *m, const char *why)
{
    fy__mux_close(m, why, true);
}

size_t fy_origin_mux_count(fy_upstream_t *u, int w, int server)
{
    size_t n = 0;
    for (fy_origin_mux_t *m = *slot(u, w, server); m; m = m->next) n++;
    return n;
}

void fy__upstream_mux_worker_close(fy_upstream_t *u, int w)
{
    size_t n = fy_upstream_nservers(u);
    for (size_t i = 0; i < n; i++) {
        fy_origin_mux_t **head = slot(u, w, (int)i);
        while (*head) {
            fy_origin_mux_t *m = *head;
            fy_timer_stop(m->loop, &m->timer);
            fy_defer_cancel(m->loop, &m->reap);
            m->proto->cancel(m);
            m->proto->close_now(m);
            m->state = M_CLOSED;
            fy__mux_fail_waiters(m, "worker exit");
            unlink_mux(m);
            if (m->users == 0) mux_destroy(m); /* still held cannot happen */
        }
    }
}

void fy__upstream_mux_drain(fy_upstream_t *u, int w, int server)
{
    for (int k = 0; k < 2; k++) {
        fy_origin_mux_t **head = (fy_origin_mux_t **)(k ? fy__upstream_h3_slot(u, w, server)
                                                        : fy__upstream_h2_slot(u, w, server));
        for (fy_origin_mux_t *m = *head, *next; m; m = next) {
            next = m->next;
            if (m->state == M_CLOSED) continue;
            if (m->users == 0 && m->nwaiters == 0 && m->state != M_CONNECTING &&
                m->state != M_HANDSHAKE) {
                m->proto->goaway(m);
                fy__mux_close(m, NULL, true);
            } else if (m->state == M_READY || m->state == M_SUSPECT) {
                m->state = M_DRAINING; /* its streams finish; the last release closes it */
            }
        }
    }
}
