/* Tests for loop.c. Timers and deferred callbacks are first driven with a fake clock (the loop's
 * cached now_ms set by hand, run_timers/run_deferred called directly), so deadlines can be
 * checked to the millisecond; then fy_loop_run is exercised for real with short timers, a pipe,
 * and a wake from another thread. Every real run is guarded by a watchdog thread that wakes and
 * stops the loop if it has not returned by itself: a loop that would block forever makes a
 * check fail instead of hanging ctest. No check asserts a duration, only order and outcome. */
#include "loop.c"

#include "core/test.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>

/* ---- helpers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* on_wake of every test loop: stops the loop when asked to (by the test or the watchdog). */
static atomic_int wakes;
static atomic_bool stop_on_wake;
static atomic_bool watchdog_fired;

static void test_on_wake(fy_loop_t *loop)
{
    atomic_fetch_add(&wakes, 1);
    if (atomic_load(&stop_on_wake) || atomic_load(&watchdog_fired)) fy_loop_stop(loop);
}

static void loop_setup(fy_loop_t *loop)
{
    int r = fy_loop_init(loop);
    CHECK_EQ_INT(r, 0);
    if (r != 0) exit(2);
    loop->on_wake = test_on_wake;
    atomic_store(&wakes, 0);
    atomic_store(&stop_on_wake, false);
    atomic_store(&watchdog_fired, false);
}

/* Ends the run from inside a callback without relying on fy_loop_stop being noticed before
 * the next epoll_wait (see test_stop): the eventfd makes epoll_wait return at once. */
static void finish(fy_loop_t *loop)
{
    atomic_store(&stop_on_wake, true);
    fy_loop_wake(loop);
}

typedef struct watchdog {
    fy_loop_t *loop;
    int ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} watchdog_t;

static void *watchdog_main(void *arg)
{
    watchdog_t *w = arg;
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += (long)w->ms * 1000000L;
    dl.tv_sec += dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&w->mu);
    int r = 0;
    while (!w->done && r != ETIMEDOUT) r = pthread_cond_timedwait(&w->cv, &w->mu, &dl);
    bool done = w->done;
    pthread_mutex_unlock(&w->mu);
    if (!done) {
        atomic_store(&watchdog_fired, true);
        fy_loop_wake(w->loop);
    }
    return NULL;
}

/* Runs the loop; returns true if it returned by itself within `ms`, false if the watchdog had
 * to wake it (it then stops at the wake). */
static bool run_guarded(fy_loop_t *loop, int ms)
{
    watchdog_t w = {.loop = loop, .ms = ms, .done = false};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w.mu, NULL);
    pthread_t th;
    if (pthread_create(&th, NULL, watchdog_main, &w) != 0) exit(2);
    fy_loop_run(loop);
    pthread_mutex_lock(&w.mu);
    w.done = true;
    pthread_cond_signal(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(th, NULL);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return !atomic_load(&watchdog_fired);
}

/* ---- timers with a fake clock ---- */

#define NT 1000

typedef struct ttimer {
    fy_timer_t t;
    fy_loop_t *loop;
    int id;
    int fired;
    uint64_t fired_at; /* loop->now_ms when the callback ran */
    bool was_active;   /* fy_timer_is_active inside the callback */
} ttimer_t;

static int fire_log[NT * 2];
static int nfire;

static void ttimer_cb(fy_timer_t *t)
{
    ttimer_t *tt = t->data;
    tt->fired++;
    tt->fired_at = tt->loop->now_ms;
    tt->was_active = fy_timer_is_active(t);
    if (nfire < NT * 2) fire_log[nfire++] = tt->id;
}

static void ttimer_init(ttimer_t *tt, fy_loop_t *loop, int id)
{
    memset(tt, 0, sizeof *tt);
    tt->loop = loop;
    tt->id = id;
    fy_timer_init(&tt->t, ttimer_cb, tt);
}

/* Advance the fake clock 1 ms at a time up to `until`, running expired timers at each step. */
static void advance_to(fy_loop_t *loop, uint64_t until)
{
    while (loop->now_ms < until) {
        loop->now_ms++;
        run_timers(loop);
    }
}

static void test_timer_basics(void)
{
    fy_loop_t loop;
    loop_setup(&loop);
    loop.now_ms = 1000;
    ttimer_t a;
    ttimer_init(&a, &loop, 1);
    CHECK(!fy_timer_is_active(&a.t));
    CHECK_EQ_INT(run_timers(&loop), -1); /* nothing armed: wait forever */

    fy_timer_start(&loop, &a.t, 10);
    CHECK(fy_timer_is_active(&a.t));
    CHECK_EQ_INT(run_timers(&loop), 10); /* epoll timeout = time to the deadline */
    loop.now_ms = 1009;
    CHECK_EQ_INT(run_timers(&loop), 1);
    CHECK_EQ_INT(a.fired, 0);
    loop.now_ms = 1010;
    CHECK_EQ_INT(run_timers(&loop), -1);
    CHECK_EQ_INT(a.fired, 1);
    CHECK(!a.was_active); /* disarmed before its callback runs */
    CHECK(!fy_timer_is_active(&a.t));

    /* zero timeout fires at the next run */
    fy_timer_start(&loop, &a.t, 0);
    run_timers(&loop);
    CHECK_EQ_INT(a.fired, 2);

    /* the epoll timeout is capped at 60 s */
    fy_timer_start(&loop, &a.t, 3600 * 1000);
    CHECK_EQ_INT(run_timers(&loop), 60000);

    /* stop */
    fy_timer_stop(&loop, &a.t);
    CHECK(!fy_timer_is_active(&a.t));
    CHECK_EQ_INT(loop.nheap, 0);
    fy_timer_stop(&loop, &a.t); /* stopping a stopped timer is a no-op */
    CHECK(!fy_timer_is_active(&a.t));
    loop.now_ms += 3600 * 1000;
    run_timers(&loop);
    CHECK_EQ_INT(a.fired, 2);
    fy_loop_destroy(&loop);
}

static void test_timer_restart(void)
{
    fy_loop_t loop;
    loop_setup(&loop);
    loop.now_ms = 1000;
    ttimer_t a, b;
    ttimer_init(&a, &loop, 1);
    ttimer_init(&b, &loop, 2);

    /* later: the heap keeps key 1010, the timer must still fire at 1025 */
    fy_timer_start(&loop, &a.t, 10);
    loop.now_ms = 1005;
    fy_timer_start(&loop, &a.t, 20);
    CHECK_EQ_INT(a.t.at, 1025);
    CHECK(fy_timer_is_active(&a.t));
    advance_to(&loop, 1010);
    CHECK_EQ_INT(a.fired, 0); /* not at the old key */
    CHECK(fy_timer_is_active(&a.t));
    CHECK_EQ_INT(run_timers(&loop), 15); /* re-queued at its real deadline */
    advance_to(&loop, 1024);
    CHECK_EQ_INT(a.fired, 0);
    advance_to(&loop, 1025);
    CHECK_EQ_INT(a.fired, 1);
    CHECK_EQ_INT(a.fired_at, 1025);
    CHECK(!fy_timer_is_active(&a.t));

    /* later several times in a row (a keep-alive timer moved on every request) */
    fy_timer_start(&loop, &a.t, 10); /* 1035 */
    for (int i = 0; i < 20; i++) {
        loop.now_ms += 3;
        fy_timer_start(&loop, &a.t, 10);
    }
    uint64_t want = loop.now_ms + 10;
    advance_to(&loop, want - 1);
    CHECK_EQ_INT(a.fired, 1);
    advance_to(&loop, want);
    CHECK_EQ_INT(a.fired, 2);
    CHECK_EQ_INT(a.fired_at, want);

    /* earlier: moves in the heap and fires at the earlier deadline */
    uint64_t t0 = loop.now_ms;
    fy_timer_start(&loop, &a.t, 50);
    fy_timer_start(&loop, &b.t, 30);
    fy_timer_start(&loop, &a.t, 5);
    CHECK_EQ_INT(run_timers(&loop), 5);
    advance_to(&loop, t0 + 5);
    CHECK_EQ_INT(a.fired, 3);
    CHECK_EQ_INT(a.fired_at, t0 + 5);
    CHECK_EQ_INT(b.fired, 0);
    advance_to(&loop, t0 + 100);
    CHECK_EQ_INT(a.fired, 3); /* the earlier restart replaced the 50 ms deadline */
    CHECK_EQ_INT(b.fired, 1);
    CHECK_EQ_INT(b.fired_at, t0 + 30);

    /* later then earlier again, still before the old key */
    t0 = loop.now_ms;
    fy_timer_start(&loop, &a.t, 10); /* key t0+10 */
    fy_timer_start(&loop, &a.t, 40); /* lazy: at t0+40 */
    fy_timer_start(&loop, &a.t, 20); /* at t0+20, still >= key: lazy */
    advance_to(&loop, t0 + 19);
    CHECK_EQ_INT(a.fired, 3);
    advance_to(&loop, t0 + 20);
    CHECK_EQ_INT(a.fired, 4);
    CHECK_EQ_INT(a.fired_at, t0 + 20);

    /* stop a lazily re-queued timer */
    t0 = loop.now_ms;
    fy_timer_start(&loop, &a.t, 10);
    fy_timer_start(&loop, &a.t, 30);
    advance_to(&loop, t0 + 15); /* past the old key: re-queued */
    CHECK(fy_timer_is_active(&a.t));
    fy_timer_stop(&loop, &a.t);
    CHECK(!fy_timer_is_active(&a.t));
    advance_to(&loop, t0 + 100);
    CHECK_EQ_INT(a.fired, 4);
    CHECK_EQ_INT(loop.nheap, 0);
    fy_loop_destroy(&loop);
}

/* Re-arming from inside its own callback (a periodic tick). */
static int periodic_left;
static void periodic_cb(fy_timer_t *t)
{
    ttimer_t *tt = t->data;
    ttimer_cb(t);
    if (--periodic_left > 0) fy_timer_start(tt->loop, t, 7);
}

static void test_timer_periodic(void)
{
    fy_loop_t loop;
    loop_setup(&loop);
    loop.now_ms = 5000;
    ttimer_t a;
    ttimer_init(&a, &loop, 1);
    fy_timer_init(&a.t, periodic_cb, &a);
    periodic_left = 5;
    fy_timer_start(&loop, &a.t, 7);
    advance_to(&loop, 5100);
    CHECK_EQ_INT(a.fired, 5);
    CHECK_EQ_INT(a.fired_at, 5035);
    CHECK(!fy_timer_is_active(&a.t));
    fy_loop_destroy(&loop);
}

/* Many timers with random deadlines, random stops and random later/earlier restarts: each
 * live timer fires exactly once, exactly at its (last) deadline, never before; stopped ones
 * never fire; callbacks come in deadline order. */
static void test_timer_random(void)
{
    static ttimer_t ts[NT];
    static uint64_t want[NT];
    static bool live[NT];
    fy_loop_t loop;
    loop_setup(&loop);
    loop.now_ms = 100000;
    uint64_t t0 = loop.now_ms;
    nfire = 0;
    for (int i = 0; i < NT; i++) {
        ttimer_init(&ts[i], &loop, i);
        fy_timer_start(&loop, &ts[i].t, rnd(500));
        live[i] = true;
    }
    CHECK_EQ_INT(loop.nheap, NT);
    /* heap property on key */
    bool heap_ok = true;
    for (size_t i = 1; i < loop.nheap; i++)
        if (loop.heap[(i - 1) / 2]->key > loop.heap[i]->key) heap_ok = false;
    CHECK(heap_ok);
    bool idx_ok = true;
    for (size_t i = 0; i < loop.nheap; i++)
        if (loop.heap[i]->idx != i + 1) idx_ok = false;
    CHECK(idx_ok);
    run_timers(&loop); /* the 0 ms ones */

    /* mutate while the clock runs */
    for (int step = 0; step < 100; step++) {
        loop.now_ms++;
        for (int k = 0; k < 20; k++) {
            int i = (int)rnd(NT);
            if (!fy_timer_is_active(&ts[i].t)) continue;
            switch (rnd(3)) {
            case 0:
                fy_timer_stop(&loop, &ts[i].t);
                live[i] = false;
                break;
            case 1:
                fy_timer_start(&loop, &ts[i].t, 100 + rnd(600)); /* likely later */
                break;
            default:
                fy_timer_start(&loop, &ts[i].t, rnd(20)); /* likely earlier */
                break;
            }
        }
        run_timers(&loop);
    }
    for (int i = 0; i < NT; i++) want[i] = ts[i].t.at;
    int fired_before = nfire;
    int early = 0;
    for (int i = 0; i < fired_before; i++) {
        ttimer_t *tt = &ts[fire_log[i]];
        if (tt->fired_at < want[tt->id]) early++;
    }
    CHECK_EQ_INT(early, 0);

    advance_to(&loop, t0 + 1000);
    CHECK_EQ_INT(loop.nheap, 0);
    int wrong_count = 0, wrong_time = 0, stopped_fired = 0;
    for (int i = 0; i < NT; i++) {
        if (!live[i]) {
            /* only armed timers were stopped, and a fired one is never re-armed */
            if (ts[i].fired != 0) stopped_fired++;
            continue;
        }
        if (ts[i].fired != 1) wrong_count++;
        if (ts[i].fired_at != want[i]) wrong_time++;
    }
    CHECK_EQ_INT(wrong_count, 0);
    CHECK_EQ_INT(wrong_time, 0);
    CHECK_EQ_INT(stopped_fired, 0);
    int out_of_order = 0;
    for (int i = 1; i < nfire; i++)
        if (ts[fire_log[i - 1]].fired_at > ts[fire_log[i]].fired_at) out_of_order++;
    CHECK_EQ_INT(out_of_order, 0);
    fy_loop_destroy(&loop);
}

/* ---- deferred callbacks (drained by hand) ---- */

typedef struct tdefer {
    fy_defer_t d;
    fy_loop_t *loop;
    int id;
    int runs;
    struct tdefer *then;   /* fy_defer this one from the callback */
    struct tdefer *cancel; /* fy_defer_cancel this one from the callback */
    int requeue;           /* re-defer itself this many times */
} tdefer_t;

static int dlog[64];
static int ndlog;

static void tdefer_cb(fy_defer_t *d)
{
    tdefer_t *td = d->data;
    td->runs++;
    if (ndlog < 64) dlog[ndlog++] = td->id;
    if (td->then) fy_defer(td->loop, &td->then->d);
    if (td->cancel) fy_defer_cancel(td->loop, &td->cancel->d);
    if (td->requeue > 0) {
        td->requeue--;
        fy_defer(td->loop, d);
    }
}

static void tdefer_init(tdefer_t *td, fy_loop_t *loop, int id)
{
    memset(td, 0, sizeof *td);
    td->loop = loop;
    td->id = id;
    td->d.cb = tdefer_cb;
    td->d.data = td;
}

static bool dlog_is(const int *want, int n)
{
    if (ndlog != n) return false;
    for (int i = 0; i < n; i++)
        if (dlog[i] != want[i]) return false;
    return true;
}

static void test_defer(void)
{
    fy_loop_t loop;
    loop_setup(&loop);
    tdefer_t d[6];
    for (int i = 0; i < 6; i++) tdefer_init(&d[i], &loop, i);

    /* FIFO order; idempotent while queued */
    ndlog = 0;
    fy_defer(&loop, &d[0].d);
    fy_defer(&loop, &d[1].d);
    fy_defer(&loop, &d[0].d);
    fy_defer(&loop, &d[2].d);
    fy_defer(&loop, &d[1].d);
    CHECK(d[0].d.queued);
    run_deferred(&loop);
    CHECK(dlog_is((int[]){0, 1, 2}, 3));
    CHECK(!d[0].d.queued);
    CHECK(loop.defer_head == NULL);
    CHECK(loop.defer_tail == &loop.defer_head);

    /* cancel head, middle, tail, the only element, and a not-queued one */
    ndlog = 0;
    for (int i = 0; i < 5; i++) fy_defer(&loop, &d[i].d);
    fy_defer_cancel(&loop, &d[0].d); /* head */
    fy_defer_cancel(&loop, &d[2].d); /* middle */
    fy_defer_cancel(&loop, &d[4].d); /* tail */
    fy_defer_cancel(&loop, &d[4].d); /* again: no-op */
    fy_defer_cancel(&loop, &d[5].d); /* never queued: no-op */
    CHECK(!d[0].d.queued && !d[2].d.queued && !d[4].d.queued);
    fy_defer(&loop, &d[5].d); /* appended after the cancelled tail: the tail pointer moved */
    fy_defer(&loop, &d[0].d); /* re-queue a cancelled one: goes to the end */
    run_deferred(&loop);
    CHECK(dlog_is((int[]){1, 3, 5, 0}, 4));

    ndlog = 0;
    fy_defer(&loop, &d[3].d);
    fy_defer_cancel(&loop, &d[3].d);
    CHECK(loop.defer_head == NULL);
    fy_defer(&loop, &d[1].d);
    run_deferred(&loop);
    CHECK(dlog_is((int[]){1}, 1));
    CHECK_EQ_INT(d[3].runs, 1); /* only from the round before */

    /* queued from within a defer: runs in the same drain, after those already queued */
    for (int i = 0; i < 6; i++) tdefer_init(&d[i], &loop, i);
    ndlog = 0;
    d[0].then = &d[3];
    d[3].then = &d[4];
    fy_defer(&loop, &d[0].d);
    fy_defer(&loop, &d[1].d);
    run_deferred(&loop);
    CHECK(dlog_is((int[]){0, 1, 3, 4}, 4));
    CHECK(loop.defer_head == NULL);

    /* the last queued one queues another (the tail was reset to the head) */
    for (int i = 0; i < 6; i++) tdefer_init(&d[i], &loop, i);
    ndlog = 0;
    d[0].then = &d[1];
    fy_defer(&loop, &d[0].d);
    run_deferred(&loop);
    CHECK(dlog_is((int[]){0, 1}, 2));

    /* a running defer may re-queue itself; it runs again in the same drain */
    for (int i = 0; i < 6; i++) tdefer_init(&d[i], &loop, i);
    ndlog = 0;
    d[0].requeue = 2;
    fy_defer(&loop, &d[0].d);
    fy_defer(&loop, &d[1].d);
    run_deferred(&loop);
    CHECK(dlog_is((int[]){0, 1, 0, 0}, 4));

    /* cancelled from within an earlier defer: never runs */
    for (int i = 0; i < 6; i++) tdefer_init(&d[i], &loop, i);
    ndlog = 0;
    d[0].cancel = &d[2];
    fy_defer(&loop, &d[0].d);
    fy_defer(&loop, &d[1].d);
    fy_defer(&loop, &d[2].d);
    run_deferred(&loop);
    CHECK(dlog_is((int[]){0, 1}, 2));
    CHECK_EQ_INT(d[2].runs, 0);
    CHECK(!d[2].d.queued);
    /* the tail was the cancelled element: appending still works */
    ndlog = 0;
    fy_defer(&loop, &d[3].d);
    run_deferred(&loop);
    CHECK(dlog_is((int[]){3}, 1));
    fy_loop_destroy(&loop);
}

/* ---- fy_loop_run for real ---- */

typedef struct rtimer {
    fy_timer_t t;
    fy_loop_t *loop;
    uint64_t at; /* wanted deadline */
    int order;   /* position in the firing sequence, 0 = not fired */
    bool early;  /* fired with loop->now_ms < at */
} rtimer_t;

static int rfired, rtotal;

static void rtimer_cb(fy_timer_t *t)
{
    rtimer_t *r = t->data;
    r->order = ++rfired;
    r->early = r->loop->now_ms < r->at;
    if (rfired == rtotal) finish(r->loop);
}

static void test_run_timers(void)
{
    enum { N = 40 };
    static rtimer_t rt[N];
    static rtimer_t *by_order[N + 1];
    fy_loop_t loop;
    loop_setup(&loop);
    fy_loop_update_time(&loop);
    rfired = 0;
    rtotal = N;
    for (int i = 0; i < N; i++) {
        rt[i].loop = &loop;
        rt[i].order = 0;
        fy_timer_init(&rt[i].t, rtimer_cb, &rt[i]);
        fy_timer_start(&loop, &rt[i].t, rnd(20));
        rt[i].at = rt[i].t.at;
    }
    CHECK(run_guarded(&loop, 2000));
    CHECK_EQ_INT(rfired, N);
    int early = 0, dup = 0;
    memset(by_order, 0, sizeof by_order);
    for (int i = 0; i < N; i++) {
        if (rt[i].early) early++;
        if (rt[i].order < 1 || rt[i].order > N || by_order[rt[i].order]) {
            dup++;
            continue;
        }
        by_order[rt[i].order] = &rt[i];
    }
    CHECK_EQ_INT(early, 0);
    CHECK_EQ_INT(dup, 0);
    int out_of_order = 0;
    for (int k = 2; k <= N && !dup; k++)
        if (by_order[k - 1]->at > by_order[k]->at) out_of_order++;
    CHECK_EQ_INT(out_of_order, 0);
    fy_loop_destroy(&loop);
}

/* A timer restarted later must fire after a marker timer set between the two deadlines. */
static void test_run_timer_restart_later(void)
{
    fy_loop_t loop;
    loop_setup(&loop);
    fy_loop_update_time(&loop);
    rtimer_t a = {.loop = &loop}, m = {.loop = &loop};
    fy_timer_init(&a.t, rtimer_cb, &a);
    fy_timer_init(&m.t, rtimer_cb, &m);
    rfired = 0;
    rtotal = 2;
    fy_timer_start(&loop, &a.t, 2);
    fy_timer_start(&loop, &m.t, 10);
    fy_timer_start(&loop, &a.t, 25); /* later: lazy */
    a.at = a.t.at;
    m.at = m.t.at;
    CHECK(run_guarded(&loop, 2000));
    CHECK_EQ_INT(m.order, 1);
    CHECK_EQ_INT(a.order, 2);
    CHECK(!a.early);
    CHECK(!m.early);
    fy_loop_destroy(&loop);
}

/* Deferred callbacks queued before the run, and from a timer, run inside fy_loop_run. */
static tdefer_t run_d[3];
static void defer_then_finish(fy_defer_t *d)
{
    tdefer_cb(d);
    finish(((tdefer_t *)d->data)->loop);
}
static void timer_defers(fy_timer_t *t)
{
    fy_defer(t->data, &run_d[2].d);
}

static void test_run_defer(void)
{
    fy_loop_t loop;
    loop_setup(&loop);
    for (int i = 0; i < 3; i++) tdefer_init(&run_d[i], &loop, i);
    run_d[2].d.cb = defer_then_finish;
    ndlog = 0;
    fy_defer(&loop, &run_d[0].d);
    fy_defer(&loop, &run_d[1].d);
    fy_timer_t t;
    fy_timer_init(&t, timer_defers, &loop);
    fy_timer_start(&loop, &t, 1);
    CHECK(run_guarded(&loop, 2000));
    CHECK(dlog_is((int[]){0, 1, 2}, 3));
    fy_loop_destroy(&loop);
}

/* ---- fy_io_set on a pipe ---- */

typedef struct pipe_watch {
    fy_io_t io;
    fy_loop_t *loop;
    int calls;
    uint32_t events;
    char got[8];
    ssize_t n;
} pipe_watch_t;

static void pipe_cb(fy_io_t *io, uint32_t events)
{
    pipe_watch_t *pw = io->data;
    pw->calls++;
    pw->events |= events;
    pw->n = read(io->fd, pw->got, sizeof pw->got);
    CHECK_EQ_INT(fy_io_set(pw->loop, io, 0), 0);
    finish(pw->loop);
}

static void test_io_pipe(void)
{
    fy_loop_t loop;
    loop_setup(&loop);
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) exit(2);
    pipe_watch_t pw = {.loop = &loop};
    pw.io.fd = fds[0];
    pw.io.cb = pipe_cb;
    pw.io.data = &pw;

    CHECK_EQ_INT(fy_io_set(&loop, &pw.io, EPOLLIN), 0);
    CHECK_EQ_INT(pw.io.events, EPOLLIN);
    CHECK_EQ_INT(fy_io_set(&loop, &pw.io, EPOLLIN), 0);              /* unchanged: no-op */
    CHECK_EQ_INT(fy_io_set(&loop, &pw.io, EPOLLIN | EPOLLRDHUP), 0); /* MOD */
    CHECK_EQ_INT(pw.io.events, EPOLLIN | EPOLLRDHUP);
    CHECK_EQ_INT(write(fds[1], "hi", 2), 2);
    CHECK(run_guarded(&loop, 2000));
    CHECK_EQ_INT(pw.calls, 1);
    CHECK(pw.events & EPOLLIN);
    CHECK_EQ_INT(pw.n, 2);
    CHECK(memcmp(pw.got, "hi", 2) == 0);
    CHECK_EQ_INT(pw.io.events, 0); /* removed in the callback */

    /* removed: more data is not delivered */
    CHECK_EQ_INT(write(fds[1], "x", 1), 1);
    loop.stop = false;
    atomic_store(&stop_on_wake, false);
    pw.calls = 0;
    /* a short timer ends this run */
    rtimer_t r = {.loop = &loop};
    fy_timer_init(&r.t, rtimer_cb, &r);
    rfired = 0;
    rtotal = 1;
    fy_timer_start(&loop, &r.t, 5);
    CHECK(run_guarded(&loop, 2000));
    CHECK_EQ_INT(pw.calls, 0);
    CHECK_EQ_INT(rfired, 1);

    /* errors: -errno and the registration is unchanged */
    fy_io_t bad = {.fd = -1, .cb = pipe_cb};
    CHECK_EQ_INT(fy_io_set(&loop, &bad, EPOLLIN), -EBADF);
    CHECK_EQ_INT(bad.events, 0);
    close(fds[0]);
    close(fds[1]);
    fy_loop_destroy(&loop);
}

/* ---- fy_loop_wake from another thread ---- */

static void *waker_main(void *arg)
{
    sleep_ms(5);
    atomic_store(&stop_on_wake, true);
    fy_loop_wake(arg);
    return NULL;
}

static void test_wake_thread(void)
{
    fy_loop_t loop;
    loop_setup(&loop);
    pthread_t th;
    if (pthread_create(&th, NULL, waker_main, &loop) != 0) exit(2);
    CHECK(run_guarded(&loop, 2000)); /* the loop blocks in epoll_wait(-1) until the wake */
    pthread_join(th, NULL);
    CHECK(atomic_load(&wakes) >= 1);

    /* several wakes before the loop runs collapse into at least one on_wake */
    fy_loop_t l2;
    loop_setup(&l2);
    fy_loop_wake(&l2);
    fy_loop_wake(&l2);
    fy_loop_wake(&l2);
    atomic_store(&stop_on_wake, true);
    CHECK(run_guarded(&l2, 2000));
    CHECK_EQ_INT(atomic_load(&wakes), 1); /* eventfd counter read at once */
    fy_loop_destroy(&l2);
    fy_loop_destroy(&loop);
}

/* ---- fy_loop_stop ---- */

static void stop_cb(fy_timer_t *t)
{
    fy_loop_stop(t->data);
}

static void stop_defer_cb(fy_defer_t *d)
{
    fy_loop_stop(d->data);
}

static int late_fired;
static void late_cb(fy_timer_t *t)
{
    late_fired++;
    finish(t->data);
}

static void test_stop(void)
{
    /* stopped before running: returns at once, runs nothing */
    fy_loop_t loop;
    loop_setup(&loop);
    tdefer_t d;
    tdefer_init(&d, &loop, 7);
    ndlog = 0;
    fy_defer(&loop, &d.d);
    fy_loop_stop(&loop);
    CHECK(run_guarded(&loop, 2000));
    CHECK_EQ_INT(d.runs, 0);
    fy_defer_cancel(&loop, &d.d);
    fy_loop_destroy(&loop);

    /* from an I/O callback (the wake eventfd): returns */
    loop_setup(&loop);
    fy_loop_wake(&loop);
    atomic_store(&stop_on_wake, true);
    CHECK(run_guarded(&loop, 2000));
    fy_loop_destroy(&loop);

    /* From a timer callback with no other timer or I/O pending: fy_loop_run must return.
     * run_timers computes the epoll timeout (-1: none left) after the callback has set `stop`,
     * and the loop checks `stop` only after epoll_wait returns, so without the watchdog's wake
     * this blocks forever (server.c's on_drain_timeout stops the loop this way). */
    loop_setup(&loop);
    fy_timer_t t;
    fy_timer_init(&t, stop_cb, &loop);
    fy_timer_start(&loop, &t, 1);
    CHECK(run_guarded(&loop, 200));
    fy_loop_destroy(&loop);

    /* Same from a deferred callback drained before epoll_wait. */
    loop_setup(&loop);
    fy_defer_t sd = {.cb = stop_defer_cb, .data = &loop};
    fy_defer(&loop, &sd);
    CHECK(run_guarded(&loop, 200));
    fy_loop_destroy(&loop);
}

/* A timer armed from a deferred callback drained before epoll_wait must bound that
 * epoll_wait. The timeout was computed by run_timers before the drain (-1 here: no timer
 * then), so the 2 ms timer only fires when something else wakes the loop. */
static fy_timer_t late_timer;
static void arm_late_cb(fy_defer_t *d)
{
    fy_timer_start(d->data, &late_timer, 2);
}

static void test_timer_from_defer(void)
{
    fy_loop_t loop;
    loop_setup(&loop);
    late_fired = 0;
    fy_timer_init(&late_timer, late_cb, &loop);
    fy_defer_t d = {.cb = arm_late_cb, .data = &loop};
    fy_defer(&loop, &d);
    bool returned = run_guarded(&loop, 200);
    CHECK(returned && late_fired == 1);
    fy_timer_stop(&loop, &late_timer);
    fy_loop_destroy(&loop);
}

FY_TEST_MAIN(test_timer_basics(); test_timer_restart(); test_timer_periodic(); test_timer_random();
             test_defer(); test_run_timers(); test_run_timer_restart_later(); test_run_defer();
             test_io_pipe(); test_wake_thread(); test_stop(); test_timer_from_defer())
