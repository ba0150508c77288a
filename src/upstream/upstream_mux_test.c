/* Unit tests of upstream/upstream_mux.c over a fake protocol table, without sockets: waiters
 * wait on a connecting connection up to the guess and then get a new one, are served by
 * priority then arrival when it is ready, stream credit holds them back, the suspect state
 * (with a PING: no new streams until the ACK; without: drained), GOAWAY drains and fails the
 * waiters, idle connections beyond `keepalive` close, reaping waits for the loop, and worker
 * close frees everything. */
#define FY__MUX_PROTO_OF fake_proto_of
#include <stdlib.h>

#include "upstream/upstream_mux.h"
static const fy__mux_proto_t *fake_proto_of(fy_upstream_t *u, int server);
#include "upstream_mux.c"

#include "core/alloc.h"
#include "core/test.h"
#include <string.h>

typedef struct fake {
    fy_origin_mux_t m; /* first */
    int id;
} fake_t;

static int connects, destroyed, shutdowns, pings, goaways;
static size_t fake_max = 2;
static bool fake_credit = true, fake_has_ping = true, fake_fail_connect;

static fy_origin_mux_t *fake_connect(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                     const char **err);
static size_t fake_max_streams(fy_origin_mux_t *m)
{
    (void)m;
    return fake_max;
}
static bool fake_can_open(fy_origin_mux_t *m)
{
    (void)m;
    return fake_credit;
}
static bool fake_ping(fy_origin_mux_t *m)
{
    (void)m;
    if (fake_has_ping) pings++;
    return fake_has_ping;
}
static void fake_nothing(fy_origin_mux_t *m)
{
    (void)m;
}
static void fake_goaway(fy_origin_mux_t *m)
{
    (void)m;
    goaways++;
}
static void fake_shutdown(fy_origin_mux_t *m, const char *why, bool ours)
{
    (void)m, (void)why, (void)ours;
    shutdowns++;
}
static void fake_destroy(fy_origin_mux_t *m)
{
    destroyed++;
    free(m);
}

static const fy__mux_proto_t fake_proto = {
    .name = "fake",
    .guess_streams = 2,
    .retire_on_down = false,
    .handshake_timeout = "no go",
    .connect = fake_connect,
    .max_streams = fake_max_streams,
    .can_open = fake_can_open,
    .ping = fake_ping,
    .flush = fake_nothing,
    .goaway = fake_goaway,
    .shutdown = fake_shutdown,
    .cancel = fake_nothing,
    .close_now = fake_nothing,
    .destroy = fake_destroy,
};

static const fy__mux_proto_t *fake_proto_of(fy_upstream_t *u, int server)
{
    (void)u, (void)server;
    return &fake_proto;
}

static fy_origin_mux_t *fake_connect(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                     const char **err)
{
    if (fake_fail_connect) {
        *err = "no socket";
        return NULL;
    }
    fake_t *f = fy_xcalloc(1, sizeof *f);
    f->id = ++connects;
    fy__mux_init(&f->m, &fake_proto, u, w, server, loop);
    return &f->m;
}

typedef struct waiter {
    fy_origin_mux_waiter_t wt;
    fy_origin_mux_t *got;
    const char *err;
    int order;
} waiter_t;

static int served;

static void on_ready(fy_origin_mux_waiter_t *wt, fy_origin_mux_t *m, const char *err)
{
    waiter_t *w = fy_container_of(wt, waiter_t, wt);
    w->got = m;
    w->err = err;
    w->order = ++served;
}

static fy_origin_mux_t *get(fy_upstream_t *u, fy_loop_t *loop, waiter_t *w, int priority)
{
    memset(w, 0, sizeof *w);
    w->wt.cb = on_ready;
    w->wt.priority = priority;
    bool ready = false;
    const char *err = NULL;
    fy_origin_mux_t *m = fy_origin_mux_acquire(u, 0, 0, loop, &w->wt, &ready, &err);
    CHECK(ready == (m != NULL));
    if (!m && !w->wt.m) w->err = err;
    return m;
}

static void stop_cb(fy_defer_t *d)
{
    fy_loop_stop(d->data);
}

static void turn(fy_loop_t *loop) /* run the deferred callbacks queued so far */
{
    fy_defer_t d = {.cb = stop_cb, .data = loop};
    fy_defer(loop, &d);
    fy_loop_run(loop);
    loop->stop = false;
}

static void test_pool(void)
{
    fy_loop_t loop;
    CHECK(fy_loop_init(&loop) == 0);
    fy_upstream_server_conf_t sv = {.url = "h2c://127.0.0.1:1", .weight = 1, .h2 = true};
    fy_upstream_conf_t uc = {.name = "t", .keepalive = 0, .keepalive_timeout_ms = 60000};
    uc.servers.v = &sv;
    uc.servers.n = 1;
    fy_upstream_t *u = fy_upstream_new(&uc, 1);
    CHECK(u != NULL);

    /* connecting: two wait on the first connection (the guess), the third gets another */
    waiter_t a, b, c, d;
    CHECK(!get(u, &loop, &a, 0) && a.wt.m && connects == 1);
    CHECK(!get(u, &loop, &b, 5) && b.wt.m == a.wt.m && connects == 1);
    CHECK(!get(u, &loop, &c, 0) && c.wt.m != a.wt.m && connects == 2);
    fy_origin_mux_t *m1 = a.wt.m, *m2 = c.wt.m;
    CHECK_EQ_INT(fy_origin_mux_count(u, 0, 0), 2);

    /* ready: served by priority, then arrival */
    fy__mux_ready(m1);
    CHECK(b.got == m1 && a.got == m1 && b.order < a.order && !b.err);
    CHECK_EQ_INT(m1->users, 2);
    /* full (2 streams): the next waits on the other, still connecting connection (now with
       as many waiters as the guess) */
    CHECK(!get(u, &loop, &d, 0) && d.wt.m == m2);
    CHECK_EQ_INT(m2->nwaiters, 2);

    /* a stream slot, but no credit: wait on it; credit serves */
    waiter_t x;
    fy_origin_mux_release(m1);
    fake_credit = false;
    CHECK(!get(u, &loop, &x, 0) && x.wt.m == m1);
    fake_credit = true;
    fy__mux_credit(m1);
    CHECK(x.got == m1);
    /* cancelled waiters are not served */
    fy_origin_mux_cancel_wait(&d.wt);
    CHECK(d.wt.m == NULL && m2->nwaiters == 1);

    /* suspect with a PING: no new streams until the ACK */
    fy_origin_mux_suspect(m1);
    CHECK(m1->state == M_SUSPECT && pings == 1);
    fy_origin_mux_release(m1);
    waiter_t e;
    CHECK(!get(u, &loop, &e, 0) && e.wt.m == m2); /* not m1 */
    fy__mux_alive(m1);
    CHECK(m1->state == M_READY);
    /* suspect and never answered: closed when its last user leaves */
    fy_origin_mux_suspect(m1);
    fy_origin_mux_release(m1);
    CHECK(m1->state == M_CLOSED && goaways == 1 && shutdowns == 1);
    CHECK_EQ_INT(destroyed, 0); /* reaped after the callback stack unwinds */
    turn(&loop);
    CHECK_EQ_INT(destroyed, 1);
    CHECK_EQ_INT(fy_origin_mux_count(u, 0, 0), 1);

    /* GOAWAY on a connecting connection: its waiters fail */
    fy__mux_goaway(m2);
    CHECK(c.err && e.err && !c.got && m2->state == M_DRAINING);
    fy__mux_close(m2, "gone", false);
    turn(&loop);
    CHECK_EQ_INT(destroyed, 2);

    /* without a PING, suspect drains: the waiter for credit goes elsewhere */
    fake_has_ping = false;
    waiter_t f, g;
    CHECK(!get(u, &loop, &f, 0));
    fy_origin_mux_t *m3 = f.wt.m;
    fy__mux_ready(m3);
    CHECK(f.got == m3);
    fake_credit = false;
    CHECK(!get(u, &loop, &g, 0) && g.wt.m == m3);
    fake_credit = true;
    fy_origin_mux_suspect(m3);
    CHECK(m3->state == M_DRAINING && g.wt.m && g.wt.m != m3); /* moved to a new connection */
    fy_origin_mux_release(m3);                                /* drained and unused: closed */
    CHECK(m3->state == M_CLOSED);
    turn(&loop);

    /* idle beyond keepalive (0): closed at release */
    fy_origin_mux_t *m4 = g.wt.m;
    fy__mux_ready(m4);
    CHECK(g.got == m4);
    int gw = goaways;
    fy_origin_mux_release(m4);
    CHECK(m4->state == M_CLOSED && goaways == gw + 1);
    turn(&loop);

    /* no socket at all: an error, nothing queued */
    fake_fail_connect = true;
    waiter_t h;
    CHECK(!get(u, &loop, &h, 0) && !h.wt.m && h.err && strcmp(h.err, "no socket") == 0);
    fake_fail_connect = false;

    /* worker close frees what is left, waiters failed */
    waiter_t i;
    CHECK(!get(u, &loop, &i, 0));
    fy_upstream_worker_close(u, 0);
    CHECK(i.err && strcmp(i.err, "worker exit") == 0);
    CHECK_EQ_INT(fy_origin_mux_count(u, 0, 0), 0);
    CHECK_EQ_INT(destroyed, connects);
    fy_upstream_free(u);
    fy_loop_destroy(&loop);
}

FY_TEST_MAIN(test_pool())
