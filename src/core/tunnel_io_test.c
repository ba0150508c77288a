/* Tests for tunnel_io.c (the in-memory transport) and tunnel_relay.c: a relay between two
 * in-memory transports moves bytes both ways, stops reading a side while the other cannot
 * take its bytes (backpressure), turns an end of stream into a half-close, and ends when both
 * directions are shut or on an error. No sockets, no loop. */
#include "core/errors.h"
#include "core/test.h"
#include "core/tunnel_io.h"
#include "core/tunnel_relay.h"

static int events, dones, last_err;

static void on_event(fy_tio_relay_t *r, bool done, int err)
{
    (void)r;
    events++;
    if (done) {
        dones++;
        last_err = err;
    }
}

static void test_mem(void)
{
    fy_tio_mem_t m;
    fy_tio_mem_init(&m);
    char b[8];
    CHECK_EQ_INT(fy_tio_read(&m.t, b, sizeof b), 0);
    fy_tio_mem_feed(&m, "hello", 5);
    CHECK_EQ_INT(fy_tio_peek(&m.t, b, 1), 1);
    CHECK(b[0] == 'h');
    CHECK_EQ_INT(fy_tio_read(&m.t, b, 3), 3);
    CHECK_EQ_INT(fy_tio_read(&m.t, b, sizeof b), 2);
    CHECK_STRN(b, 2, "lo");
    fy_tio_mem_eof(&m);
    CHECK_EQ_INT(fy_tio_read(&m.t, b, sizeof b), FY_EEOF);
    m.room = 4;
    CHECK_EQ_INT(fy_tio_write(&m.t, "abcdef", 6), 4);
    CHECK_EQ_INT(fy_tio_write(&m.t, "ef", 2), 0);
    CHECK_STRN(m.out, m.out_len, "abcd");
    fy_tio_shutdown(&m.t);
    CHECK(m.shut);
    CHECK(fy_tio_write(&m.t, "x", 1) < 0);
    fy_tio_close(&m.t);
    CHECK(m.closed);
    fy_tio_mem_free(&m);
}

static void test_relay(void)
{
    fy_tio_mem_t a, b;
    fy_tio_mem_init(&a);
    fy_tio_mem_init(&b);
    fy_tio_relay_t r = {.event = on_event};
    events = dones = 0;
    fy_tio_relay_start(&r, &a.t, &b.t, 4, "PRE", 3);
    CHECK_STRN(b.out, b.out_len, "PRE"); /* bytes read before the relay go first */
    CHECK(a.wanted & FY_TIO_READ);
    CHECK(b.wanted & FY_TIO_READ);
    /* a to b in buffers of 4, any split */
    fy_tio_mem_feed(&a, "0123456789", 10);
    CHECK_STRN(b.out, b.out_len, "PRE0123456789");
    fy_tio_mem_feed(&b, "pong", 4);
    CHECK_STRN(a.out, a.out_len, "pong");
    CHECK(events >= 2);
    /* backpressure: b takes 2 bytes, then a is not read until b drains */
    fy_tio_mem_drain(&b, 2);
    fy_tio_mem_feed(&a, "abcdefgh", 8);
    CHECK_STRN(b.out, b.out_len, "ab");
    CHECK(!(a.wanted & FY_TIO_READ));
    CHECK(b.wanted & FY_TIO_WRITE);
    CHECK_EQ_INT(a.in_len - a.in_off, 4); /* "efgh" stays with a */
    fy_tio_mem_drain(&b, 2);
    CHECK_STRN(b.out, b.out_len, "cd");
    CHECK_EQ_INT(a.in_len - a.in_off, 0); /* the buffer emptied: a was read again */
    fy_tio_mem_drain(&b, 0);
    CHECK(a.wanted & FY_TIO_READ);
    CHECK_STRN(b.out, b.out_len, "efgh");
    /* a ends: b is half-closed; then b ends: done */
    fy_tio_mem_eof(&a);
    CHECK(b.shut);
    CHECK(!a.shut);
    CHECK_EQ_INT(dones, 0);
    fy_tio_mem_eof(&b);
    CHECK(a.shut);
    CHECK_EQ_INT(dones, 1);
    CHECK_EQ_INT(last_err, 0);
    CHECK_EQ_INT(a.wanted | b.wanted, 0);
    fy_tio_relay_stop(&r);
    fy_tio_mem_free(&a);
    fy_tio_mem_free(&b);
}

static void test_relay_error(void)
{
    fy_tio_mem_t a, b;
    fy_tio_mem_init(&a);
    fy_tio_mem_init(&b);
    fy_tio_relay_t r = {.event = on_event};
    dones = 0;
    fy_tio_relay_start(&r, &a.t, &b.t, 16, NULL, 0);
    fy_tio_shutdown(&b.t); /* writes to b now fail */
    fy_tio_mem_feed(&a, "x", 1);
    CHECK_EQ_INT(dones, 1);
    CHECK(last_err < 0);
    fy_tio_mem_feed(&a, "y", 1); /* nothing after the end */
    CHECK_EQ_INT(dones, 1);
    fy_tio_relay_stop(&r);
    fy_tio_mem_free(&a);
    fy_tio_mem_free(&b);
}

FY_TEST_MAIN(test_mem(); test_relay(); test_relay_error())
