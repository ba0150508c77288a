/* Tests for protocol.c, the FY_STAGE_PROTOCOL step of fy_exchange_dispatch: what it answers
 * before any route (classic CONNECT 405 unless the listener is a forward proxy and the codec can
 * carry a tunnel, `OPTIONS *` 204 with Allow, Content-Length over limits.body-size 413 with
 * ex->refused set), what it lets through to the route, and Alt-Svc added once by
 * fy_exchange_start_response for h1/h2 final responses only. The codec's sink is a fake that
 * records what it was sent. */
#include "http/protocol.h"
#include "http/router.h"
#include "core/test.h"

static int handled; /* exchanges that reached the route's handler */
static void h_on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    (void)h;
    (void)ex;
    handled++;
}
static const fy_handler_ops_t h_ops = {.name = "t", .on_request = h_on_request};

static int finals;
static void c_send(fy_exchange_t *ex, const struct iovec *b, size_t n, int state)
{
    (void)ex, (void)b, (void)n;
    if (state == FY_SEND_FINAL) finals++;
}
static const fy_sink_ops_t c_sink = {.name = "test", .send = c_send};

static fy_loop_t loop;
static fy_handler_t handler = {&h_ops};
static fy_route_t route = {.path = "/", .path_len = 1, .handler = &handler};
static fy_router_t router = {&route, 1};
static fy_http_limits_t limits = {.max_body = 1000, .merge_slashes = true};
static fy_http_ctx_t ctx = {.router = &router, .limits = &limits, .loop = &loop};
static fy_arena_t arena;
static fy_exchange_t ex;

static fy_exchange_t *req(int method, const char *target, int64_t cl, int version)
{
    fy_arena_reset(&arena);
    memset(&ex, 0, sizeof ex);
    ex.arena = &arena;
    ex.ctx = &ctx;
    ex.sink = &c_sink;
    ex.req.method_id = method;
    ex.req.target = fy_str(target, strlen(target));
    ex.req.path = method == FY_M_CONNECT ? FY_STR_NULL : ex.req.target;
    ex.req.content_length = cl;
    ex.req.version = version;
    handled = finals = 0;
    return &ex;
}

static int count(const fy_headers_t *hs, const char *name)
{
    int n = 0;
    for (size_t i = 0; i < hs->n; i++) n += fy_str_ieq(hs->v[i].name, name, strlen(name));
    return n;
}

static void test_connect(void)
{
    int versions[] = {11, 20, 30};
    for (int i = 0; i < 3; i++) {
        ctx.forward_proxy = false;
        fy_exchange_dispatch(req(FY_M_CONNECT, "example.com:443", 0, versions[i]));
        CHECK_EQ_INT(handled, 0);
        CHECK_EQ_INT(ex.res.status, 405);
        CHECK(ex.refused);
        CHECK(strcmp(ex.error, FY_HTTP_E_CONNECT) == 0);
        CHECK(ex.route == NULL); /* before any route */
        CHECK_EQ_INT(finals, 1);

        /* a forward proxy's handler takes it, where the codec can carry a tunnel */
        ctx.forward_proxy = true;
        fy_exchange_dispatch(req(FY_M_CONNECT, "example.com:443", 0, versions[i]));
        CHECK_EQ_INT(handled, versions[i] == 30 ? 0 : 1);
        CHECK_EQ_INT(ex.res.status, versions[i] == 30 ? 405 : 0);
    }
    /* h1 inside an intercepted tunnel cannot hand its connection over */
    fy_exchange_dispatch(req(FY_M_CONNECT, "example.com:443", 0, 11));
    ex.tunnel = &ex;
    handled = 0;
    memset(&ex.res, 0, sizeof ex.res);
    fy_exchange_dispatch(&ex);
    CHECK_EQ_INT(handled, 0);
    CHECK_EQ_INT(ex.res.status, 405);
    ctx.forward_proxy = false;

    /* an extended CONNECT (RFC 8441/9220) is a route's business */
    req(FY_M_CONNECT, "/chat", 0, 20);
    ex.req.path = ex.req.target;
    ex.req.protocol = FY_STR_LIT("websocket");
    fy_exchange_dispatch(&ex);
    CHECK_EQ_INT(handled, 1);
}

static void test_options_and_size(void)
{
    fy_exchange_dispatch(req(FY_M_OPTIONS, "*", 0, 20));
    CHECK_EQ_INT(handled, 0);
    CHECK_EQ_INT(ex.res.status, 204);
    CHECK(!ex.refused);
    const fy_header_t *a = FY_HDR_FIND(&ex.res.headers, "allow");
    CHECK(a && fy_str_eq(a->value, "GET, HEAD, POST, OPTIONS", 24));

    fy_exchange_dispatch(req(FY_M_OPTIONS, "/x", 0, 11)); /* not asterisk-form: routed */
    CHECK_EQ_INT(handled, 1);

    fy_exchange_dispatch(req(FY_M_POST, "/up", 1001, 11));
    CHECK_EQ_INT(handled, 0);
    CHECK_EQ_INT(ex.res.status, 413);
    CHECK(ex.refused);
    fy_exchange_dispatch(req(FY_M_POST, "/up", 1000, 30)); /* at the limit: fine */
    CHECK_EQ_INT(handled, 1);
    fy_exchange_dispatch(req(FY_M_POST, "/up", -1, 20)); /* unknown length: the codec counts */
    CHECK_EQ_INT(handled, 1);

    /* the codecs' answer to a body that grows past the limit */
    req(FY_M_POST, "/up", -1, 20);
    fy_http_body_too_large(&ex);
    CHECK_EQ_INT(ex.res.status, 413);
    CHECK(ex.refused && strcmp(ex.error, FY_HTTP_E_BODY_SIZE) == 0);
}

static void test_alt_svc(void)
{
    static const char v[] = "h3=\":443\"; ma=86400";
    ctx.alt_svc = v;
    /* once per response, even when the handler's response is replaced by an error page */
    fy_exchange_dispatch(req(FY_M_GET, "/", 0, 11));
    ex.res.status = 200;
    fy_exchange_start_response(&ex, NULL);
    fy_exchange_fail(&ex, 502, "test");
    CHECK_EQ_INT(count(&ex.res.headers, "alt-svc"), 1);
    const fy_header_t *h = FY_HDR_FIND(&ex.res.headers, "alt-svc");
    CHECK(h && fy_str_eq(h->value, v, strlen(v)));
    /* the refusals carry it too (the codecs wrote it for every final response) */
    fy_exchange_dispatch(req(FY_M_POST, "/up", 5000, 20));
    CHECK_EQ_INT(count(&ex.res.headers, "alt-svc"), 1);
    /* not on h3 itself, and not on interim responses */
    fy_exchange_dispatch(req(FY_M_OPTIONS, "*", 0, 30));
    CHECK_EQ_INT(count(&ex.res.headers, "alt-svc"), 0);
    req(FY_M_GET, "/ws", 0, 11);
    ex.res.status = 101;
    fy_exchange_start_response(&ex, NULL);
    CHECK_EQ_INT(count(&ex.res.headers, "alt-svc"), 0);
    ctx.alt_svc = NULL;
    fy_exchange_dispatch(req(FY_M_OPTIONS, "*", 0, 11));
    CHECK_EQ_INT(count(&ex.res.headers, "alt-svc"), 0);
}

FY_TEST_MAIN(fy_arena_init(&arena, NULL, 0, 4096); test_connect(); test_options_and_size();
             test_alt_svc(); fy_arena_free(&arena))
