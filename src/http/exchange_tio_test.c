/* Tests for exchange_tio.c: a CONNECT exchange as a tunnel transport over a fake codec sink:
 * the 200 goes out at start, a write is taken only after the codec's proceed (backpressure),
 * reads return the request slices and ask for the next one only once the last was read, the
 * client's end is FY_EEOF, shutdown sends FINAL, a stopped exchange fails reads and writes
 * and says so by callback, and the transport is freed after both close and the arena reset
 * (ASan's leak check). No sockets. */
#include "http/exchange_tio.h"

#include "core/arena.h"
#include "core/errors.h"
#include "core/test.h"

#include <errno.h>

static int sends, finals, errors, read_bodies, readies;
static unsigned last_ready;
static char sent[64];
static size_t sent_len;

static void c_send(fy_exchange_t *ex, const struct iovec *b, size_t n, int state)
{
    (void)ex;
    sends++;
    if (state == FY_SEND_FINAL) finals++;
    if (state == FY_SEND_ERROR) errors++;
    for (size_t i = 0; i < n; i++) {
        memcpy(sent + sent_len, b[i].iov_base, b[i].iov_len);
        sent_len += b[i].iov_len;
    }
}
static void c_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state)
{
    (void)ex, (void)fd, (void)off, (void)len, (void)state;
}
static void c_read_body(fy_exchange_t *ex)
{
    (void)ex;
    read_bodies++;
}
static const fy_sink_ops_t c_sink = {"test", c_send, c_send_file, c_read_body, NULL, NULL};

static void on_ready(fy_tio_t *t, unsigned what)
{
    (void)t;
    readies++;
    last_ready = what;
}

static void stop_cb(fy_defer_t *d)
{
    fy_loop_stop(d->data);
}

/* Run the deferred callbacks queued so far. */
static void flush(fy_loop_t *loop)
{
    fy_defer_t d = {.cb = stop_cb, .data = loop};
    fy_defer(loop, &d);
    loop->stop = false;
    fy_loop_run(loop);
}

static void test_stream(void)
{
    fy_loop_t loop;
    CHECK_EQ_INT(fy_loop_init(&loop), 0);
    fy_arena_t arena;
    fy_arena_init(&arena, NULL, 0, 4096);
    fy_http_ctx_t ctx = {.loop = &loop};
    fy_exchange_t ex = {.ctx = &ctx, .sink = &c_sink, .arena = &arena};
    sends = finals = errors = read_bodies = readies = 0;
    sent_len = 0;
    fy_tio_t *t = fy_exchange_tio_start(&ex);
    t->on_ready = on_ready;
    CHECK_EQ_INT(ex.res.status, 200);
    CHECK_EQ_INT(sends, 1); /* the head */
    CHECK_EQ_INT(t->fd, -1);
    /* writes wait for the codec's proceed */
    CHECK_EQ_INT(fy_tio_write(t, "x", 1), 0);
    fy_tio_want(t, FY_TIO_WRITE);
    ex.producer->proceed(&ex);
    CHECK_EQ_INT(readies, 1);
    CHECK(last_ready == FY_TIO_WRITE);
    CHECK_EQ_INT(fy_tio_write(t, "hello", 5), 5);
    CHECK_EQ_INT(fy_tio_write(t, "more", 4), 0); /* "hello" is with the codec */
    CHECK_STRN(sent, sent_len, "hello");
    ex.producer->proceed(&ex);
    CHECK_EQ_INT(fy_tio_write(t, "more", 4), 4);
    CHECK_STRN(sent, sent_len, "hellomore");
    /* reads: nothing yet, one read_body outstanding */
    char b[16];
    readies = 0;
    CHECK_EQ_INT(fy_tio_read(t, b, sizeof b), 0);
    CHECK_EQ_INT(read_bodies, 1);
    CHECK_EQ_INT(fy_tio_read(t, b, sizeof b), 0);
    CHECK_EQ_INT(read_bodies, 1);
    fy_tio_want(t, FY_TIO_READ);
    ex.on_body(&ex, "abcdef", 6, false);
    CHECK_EQ_INT(readies, 1);
    CHECK(last_ready == FY_TIO_READ);
    CHECK_EQ_INT(fy_tio_peek(t, b, 1), 1);
    CHECK(b[0] == 'a');
    CHECK_EQ_INT(fy_tio_read(t, b, 4), 4);
    CHECK_EQ_INT(read_bodies, 1); /* "ef" is still unread: no more asked for */
    CHECK_EQ_INT(fy_tio_read(t, b, sizeof b), 2);
    CHECK_STRN(b, 2, "ef");
    CHECK_EQ_INT(read_bodies, 2);
    ex.on_body(&ex, NULL, 0, true);
    CHECK_EQ_INT(fy_tio_read(t, b, sizeof b), FY_EEOF);
    /* level-triggered: wanting READ at the end of stream calls back (deferred) */
    readies = 0;
    fy_tio_want(t, FY_TIO_READ);
    CHECK_EQ_INT(readies, 0);
    flush(&loop);
    CHECK_EQ_INT(readies, 1);
    /* half-close: FINAL; nothing written after */
    CHECK_EQ_INT(fy_tio_shutdown(t), 0);
    CHECK_EQ_INT(finals, 0); /* "more" is still with the codec: FINAL at its proceed */
    ex.producer->proceed(&ex);
    CHECK_EQ_INT(finals, 1);
    CHECK(fy_tio_write(t, "z", 1) < 0);
    fy_tio_close(t);
    CHECK_EQ_INT(finals, 1);
    CHECK_EQ_INT(errors, 0);
    fy_arena_reset(&arena); /* the exchange ends: the transport is freed after the stack */
    flush(&loop);
    fy_arena_free(&arena);
    fy_loop_destroy(&loop);
}

static void test_stopped(void)
{
    fy_loop_t loop;
    CHECK_EQ_INT(fy_loop_init(&loop), 0);
    fy_arena_t arena;
    fy_arena_init(&arena, NULL, 0, 4096);
    fy_http_ctx_t ctx = {.loop = &loop};
    fy_exchange_t ex = {.ctx = &ctx, .sink = &c_sink, .arena = &arena};
    sends = finals = errors = read_bodies = readies = 0;
    sent_len = 0;
    fy_tio_t *t = fy_exchange_tio_start(&ex);
    t->on_ready = on_ready;
    char b[4];
    CHECK_EQ_INT(fy_tio_read(t, b, sizeof b), 0);
    fy_tio_want(t, FY_TIO_READ);
    ex.producer->stop(&ex); /* the client reset the stream */
    flush(&loop);
    CHECK_EQ_INT(readies, 1);
    CHECK_EQ_INT(fy_tio_read(t, b, sizeof b), -ECONNRESET);
    CHECK_EQ_INT(fy_tio_write(t, "x", 1), -ECONNRESET);
    fy_arena_reset(&arena); /* reset before close */
    flush(&loop);
    fy_tio_close(t);
    CHECK_EQ_INT(sends, 1); /* nothing sent after the stop */
    flush(&loop);           /* freed now */
    /* closed with a slice in flight: the end (ERROR: not shut) goes out at proceed */
    fy_arena_init(&arena, NULL, 0, 4096);
    fy_exchange_t ex2 = {.ctx = &ctx, .sink = &c_sink, .arena = &arena};
    sends = errors = 0;
    t = fy_exchange_tio_start(&ex2);
    fy_tio_close(t);
    CHECK_EQ_INT(errors, 0);
    ex2.producer->proceed(&ex2);
    CHECK_EQ_INT(errors, 1);
    fy_arena_reset(&arena);
    flush(&loop);
    fy_arena_free(&arena);
    fy_loop_destroy(&loop);
}

FY_TEST_MAIN(test_stream(); test_stopped())
