/* The inspector's filter language and query strings: parse, match, errors, limits. */
#include "ops/inspector_filter.c"

#include "core/test.h"

static fy_cs_header_t rq[] = {{FY_STR_LIT("User-Agent"), FY_STR_LIT("curl/8")},
                              {FY_STR_LIT("X-Trace"), FY_STR_LIT("abc")}};
static fy_cs_header_t rs[] = {{FY_STR_LIT("Content-Type"), FY_STR_LIT("application/json")}};
static fy_cs_flow_t flow;
static int loads;

static const fy_cs_flow_t *load(void *ud)
{
    (void)ud;
    loads++;
    return &flow;
}

static bool m(const char *f, const fy_cs_entry_t *e)
{
    const char *err;
    size_t at;
    fy_insp_expr_t *x = fy_insp_filter_parse(f, strlen(f), &err, &at);
    if (!x && err) {
        fprintf(stderr, "parse %s: %s at %zu\n", f, err, at);
        return false;
    }
    fy_insp_subject_t s = {.e = e, .load = load};
    bool r = fy_insp_filter_match(x, &s);
    fy_insp_filter_free(x);
    return r;
}

static const char *perr(const char *f, size_t *at)
{
    const char *err;
    fy_insp_expr_t *x = fy_insp_filter_parse(f, strlen(f), &err, at);
    fy_insp_filter_free(x);
    return x ? NULL : err;
}

static void test_match(void)
{
    fy_cs_entry_t e = {.id = 7,
                       .status = 503,
                       .duration_ms = 1500,
                       .res_size = 2048,
                       .flags = FY_CS_INTERCEPTED,
                       .method = "POST",
                       .host = "api.Example.test",
                       .target = "/v1/items?page=2",
                       .ctype = "application/json"};
    flow = (fy_cs_flow_t){.req_headers = rq,
                          .n_req_headers = 2,
                          .res_headers = rs,
                          .n_res_headers = 1,
                          .req_body = FY_STR_LIT("{\"name\": \"Widget\"}"),
                          .res_body = FY_STR_LIT("{\"id\": 42}")};
    CHECK(m("", &e));
    CHECK(m("   ", &e));
    CHECK(m("~d example", &e));
    CHECK(!m("~d other", &e));
    CHECK(m("~u /v1/items", &e));
    CHECK(m("items", &e)); /* a bare word is ~u */
    CHECK(m("~m post", &e));
    CHECK(!m("~m pos", &e));
    CHECK(m("~c 503", &e));
    CHECK(m("~c >=500", &e));
    CHECK(m("~c 5xx", &e));
    CHECK(!m("~c 4xx", &e));
    CHECK(!m("~c <500", &e));
    CHECK(m("~c !=200", &e));
    CHECK(m("~dur >1000", &e));
    CHECK(!m("~dur <=1000", &e));
    CHECK(m("~size 2048", &e));
    CHECK(m("~t json", &e));
    CHECK(m("~i", &e));
    CHECK(!m("!~i", &e));
    loads = 0;
    CHECK(m("~d example ~c 503", &e)); /* juxtaposition is & */
    CHECK_EQ_INT(loads, 0);            /* index terms never read the flow */
    CHECK(m("~d nope | ~c 503", &e));
    CHECK(!m("~d nope | (~c 503 & ~m GET)", &e));
    CHECK(m("!(~m GET | ~m PUT)", &e));
    CHECK(m("~h \"x-trace: abc\"", &e));
    CHECK(m("~hq user-agent", &e));
    CHECK(!m("~hs user-agent", &e));
    CHECK(m("~hs content-type:", &e));
    CHECK(m("~b widget", &e));
    CHECK(m("~bs \"\\\"id\\\": 42\"", &e));
    CHECK(!m("~bq 42", &e));
    CHECK(!m("~e", &e));
    CHECK(loads > 0);
    fy_insp_subject_t s = {.e = &e, .load = NULL}; /* an unreadable flow: body terms false */
    const char *err;
    size_t at;
    fy_insp_expr_t *x = fy_insp_filter_parse("~b widget", 9, &err, &at);
    CHECK(!fy_insp_filter_match(x, &s));
    CHECK(fy_insp_filter_needs_flow(x));
    fy_insp_filter_free(x);
    x = fy_insp_filter_parse("~d a | ~c 200", 13, &err, &at);
    CHECK(!fy_insp_filter_needs_flow(x));
    fy_insp_filter_free(x);
}

static void test_errors(void)
{
    size_t at;
    CHECK(perr("~x foo", &at) != NULL);
    CHECK_EQ_INT(at, 0);
    CHECK(perr("~d", &at) != NULL);
    CHECK(perr("~c abc", &at) != NULL);
    CHECK(perr("~c >", &at) != NULL);
    CHECK(perr("(~d a", &at) != NULL);
    CHECK(perr("~d a)", &at) != NULL);
    CHECK_EQ_INT(at, 4);
    CHECK(perr("~d \"open", &at) != NULL);
    CHECK(perr("| ~d a", &at) != NULL);
    CHECK(perr("~d a |", &at) != NULL);
    CHECK(perr("~c 99999999999999999999", &at) != NULL);
    char deep[200];
    memset(deep, '(', 100);
    memcpy(deep + 100, "a", 2);
    CHECK(perr(deep, &at) != NULL); /* nesting bound */
    memset(deep, '!', 100);
    memcpy(deep + 100, "a", 2);
    CHECK(perr(deep, &at) != NULL);
    char many[3000];
    for (int i = 0; i < 300; i++) memcpy(many + 2 * i, "a ", 2);
    many[600] = 0;
    CHECK(perr(many, &at) != NULL); /* term bound */
}

static void test_query(void)
{
    const char *q = "filter=~c+%3E%3D500&limit=20&x&token=a%2Fb&bad=%zz%4";
    size_t n = strlen(q);
    char out[64];
    CHECK_EQ_INT(fy_insp_query_get(q, n, "filter", out, sizeof out), 8);
    CHECK(strcmp(out, "~c >=500") == 0 || (printf("%s\n", out), 0));
    CHECK_EQ_INT(fy_insp_query_get(q, n, "x", out, sizeof out), 0);
    CHECK_EQ_INT(fy_insp_query_get(q, n, "nope", out, sizeof out), -1);
    CHECK_EQ_INT(fy_insp_query_get(q, n, "token", out, sizeof out), 3);
    CHECK(strcmp(out, "a/b") == 0);
    CHECK_EQ_INT(fy_insp_query_get(q, n, "bad", out, sizeof out), 5);
    CHECK(strcmp(out, "%zz%4") == 0);
    CHECK_EQ_INT(fy_insp_query_get(q, n, "filter", out, 4), 3); /* cut at the buffer */
    CHECK(strcmp(out, "~c ") == 0);
    CHECK_EQ_INT(fy_insp_query_uint(q, n, "limit", 5, 1000), 20);
    CHECK_EQ_INT(fy_insp_query_uint(q, n, "limit", 5, 10), 10);
    CHECK_EQ_INT(fy_insp_query_uint(q, n, "token", 5, 10), 5);
    CHECK_EQ_INT(fy_insp_query_uint(q, n, "none", 5, 10), 5);
    CHECK_EQ_INT(fy_insp_query_get("", 0, "a", out, sizeof out), -1);
    CHECK_EQ_INT(fy_insp_query_get("a", 1, "a", out, sizeof out), 0);
}

FY_TEST_MAIN({
    test_match();
    test_errors();
    test_query();
})
