/* The h2 server codec through the in-memory transport (core/transport_mem.h), no socket, with
 * nghttp2's client session as the peer: requests delivered whole and byte by byte (the
 * pre-scanner's split frame headers), several streams in turn on one connection, request
 * header names and values from HPACK's static table and from literals, a request body, a
 * response header name in upper case, and a file body (given to nghttp2 by reference, read
 * into the write buffer) written through a transport that takes a few bytes per write. */
#include "h2/h2_server.h"

#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/loop.h"
#include "core/test.h"
#include "core/transport_mem.h"
#include "h2/h2_conf.h"
#include "http/router.h"

static fy_loop_t loop;
static bool timed_out;
static int file_fd = -1;
static char file_data[20000];

/* the handler: /file answers the file; a body is counted, "n=<bytes>"; else
   "METHOD /path x=<x-t> ua=<user-agent>" with an `X-Echo` header */
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
    if (fy_str_eq(ex->req.path, "/file", 5)) {
        static const fy_producer_ops_t none = {NULL, NULL};
        ex->res.status = 200;
        ex->res.content_length = (int64_t)sizeof file_data;
        fy_exchange_start_response(ex, &none);
        fy_exchange_send_file(ex, file_fd, 0, sizeof file_data, FY_SEND_FINAL);
        return;
    }
    const fy_header_t *x = FY_HDR_FIND(&ex->req.headers, "x-t");
    const fy_header_t *ua = FY_HDR_FIND(&ex->req.headers, "user-agent");
    fy_str_t xv = x ? x->value : fy_str("-", 1), uav = ua ? ua->value : fy_str("-", 1);
    char *b = fy_arena_alloc(ex->arena, 256);
    int l = snprintf(b, 256, "%.*s %.*s x=%.*s ua=%.*s", (int)ex->req.method.len, ex->req.method.p,
                     (int)ex->req.path.len, ex->req.path.p, (int)xv.len, xv.p, (int)uav.len, uav.p);
    fy_headers_add(ex->arena, &ex->res.headers, "X-Echo", 6, "yes", 3);
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
static fy_h2_conf_t h2conf = {
    .max_concurrent_streams = 100,
    .initial_window_size = 65535,
    .connection_window_size = 1 << 20,
    .max_frame_size = 16384,
    .reset_burst = 1000,
    .reset_rate = 33,
    .max_continuations = 8,
    .max_glitches = 1000,
};
static fy_http_ctx_t ctx = {.router = &router, .limits = &limits, .loop = &loop, .h2conf = &h2conf};

static void on_guard(fy_timer_t *t)
{
    (void)t;
    timed_out = true;
    fy_loop_stop(&loop);
}
static fy_timer_t guard;

/* The h2 codec does not read until a read finds nothing (it stops at a short read), so the
 * transport does not stop the loop: an always-readable eventfd does, once the loop has gone
 * round twice with every fed byte read (the second round runs what the first deferred). */
static struct fy_mem_transport *mt;
static fy_io_t idle;
static int idle_rounds;
static void on_idle(fy_io_t *io, uint32_t ev)
{
    (void)io, (void)ev;
    if (mt->in_off == mt->in_len && ++idle_rounds >= 2) fy_loop_stop(&loop);
}

/* run the loop until the codec has read what it was given and done what follows */
static void pump(void)
{
    loop.stop = false;
    idle_rounds = 0;
    fy_timer_start(&loop, &guard, 5000);
    CHECK(fy_io_set(&loop, &idle, EPOLLIN) == 0);
    fy_loop_run(&loop);
    fy_io_set(&loop, &idle, 0);
    fy_timer_stop(&loop, &guard);
    CHECK(!timed_out);
}

static void stop_cb(fy_defer_t *d)
{
    (void)d;
    fy_loop_stop(&loop);
}

static void close_all(void)
{
    fy_http_ctx_close_all(&ctx);
    static fy_defer_t d = {.cb = stop_cb};
    fy_defer(&loop, &d);
    loop.stop = false;
    fy_loop_run(&loop);
}

/* ---- the peer: nghttp2's client session ---- */

typedef struct {
    int status;
    bool closed;
    uint32_t code;
    char echo[8];
    char body[sizeof file_data + 64];
    size_t body_len;
} resp_t;

static nghttp2_session *peer;
static resp_t resp[16];

static resp_t *resp_of(int32_t id)
{
    return id > 0 && id / 2 < (int32_t)(sizeof resp / sizeof resp[0]) ? &resp[id / 2] : NULL;
}

static int p_on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name,
                       size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                       void *ud)
{
    (void)ng, (void)flags, (void)ud;
    resp_t *r = resp_of(f->hd.stream_id);
    if (!r) return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0)
        r->status = (int)strtol((const char *)value, NULL, 10);
    if (namelen == 6 && memcmp(name, "x-echo", 6) == 0 && valuelen < sizeof r->echo)
        memcpy(r->echo, value, valuelen);
    return 0;
}

static int p_on_data(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
                     size_t len, void *ud)
{
    (void)ng, (void)flags, (void)ud;
    resp_t *r = resp_of(id);
    if (!r || r->body_len + len > sizeof r->body) return 0;
    memcpy(r->body + r->body_len, data, len);
    r->body_len += len;
    return 0;
}

static int p_on_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud)
{
    (void)ng, (void)ud;
    resp_t *r = resp_of(id);
    if (r) {
        r->closed = true;
        r->code = code;
    }
    return 0;
}

static fy_mem_transport_t m;

/* the peer's pending frames, to the codec whole or one byte at a time */
static void peer_flush(bool bytewise)
{
    for (;;) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(peer, &d);
        CHECK(n >= 0);
        if (n <= 0) break;
        if (!bytewise) {
            fy_mem_transport_feed(&m, d, (size_t)n);
            pump();
            continue;
        }
        for (ssize_t i = 0; i < n; i++) {
            fy_mem_transport_feed(&m, d + i, 1);
            pump();
        }
    }
}

/* what the codec wrote, to the peer */
static void peer_read(void)
{
    if (m.out_len) {
        ssize_t r = nghttp2_session_mem_recv(peer, (const uint8_t *)m.out, m.out_len);
        CHECK(r == (ssize_t)m.out_len);
    }
    fy_mem_transport_out_reset(&m);
}

static void start(void)
{
    CHECK(fy_mem_transport_init(&m, &loop) == 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    CHECK(fy_h2_conn_start(&ctx, m.t.fd, &m.t, (struct sockaddr *)&sa, sizeof sa, NULL, 0, NULL) ==
          0);
    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, p_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, p_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, p_on_close);
    CHECK(nghttp2_session_client_new(&peer, cbs, NULL) == 0);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(peer, NGHTTP2_FLAG_NONE, NULL, 0);
    memset(resp, 0, sizeof resp);
    pump();
}

static void finish(void)
{
    nghttp2_session_del(peer);
    peer = NULL;
    if (!m.destroyed) close_all();
    CHECK(m.destroyed);
    fy_mem_transport_free(&m);
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE         \
    }

static int32_t get(const char *path, const char *xt)
{
    nghttp2_nv nv[6] = {NV(":method", "GET"), NV(":scheme", "http"),   NV(":authority", "a"),
                        NV(":path", ""),      NV("user-agent", "t/1"), NV("x-t", "")};
    nv[3].value = (uint8_t *)path;
    nv[3].valuelen = strlen(path);
    nv[5].value = (uint8_t *)xt;
    nv[5].valuelen = strlen(xt);
    return nghttp2_submit_request(peer, NULL, nv, 6, NULL, NULL);
}

static bool body_is(int32_t id, const char *want)
{
    resp_t *r = resp_of(id);
    return r && r->closed && r->code == 0 && r->status == 200 && r->body_len == strlen(want) &&
           memcmp(r->body, want, r->body_len) == 0;
}

static void test_whole_and_bytewise(void)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        start();
        /* ":path /" is in HPACK's static table; "/a?q=1" is a literal */
        int32_t a = get("/", "one"), b = get("/a?q=1", "two");
        peer_flush(bytewise);
        peer_read();
        CHECK(body_is(a, "GET / x=one ua=t/1"));
        CHECK(body_is(b, "GET /a x=two ua=t/1"));
        CHECK(strcmp(resp_of(a)->echo, "yes") == 0); /* X-Echo, sent in lower case */
        /* streams in turn on the same connection: HPACK's dynamic table in use now */
        for (int i = 0; i < 5; i++) {
            int32_t c = get("/again", i % 2 ? "odd" : "even");
            peer_flush(bytewise);
            peer_read();
            CHECK(body_is(c, i % 2 ? "GET /again x=odd ua=t/1" : "GET /again x=even ua=t/1"));
        }
        finish();
    }
}

static ssize_t p_read_body(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len,
                           uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)ng, (void)id, (void)ud;
    size_t *left = src->ptr, n = *left < len ? *left : len;
    memset(buf, 'b', n);
    *left -= n;
    if (*left == 0) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static void test_body_bytewise(void)
{
    start();
    nghttp2_nv nv[] = {NV(":method", "POST"), NV(":scheme", "http"), NV(":authority", "a"),
                       NV(":path", "/up"), NV("content-length", "3000")};
    size_t left = 3000;
    nghttp2_data_provider dp = {.source.ptr = &left, .read_callback = p_read_body};
    int32_t id = nghttp2_submit_request(peer, NULL, nv, 5, &dp, NULL);
    peer_flush(true);
    peer_read();
    CHECK(body_is(id, "n=3000"));
    finish();
}

static void test_file_short_writes(void)
{
    start();
    m.max_write = 7; /* the transport takes 7 bytes per write: the rest waits in wbuf */
    int32_t id = get("/file", "f");
    peer_flush(false);
    for (int i = 0; i < 10000 && !(resp_of(id)->closed); i++) {
        peer_read();
        pump();
    }
    peer_read();
    resp_t *r = resp_of(id);
    CHECK(r->closed && r->status == 200);
    CHECK_EQ_INT(r->body_len, sizeof file_data);
    CHECK(memcmp(r->body, file_data, sizeof file_data) == 0);
    /* the peer acknowledges what it consumed: the connection goes on serving */
    nghttp2_session_consume_connection(peer, 0);
    int32_t b = get("/", "after");
    peer_flush(false);
    for (int i = 0; i < 1000 && !(resp_of(b)->closed); i++) {
        peer_read();
        pump();
    }
    CHECK(body_is(b, "GET / x=after ua=t/1"));
    finish();
}

int main(void)
{
    CHECK(fy_loop_init(&loop) == 0);
    fy_list_init(&ctx.conns);
    fy_timer_init(&guard, on_guard, NULL);
    idle.fd = eventfd(1, EFD_CLOEXEC);
    idle.cb = on_idle;
    CHECK(idle.fd >= 0);
    mt = &m;
    for (size_t i = 0; i < sizeof file_data; i++) file_data[i] = (char)('a' + i % 26);
    char tmpl[] = "/tmp/fy_h2_test_XXXXXX";
    file_fd = mkstemp(tmpl);
    CHECK(file_fd >= 0);
    unlink(tmpl);
    CHECK(write(file_fd, file_data, sizeof file_data) == (ssize_t)sizeof file_data);
    test_whole_and_bytewise();
    test_body_bytewise();
    test_file_short_writes();
    close(file_fd);
    close(idle.fd);
    fy_h2_thread_cleanup();
    fy_loop_destroy(&loop);
    printf("%d passed, %d failed\n", fy_test_pass, fy_test_fail);
    return fy_test_fail ? 1 : 0;
}
