/* Tests for h2_mem.c: a real nghttp2 server session on the allocator counts what it holds
 * (the session, its HPACK tables, its 16 KiB frame buffer), trimming gives the frame buffer's
 * pages back without breaking the session, and deleting the session returns the count to 0. */
#include "h2/h2_mem.h"
#include "core/test.h"

static ssize_t to_nowhere(nghttp2_session *s, const uint8_t *d, size_t n, int f, void *ud)
{
    (void)s, (void)d, (void)f, (void)ud;
    return (ssize_t)n;
}

static void test_session_counted_and_trimmed(void)
{
    fy_h2_mem_t m;
    fy_h2_mem_init(&m);
    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_send_callback(cbs, to_nowhere);
    nghttp2_session *ng;
    CHECK(nghttp2_session_server_new3(&ng, cbs, NULL, NULL, &m.mem) == 0);
    CHECK(m.bytes > 16384); /* the frame buffer at least */
    CHECK(m.big[0] != NULL);
    nghttp2_submit_settings(ng, NGHTTP2_FLAG_NONE, NULL, 0);
    CHECK(nghttp2_session_send(ng) == 0);
    CHECK(!nghttp2_session_want_write(ng));
    fy_h2_mem_trim(&m);
#ifndef FY_NO_POOL
    CHECK(m.trimmed >= 16384);
    CHECK_EQ_INT(fy_h2_mem_held(&m), m.bytes - m.trimmed);
#endif
    fy_h2_mem_wake(&m);
    CHECK_EQ_INT(fy_h2_mem_held(&m), m.bytes);
    /* still works after the trim: another frame goes through the given-back pages */
    CHECK(nghttp2_submit_ping(ng, NGHTTP2_FLAG_NONE, NULL) == 0);
    CHECK(nghttp2_session_send(ng) == 0);
    nghttp2_session_del(ng);
    CHECK_EQ_INT(m.bytes, 0);
    CHECK_EQ_INT(fy_h2_mem_held(&m), 0);
    nghttp2_session_callbacks_del(cbs);
}

FY_TEST_MAIN(test_session_counted_and_trimmed())
