/* Per-worker event loop: level-triggered epoll, a lazy timer heap, deferred callbacks and a
 * clock cached once per turn. One loop per thread; nothing here is thread-safe except
 * fy_loop_wake. */
#ifndef FY_CORE_LOOP_H
#define FY_CORE_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <time.h>

#include "core/fwd.h"

/* Readiness watcher on one fd. `cb` gets the epoll event bits. Embedded in its owner. */
struct fy_io {
    int fd;
    uint32_t events; /* currently registered EPOLL* bits; 0 = not registered */
    void (*cb)(fy_io_t *io, uint32_t events);
    void *data;
};

/* One-shot timer. Restarting a running timer with a later deadline is O(1): the heap keeps the
 * old key and re-queues on expiry (keep-alive timers move on every request). */
struct fy_timer {
    uint64_t at;  /* wanted deadline (ms, loop clock) */
    uint64_t key; /* deadline the heap is ordered by (<= at) */
    size_t idx;   /* heap slot + 1; 0 = not armed */
    void (*cb)(fy_timer_t *t);
    void *data;
};

typedef struct fy_defer {
    struct fy_defer *next;
    void (*cb)(struct fy_defer *d);
    void *data;
    bool queued;
} fy_defer_t;

struct fy_loop {
    int epfd;
    int wakefd; /* eventfd: fy_loop_wake */
    fy_io_t wake_io;
    void (*on_wake)(fy_loop_t *loop);
    void *data;
    uint64_t now_ms; /* CLOCK_MONOTONIC, cached per turn */
    time_t now_sec;  /* wall clock seconds, cached per turn */
    bool stop;
    fy_timer_t **heap;
    size_t nheap, capheap;
    fy_defer_t *defer_head, **defer_tail;
};

/* Create the loop in `loop` (caller-owned memory). Returns 0 or -errno. */
int fy_loop_init(fy_loop_t *loop);
/* Close the epoll and eventfd. Watchers must have been stopped by their owners. */
void fy_loop_destroy(fy_loop_t *loop);
/* Run until fy_loop_stop. */
void fy_loop_run(fy_loop_t *loop);
void fy_loop_stop(fy_loop_t *loop);
/* Thread-safe: wake the loop; `on_wake` runs on the loop's thread. */
void fy_loop_wake(fy_loop_t *loop);
/* Refresh the cached clock (called at every turn; exposed for tests). */
void fy_loop_update_time(fy_loop_t *loop);

/* Register/modify/remove interest. events == 0 removes. Returns 0 or -errno. */
int fy_io_set(fy_loop_t *loop, fy_io_t *io, uint32_t events);

void fy_timer_init(fy_timer_t *t, void (*cb)(fy_timer_t *t), void *data);
/* (Re)arm to fire `ms` milliseconds from the loop's cached now. */
void fy_timer_start(fy_loop_t *loop, fy_timer_t *t, uint64_t ms);
void fy_timer_stop(fy_loop_t *loop, fy_timer_t *t);
static inline bool fy_timer_is_active(const fy_timer_t *t)
{
    return t->idx != 0;
}

/* Run d->cb after the current callback stack unwinds (same turn). Idempotent while queued. */
void fy_defer(fy_loop_t *loop, fy_defer_t *d);
void fy_defer_cancel(fy_loop_t *loop, fy_defer_t *d);

#endif
