/* The circuit breaker and retry budget state machines (upstream_breaker.h). */
#include "upstream/upstream_breaker.h"

void fy_window_add(fy_window_t *w, uint64_t window_ms, uint64_t now, uint32_t a, uint32_t b)
{
    uint64_t step = window_ms / FY_BRK_BUCKETS;
    if (step == 0) step = 1;
    if (now >= w->start_ms + step) {
        uint64_t n = (now - w->start_ms) / step; /* buckets to move forward */
        if (n >= FY_BRK_BUCKETS) {
            for (int i = 0; i < FY_BRK_BUCKETS; i++) w->a[i] = w->b[i] = 0;
            w->start_ms = now - (now % step);
        } else {
            for (uint64_t i = 0; i < n; i++) {
                w->cur = (w->cur + 1) % FY_BRK_BUCKETS;
                w->a[w->cur] = w->b[w->cur] = 0;
            }
            w->start_ms += n * step;
        }
    }
    w->a[w->cur] += a;
    w->b[w->cur] += b;
}

void fy_window_sum(const fy_window_t *w, uint64_t *a, uint64_t *b)
{
    uint64_t sa = 0, sb = 0;
    for (int i = 0; i < FY_BRK_BUCKETS; i++) {
        sa += w->a[i];
        sb += w->b[i];
    }
    *a = sa;
    *b = sb;
}

static int trip(fy_breaker_t *b, const fy_breaker_conf_t *c, int why, uint64_t now)
{
    /* backoff: open-for, doubled for each reopening since the last close */
    uint64_t ms = c->open_ms;
    for (uint32_t i = 0; i < b->reopens && ms < c->max_open_ms; i++) ms *= 2;
    if (c->max_open_ms && ms > c->max_open_ms) ms = c->max_open_ms;
    b->reopens++;
    b->state = FY_BRK_OPEN;
    b->why = (uint8_t)why;
    b->open_for_ms = ms;
    b->until_ms = now + ms;
    b->consecutive = 0;
    b->trials_out = b->trials_ok = 0;
    b->win = (fy_window_t){0};
    return FY_BRK_TO_OPEN;
}

int fy_breaker_admit(fy_breaker_t *b, const fy_breaker_conf_t *c, uint64_t now)
{
    if (b->state == FY_BRK_CLOSED) return FY_BRK_SAME;
    int r = FY_BRK_SAME;
    if (b->state == FY_BRK_OPEN) {
        if (now < b->until_ms) return FY_BRK_SAME; /* not due: the caller asked usable first */
        b->state = FY_BRK_HALF_OPEN;
        b->trials_out = b->trials_ok = 0;
        b->until_ms = now + c->open_ms;
        r = FY_BRK_TO_HALF_OPEN;
    } else if (now >= b->until_ms && b->trials_out >= (uint32_t)c->half_open_requests) {
        b->trials_out = 0; /* trials that never reported: forgotten */
        b->until_ms = now + c->open_ms;
    }
    b->trials_out++;
    return r;
}

int fy_breaker_record(fy_breaker_t *b, const fy_breaker_conf_t *c, bool ok, uint64_t now)
{
    switch (b->state) {
    case FY_BRK_OPEN:
        return FY_BRK_SAME;
    case FY_BRK_HALF_OPEN:
        if (!ok) return trip(b, c, FY_BRK_WHY_TRIAL, now);
        if (b->trials_out) b->trials_out--;
        if (++b->trials_ok < (uint32_t)c->half_open_requests) return FY_BRK_SAME;
        b->state = FY_BRK_CLOSED;
        b->reopens = 0;
        b->consecutive = 0;
        b->trials_out = b->trials_ok = 0;
        b->win = (fy_window_t){0};
        return FY_BRK_TO_CLOSED;
    default:
        break;
    }
    if (ok) {
        fy_breaker_ok_fast(b, c, now);
        return FY_BRK_SAME;
    }
    if (c->consecutive && ++b->consecutive >= (uint32_t)c->consecutive)
        return trip(b, c, FY_BRK_WHY_CONSECUTIVE, now);
    if (c->error_rate) {
        fy_window_add(&b->win, c->window_ms, now, 1, 1);
        uint64_t n, f;
        fy_window_sum(&b->win, &n, &f);
        if (n >= (uint64_t)c->min_requests && f * 100 >= n * (uint64_t)c->error_rate)
            return trip(b, c, FY_BRK_WHY_RATE, now);
    }
    return FY_BRK_SAME;
}

bool fy_retry_budget_take(fy_retry_budget_t *rb, const fy_retry_budget_conf_t *c, uint64_t now)
{
    fy_window_add(&rb->win, c->window_ms, now, 0, 0);
    uint64_t req, ret;
    fy_window_sum(&rb->win, &req, &ret);
    /* ratio in per mille: no floating point on the request path */
    uint64_t allowed = req * (uint64_t)c->ratio_permille / 1000u +
                       (uint64_t)c->min_per_second * (c->window_ms / 1000u);
    if (ret + 1 > allowed) return false;
    fy_window_add(&rb->win, c->window_ms, now, 0, 1);
    return true;
}
