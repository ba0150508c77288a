/* Unit tests of the HTTP/2 client codec against an in-memory nghttp2 server session: heads,
 * bodies and trailers; flow control as backpressure (nothing beyond the stream window until
 * consumed); request bodies pulled with deferral; REFUSED_STREAM and GOAWAY; the origin's
 * stream limit and extended CONNECT setting. */
#include "h2/h2_client.c"

#include <nghttp2/nghttp2.h>

#include "core/test.h"

/* ---- the origin: an nghttp2 server session ---- */

typedef struct origin {
    nghttp2_session *ng;
    int mode; /* what to answer */
    size_t body_len, body_sent;
    size_t req_body;
    int32_t last_sid;
    bool got_trailer;
} origin_t;

enum { M_HELLO = 0, M_BIG, M_REFUSE, M_GOAWAY0, M_SILENT };

static ssize_t big_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len, uint32_t *fl,
                        nghttp2_data_source *src, void *ud)
{
    (void)ng;
    (void)id;
    (void)src;
    origin_t *o = ud;
    size_t n = o->body_len - o->body_sent;
    if (n > len) n = len;
    memset(buf, 'z', n);
    o->body_sent += n;
    if (o->body_sent == o->body_len) *fl |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static ssize_t hello_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len, uint32_t *fl,
                          nghttp2_data_source *src, void *ud)
{
    (void)src;
    (void)ud;
    (void)len;
    memcpy(buf, "hello", 5);
    *fl |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_nv tr[] = {{(uint8_t *)"x-tr", (uint8_t *)"t1", 4, 2, 0}};
    nghttp2_submit_trailer(ng, id, tr, 1);
    return 5;
}

static void answer(origin_t *o, int32_t id)
{
    o->last_sid = id;
    if (o->mode == M_SILENT) return;
    if (o->mode == M_REFUSE) {
        nghttp2_submit_rst_stream(o->ng, 0, id, NGHTTP2_REFUSED_STREAM);
        return;
    }
    if (o->mode == M_GOAWAY0) {
        nghttp2_submit_goaway(o->ng, 0, 0, NGHTTP2_NO_ERROR, NULL, 0);
        return;
    }
    nghttp2_nv h[] = {{(uint8_t *)":status", (uint8_t *)"200", 7, 3, 0}};
    nghttp2_data_provider dp = {.read_callback = o->mode == M_BIG ? big_read : hello_read};
    nghttp2_submit_response(o->ng, id, h, 1, &dp);
}

static int o_frame(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    (void)ng;
    origin_t *o = ud;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_HEADERS)
        o->got_trailer = true;
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        answer(o, f->hd.stream_id);
    return 0;
}

static int o_data(nghttp2_session *ng, uint8_t fl, int32_t id, const uint8_t *d, size_t n, void *ud)
{
    (void)ng;
    (void)fl;
    (void)id;
    (void)d;
    ((origin_t *)ud)->req_body += n;
    return 0;
}

static void origin_init(origin_t *o, int mode, uint32_t max_streams, bool connect_proto)
{
    memset(o, 0, sizeof *o);
    o->mode = mode;
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, o_frame);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, o_data);
    nghttp2_session_server_new(&o->ng, cb, o);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams},
                                   {NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, connect_proto}};
    nghttp2_submit_settings(o->ng, 0, iv, 2);
}

/* ---- the client side: records what the codec reports ---- */

typedef struct rec {
    int status, heads, ends, errors, kind;
    size_t data;
    bool end_on_head;
    char trailer[16];
    size_t body_left; /* request body to give */
    int defers;
    fy_h2_client_stream_t *s;
} rec_t;

static void r_head(void *ud, int st, fy_headers_t *hs, bool end)
{
    (void)hs;
    rec_t *r = ud;
    r->status = st;
    r->heads++;
    r->end_on_head = end;
}
static void r_data(void *ud, const char *p, size_t n)
{
    (void)p;
    ((rec_t *)ud)->data += n;
}
static void r_end(void *ud, fy_headers_t *tr)
{
    rec_t *r = ud;
    r->ends++;
    const fy_header_t *h = FY_HDR_FIND(tr, "x-tr");
    if (h && h->value.len < sizeof r->trailer) memcpy(r->trailer, h->value.p, h->value.len);
}
static void r_error(void *ud, int kind, uint64_t code, const char *why)
{
    (void)code;
    (void)why;
    rec_t *r = ud;
    r->errors++;
    r->kind = kind;
}
static ssize_t r_body(void *ud, char *buf, size_t len, const fy_headers_t **tr)
{
    rec_t *r = ud;
    if (r->defers > 0) {
        r->defers--;
        return FY_CLIENT_DEFER;
    }
    *tr = NULL;
    size_t n = len < r->body_left ? len : r->body_left;
    memset(buf, 'b', n);
    r->body_left -= n;
    return (ssize_t)n;
}
static const fy_client_stream_ops_t rops = {r_head, r_data, r_end, r_error, r_body, NULL};

static int settings_seen, goaways;
static void c_want(void *ud)
{
    (void)ud;
}
static void c_settings(void *ud)
{
    (void)ud;
    settings_seen++;
}
static void c_goaway(void *ud)
{
    (void)ud;
    goaways++;
}
static const fy_h2_client_conn_ops_t cops = {c_want, c_settings, c_goaway, NULL};

/* Move bytes both ways until neither side has anything to say. */
static void pump(fy_h2_client_t *c, origin_t *o)
{
    for (int i = 0; i < 1000; i++) {
        bool moved = false;
        const uint8_t *d;
        ssize_t n;
        while ((n = fy_h2_client_send(c, &d)) > 0) {
            CHECK(nghttp2_session_mem_recv(o->ng, d, (size_t)n) == n);
            moved = true;
        }
        while ((n = nghttp2_session_mem_send(o->ng, &d)) > 0) {
            CHECK(fy_h2_client_recv(c, (const char *)d, (size_t)n) == 0);
            moved = true;
        }
        if (!moved) return;
    }
}

static void req(fy_arena_t *a, fy_headers_t *hs, const char *m)
{
    *hs = (fy_headers_t){0};
    FY_HDR_ADD(a, hs, ":method", m, strlen(m));
    FY_HDR_ADD(a, hs, ":scheme", "http", 4);
    FY_HDR_ADD(a, hs, ":authority", "o", 1);
    FY_HDR_ADD(a, hs, ":path", "/", 1);
}

static void test_get_with_trailers(void)
{
    origin_t o;
    origin_init(&o, M_HELLO, 100, false);
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 4096);
    settings_seen = 0;
    fy_h2_client_t *c = fy_h2_client_new(&cops, NULL, 65536);
    pump(c, &o);
    CHECK_EQ_INT(settings_seen, 1);
    CHECK_EQ_INT(fy_h2_client_max_streams(c), 100);
    CHECK(!fy_h2_client_can_connect_protocol(c));
    rec_t r = {0};
    fy_headers_t hs;
    req(&a, &hs, "GET");
    r.s = fy_h2_client_submit(c, &hs, false, &a, &rops, &r);
    CHECK(r.s != NULL);
    CHECK_EQ_INT(fy_h2_client_nstreams(c), 1);
    pump(c, &o);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_INT(r.data, 5);
    CHECK_EQ_INT(r.ends, 1);
    CHECK_EQ_INT(r.errors, 0);
    CHECK(strcmp(r.trailer, "t1") == 0);
    fy_h2_client_consume(r.s, 5);
    fy_h2_client_release(r.s);
    pump(c, &o);
    CHECK_EQ_INT(fy_h2_client_nstreams(c), 0);
    fy_h2_client_free(c, "done");
    nghttp2_session_del(o.ng);
    fy_arena_free(&a);
}

static void test_flow_control_is_backpressure(void)
{
    origin_t o;
    origin_init(&o, M_BIG, 100, true);
    o.body_len = 4 * FY_H2C_STREAM_WINDOW;
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 4096);
    fy_h2_client_t *c = fy_h2_client_new(&cops, NULL, 65536);
    pump(c, &o);
    CHECK(fy_h2_client_can_connect_protocol(c));
    rec_t r = {0};
    fy_headers_t hs;
    req(&a, &hs, "GET");
    r.s = fy_h2_client_submit(c, &hs, false, &a, &rops, &r);
    pump(c, &o);
    /* nothing consumed: the origin stops at the stream window */
    CHECK_EQ_INT(r.data, FY_H2C_STREAM_WINDOW);
    for (int i = 0; i < 64 && r.ends == 0; i++) {
        fy_h2_client_consume(r.s, FY_H2C_STREAM_WINDOW); /* all delivered so far */
        pump(c, &o);
    }
    CHECK_EQ_INT(r.data, 4 * FY_H2C_STREAM_WINDOW);
    CHECK_EQ_INT(r.ends, 1);
    fy_h2_client_release(r.s);
    fy_h2_client_free(c, "done");
    nghttp2_session_del(o.ng);
    fy_arena_free(&a);
}

static void test_request_body_deferred(void)
{
    origin_t o;
    origin_init(&o, M_HELLO, 100, false);
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 4096);
    fy_h2_client_t *c = fy_h2_client_new(&cops, NULL, 65536);
    pump(c, &o);
    rec_t r = {0};
    r.body_left = 40000;
    r.defers = 1;
    fy_headers_t hs;
    req(&a, &hs, "POST");
    r.s = fy_h2_client_submit(c, &hs, true, &a, &rops, &r);
    pump(c, &o);
    CHECK_EQ_INT(o.req_body, 0); /* deferred */
    CHECK_EQ_INT(r.heads, 0);
    fy_h2_client_resume(r.s);
    pump(c, &o);
    CHECK_EQ_INT(o.req_body, 40000);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_INT(r.ends, 1);
    fy_h2_client_release(r.s);
    fy_h2_client_free(c, "done");
    nghttp2_session_del(o.ng);
    fy_arena_free(&a);
}

static void test_refused_and_goaway(void)
{
    origin_t o;
    origin_init(&o, M_REFUSE, 1, false);
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 4096);
    fy_h2_client_t *c = fy_h2_client_new(&cops, NULL, 65536);
    pump(c, &o);
    CHECK_EQ_INT(fy_h2_client_max_streams(c), 1);
    rec_t r = {0};
    fy_headers_t hs;
    req(&a, &hs, "GET");
    r.s = fy_h2_client_submit(c, &hs, false, &a, &rops, &r);
    pump(c, &o);
    CHECK_EQ_INT(r.errors, 1);
    CHECK_EQ_INT(r.kind, FY_CLIENT_REFUSED);
    fy_h2_client_release(r.s);
    /* GOAWAY(last 0): the next stream is refused too, by the GOAWAY */
    o.mode = M_GOAWAY0;
    goaways = 0;
    rec_t r2 = {0};
    r2.s = fy_h2_client_submit(c, &hs, false, &a, &rops, &r2);
    pump(c, &o);
    CHECK_EQ_INT(goaways, 1);
    CHECK_EQ_INT(r2.errors, 1);
    CHECK_EQ_INT(r2.kind, FY_CLIENT_REFUSED);
    fy_h2_client_release(r2.s);
    fy_h2_client_free(c, "done");
    nghttp2_session_del(o.ng);
    fy_arena_free(&a);
}

static void test_connection_loss_fails_open_streams(void)
{
    origin_t o;
    origin_init(&o, M_SILENT, 100, false);
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 4096);
    fy_h2_client_t *c = fy_h2_client_new(&cops, NULL, 65536);
    pump(c, &o);
    rec_t r = {0}, r2 = {0};
    fy_headers_t hs;
    req(&a, &hs, "GET");
    r.s = fy_h2_client_submit(c, &hs, false, &a, &rops, &r);
    r2.s = fy_h2_client_submit(c, &hs, false, &a, &rops, &r2);
    pump(c, &o);
    fy_h2_client_release(r2.s); /* its owner went away: no callback for it */
    fy_h2_client_fail_all(c, "lost");
    CHECK_EQ_INT(r.errors, 1);
    CHECK_EQ_INT(r.kind, FY_CLIENT_CONN);
    CHECK_EQ_INT(r2.errors, 0);
    CHECK(fy_h2_client_submit(c, &hs, false, &a, &rops, &r) == NULL); /* dead */
    fy_h2_client_release(r.s);
    fy_h2_client_free(c, "done");
    nghttp2_session_del(o.ng);
    fy_arena_free(&a);
}

static void test_garbage_is_fatal(void)
{
    fy_h2_client_t *c = fy_h2_client_new(&cops, NULL, 65536);
    const uint8_t *d;
    while (fy_h2_client_send(c, &d) > 0) {
    }
    static const char junk[] = "HTTP/1.1 200 OK\r\n\r\n";
    /* nghttp2 answers with GOAWAY and wants nothing more: the owner closes */
    int r = fy_h2_client_recv(c, junk, sizeof junk - 1);
    while (r == 0 && fy_h2_client_send(c, &d) > 0) {
    }
    CHECK(r < 0 || !fy_h2_client_alive(c));
    fy_h2_client_free(c, "done");
}

FY_TEST_MAIN(fy_log_min_level = FY_LOG_ALERT; test_get_with_trailers();
             test_flow_control_is_backpressure(); test_request_body_deferred();
             test_refused_and_goaway(); test_connection_loss_fails_open_streams();
             test_garbage_is_fatal(); fy_h2_client_thread_cleanup())
