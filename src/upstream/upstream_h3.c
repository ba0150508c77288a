/* HTTP/3 origin connections: per-worker multiplexed QUIC connections to h3:// servers (see
 * upstream.h). Each wraps one HTTP/3 client codec (h3/h3_client.c), which does its own I/O on
 * its own UDP socket; this file only pools them: waiters, idle keep-alive, GOAWAY, close. */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "h2/h2_client.h"
#include "h3/h3_client.h"
#include "upstream/upstream_int.h"

enum { S_CONNECTING = 1, S_READY, S_DRAINING, S_CLOSED };

/* Streams we put on one connection at most (a common initial_max_streams_bidi; more wait for
 * another connection). */
#define H3_MAX_STREAMS 100u

/* The origin side's QUIC settings: response bodies buffered per stream like h2 origins. */
static const fy_quic_conf_t origin_quic = {
    .cc = FY_QUIC_CC_CUBIC,
    .idle_timeout_ms = 60000,
    .handshake_timeout_ms = 10000,
    .max_streams = 100,
    .stream_window = FY_H2C_STREAM_WINDOW,
    .connection_window = FY_H2C_CONN_WINDOW,
    .send_buffer = 256 * 1024,
    .max_datagram_size = 0,
    .max_connections = 1,
};

struct fy_origin_h3 {
    fy_upstream_t *u;
    int w, server;
    fy_loop_t *loop;
    fy_h3_client_t *c; /* owned until closed */
    fy_origin_h3_t *next, *prev;
    bool linked;
    int state;
    unsigned users;
    unsigned downs; /* fy__upstream_downs when made: a later down mark retires it */
    fy_list_t waiters;
    size_t nwaiters;
    fy_timer_t timer; /* idle keep-alive */
    fy_defer_t reap;
};

static fy_origin_h3_t **slot(fy_upstream_t *u, int w, int server)
{
    return (fy_origin_h3_t **)fy__upstream_h3_slot(u, w, server);
}

static void unlink_conn(fy_origin_h3_t *s)
{
    if (!s->linked) return;
    fy_origin_h3_t **head = slot(s->u, s->w, s->server);
    if (s->prev)
        s->prev->next = s->next;
    else
        *head = s->next;
    if (s->next) s->next->prev = s->prev;
    s->next = s->prev = NULL;
    s->linked = false;
}

static void reap_cb(fy_defer_t *d)
{
    fy_origin_h3_t *s = d->data;
    unlink_conn(s);
    free(s);
}

static void reap_maybe(fy_origin_h3_t *s)
{
    if (s->state == S_CLOSED && s->users == 0 && !s->reap.queued) {
        s->reap.cb = reap_cb;
        s->reap.data = s;
        fy_defer(s->loop, &s->reap);
    }
}

static void fail_waiters(fy_origin_h3_t *s, const char *why)
{
    while (!fy_list_empty(&s->waiters)) {
        fy_origin_h3_waiter_t *wt = fy_container_of(s->waiters.next, fy_origin_h3_waiter_t, link);
        fy_list_remove(&wt->link);
        s->nwaiters--;
        wt->s = NULL;
        wt->cb(wt, NULL, why);
    }
}

/* Mark closed, fail the waiters; `close_client`: we end the QUIC connection ourselves. */
static void conn_close(fy_origin_h3_t *s, const char *why, bool close_client)
{
    if (s->state == S_CLOSED) return;
    bool quiet = (s->state == S_READY || s->state == S_DRAINING) && s->users == 0;
    s->state = S_CLOSED;
    fy_timer_stop(s->loop, &s->timer);
    if (!quiet && why)
        fy_info("upstream %s: h3 connection closed: %s", fy_upstream_conf(s->u)->name, why);
    s->users++;
    fail_waiters(s, why);
    if (close_client && s->c) fy_h3_client_close(s->c);
    s->c = NULL;
    s->users--;
    reap_maybe(s);
}

static void serve_waiters(fy_origin_h3_t *s)
{
    s->users++;
    while (!fy_list_empty(&s->waiters)) {
        fy_origin_h3_waiter_t *wt = fy_container_of(s->waiters.next, fy_origin_h3_waiter_t, link);
        if (s->state == S_READY && s->users - 1 < H3_MAX_STREAMS && fy_h3_client_ready(s->c)) {
            /* out of QUIC stream credit: the rest wait here for on_credit */
            if (!fy_h3_client_can_open(s->c)) break;
            fy_list_remove(&wt->link);
            s->nwaiters--;
            wt->s = NULL;
            s->users++;
            wt->cb(wt, s, NULL);
            continue;
        }
        fy_list_remove(&wt->link);
        s->nwaiters--;
        wt->s = NULL;
        bool ready = false;
        const char *err = "origin connect failed";
        fy_origin_h3_t *o = fy_origin_h3_acquire(s->u, s->w, s->server, s->loop, wt, &ready, &err);
        if (ready)
            wt->cb(wt, o, NULL);
        else if (!o && !wt->s)
            wt->cb(wt, NULL, err);
    }
    s->users--;
    if (s->state == S_CLOSED)
        reap_maybe(s);
    else if (s->state == S_READY && s->users == 0 && s->nwaiters == 0)
        fy_timer_start(s->loop, &s->timer, fy_upstream_conf(s->u)->keepalive_timeout_ms);
}

static void on_ready(void *ud)
{
    fy_origin_h3_t *s = ud;
    if (s->state != S_CONNECTING) return;
    s->state = S_READY;
    serve_waiters(s);
}

static void on_credit(void *ud)
{
    fy_origin_h3_t *s = ud;
    if (s->state == S_READY && s->nwaiters) serve_waiters(s);
}

static void on_goaway(void *ud)
{
    fy_origin_h3_t *s = ud;
    if (s->state == S_CLOSED) return;
    s->state = S_DRAINING;
    fail_waiters(s, "origin sent GOAWAY");
}

static void on_close(void *ud, const char *why)
{
    fy_origin_h3_t *s = ud;
    s->c = NULL; /* the codec frees itself after this returns */
    conn_close(s, why ? why : "origin connection closed", false);
}

static const fy_h3_client_conn_ops_t conn_ops = {on_ready, on_credit, on_goaway, on_close};

static void on_timer(fy_timer_t *t)
{
    fy_origin_h3_t *s = t->data;
    if (s->state == S_READY && s->users == 0 && s->nwaiters == 0) conn_close(s, NULL, true);
}

fy_origin_h3_t *fy_origin_h3_acquire(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                     fy_origin_h3_waiter_t *wt, bool *ready, const char **err)
{
    *ready = false;
    wt->s = NULL;
    fy_origin_h3_t **head = slot(u, w, server);
    fy_origin_h3_t *wait_on = NULL;
    unsigned downs = fy__upstream_downs(u, server);
    for (fy_origin_h3_t *s = *head, *next; s; s = next) {
        next = s->next;
        /* The health checker found the origin down since this connection was made: it may be
           a QUIC connection to a process that is gone (no RST over UDP; a restarted origin
           cannot even reset it), so it is not reused; idle, it is closed now. */
        if (s->downs != downs) {
            if (s->state == S_READY) {
                s->state = S_DRAINING; /* its streams finish; the last release closes it */
                if (s->users == 0) conn_close(s, NULL, true);
            }
            continue; /* (a connecting one still serves its waiters, but takes no more) */
        }
        if (s->state == S_READY && s->users < H3_MAX_STREAMS && fy_h3_client_ready(s->c)) {
            /* Our users count drops when a request is done, but the server's stream credit
               (MAX_STREAMS) comes back only after it has seen the stream closed: with none
               left, wait on this connection for on_credit rather than fail the submit. */
            if (fy_h3_client_can_open(s->c)) {
                if (s->users == 0) fy_timer_stop(loop, &s->timer);
                s->users++;
                *ready = true;
                return s;
            }
            if (s->nwaiters < H3_MAX_STREAMS && !wait_on) wait_on = s;
            continue;
        }
        if (s->state == S_CONNECTING && s->nwaiters < H3_MAX_STREAMS && !wait_on) wait_on = s;
    }
    if (!wait_on) {
        const fy_upstream_conf_t *uc = fy_upstream_conf(u);
        const fy_upstream_server_conf_t *sv =
            &((const fy_upstream_server_conf_t *)uc->servers.v)[server];
        fy_origin_h3_t *s = fy_xcalloc(1, sizeof *s);
        s->u = u;
        s->w = w;
        s->server = server;
        s->loop = loop;
        s->state = S_CONNECTING;
        s->downs = downs;
        fy_list_init(&s->waiters);
        fy_timer_init(&s->timer, on_timer, s);
        fy_quic_client_opts_t o = {.conf = &origin_quic,
                                   .sni = uc->sni ? uc->sni : sv->host,
                                   .ca_file = uc->ca,
                                   .insecure = uc->insecure,
                                   .cert_file = uc->cert,
                                   .key_file = uc->key,
                                   .name = uc->name};
        s->c = fy_h3_client_connect(loop, (const struct sockaddr *)&sv->addr, sv->addrlen, &o,
                                    &conn_ops, s);
        if (!s->c) {
            free(s);
            *err = "cannot start a QUIC connection to the origin";
            return NULL;
        }
        s->next = *head;
        if (*head) (*head)->prev = s;
        *head = s;
        s->linked = true;
        wait_on = s;
    }
    if (wait_on->state == S_READY) fy_timer_stop(loop, &wait_on->timer);
    fy_list_insert_tail(&wait_on->waiters, &wt->link);
    wait_on->nwaiters++;
    wt->s = wait_on;
    return NULL;
}

void fy_origin_h3_cancel_wait(fy_origin_h3_waiter_t *wt)
{
    if (!wt->s) return;
    fy_list_remove(&wt->link);
    wt->s->nwaiters--;
    wt->s = NULL;
}

fy_h3_client_t *fy_origin_h3_client(fy_origin_h3_t *s)
{
    return s->c;
}

void fy_origin_h3_release(fy_origin_h3_t *s)
{
    s->users--;
    if (s->users > 0) return;
    if (s->state == S_CLOSED) {
        reap_maybe(s);
        return;
    }
    if (s->state == S_DRAINING) {
        conn_close(s, NULL, true);
        return;
    }
    if (s->state != S_READY) return;
    if (s->nwaiters) return; /* requests wait for its stream credit: on_credit serves them */
    size_t idle = 0;
    for (fy_origin_h3_t *o = *slot(s->u, s->w, s->server); o; o = o->next)
        if (o->state == S_READY && o->users == 0) idle++;
    if (idle > (size_t)fy_upstream_conf(s->u)->keepalive) {
        conn_close(s, NULL, true);
        return;
    }
    fy_timer_start(s->loop, &s->timer, fy_upstream_conf(s->u)->keepalive_timeout_ms);
}

void fy_origin_h3_suspect(fy_origin_h3_t *s)
{
    if (s->state != S_READY) return;
    /* QUIC keeps itself alive (its PINGs and ACKs are the library's): an unanswered stream
       is the application's, so the connection takes no new ones and closes after its last */
    fy_info("upstream %s: h3 connection takes no new streams after a first-byte timeout",
            fy_upstream_conf(s->u)->name);
    s->state = S_DRAINING;
    if (s->nwaiters) serve_waiters(s); /* those waiting for its stream credit go elsewhere */
}

size_t fy_origin_h3_count(fy_upstream_t *u, int w, int server)
{
    size_t n = 0;
    for (fy_origin_h3_t *s = *slot(u, w, server); s; s = s->next) n++;
    return n;
}

void fy__upstream_h3_worker_close(fy_upstream_t *u, int w)
{
    size_t n = fy_upstream_nservers(u);
    for (size_t i = 0; i < n; i++) {
        fy_origin_h3_t **head = slot(u, w, (int)i);
        while (*head) {
            fy_origin_h3_t *s = *head;
            fy_timer_stop(s->loop, &s->timer);
            fy_defer_cancel(s->loop, &s->reap);
            s->state = S_CLOSED;
            fail_waiters(s, "worker exit");
            if (s->c) fy_h3_client_close(s->c);
            s->c = NULL;
            unlink_conn(s);
            free(s);
        }
    }
}

void fy__origin_h3_abandon(fy_origin_h3_t *s, const char *why)
{
    conn_close(s, why, true);
}
