/* Byte relay between two tunnel transports.
 * Threads: one loop's thread. */
#include "core/tunnel_relay.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/errors.h"

/* Move what can move from `from` to `to`. 1 progress, 0 none, <0 error. */
static int pump(fy_tio_relay_t *r, fy_tio_t *from, fy_tio_t *to, fy_tio_relay_dir_t *d)
{
    int progress = 0;
    if (d->len == d->off && !d->eof) {
        ssize_t n = fy_tio_read(from, d->buf, r->cap);
        if (n > 0) {
            d->len = (size_t)n;
            d->off = 0;
            progress = 1;
        } else if (n == FY_EEOF) {
            d->eof = true;
            progress = 1;
        } else if (n < 0) {
            return (int)n;
        }
    }
    while (d->len > d->off) {
        ssize_t n = fy_tio_write(to, d->buf + d->off, d->len - d->off);
        if (n < 0) return (int)n;
        if (n == 0) break;
        d->off += (size_t)n;
        progress = 1;
    }
    if (d->len == d->off) d->len = d->off = 0;
    if (d->eof && d->len == 0 && !d->shut) {
        fy_tio_shutdown(to);
        d->shut = true;
    }
    return progress;
}

static void arm(fy_tio_relay_t *r)
{
    unsigned wa = 0, wb = 0;
    if (!r->ab.eof && r->ab.len == 0) wa |= FY_TIO_READ;
    if (r->ba.len > r->ba.off) wa |= FY_TIO_WRITE;
    if (!r->ba.eof && r->ba.len == 0) wb |= FY_TIO_READ;
    if (r->ab.len > r->ab.off) wb |= FY_TIO_WRITE;
    fy_tio_want(r->a, wa);
    fy_tio_want(r->b, wb);
}

static void finish(fy_tio_relay_t *r, int err)
{
    r->finished = true;
    fy_tio_want(r->a, 0);
    fy_tio_want(r->b, 0);
    r->event(r, true, err);
}

static void step(fy_tio_relay_t *r)
{
    if (r->finished) return;
    int moved = 0;
    for (int i = 0; i < 16; i++) {
        int x = pump(r, r->a, r->b, &r->ab);
        int y = x < 0 ? 0 : pump(r, r->b, r->a, &r->ba);
        if (x < 0 || y < 0) {
            finish(r, x < 0 ? x : y);
            return;
        }
        if (r->ab.shut && r->ba.shut) {
            finish(r, 0);
            return;
        }
        if (!x && !y) break;
        moved = 1;
    }
    arm(r);
    if (moved) r->event(r, false, 0);
}

static void on_ready(fy_tio_t *t, unsigned what)
{
    (void)what;
    step(t->data);
}

void fy_tio_relay_start(fy_tio_relay_t *r, fy_tio_t *a, fy_tio_t *b, size_t cap, const void *pre,
                        size_t pre_len)
{
    r->a = a;
    r->b = b;
    r->cap = cap;
    r->finished = false;
    memset(&r->ab, 0, sizeof r->ab);
    memset(&r->ba, 0, sizeof r->ba);
    r->ab.buf = fy_xmalloc(cap);
    r->ba.buf = fy_xmalloc(cap);
    if (pre_len) {
        memcpy(r->ab.buf, pre, pre_len < cap ? pre_len : cap);
        r->ab.len = pre_len < cap ? pre_len : cap;
    }
    a->on_ready = b->on_ready = on_ready;
    a->data = b->data = r;
    step(r);
}

void fy_tio_relay_stop(fy_tio_relay_t *r)
{
    if (!r->finished && r->a) {
        fy_tio_want(r->a, 0);
        fy_tio_want(r->b, 0);
    }
    r->finished = true;
    free(r->ab.buf);
    free(r->ba.buf);
    r->ab.buf = r->ba.buf = NULL;
}
