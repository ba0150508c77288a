/* Tests for filter.c: chains sorted by stage with references, the request phase (NEXT, DONE,
 * WAIT + resume; listener chain before route chain), and sink layers (stage order, NULL ops
 * passing through, reaching the codec's sink). Exchanges and the codec sink are fakes. */
#include "http/filter.h"
#include "http/router.h"
#include "core/test.h"

static char trace[64];
static size_t tn;
static void mark(char c)
{
    if (tn + 1 < sizeof trace) trace[tn++] = c, trace[tn] = 0;
}

typedef struct tfilter {
    fy_filter_t f;
    char tag;
    fy_filter_verdict_t verdict;
    int destroyed;
} tfilter_t;

static fy_filter_verdict_t t_on_request(fy_filter_t *f, fy_exchange_t *ex)
{
    (void)ex;
    tfilter_t *t = (tfilter_t *)f;
    mark(t->tag);
    return t->verdict;
}
static void t_destroy(fy_filter_t *f)
{
    ((tfilter_t *)f)->destroyed++;
}

static const fy_filter_ops_t ops_access = {"access", FY_STAGE_ACCESS, t_on_request, t_destroy};
static const fy_filter_ops_t ops_auth = {"auth", FY_STAGE_AUTH, t_on_request, t_destroy};
static const fy_filter_ops_t ops_cache = {"cache", FY_STAGE_CACHE, t_on_request, t_destroy};

static void h_on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    (void)h;
    (void)ex;
    mark('H');
}
static const fy_handler_ops_t h_ops = {"t", h_on_request, NULL};

/* the codec's sink: records the sends */
static void c_send(fy_exchange_t *ex, const struct iovec *b, size_t n, int state)
{
    (void)ex;
    (void)b;
    (void)n;
    mark(state == FY_SEND_FINAL ? 'F' : 'M');
}
static void c_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state)
{
    (void)ex, (void)fd, (void)off, (void)len, (void)state;
    mark('f');
}
static void c_read_body(fy_exchange_t *ex)
{
    (void)ex;
    mark('r');
}
static const fy_sink_ops_t c_sink = {"test", c_send, c_send_file, c_read_body, NULL, NULL};

typedef struct tlayer {
    fy_sink_layer_t l;
    char tag;
} tlayer_t;
static void l_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *b, size_t n, int st)
{
    mark(((tlayer_t *)l)->tag);
    fy_layer_next_send(l, ex, b, n, st);
}
static const fy_layer_ops_t lops = {.name = "t", .send = l_send};
static const fy_layer_ops_t lops_pass = {.name = "pass"}; /* every op passes through */

static void test_chain(void)
{
    tfilter_t a = {{&ops_access, 0}, 'a', FY_FILTER_NEXT, 0};
    tfilter_t u = {{&ops_auth, 0}, 'u', FY_FILTER_NEXT, 0};
    tfilter_t c = {{&ops_cache, 0}, 'c', FY_FILTER_NEXT, 0};
    fy_filter_chain_t ch = {0}, ch2 = {0};
    CHECK(fy_filter_chain_add(&ch, &c.f) == 0);
    CHECK(fy_filter_chain_add(&ch, &a.f) == 0);
    CHECK(fy_filter_chain_add(&ch, &u.f) == 0);
    CHECK(fy_filter_chain_add(&ch2, &a.f) == 0);
    CHECK_EQ_INT(ch.n, 3);
    CHECK(ch.v[0] == &a.f && ch.v[1] == &u.f && ch.v[2] == &c.f);
    CHECK_EQ_INT(a.f.refs, 2);
    fy_filter_chain_free(&ch);
    CHECK_EQ_INT(a.destroyed, 0);
    CHECK_EQ_INT(u.destroyed, 1);
    fy_filter_chain_free(&ch2);
    CHECK_EQ_INT(a.destroyed, 1);
    CHECK(ch.v == NULL && ch.n == 0);
}

static void test_run(void)
{
    tfilter_t a = {{&ops_access, 0}, 'a', FY_FILTER_NEXT, 0};
    tfilter_t u = {{&ops_auth, 0}, 'u', FY_FILTER_NEXT, 0};
    tfilter_t c = {{&ops_cache, 0}, 'c', FY_FILTER_NEXT, 0};
    fy_filter_chain_t lch = {0};
    fy_filter_chain_add(&lch, &c.f); /* listener chain runs first even with a higher stage */
    fy_handler_t h = {&h_ops};
    fy_route_t r = {.handler = &h};
    fy_filter_chain_add(&r.filters, &u.f);
    fy_filter_chain_add(&r.filters, &a.f);
    fy_http_ctx_t ctx = {.filters = &lch};
    fy_exchange_t ex = {.ctx = &ctx, .route = &r, .sink = &c_sink};

    tn = 0;
    fy_filter_run(&ex);
    CHECK(strcmp(trace, "cauH") == 0);

    memset(&ex, 0, sizeof ex);
    ex.ctx = &ctx, ex.route = &r, ex.sink = &c_sink;
    a.verdict = FY_FILTER_WAIT;
    tn = 0;
    fy_filter_run(&ex);
    CHECK(strcmp(trace, "ca") == 0);
    fy_filter_resume(&ex); /* goes on after 'a' */
    CHECK(strcmp(trace, "cauH") == 0);

    memset(&ex, 0, sizeof ex);
    ex.ctx = &ctx, ex.route = &r, ex.sink = &c_sink;
    a.verdict = FY_FILTER_DONE;
    tn = 0;
    fy_filter_run(&ex);
    CHECK(strcmp(trace, "ca") == 0);
    fy_filter_chain_free(&lch);
    fy_filter_chain_free(&r.filters);
}

/* the one-filter fast path of fy_filter_run: NEXT, WAIT then resume, DONE; a second filter
 * turns it off */
static void test_run_one(void)
{
    tfilter_t a = {{&ops_access, 0}, 'a', FY_FILTER_NEXT, 0};
    tfilter_t u = {{&ops_auth, 0}, 'u', FY_FILTER_NEXT, 0};
    fy_handler_t h = {&h_ops};
    fy_route_t r = {.handler = &h};
    fy_filter_chain_add(&r.filters, &a.f);
    CHECK(r.filters.only == ops_access.on_request);
    fy_http_ctx_t ctx = {0};
    fy_exchange_t ex = {.ctx = &ctx, .route = &r, .sink = &c_sink};

    tn = 0;
    fy_filter_run(&ex);
    CHECK(strcmp(trace, "aH") == 0 && ex.filter_pos == 1);

    memset(&ex, 0, sizeof ex);
    ex.ctx = &ctx, ex.route = &r, ex.sink = &c_sink;
    a.verdict = FY_FILTER_WAIT;
    tn = 0;
    fy_filter_run(&ex);
    CHECK(strcmp(trace, "a") == 0);
    fy_filter_resume(&ex); /* the handler, not the filter again */
    CHECK(strcmp(trace, "aH") == 0);

    memset(&ex, 0, sizeof ex);
    ex.ctx = &ctx, ex.route = &r, ex.sink = &c_sink;
    a.verdict = FY_FILTER_DONE;
    tn = 0;
    fy_filter_run(&ex);
    CHECK(strcmp(trace, "a") == 0);

    fy_filter_chain_add(&r.filters, &u.f);
    CHECK(r.filters.only == NULL);
    memset(&ex, 0, sizeof ex);
    ex.ctx = &ctx, ex.route = &r, ex.sink = &c_sink;
    a.verdict = FY_FILTER_NEXT;
    tn = 0;
    fy_filter_run(&ex);
    CHECK(strcmp(trace, "auH") == 0);
    fy_filter_chain_free(&r.filters);
    CHECK(r.filters.only == NULL);
}

/* the names filters give the fields they add */
static void test_field_names(void)
{
    CHECK(fy_filter_field_is_ours(FY_FILTER_FIELD_TRACEPARENT));
    CHECK(fy_filter_field_is_ours(FY_FILTER_FIELD_TRACESTATE));
    CHECK(strcmp(FY_FILTER_FIELD_TRACEPARENT, "traceparent") == 0);
    CHECK(strcmp(FY_FILTER_FIELD_TRACESTATE, "tracestate") == 0);
    static const char other[] = "traceparent";
    CHECK(!fy_filter_field_is_ours(other));
    CHECK(!fy_filter_field_is_ours(NULL));
}

static void test_layers(void)
{
    fy_exchange_t ex = {.sink = &c_sink};
    tlayer_t x = {.tag = 'x'}, y = {.tag = 'y'}, z = {.tag = 'z'};
    fy_sink_layer_t p;
    fy_exchange_push_layer(&ex, &y.l, &lops, FY_STAGE_COMPRESS);
    fy_exchange_push_layer(&ex, &x.l, &lops, FY_STAGE_CACHE);
    fy_exchange_push_layer(&ex, &p, &lops_pass, FY_STAGE_REWRITE);
    fy_exchange_push_layer(&ex, &z.l, &lops, FY_STAGE_CAPTURE);
    CHECK(fy_exchange_find_layer(&ex, &lops_pass) == &p);
    CHECK(fy_exchange_find_layer(&ex, &lops) == &x.l); /* the outermost of that kind */
    tn = 0;
    fy_exchange_send(&ex, NULL, 0, FY_SEND_MORE);
    fy_exchange_send(&ex, NULL, 0, FY_SEND_FINAL);
    /* highest stage first, then down to the codec */
    CHECK(strcmp(trace, "xyzMxyzF") == 0);
    tn = 0;
    fy_exchange_send_file(&ex, -1, 0, 0, FY_SEND_FINAL); /* no layer has send_file */
    fy_exchange_read_body(&ex, NULL);
    CHECK(strcmp(trace, "fr") == 0);
    CHECK(fy_exchange_detach(&ex, NULL, NULL, 0, NULL) == -1);
}

FY_TEST_MAIN(test_chain(); test_run(); test_run_one(); test_field_names(); test_layers())
