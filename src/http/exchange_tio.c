/* A CONNECT exchange as a tunnel transport.
 * Threads: the exchange's worker (see exchange_tio.h). */
#include "http/exchange_tio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/errors.h"

#define OUT_CAP 16384

typedef struct ex_tio {
    fy_tio_t t;        /* first */
    fy_exchange_t *ex; /* NULL once its arena was reset */
    fy_loop_t *loop;
    const char *in; /* the request slice being read (codec's buffer) */
    size_t in_len, in_off;
    bool in_end;  /* the client ended its side */
    bool reading; /* a read_body is outstanding */
    bool sending; /* a response slice is with the codec */
    bool shut;    /* FINAL asked for (sent once nothing is in flight) */
    bool ended;   /* FINAL or ERROR sent: no more sends */
    bool dead;    /* the exchange stopped or went away */
    bool closed;  /* the user closed it */
    int depth;    /* inside a call into the exchange: no callbacks from there */
    unsigned wanted;
    fy_defer_t kick; /* level-triggered readiness, delivered after the stack unwinds */
    char out[OUT_CAP];
} ex_tio_t;

static void on_body(fy_exchange_t *ex, const char *p, size_t n, bool end);

static unsigned ready(ex_tio_t *h)
{
    unsigned r = 0;
    if (h->dead || h->in_off < h->in_len || h->in_end) r |= FY_TIO_READ;
    if (h->dead || !h->sending) r |= FY_TIO_WRITE;
    return r & h->wanted;
}

static void notify(ex_tio_t *h)
{
    if (h->closed || h->depth) return;
    unsigned r = ready(h);
    if (r && h->t.on_ready) h->t.on_ready(&h->t, r);
}

static void kick_cb(fy_defer_t *d)
{
    ex_tio_t *h = d->data;
    if (h->closed && !h->ex) {
        free(h);
        return;
    }
    notify(h);
}

static void kick(ex_tio_t *h)
{
    if (!h->kick.queued) fy_defer(h->loop, &h->kick);
}

static void ask_more(ex_tio_t *h)
{
    if (h->reading || h->in_end || h->dead || !h->ex) return;
    h->in = NULL;
    h->in_len = h->in_off = 0;
    h->reading = true;
    h->depth++;
    fy_exchange_read_body(h->ex, on_body);
    h->depth--;
}

static void on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    ex_tio_t *h = ex->handler_data;
    h->reading = false;
    h->in = p;
    h->in_len = n;
    h->in_off = 0;
    h->in_end = end;
    if (!n && !end) {
        ask_more(h);
        return;
    }
    notify(h);
}

static ssize_t take(fy_tio_t *t, void *buf, size_t len, bool consume)
{
    ex_tio_t *h = (ex_tio_t *)t;
    if (h->dead) return -ECONNRESET;
    if (h->in_off == h->in_len) {
        if (h->in_end) return FY_EEOF;
        ask_more(h); /* may deliver at once */
        if (h->dead) return -ECONNRESET;
        if (h->in_off == h->in_len) return h->in_end ? FY_EEOF : 0;
    }
    size_t n = h->in_len - h->in_off;
    if (n > len) n = len;
    memcpy(buf, h->in + h->in_off, n);
    if (consume) {
        h->in_off += n;
        if (h->in_off == h->in_len && !h->in_end) ask_more(h);
    }
    return (ssize_t)n;
}

static ssize_t ex_read(fy_tio_t *t, void *buf, size_t len)
{
    return take(t, buf, len, true);
}
static ssize_t ex_peek(fy_tio_t *t, void *buf, size_t len)
{
    return take(t, buf, len, false);
}

static void send_end(ex_tio_t *h, int state)
{
    if (h->ended || !h->ex || h->dead) return;
    h->ended = true;
    h->depth++;
    fy_exchange_send(h->ex, NULL, 0, state);
    h->depth--;
}

static ssize_t ex_write(fy_tio_t *t, const void *buf, size_t len)
{
    ex_tio_t *h = (ex_tio_t *)t;
    if (h->dead || !h->ex) return -ECONNRESET;
    if (h->shut || h->ended) return -EPIPE;
    if (h->sending) return 0;
    size_t n = len < OUT_CAP ? len : OUT_CAP;
    memcpy(h->out, buf, n);
    h->sending = true;
    struct iovec iov = {h->out, n};
    h->depth++;
    fy_exchange_send(h->ex, &iov, 1, FY_SEND_MORE);
    h->depth--;
    return (ssize_t)n;
}

static int ex_want(fy_tio_t *t, unsigned what)
{
    ex_tio_t *h = (ex_tio_t *)t;
    h->wanted = what;
    if (ready(h)) kick(h);
    return 0;
}

static int ex_shutdown(fy_tio_t *t)
{
    ex_tio_t *h = (ex_tio_t *)t;
    h->shut = true;
    if (!h->sending) send_end(h, FY_SEND_FINAL);
    return 0;
}

static void ex_close(fy_tio_t *t)
{
    ex_tio_t *h = (ex_tio_t *)t;
    if (h->closed) return;
    h->closed = true;
    h->wanted = 0;
    if (!h->sending) send_end(h, h->shut ? FY_SEND_FINAL : FY_SEND_ERROR); /* else at proceed */
    if (!h->ex) kick(h); /* free after the stack unwinds */
}

static void on_proceed(fy_exchange_t *ex)
{
    ex_tio_t *h = ex->handler_data;
    h->sending = false;
    if (h->closed || h->shut) {
        send_end(h, h->shut ? FY_SEND_FINAL : FY_SEND_ERROR);
        return;
    }
    notify(h);
}

static void on_stop(fy_exchange_t *ex)
{
    ex_tio_t *h = ex->handler_data;
    h->dead = true;
    h->ended = true;
    kick(h);
}

static const fy_producer_ops_t producer = {on_proceed, on_stop};

static void on_reset(void *arg)
{
    ex_tio_t *h = arg;
    h->ex = NULL;
    h->dead = true;
    h->ended = true;
    kick(h); /* the user hears of it, or (closed) it is freed */
}

static const fy_tio_ops_t ops = {"exchange", ex_read,     ex_peek, ex_write,
                                 ex_want,    ex_shutdown, ex_close};

fy_tio_t *fy_exchange_tio_start(fy_exchange_t *ex)
{
    ex_tio_t *h = fy_xcalloc(1, sizeof *h);
    h->t.ops = &ops;
    h->t.fd = -1;
    h->ex = ex;
    h->loop = ex->ctx->loop;
    h->kick.cb = kick_cb;
    h->kick.data = h;
    ex->handler_data = h;
    fy_arena_on_reset(ex->arena, on_reset, h);
    ex->res.status = 200;
    ex->res.content_length = -1;
    fy_exchange_start_response(ex, &producer);
    h->sending = true; /* the 200 opens the tunnel; writable at proceed */
    h->depth++;
    fy_exchange_send(ex, NULL, 0, FY_SEND_MORE);
    h->depth--;
    return &h->t;
}
