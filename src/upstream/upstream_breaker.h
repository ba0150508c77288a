/* The per-server circuit breaker and the per-upstream retry budget (issue 15, resilience):
 * pure state machines over the loop clock, no allocation, no I/O; upstream.c owns one breaker
 * per worker and server and one budget per worker, and turns the transitions these return
 * into log lines and counters.
 *
 * Breaker: CLOSED passes everything and counts outcomes: `consecutive-failures` failures in a
 * row, or an error rate of at least `error-rate` % over the sliding `window` once it holds
 * `min-requests` outcomes, OPENs it. OPEN refuses until `open-for` has passed (doubled on each
 * reopening without a close in between, up to `max-open-for`), then lets through up to
 * `half-open-requests` trial requests (HALF_OPEN): that many successes CLOSE it, one failure
 * OPENs it again with the longer interval. Trials that never report (a client went away) are
 * forgotten after another `open-for`, so a half-open breaker cannot wedge.
 *
 * Retry budget: a retry may start only while retries <= ratio x requests + min-per-second x
 * window seconds, both counted over the sliding window (Finagle/Linkerd's budget, by counts).
 *
 * Thread: each struct belongs to one worker; nothing here is shared. */
#ifndef FY_UPSTREAM_UPSTREAM_BREAKER_H
#define FY_UPSTREAM_UPSTREAM_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

#include "upstream/upstream_conf.h"

enum { FY_BRK_CLOSED = 0, FY_BRK_OPEN = 1, FY_BRK_HALF_OPEN = 2 };

/* what a call changed (upstream.c logs and counts it) */
enum { FY_BRK_SAME = 0, FY_BRK_TO_OPEN, FY_BRK_TO_HALF_OPEN, FY_BRK_TO_CLOSED };
/* why it opened (after FY_BRK_TO_OPEN) */
enum { FY_BRK_WHY_CONSECUTIVE = 1, FY_BRK_WHY_RATE, FY_BRK_WHY_TRIAL };

#define FY_BRK_BUCKETS 10 /* the sliding window, in tenths */

typedef struct fy_window {
    uint64_t start_ms; /* start of the current bucket */
    uint32_t cur;      /* its index */
    uint32_t a[FY_BRK_BUCKETS], b[FY_BRK_BUCKETS];
} fy_window_t;

/* Move the window to `now` (buckets older than it emptied), then add to the current one. */
void fy_window_add(fy_window_t *w, uint64_t window_ms, uint64_t now, uint32_t a, uint32_t b);
/* The same, inline while `now` is still in the current bucket (the request path). */
static inline void fy_window_inc(fy_window_t *w, uint64_t window_ms, uint64_t now, uint32_t a,
                                 uint32_t b)
{
    if (now - w->start_ms < window_ms / FY_BRK_BUCKETS && now >= w->start_ms) {
        w->a[w->cur] += a;
        w->b[w->cur] += b;
        return;
    }
    fy_window_add(w, window_ms, now, a, b);
}
/* Totals over the window as of the last add. */
void fy_window_sum(const fy_window_t *w, uint64_t *a, uint64_t *b);

typedef struct fy_breaker {
    uint8_t state;
    uint8_t why;          /* after an opening */
    uint32_t consecutive; /* failures in a row (closed) */
    uint32_t trials_out;  /* half-open: admitted, not reported */
    uint32_t trials_ok;   /* half-open: successes */
    uint32_t reopens;     /* openings since the last close: the backoff's exponent */
    uint64_t until_ms;    /* open: half-open from then; half-open: trials forgotten then */
    uint64_t open_for_ms; /* the interval of the last opening */
    fy_window_t win;      /* a = requests, b = failures */
} fy_breaker_t;

/* May a request go to this server now (open and not yet due: no; half-open: while trial
 * slots are free)? Does not change anything. */
static inline bool fy_breaker_usable(const fy_breaker_t *b, const fy_breaker_conf_t *c,
                                     uint64_t now)
{
    if (b->state == FY_BRK_CLOSED) return true;
    if (b->state == FY_BRK_OPEN) return now >= b->until_ms;
    return b->trials_out < (uint32_t)c->half_open_requests || now >= b->until_ms;
}
/* A request goes to the server (after fy_breaker_usable said yes): an open breaker that is due
 * turns half-open, and a half-open one counts a trial. Returns FY_BRK_SAME or
 * FY_BRK_TO_HALF_OPEN. */
int fy_breaker_admit(fy_breaker_t *b, const fy_breaker_conf_t *c, uint64_t now);
/* The outcome of a request to the server. Returns FY_BRK_SAME, FY_BRK_TO_OPEN (b->why says
 * why, b->open_for_ms for how long) or FY_BRK_TO_CLOSED. Outcomes while open are ignored (requests
 * that started before it opened). */
int fy_breaker_record(fy_breaker_t *b, const fy_breaker_conf_t *c, bool ok, uint64_t now);
/* A success of a closed breaker: its whole effect, inline (the request path). False when the
 * outcome needs fy_breaker_record. */
static inline bool fy_breaker_ok_fast(fy_breaker_t *b, const fy_breaker_conf_t *c, uint64_t now)
{
    if (b->state != FY_BRK_CLOSED) return false;
    b->consecutive = 0;
    if (c->error_rate) fy_window_inc(&b->win, c->window_ms, now, 1, 0);
    return true;
}

typedef struct fy_retry_budget {
    fy_window_t win; /* a = requests, b = retries */
} fy_retry_budget_t;

/* A first attempt. */
static inline void fy_retry_budget_request(fy_retry_budget_t *rb, const fy_retry_budget_conf_t *c,
                                           uint64_t now)
{
    fy_window_inc(&rb->win, c->window_ms, now, 1, 0);
}
/* May a retry start now? Counts it when yes. */
bool fy_retry_budget_take(fy_retry_budget_t *rb, const fy_retry_budget_conf_t *c, uint64_t now);

#endif
