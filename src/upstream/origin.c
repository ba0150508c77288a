/* The origin interface (origin.h) over the three client codecs: one table per protocol. */
#include "upstream/origin.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "h2/h2_client.h"
#include "h3/h3_client.h"

struct fy__origin_proto {
    const char *name;
    fy_origin_framing_t framing;
    int (*open)(fy_origin_stream_t *os, int priority, const char **err);
    bool (*can_tunnel)(const fy_origin_stream_t *os);
    int (*submit)(fy_origin_stream_t *os, const fy_origin_request_t *rq);
    void (*consume)(fy_origin_stream_t *os, size_t n);
    void (*resume)(fy_origin_stream_t *os);
    bool (*blames)(int kind, uint64_t code, bool after_head);
    bool (*finish)(fy_origin_stream_t *os); /* response complete: may the connection go on? */
    void (*suspect)(fy_origin_stream_t *os);
    void (*abandon)(fy_origin_stream_t *os);
    void (*close)(fy_origin_stream_t *os, bool reusable);
};

/* ---- h2/h3 codecs' callbacks, to the owner (ud: the origin stream; the h1 codec calls the
 * owner's ops directly, its bytes need no ring) ---- */

static void ring_lend(fy_origin_stream_t *os);

static void t_on_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    fy_origin_stream_t *os = ud;
    os->ops->c.on_head(os->ud, status, hs, end);
}

static void t_on_end(void *ud, fy_headers_t *trailers)
{
    fy_origin_stream_t *os = ud;
    if (os->rb_count > os->rb_lent) { /* after the bytes still in the ring */
        os->end_pending = true;
        os->trailers = trailers;
        return;
    }
    os->ops->c.on_end(os->ud, trailers);
}

static void t_on_error(void *ud, int kind, uint64_t code, const char *why)
{
    fy_origin_stream_t *os = ud;
    os->end_pending = false;
    os->ops->c.on_error(os->ud, kind, code, why);
}

static ssize_t t_read_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers)
{
    fy_origin_stream_t *os = ud;
    return os->ops->c.read_body(os->ud, buf, len, trailers);
}

/* ---- HTTP/1.1: a pooled connection is a pool of one stream ---- */

static int h1_want(void *ud, uint32_t ev)
{
    fy_origin_stream_t *os = ud;
    return os->oc ? fy_origin_want(os->oc, ev) : 0;
}

static void h1_event(fy_origin_conn_t *oc, unsigned ev, void *ud)
{
    fy_origin_stream_t *os = ud;
    if (ev & FY_ORIGIN_ERROR) {
        os->oc = NULL; /* closed by upstream.c */
        os->proto = NULL;
        os->ops->on_open(os->ud, oc->error ? oc->error : "origin connect failed");
        return;
    }
    if (ev & FY_ORIGIN_READY) {
        os->ops->on_open(os->ud, NULL);
        return;
    }
    if (!os->c1) return;
    os->busy++;
    fy_h1_client_io(os->c1, ev);
    os->busy--;
    os->ops->after_io(os->ud);
}

static int h1_open(fy_origin_stream_t *os, int priority, const char **err)
{
    (void)priority;
    bool ready = false;
    os->oc = fy_origin_acquire(os->u, os->w, os->server, os->loop, h1_event, os, &ready, err);
    if (!os->oc) return -1;
    os->reused = ready;
    return ready ? 1 : 0;
}

static bool can_tunnel(const fy_origin_stream_t *os)
{
    (void)os;
    return true;
}

static int h1_submit(fy_origin_stream_t *os, const fy_origin_request_t *rq)
{
    /* the codec reads the response straight into its buffers and lends them (no ring) */
    os->c1 = fy_h1_client_new(rq->arena, os->oc->t, rq->limits, rq->head, &os->ops->c, h1_want, os,
                              os->ud);
    os->busy++;
    fy_h1_client_submit(os->c1, rq->hs, rq->tunnel ? 0 : rq->body_len);
    os->busy--;
    return 0;
}

static void h1_consume(fy_origin_stream_t *os, size_t n)
{
    if (!os->c1) return;
    os->busy++;
    fy_h1_client_consume(os->c1, n); /* the codec reads on */
    os->busy--;
}

static void h1_resume(fy_origin_stream_t *os)
{
    if (!os->c1) return;
    os->busy++;
    fy_h1_client_resume(os->c1);
    os->busy--;
}

/* the codec says (code 1) when the failure is the origin's */
static bool h1_blames(int kind, uint64_t code, bool after_head)
{
    (void)kind;
    (void)after_head;
    return code == 1;
}

static void nothing(fy_origin_stream_t *os)
{
    (void)os;
}

static bool h1_finish(fy_origin_stream_t *os)
{
    bool reusable = os->c1 && fy_h1_client_release(os->c1);
    if (os->oc) os->oc->requests++;
    return reusable;
}

static void h1_close(fy_origin_stream_t *os, bool reusable)
{
    if (os->c1) fy_h1_client_release(os->c1); /* its buffers stay until the next open */
    if (os->oc) fy_origin_release(os->oc, reusable);
    os->oc = NULL;
}

static const struct fy__origin_proto proto_h1 = {
    "h1",      {false, false, true},
    h1_open,   can_tunnel,
    h1_submit, h1_consume,
    h1_resume, h1_blames,
    h1_finish, nothing,
    nothing,   h1_close,
};

/* ---- h2 / h3: codec bytes borrowed for the callback are lent from a ring ---- */

static void ring_lend(fy_origin_stream_t *os)
{
    while (os->rb_lent == 0 && os->direct_n == 0 && os->rb_count) {
        size_t n = os->rb_cap - os->rb_head;
        if (n > os->rb_count) n = os->rb_count;
        os->rb_lent = n;
        os->ops->c.on_data(os->ud, os->rb + os->rb_head, n);
        if (!os->proto) return; /* closed from inside */
    }
    if (os->end_pending && os->rb_count == os->rb_lent) {
        os->end_pending = false;
        os->ops->c.on_end(os->ud, os->trailers);
    }
}

static void mux_on_data(void *ud, const char *p, size_t n)
{
    fy_origin_stream_t *os = ud;
    if (os->rb_count == 0 && os->direct_n == 0 && os->mx) {
        /* nothing else lent or waiting: lend the codec's bytes in place if they can stay */
        fy_origin_pin_t *pin = os->pin ? NULL : fy_origin_mux_pin(os->mx);
        if (pin) {
            os->pin = pin;
            os->direct_n = n;
            os->ops->c.on_data(os->ud, p, n);
            return;
        }
    }
    if (!os->rb) {
        /* unconsumed bytes never exceed the stream window, nor (nghttp2 checks it) the
           announced content length: a tiny response gets a tiny ring */
        int64_t cl = os->expect;
        os->rb_cap =
            cl > 0 && (uint64_t)cl < FY_H2C_STREAM_WINDOW ? (uint32_t)cl : FY_H2C_STREAM_WINDOW;
        os->rb_pooled = os->rb_cap <= FY_CHUNK_SIZE;
        if (os->rb_pooled) {
            os->rb = fy_pool_get(fy_chunk_pool());
            os->rb_cap = FY_CHUNK_SIZE;
        } else {
            os->rb = fy_xmalloc(os->rb_cap);
        }
    }
    if (os->rb_count + n > os->rb_cap) { /* the window (or content length) bounds it */
        os->ops->c.on_error(os->ud, FY_CLIENT_PROTOCOL, 0, "origin overran the stream window");
        return;
    }
    size_t tail = (os->rb_head + os->rb_count) % os->rb_cap;
    size_t first = os->rb_cap - tail;
    if (first > n) first = n;
    memcpy(os->rb + tail, p, first);
    if (n > first) memcpy(os->rb, p + first, n - first);
    os->rb_count += n;
    ring_lend(os);
}

static const fy_client_stream_ops_t mux_stream_ops = {
    t_on_head, mux_on_data, t_on_end, t_on_error, t_read_body, NULL,
};

static void ring_consume(fy_origin_stream_t *os, size_t n)
{
    if (os->direct_n) { /* the piece lent in place */
        if (n > os->direct_n) n = os->direct_n;
        os->direct_n -= n;
        if (os->direct_n == 0) {
            fy_origin_mux_unpin(os->pin);
            os->pin = NULL;
        }
        return;
    }
    if (n > os->rb_lent) n = os->rb_lent;
    os->rb_head = (os->rb_head + n) % os->rb_cap;
    os->rb_count -= n;
    os->rb_lent -= n;
    if (os->rb_count == 0) os->rb_head = 0;
}

/* stream errors count against the server unless refused (not processed); after the head,
   the connection is shared and the stream's end says little about the server */
static bool mux_blames(int kind, uint64_t code, bool after_head)
{
    (void)code;
    return !after_head && kind != FY_CLIENT_REFUSED;
}

static void mux_ready(fy_origin_mux_waiter_t *wt, fy_origin_mux_t *m, const char *err)
{
    fy_origin_stream_t *os = fy_container_of(wt, fy_origin_stream_t, wait);
    if (!m) {
        os->proto = NULL;
        os->ops->on_open(os->ud, err ? err : "origin connect failed");
        return;
    }
    os->mx = m;
    os->ops->on_open(os->ud, NULL);
}

static int mux_open(fy_origin_stream_t *os, int priority, const char **err)
{
    os->wait.cb = mux_ready;
    os->wait.priority = priority;
    bool ready = false;
    fy_origin_mux_t *m =
        fy_origin_mux_acquire(os->u, os->w, os->server, os->loop, &os->wait, &ready, err);
    if (ready) {
        os->mx = m;
        return 1;
    }
    return os->wait.m ? 0 : -1;
}

static bool mux_finish(fy_origin_stream_t *os)
{
    (void)os;
    return true; /* the connection's fate is the pool's */
}

static void mux_suspect(fy_origin_stream_t *os)
{
    if (os->mx) fy_origin_mux_suspect(os->mx);
}

static void mux_abandon(fy_origin_stream_t *os)
{
    if (os->mx) fy_origin_mux_abandon(os->mx, "health check timed out");
}

/* after the caller's stream was released */
static void mux_release(fy_origin_stream_t *os)
{
    fy_origin_mux_cancel_wait(&os->wait);
    if (os->mx) fy_origin_mux_release(os->mx);
    os->mx = NULL;
}

static bool h2_can_tunnel(const fy_origin_stream_t *os)
{
    fy_h2_client_t *c = os->mx ? fy_origin_mux_h2(os->mx) : NULL;
    return c && fy_h2_client_can_connect_protocol(c);
}

static int h2_submit(fy_origin_stream_t *os, const fy_origin_request_t *rq)
{
    bool has_body = rq->tunnel || rq->body_len != 0;
    fy_h2_client_t *c = fy_origin_mux_h2(os->mx);
    os->st = c ? fy_h2_client_submit(c, rq->hs, has_body, rq->arena, &mux_stream_ops, os) : NULL;
    return os->st ? 0 : -1;
}

static void h2_consume(fy_origin_stream_t *os, size_t n)
{
    ring_consume(os, n);
    if (os->st) fy_h2_client_consume(os->st, n); /* the origin may send as much again */
    ring_lend(os);
}

static void h2_resume(fy_origin_stream_t *os)
{
    if (os->st) fy_h2_client_resume(os->st);
}

static void h2_close(fy_origin_stream_t *os, bool reusable)
{
    (void)reusable;
    if (os->st) fy_h2_client_release(os->st);
    os->st = NULL;
    mux_release(os);
}

static const struct fy__origin_proto proto_h2 = {
    "h2",      {true, true, false}, mux_open,   h2_can_tunnel, h2_submit, h2_consume,
    h2_resume, mux_blames,          mux_finish, mux_suspect,   nothing,   h2_close,
};

static int h3_submit(fy_origin_stream_t *os, const fy_origin_request_t *rq)
{
    bool has_body = rq->tunnel || rq->body_len != 0;
    fy_h3_client_t *c = fy_origin_mux_h3(os->mx);
    os->st = c ? fy_h3_client_submit(c, rq->hs, has_body, rq->arena, &mux_stream_ops, os) : NULL;
    return os->st ? 0 : -1;
}

static void h3_consume(fy_origin_stream_t *os, size_t n)
{
    ring_consume(os, n);
    if (os->st) fy_h3_client_consume(os->st, n);
    ring_lend(os);
}

static void h3_resume(fy_origin_stream_t *os)
{
    if (os->st) fy_h3_client_resume(os->st);
}

static void h3_close(fy_origin_stream_t *os, bool reusable)
{
    (void)reusable;
    if (os->st) fy_h3_client_release(os->st);
    os->st = NULL;
    mux_release(os);
}

static const struct fy__origin_proto proto_h3 = {
    "h3",      {true, true, false}, mux_open,   can_tunnel,  h3_submit,   h3_consume,
    h3_resume, mux_blames,          mux_finish, mux_suspect, mux_abandon, h3_close,
};

/* ---- the interface ---- */

void fy_origin_stream_init(fy_origin_stream_t *os, const fy_origin_stream_ops_t *ops, void *ud)
{
    os->ops = ops;
    os->ud = ud;
    os->expect = -1;
}

static void free_lent(fy_origin_stream_t *os)
{
    if (os->c1) {
        fy_h1_client_release(os->c1);
        fy_h1_client_free(os->c1);
        os->c1 = NULL;
    }
    if (os->pin) fy_origin_mux_unpin(os->pin);
    os->pin = NULL;
    os->direct_n = 0;
    os->rb_head = os->rb_count = os->rb_lent = 0;
    os->end_pending = false;
}

int fy_origin_stream_open(fy_origin_stream_t *os, fy_upstream_t *u, int w, int server,
                          fy_loop_t *loop, int priority, const char **err)
{
    free_lent(os);
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(u)->servers.v)[server];
    os->proto = sv->h3 ? &proto_h3 : sv->h2 ? &proto_h2 : &proto_h1;
    os->u = u;
    os->w = w;
    os->server = server;
    os->loop = loop;
    os->reused = false;
    os->expect = -1;
    int rc = os->proto->open(os, priority, err);
    if (rc < 0) os->proto = NULL;
    return rc;
}

fy_origin_framing_t fy_origin_stream_framing(const fy_origin_stream_t *os)
{
    return os->proto ? os->proto->framing : proto_h1.framing;
}

bool fy_origin_stream_can_tunnel(const fy_origin_stream_t *os)
{
    return os->proto && os->proto->can_tunnel(os);
}

bool fy_origin_stream_timing(const fy_origin_stream_t *os, int32_t *connect_us, int32_t *tls_us)
{
    if (os->proto != &proto_h1 || !os->oc) return false;
    bool tls = os->oc->tls;
    *connect_us = os->reused ? -1 : (int32_t)os->oc->connect_us;
    *tls_us = os->reused || !tls ? -1 : (int32_t)os->oc->tls_us;
    return true;
}

int fy_origin_stream_submit(fy_origin_stream_t *os, const fy_origin_request_t *rq)
{
    return os->proto ? os->proto->submit(os, rq) : -1;
}

void fy_origin_stream_expect(fy_origin_stream_t *os, int64_t content_length)
{
    os->expect = content_length;
}

void fy_origin_stream_consume(fy_origin_stream_t *os, size_t n)
{
    if (os->proto) os->proto->consume(os, n);
}

void fy_origin_stream_resume(fy_origin_stream_t *os)
{
    if (os->proto) os->proto->resume(os);
}

bool fy_origin_stream_busy(const fy_origin_stream_t *os)
{
    return os->busy > 0;
}

bool fy_origin_stream_sending(const fy_origin_stream_t *os)
{
    return os->c1 && fy_h1_client_sending(os->c1);
}

bool fy_origin_stream_got_bytes(const fy_origin_stream_t *os)
{
    return os->c1 && fy_h1_client_got_bytes(os->c1);
}

bool fy_origin_stream_blames(const fy_origin_stream_t *os, int kind, uint64_t code, bool after_head)
{
    return os->proto ? os->proto->blames(kind, code, after_head) : true;
}

bool fy_origin_stream_finish(fy_origin_stream_t *os)
{
    return os->proto ? os->proto->finish(os) : false;
}

void fy_origin_stream_suspect(fy_origin_stream_t *os)
{
    if (os->proto) os->proto->suspect(os);
}

void fy_origin_stream_abandon(fy_origin_stream_t *os)
{
    if (os->proto) os->proto->abandon(os);
}

void fy_origin_stream_close(fy_origin_stream_t *os, bool reusable)
{
    if (!os->proto) return;
    const struct fy__origin_proto *p = os->proto;
    os->proto = NULL; /* callbacks from inside see a closed stream */
    p->close(os, reusable);
}

void fy_origin_stream_free(fy_origin_stream_t *os)
{
    fy_origin_stream_close(os, false);
    free_lent(os);
    if (os->rb_pooled)
        fy_pool_put(fy_chunk_pool(), os->rb);
    else
        free(os->rb);
    os->rb = NULL;
}
