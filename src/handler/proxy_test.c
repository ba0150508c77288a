/* The reverse proxy without sockets: an HTTP/1.1 client (the h1 server codec over an in-memory
 * transport) through the proxy handler to an HTTP/1.1 origin whose connections are in-memory
 * transports too (fy__origin_test_connect). What the origin is sent (request line, Host kept,
 * X-Forwarded-For added, hop-by-hop fields dropped, a body forwarded), responses delivered one
 * byte per read (by length and chunked), the origin connection pooled and reused, a pooled
 * connection that closes before answering retried once on a fresh one, and a fresh one that
 * closes before its head answered 502. The loop runs tick by tick (each tick handles what is
 * ready, never waits), so nothing depends on time. */
#include "handler/proxy.h"
#include "handler/proxy_conf.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/loop.h"
#include "core/test.h"
#include "core/transport_mem.h"
#include "h1/h1_server.h"
#include "http/router.h"
#include "upstream/upstream.h"
#include "upstream/upstream_conf.h"

static fy_loop_t loop;

/* ---- the origin side: every connection the proxy makes is one of these ---- */

#define MAX_ORIGINS 8
static fy_mem_transport_t om[MAX_ORIGINS];
static int n_om;

static fy_transport_t *test_connect(const fy_upstream_server_conf_t *sv, int *fd)
{
    (void)sv;
    CHECK(n_om < MAX_ORIGINS);
    fy_mem_transport_t *o = &om[n_om++];
    CHECK(fy_mem_transport_init(o, &loop) == 0);
    o->exact_ready = true; /* an idle pooled connection must not look spoken to */
    *fd = o->t.fd;
    return &o->t;
}

/* ---- the client side ---- */

static fy_mem_transport_t cm;
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
static fy_route_t route = {.path = "/", .path_len = 1};
static fy_router_t router = {&route, 1};
static fy_http_ctx_t ctx = {.router = &router, .limits = &limits, .loop = &loop};

/* An eventfd that is always readable: its callback stops the loop, after the other ready
 * descriptors of the same epoll_wait had theirs. */
static fy_io_t tick_io;
static void tick_cb(fy_io_t *io, uint32_t ev)
{
    (void)io, (void)ev;
    fy_loop_stop(&loop);
}

/* One turn of the loop: what is ready runs (and what that defers), then it stops. */
static void tick(void)
{
    loop.stop = false;
    fy_loop_run(&loop);
}

/* Turns until `cond` holds (at most 1,000: then the test fails). */
#define SETTLE(cond)                                                                               \
    do {                                                                                           \
        int turns_ = 0;                                                                            \
        while (!(cond) && turns_++ < 1000) tick();                                                 \
        CHECK(cond);                                                                               \
    } while (0)

static bool has(const fy_mem_transport_t *m, const char *s)
{
    return m->out_len && memmem(m->out, m->out_len, s, strlen(s)) != NULL;
}

static bool ends(const fy_mem_transport_t *m, const char *s)
{
    size_t l = strlen(s);
    return m->out_len >= l && memcmp(m->out + m->out_len - l, s, l) == 0;
}

/* The chunked body after the head in m's output, into out: its length, or -1 if malformed. */
static long dechunk(const fy_mem_transport_t *m, char *out, size_t cap)
{
    if (!m->out_len) return -1;
    const char *p = memmem(m->out, m->out_len, "\r\n\r\n", 4), *end = m->out + m->out_len;
    if (!p) return -1;
    p += 4;
    size_t n = 0;
    for (;;) {
        char *e;
        unsigned long k = strtoul(p, &e, 16);
        if (e == p || end - e < 2 || memcmp(e, "\r\n", 2) != 0) return -1;
        p = e + 2;
        if (k == 0) return (long)n;
        if ((size_t)(end - p) < k + 2 || n + k > cap) return -1;
        memcpy(out + n, p, k);
        n += k;
        p += k + 2;
    }
}

static void feed(fy_mem_transport_t *m, const char *s)
{
    fy_mem_transport_feed(m, s, strlen(s));
}

static void feed_bytewise(fy_mem_transport_t *m, const char *s)
{
    for (size_t i = 0; s[i]; i++) {
        fy_mem_transport_feed(m, s + i, 1);
        for (int k = 0; k < 3; k++) tick();
    }
}

static void client_start(void)
{
    CHECK(fy_mem_transport_init(&cm, &loop) == 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000009)};
    CHECK(fy_h1_conn_start(&ctx, cm.t.fd, &cm.t, (struct sockaddr *)&sa, sizeof sa, NULL, NULL) ==
          0);
    tick();
}

static void test_forward_pool_and_bodies(void)
{
    client_start();
    feed(&cm, "GET /x?y=1 HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, x-hop\r\n"
              "X-Hop: 1\r\nKeep-Alive: 5\r\n\r\n");
    SETTLE(n_om == 1 && ends(&om[0], "\r\n\r\n"));
    fy_mem_transport_t *o = &om[0];
    CHECK(memcmp(o->out, "GET /x?y=1 HTTP/1.1\r\n", 21) == 0);
    CHECK(has(o, "\r\nHost: example.com\r\n"));
    CHECK(has(o, "\r\nx-forwarded-for: 127.0.0.9\r\n"));
    CHECK(!has(o, "X-Hop") && !has(o, "Keep-Alive") && !has(o, "x-hop"));
    CHECK_EQ_INT(cm.out_len, 0); /* nothing to the client before the origin's head */

    /* the response, one byte per read */
    fy_mem_transport_out_reset(o);
    feed_bytewise(o, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Origin: a\r\n\r\nhello");
    SETTLE(ends(&cm, "hello"));
    CHECK(memcmp(cm.out, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CHECK(has(&cm, "\r\nX-Origin: a\r\n") && has(&cm, "\r\nContent-Length: 5\r\n"));
    for (int i = 0; i < 5; i++) tick(); /* the exchange's end: the origin connection pooled */

    /* keep-alive both ways: the second request goes on the pooled origin connection, and a
       chunked response is re-framed for the client */
    fy_mem_transport_out_reset(&cm);
    feed(&cm, "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc");
    SETTLE(ends(o, "\r\n\r\nabc"));
    CHECK_EQ_INT(n_om, 1);
    CHECK(memcmp(o->out, "POST /p HTTP/1.1\r\n", 18) == 0 && has(o, "\r\nContent-Length: 3\r\n"));
    fy_mem_transport_out_reset(o);
    feed_bytewise(o, "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "3\r\nwor\r\n2\r\nld\r\n0\r\n\r\n");
    SETTLE(has(&cm, "201 Created") && ends(&cm, "0\r\n\r\n"));
    char body[64];
    CHECK(dechunk(&cm, body, sizeof body) == 5 && memcmp(body, "world", 5) == 0);

    /* the pooled connection closes before answering: once more on a fresh connection (not
       charged as a retry), which also closes before its head: 502 */
    fy_mem_transport_out_reset(&cm);
    feed(&cm, "GET /gone HTTP/1.1\r\nHost: a\r\n\r\n");
    SETTLE(has(o, "GET /gone"));
    fy_mem_transport_eof(o);
    SETTLE(n_om == 2 && has(&om[1], "GET /gone"));
    fy_mem_transport_eof(&om[1]);
    SETTLE(has(&cm, "HTTP/1.1 502 "));
    CHECK(!cm.destroyed); /* the client's connection stays */
}

FY_TEST_MAIN({
    CHECK(fy_loop_init(&loop) == 0);
    fy_list_init(&ctx.conns);
    tick_io.fd = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);
    tick_io.cb = tick_cb;
    CHECK(tick_io.fd >= 0 && fy_io_set(&loop, &tick_io, EPOLLIN) == 0);
    fy__origin_test_connect = test_connect;
    static fy_upstream_server_conf_t sv;
    char host[256], auth[256], err[256];
    static char url[] = "http://127.0.0.1:9";
    CHECK(fy_upstream_url_parse(url, &sv, true, host, auth, err, sizeof err) == 0);
    sv.url = url;
    sv.weight = 1;
    sv.host = host;
    sv.authority = auth;
    fy_upstream_conf_t uc = {.name = "app",
                             .servers = {&sv, 1},
                             .connect_timeout_ms = 10000,
                             .first_byte_timeout_ms = 10000,
                             .idle_timeout_ms = 10000,
                             .keepalive = 8,
                             .keepalive_timeout_ms = 10000,
                             .retries = 0,
                             .max_fails = 100,
                             .fail_timeout_ms = 10000};
    fy_upstream_t *u = fy_upstream_new(&uc, 1);
    CHECK(u != NULL);
    fy_proxy_conf_t pc = {.upstream = "app", .preserve_host = true, .forwarded = true};
    fy_handler_t *h = fy_proxy_handler_new(&pc, u);
    route.handler = h;

    test_forward_pool_and_bodies();

    fy_http_ctx_close_all(&ctx);
    fy_upstream_worker_close(u, 0);
    tick();
    tick();
    h->ops->destroy(h);
    fy_upstream_free(u);
    fy_mem_transport_free(&cm);
    for (int i = 0; i < n_om; i++) fy_mem_transport_free(&om[i]);
    fy_io_set(&loop, &tick_io, 0);
    close(tick_io.fd);
    fy_loop_destroy(&loop);
})
