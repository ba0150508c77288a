#include "core/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"

static void wake_cb(fy_io_t *io, uint32_t events)
{
    fy_loop_t *loop = io->data;
    uint64_t v;
    ssize_t r = read(loop->wakefd, &v, sizeof v);
    (void)r;
    if (loop->on_wake) loop->on_wake(loop);
}

int fy_loop_init(fy_loop_t *loop)
{
    memset(loop, 0, sizeof *loop);
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0) return -errno;
    loop->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (loop->wakefd < 0) {
        int e = errno;
        close(loop->epfd);
        return -e;
    }
    loop->defer_tail = &loop->defer_head;
    loop->wake_io.fd = loop->wakefd;
    loop->wake_io.cb = wake_cb;
    loop->wake_io.data = loop;
    fy_loop_update_time(loop);
    return fy_io_set(loop, &loop->wake_io, EPOLLIN);
}

void fy_loop_destroy(fy_loop_t *loop)
{
    close(loop->wakefd);
    close(loop->epfd);
    free(loop->heap);
    loop->heap = NULL;
}

void fy_loop_update_time(fy_loop_t *loop)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    loop->now_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    loop->now_sec = ts.tv_sec;
}

void fy_loop_stop(fy_loop_t *loop)
{
    loop->stop = true;
}

void fy_loop_wake(fy_loop_t *loop)
{
    uint64_t one = 1;
    ssize_t r = write(loop->wakefd, &one, sizeof one);
    (void)r;
}

int fy_io_set(fy_loop_t *loop, fy_io_t *io, uint32_t events)
{
    if (io->events == events) return 0;
    struct epoll_event ev = {.events = events, .data.ptr = io};
    int op = events == 0 ? EPOLL_CTL_DEL : io->events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    if (epoll_ctl(loop->epfd, op, io->fd, &ev) < 0) return -errno;
    io->events = events;
    return 0;
}

/* ---- timers: binary min-heap on `key` ---- */

static void heap_set(fy_loop_t *loop, size_t i, fy_timer_t *t)
{
    loop->heap[i] = t;
    t->idx = i + 1;
}

static void sift_up(fy_loop_t *loop, size_t i)
{
    fy_timer_t *t = loop->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (loop->heap[p]->key <= t->key) break;
        heap_set(loop, i, loop->heap[p]);
        i = p;
    }
    heap_set(loop, i, t);
}

static void sift_down(fy_loop_t *loop, size_t i)
{
    fy_timer_t *t = loop->heap[i];
    size_t n = loop->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && loop->heap[c + 1]->key < loop->heap[c]->key) c++;
        if (loop->heap[c]->key >= t->key) break;
        heap_set(loop, i, loop->heap[c]);
        i = c;
    }
    heap_set(loop, i, t);
}

static void heap_remove(fy_loop_t *loop, fy_timer_t *t)
{
    size_t i = t->idx - 1;
    t->idx = 0;
    fy_timer_t *last = loop->heap[--loop->nheap];
    if (i == loop->nheap) return;
    heap_set(loop, i, last);
    if (i > 0 && loop->heap[(i - 1) / 2]->key > last->key)
        sift_up(loop, i);
    else
        sift_down(loop, i);
}

static void heap_push(fy_loop_t *loop, fy_timer_t *t)
{
    if (loop->nheap == loop->capheap) {
        loop->capheap = loop->capheap ? loop->capheap * 2 : 64;
        loop->heap = fy_xrealloc(loop->heap, loop->capheap * sizeof *loop->heap);
    }
    heap_set(loop, loop->nheap++, t);
    sift_up(loop, loop->nheap - 1);
}

void fy_timer_init(fy_timer_t *t, void (*cb)(fy_timer_t *t), void *data)
{
    memset(t, 0, sizeof *t);
    t->cb = cb;
    t->data = data;
}

void fy_timer_start(fy_loop_t *loop, fy_timer_t *t, uint64_t ms)
{
    uint64_t at = loop->now_ms + ms;
    t->at = at;
    if (t->idx) {
        if (at >= t->key) return; /* lazy: re-queued when the old key expires */
        heap_remove(loop, t);
    }
    t->key = at;
    heap_push(loop, t);
}

void fy_timer_stop(fy_loop_t *loop, fy_timer_t *t)
{
    if (t->idx) heap_remove(loop, t);
}

/* epoll_wait timeout until the next timer: -1 none, 0 due now. */
static int next_timeout(const fy_loop_t *loop)
{
    if (!loop->nheap) return -1;
    uint64_t key = loop->heap[0]->key;
    if (key <= loop->now_ms) return 0;
    uint64_t d = key - loop->now_ms;
    return d > 60000 ? 60000 : (int)d;
}

/* Run the due timers; returns the timeout until the next one (as next_timeout). */
static int run_timers(fy_loop_t *loop)
{
    while (loop->nheap) {
        fy_timer_t *t = loop->heap[0];
        if (t->key > loop->now_ms) break;
        heap_remove(loop, t);
        if (t->at > loop->now_ms) {
            t->key = t->at;
            heap_push(loop, t);
            continue;
        }
        t->cb(t);
    }
    return next_timeout(loop);
}

/* ---- deferred callbacks ---- */

void fy_defer(fy_loop_t *loop, fy_defer_t *d)
{
    if (d->queued) return;
    d->queued = true;
    d->next = NULL;
    *loop->defer_tail = d;
    loop->defer_tail = &d->next;
}

void fy_defer_cancel(fy_loop_t *loop, fy_defer_t *d)
{
    if (!d->queued) return;
    fy_defer_t **pp = &loop->defer_head;
    while (*pp && *pp != d) pp = &(*pp)->next;
    if (*pp) {
        *pp = d->next;
        if (loop->defer_tail == &d->next) loop->defer_tail = pp;
    }
    d->queued = false;
}

static void run_deferred(fy_loop_t *loop)
{
    while (loop->defer_head) {
        fy_defer_t *d = loop->defer_head;
        loop->defer_head = d->next;
        if (!loop->defer_head) loop->defer_tail = &loop->defer_head;
        d->queued = false;
        d->cb(d);
    }
}

void fy_loop_run(fy_loop_t *loop)
{
    struct epoll_event evs[256];
    while (!loop->stop) {
        run_timers(loop);
        run_deferred(loop);
        /* checked after the callbacks: a timer or deferred callback may stop the loop, and
           the timeout is computed after them so that a timer they start is not missed */
        if (loop->stop) break;
        int timeout = loop->defer_head ? 0 : next_timeout(loop);
        int n = epoll_wait(loop->epfd, evs, 256, timeout);
        if (n < 0 && errno != EINTR) {
            fy_alert("epoll_wait: %s", strerror(errno));
            break;
        }
        fy_loop_update_time(loop);
        for (int i = 0; i < n; i++) {
            fy_io_t *io = evs[i].data.ptr;
            io->cb(io, evs[i].events);
        }
        run_deferred(loop);
        if (loop->stop) break;
    }
}
