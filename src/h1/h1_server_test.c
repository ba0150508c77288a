/* The h1 server codec through the in-memory transport (core/transport_mem.h), no socket: a
 * request delivered whole, byte by byte (head and body, Content-Length and chunked), pipelined
 * requests answered in order, and the protocol stage's answers as h1 writes them (CONNECT 405
 * closes the connection; `OPTIONS *` 204 keeps it). The loop runs until the codec has read
 * everything it was given (the transport stops it), with a guard timer that fails the test.
 * Last, the thread's free request blocks go back to malloc (a worker's exit: valgrind found
 * them lost when nothing drained the lists). */
#include "h1/h1_server.h"
#include "h1/h1_server_int.h" /* the idle tests look at the connection's parts */

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "core/loop.h"
#include "core/test.h"
#include "core/transport_mem.h"
#include "http/router.h"

static fy_loop_t loop;
static bool timed_out;

/* the handler: GET answers "METHOD /path"; a body is counted and answered "n=<bytes>" */
static size_t body_n;
static void on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    (void)p;
    body_n += n;
    if (!end) {
        fy_exchange_read_body(ex, on_body);
        return;
    }
    char *b = fy_arena_alloc(ex->arena, 32);
    int l = snprintf(b, 32, "n=%zu", body_n);
    fy_exchange_respond(ex, 200, "text/plain", b, (size_t)l);
}
static void h_on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    (void)h;
    if (ex->req.content_length != 0) {
        body_n = 0;
        fy_exchange_read_body(ex, on_body);
        return;
    }
    char *b = fy_arena_alloc(ex->arena, ex->req.method.len + ex->req.path.len + 2);
    int l =
        snprintf(b, ex->req.method.len + ex->req.path.len + 2, "%.*s %.*s", (int)ex->req.method.len,
                 ex->req.method.p, (int)ex->req.path.len, ex->req.path.p);
    fy_exchange_respond(ex, 200, "text/plain", b, (size_t)l);
}
static const fy_handler_ops_t h_ops = {.name = "t", .on_request = h_on_request};
static fy_handler_t handler = {&h_ops};
static fy_route_t route = {.path = "/", .path_len = 1, .handler = &handler};
static fy_router_t router = {&route, 1};
static fy_http_limits_t limits = {
    .max_request_line = 8192,
    .max_header_bytes = 32768,
    .max_headers = 100,
    .max_body = 1 << 20,
    .header_timeout_ms = 10000,
    .body_timeout_ms = 10000,
    .keepalive_timeout_ms = 10000,
    .send_timeout_ms = 10000,
    .keepalive_requests = 1000,
    .max_connections = 16,
    .merge_slashes = true,
};
static fy_http_ctx_t ctx = {.router = &router, .limits = &limits, .loop = &loop};

static void on_guard(fy_timer_t *t)
{
    (void)t;
    timed_out = true;
    fy_loop_stop(&loop);
}
static fy_timer_t guard;

/* run the loop until the codec waits for more bytes */
static void pump(void)
{
    loop.stop = false;
    fy_timer_start(&loop, &guard, 5000);
    fy_loop_run(&loop);
    fy_timer_stop(&loop, &guard);
    CHECK(!timed_out);
}

static void stop_cb(fy_defer_t *d)
{
    (void)d;
    fy_loop_stop(&loop);
}

/* close every conn and let their deferred frees run */
static void close_all(void)
{
    fy_http_ctx_close_all(&ctx);
    static fy_defer_t d = {.cb = stop_cb};
    fy_defer(&loop, &d);
    loop.stop = false;
    fy_loop_run(&loop);
}

static fy_mem_transport_t m;
static void start(void)
{
    CHECK(fy_mem_transport_init(&m, &loop) == 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    CHECK(fy_h1_conn_start(&ctx, m.t.fd, &m.t, (struct sockaddr *)&sa, sizeof sa, NULL, NULL) == 0);
    pump();
}
static void finish(void)
{
    if (!m.destroyed) close_all();
    CHECK(m.destroyed);
    fy_mem_transport_free(&m);
}

static void feed_bytewise(const char *s)
{
    for (size_t i = 0; s[i]; i++) {
        fy_mem_transport_feed(&m, s + i, 1);
        pump();
    }
}

static size_t count(const char *hay, size_t n, const char *needle)
{
    size_t c = 0, l = strlen(needle);
    for (size_t i = 0; i + l <= n; i++) c += memcmp(hay + i, needle, l) == 0;
    return c;
}
static bool ends_with(const char *s)
{
    size_t l = strlen(s);
    return m.out_len >= l && memcmp(m.out + m.out_len - l, s, l) == 0;
}

static void test_whole_and_bytewise(void)
{
    static const char req[] = "GET /a/b?x=1 HTTP/1.1\r\nHost: example.com\r\nX-Long: "
                              "some value\r\n\r\n";
    start();
    fy_mem_transport_feed(&m, req, sizeof req - 1);
    pump();
    CHECK(count(m.out, m.out_len, "HTTP/1.1 200 OK\r\n") == 1);
    CHECK(ends_with("\r\n\r\nGET /a/b"));
    size_t whole = m.out_len;
    char first[512];
    memcpy(first, m.out, whole);

    /* the same request, one byte per read, on the same connection */
    fy_mem_transport_out_reset(&m);
    for (size_t i = 0; i + 1 < sizeof req - 1; i++) {
        fy_mem_transport_feed(&m, req + i, 1);
        pump();
        CHECK_EQ_INT(m.out_len, 0); /* nothing before the head is complete */
    }
    fy_mem_transport_feed(&m, req + sizeof req - 2, 1);
    pump();
    CHECK_EQ_INT(m.out_len, whole);
    CHECK(count(m.out, m.out_len, "HTTP/1.1 200 OK\r\n") == 1 && ends_with("GET /a/b"));
    CHECK(!m.shut);
    finish();
}

static void test_pipelined(void)
{
    start();
    static const char two[] =
        "GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n";
    fy_mem_transport_feed(&m, two, sizeof two - 1);
    pump();
    CHECK(count(m.out, m.out_len, "HTTP/1.1 200 OK\r\n") == 2);
    const char *one = memmem(m.out, m.out_len, "GET /one", 8);
    const char *tw = memmem(m.out, m.out_len, "GET /two", 8);
    CHECK(one && tw && one < tw);
    finish();
}

static void test_bodies_bytewise(void)
{
    start();
    feed_bytewise("POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world");
    CHECK(ends_with("\r\n\r\nn=11"));
    fy_mem_transport_out_reset(&m);
    feed_bytewise("POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n");
    CHECK(count(m.out, m.out_len, "HTTP/1.1 200 OK\r\n") == 1);
    CHECK(ends_with("\r\n\r\nn=11"));
    finish();
}

static void test_protocol_stage(void)
{
    /* OPTIONS *: 204 with Allow, and the connection serves the next request */
    start();
    feed_bytewise("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK(count(m.out, m.out_len, "HTTP/1.1 204 No Content\r\n") == 1);
    CHECK(count(m.out, m.out_len, "Allow: GET, HEAD, POST, OPTIONS\r\n") == 1);
    fy_mem_transport_feed(&m, "GET /z HTTP/1.1\r\nHost: a\r\n\r\n", 28);
    pump();
    CHECK(ends_with("GET /z"));
    CHECK(!m.shut);
    finish();

    /* CONNECT on a listener that is no forward proxy: 405, Connection: close, then the
       codec half-closes and lingers; what the client sends after is not served */
    start();
    fy_mem_transport_feed(&m,
                          "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
                          "GET /no HTTP/1.1\r\nHost: a\r\n\r\n",
                          88);
    pump();
    CHECK(count(m.out, m.out_len, "HTTP/1.1 405 Method Not Allowed\r\n") == 1);
    CHECK(count(m.out, m.out_len, "Connection: close\r\n") == 1);
    CHECK(count(m.out, m.out_len, "HTTP/1.1 200") == 0);
    CHECK(m.shut);
    finish();

    /* a declared body over limits.body-size: 413 before the body is read */
    start();
    fy_mem_transport_feed(&m, "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\nxx",
                          57);
    pump();
    CHECK(count(m.out, m.out_len, "HTTP/1.1 413 ") == 1);
    CHECK(count(m.out, m.out_len, "Connection: close\r\n") == 1);
    CHECK(m.shut);
    finish();
}

/* A served request leaves its header array and arena block on the thread's free lists (with
 * pools); fy_h1_thread_cleanup empties them, as a worker does at exit. */
static void test_thread_cleanup(void)
{
    static const char req[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    start();
    fy_mem_transport_feed(&m, req, sizeof req - 1);
    pump();
    CHECK(count(m.out, m.out_len, "HTTP/1.1 200 OK\r\n") == 1);
    finish();
#ifndef FY_NO_POOL
    CHECK(fy_h1_thread_cached() >= 2);
#endif
    fy_h1_thread_cleanup();
    CHECK_EQ_INT(fy_h1_thread_cached(), 0);
    /* the lists still work after a drain */
    start();
    fy_mem_transport_feed(&m, req, sizeof req - 1);
    pump();
    CHECK(count(m.out, m.out_len, "HTTP/1.1 200 OK\r\n") == 1);
    finish();
    fy_h1_thread_cleanup();
    CHECK_EQ_INT(fy_h1_thread_cached(), 0);
}

/* let the loop run for `ms` (the idle release after IDLE_RELEASE_MS) */
static void wait_ms(uint64_t ms)
{
    static fy_timer_t t;
    fy_timer_init(&t, on_guard, NULL);
    loop.stop = false;
    fy_timer_start(&loop, &t, ms);
    fy_loop_run(&loop);
    timed_out = false;
}

static h1_conn_t *the_conn(void)
{
    CHECK(ctx.conns.next != &ctx.conns);
    return fy_container_of(ctx.conns.next, h1_conn_t, node.link);
}

/* Issue 19: between requests a kept-alive connection holds its core only; the request part
 * (h1_busy_t) is taken when bytes arrive, kept while pipelined bytes wait, and given back at
 * the idle release, and the memory gauge follows (mem_held). */
static void test_idle_busy_idle(void)
{
    static const char req[] = "GET /i HTTP/1.1\r\nHost: a\r\n\r\n";
    start();
    h1_conn_t *c = the_conn();
    CHECK(c->b == NULL); /* accepted, nothing read yet */
    for (int round = 0; round < 3; round++) {
        fy_mem_transport_out_reset(&m);
        fy_mem_transport_feed(&m, req, sizeof req - 1);
        pump();
        CHECK(ends_with("\r\n\r\nGET /i"));
        if (round == 0) {
            /* the connection's first response: everything goes back at once */
            CHECK(c->b == NULL && c->rbuf == NULL && c->wbuf == NULL);
            CHECK_EQ_INT(c->mem_held, sizeof(h1_conn_t));
            continue;
        }
        /* a reused connection keeps the part and buffers for a quick next request */
        CHECK(c->b != NULL);
        CHECK(c->mem_held >= sizeof(h1_conn_t) + sizeof(h1_busy_t));
        wait_ms(IDLE_RELEASE_MS + 20);
        CHECK(c->b == NULL && c->rbuf == NULL && c->wbuf == NULL);
        CHECK_EQ_INT(c->mem_held, sizeof(h1_conn_t));
        CHECK_EQ_INT(c->stream_held, 0);
        CHECK(!m.shut && !m.destroyed);
    }
#ifndef FY_NO_POOL
    CHECK(fy_h1_thread_cached() >= 3); /* the part, its header array and arena block */
#endif
    CHECK(sizeof(h1_conn_t) <= 448); /* the idle core (issue 19: <= 0.5 KiB per idle connection) */
    finish();
}

/* A request and the first bytes of the next: the part stays over the idle release (the
 * pending bytes are a request in progress), and the rest completes it in order. Then the same
 * across a release: the second request arrives whole after it and takes a fresh part. */
static void test_pipelined_over_release(void)
{
    start();
    h1_conn_t *c = the_conn();
    static const char one[] = "GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHo";
    fy_mem_transport_feed(&m, one, sizeof one - 1);
    pump();
    CHECK(count(m.out, m.out_len, "HTTP/1.1 200 OK\r\n") == 1 && ends_with("GET /one"));
    wait_ms(IDLE_RELEASE_MS + 20);
    CHECK(c->b != NULL && c->rbuf != NULL); /* "GET /two ..." is being parsed */
    CHECK(c->b->req.scanned > 0 || c->rlen > c->rstart);
    fy_mem_transport_feed(&m, "st: a\r\n\r\nGET /three HTTP/1.1\r\nHost: a\r\n\r\n", 41);
    pump();
    CHECK(count(m.out, m.out_len, "HTTP/1.1 200 OK\r\n") == 3);
    const char *p1 = memmem(m.out, m.out_len, "GET /one", 8);
    const char *p2 = memmem(m.out, m.out_len, "GET /two", 8);
    const char *p3 = memmem(m.out, m.out_len, "GET /three", 10);
    CHECK(p1 && p2 && p3 && p1 < p2 && p2 < p3);
    wait_ms(IDLE_RELEASE_MS + 20);
    CHECK(c->b == NULL);
    CHECK_EQ_INT(c->mem_held, sizeof(h1_conn_t));
    fy_mem_transport_out_reset(&m);
    fy_mem_transport_feed(
        &m, "GET /4 HTTP/1.1\r\nHost: a\r\n\r\nGET /5 HTTP/1.1\r\nHost: a\r\n\r\n", 56);
    pump();
    CHECK(count(m.out, m.out_len, "HTTP/1.1 200 OK\r\n") == 2 && ends_with("GET /5"));
    CHECK(!m.shut);
    finish();
}

/* The client goes away while the connection is idle: after the release (nothing but the core
 * to free), and just after a response (the part is still held). */
static void test_close_while_idle(void)
{
    static const char req[] = "GET /c HTTP/1.1\r\nHost: a\r\n\r\n";
    for (int released = 0; released < 2; released++) {
        start();
        size_t before = ctx.nconns;
        for (int i = 0; i < 2; i++) { /* two: the second response's part is kept a while */
            fy_mem_transport_feed(&m, req, sizeof req - 1);
            pump();
        }
        CHECK(count(m.out, m.out_len, "GET /c") == 2);
        if (released) {
            wait_ms(IDLE_RELEASE_MS + 20);
            CHECK(the_conn()->b == NULL);
        } else {
            CHECK(the_conn()->b != NULL);
        }
        fy_mem_transport_eof(&m);
        pump();
        wait_ms(5); /* the deferred free */
        CHECK(m.destroyed);
        CHECK_EQ_INT(ctx.nconns, before - 1);
        finish();
    }
}

int main(void)
{
    CHECK(fy_loop_init(&loop) == 0);
    fy_list_init(&ctx.conns);
    fy_timer_init(&guard, on_guard, NULL);
    test_whole_and_bytewise();
    test_pipelined();
    test_bodies_bytewise();
    test_protocol_stage();
    test_idle_busy_idle();
    test_pipelined_over_release();
    test_close_while_idle();
    test_thread_cleanup();
    fy_loop_destroy(&loop);
    printf("%d passed, %d failed\n", fy_test_pass, fy_test_fail);
    return fy_test_fail ? 1 : 0;
}
