/* Tests for router.c and the protocol-neutral helpers of exchange.c: host and path matching,
 * method ids, reason phrases, HTTP dates and header lists. Exchanges are built by hand and the
 * handlers are dummies: nothing is dispatched. */
#include "http/exchange.h"
#include "http/handler.h"
#include "http/router.h"
#include "core/test.h"

#include <stdint.h>

/* ---- dummy handlers ---- */

static int destroyed;
static void dummy_on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    (void)h;
    (void)ex;
}
static void dummy_destroy(fy_handler_t *h)
{
    (void)h;
    destroyed++;
}
static const fy_handler_ops_t dummy_ops = {"dummy", dummy_on_request, dummy_destroy};

typedef struct dummy {
    fy_handler_t h;
    int id;
} dummy_t;

static fy_str_t S(const char *s)
{
    return fy_str(s, strlen(s));
}

static fy_route_t route_hosts(char **hosts, size_t n)
{
    fy_route_t r;
    memset(&r, 0, sizeof r);
    r.hosts = hosts;
    r.nhosts = n;
    r.path = "/";
    r.path_len = 1;
    return r;
}

/* ---- fy_route_host_matches ---- */

static void test_host_matches(void)
{
    fy_route_t any = route_hosts(NULL, 0);
    CHECK(fy_route_host_matches(&any, S("whatever")));
    CHECK(fy_route_host_matches(&any, S("")));

    char *h1[] = {"example.com"};
    fy_route_t r = route_hosts(h1, 1);
    CHECK(fy_route_host_matches(&r, S("example.com")));
    CHECK(fy_route_host_matches(&r, S("EXAMPLE.Com")));
    CHECK(fy_route_host_matches(&r, S("example.com:8080")));
    CHECK(fy_route_host_matches(&r, S("example.com:")));
    CHECK(fy_route_host_matches(&r, S("example.com.")));
    CHECK(fy_route_host_matches(&r, S("example.com.:443")));
    CHECK(!fy_route_host_matches(&r, S("example.co")));
    CHECK(!fy_route_host_matches(&r, S("example.comm")));
    CHECK(!fy_route_host_matches(&r, S("www.example.com")));
    CHECK(!fy_route_host_matches(&r, S("xexample.com")));
    CHECK(!fy_route_host_matches(&r, S("")));
    CHECK(!fy_route_host_matches(&r, S(":8080")));
    /* length-delimited: bytes after len are not read */
    CHECK(fy_route_host_matches(&r, fy_str("example.comXYZ", 11)));
    CHECK(!fy_route_host_matches(&r, fy_str("example.com", 10)));

    /* IPv6 literal: the port after ']' is stripped, the colons inside are not */
    char *h6[] = {"[::1]"};
    r = route_hosts(h6, 1);
    CHECK(fy_route_host_matches(&r, S("[::1]")));
    CHECK(fy_route_host_matches(&r, S("[::1]:8080")));
    CHECK(!fy_route_host_matches(&r, S("[::2]:8080")));
    CHECK(!fy_route_host_matches(&r, S("[::1")));
    char *h6b[] = {"[2001:db8::a]"};
    r = route_hosts(h6b, 1);
    CHECK(fy_route_host_matches(&r, S("[2001:DB8::A]:443")));

    /* wildcard: any non-empty label sequence before the suffix */
    char *hw[] = {"*.example.com"};
    r = route_hosts(hw, 1);
    CHECK(fy_route_host_matches(&r, S("a.example.com")));
    CHECK(fy_route_host_matches(&r, S("a.b.example.com")));
    CHECK(fy_route_host_matches(&r, S("A.Example.COM:80")));
    CHECK(fy_route_host_matches(&r, S("a.example.com.")));
    CHECK(!fy_route_host_matches(&r, S("example.com")));
    CHECK(!fy_route_host_matches(&r, S(".example.com")));
    CHECK(!fy_route_host_matches(&r, S("aexample.com")));
    CHECK(!fy_route_host_matches(&r, S("a.example.com.evil")));
    CHECK(!fy_route_host_matches(&r, S("a.example.org")));

    /* a list: any entry */
    char *hl[] = {"a.test", "*.b.test", "[::1]"};
    r = route_hosts(hl, 3);
    CHECK(fy_route_host_matches(&r, S("a.test")));
    CHECK(fy_route_host_matches(&r, S("x.b.test:1")));
    CHECK(fy_route_host_matches(&r, S("[::1]:1")));
    CHECK(!fy_route_host_matches(&r, S("b.test")));
    CHECK(!fy_route_host_matches(&r, S("c.test")));
}

/* ---- fy_router_match ---- */

static fy_exchange_t make_ex(int method, const char *authority, const char *path)
{
    fy_exchange_t ex;
    memset(&ex, 0, sizeof ex);
    ex.req.method_id = method;
    ex.req.authority = S(authority);
    ex.req.path = S(path);
    return ex;
}

static int match_id(const fy_router_t *rt, int method, const char *host, const char *path)
{
    fy_exchange_t ex = make_ex(method, host, path);
    const fy_route_t *r = fy_router_match(rt, &ex);
    return r ? ((dummy_t *)r->handler)->id : -1;
}

static fy_route_t mk(char **hosts, size_t nhosts, const char *path, unsigned methods, dummy_t *d)
{
    fy_route_t r;
    memset(&r, 0, sizeof r);
    r.hosts = hosts;
    r.nhosts = nhosts;
    r.path = path;
    r.path_len = strlen(path);
    r.methods = methods;
    r.handler = &d->h;
    return r;
}

static void test_router_match(void)
{
    static dummy_t d[8];
    for (int i = 0; i < 8; i++) d[i] = (dummy_t){{&dummy_ops}, i};
    static char *api_host[] = {"api.test"};
    static char *wild[] = {"*.test"};
    fy_route_t routes[] = {
        mk(api_host, 1, "/v1", 1u << FY_M_GET | 1u << FY_M_HEAD, &d[0]),
        mk(NULL, 0, "/api", 0, &d[1]),
        mk(NULL, 0, "/api", 0, &d[2]), /* shadowed by the one above */
        mk(NULL, 0, "/files/", 1u << FY_M_GET, &d[3]),
        mk(wild, 1, "/", 1u << FY_M_POST, &d[4]),
        mk(NULL, 0, "/", 0, &d[5]),
    };
    fy_router_t rt = {routes, sizeof routes / sizeof routes[0]};

    /* prefix on a segment boundary */
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/api"), 1);
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/api/"), 1);
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/api/x/y"), 1);
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/apix"), 5);
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/ap"), 5);
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/API"), 5); /* paths are case-sensitive */
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/"), 5);
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", ""), 5);
    /* a prefix ending in '/' is a plain prefix */
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/files/"), 3);
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/files/a.txt"), 3);
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/files"), 5);
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "x", "/filesx"), 5);
    /* methods mask */
    CHECK_EQ_INT(match_id(&rt, FY_M_PUT, "x", "/files/a"), 5);
    CHECK_EQ_INT(match_id(&rt, FY_M_OTHER, "x", "/files/a"), 5);
    /* host + path + methods together; first match wins */
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "api.test", "/v1/users"), 0);
    CHECK_EQ_INT(match_id(&rt, FY_M_HEAD, "API.TEST:8443", "/v1"), 0);
    CHECK_EQ_INT(match_id(&rt, FY_M_POST, "api.test", "/v1/users"), 4); /* method: next */
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "web.test", "/v1"), 5);        /* host: next */
    CHECK_EQ_INT(match_id(&rt, FY_M_GET, "api.test", "/v10"), 5);       /* boundary */
    CHECK_EQ_INT(match_id(&rt, FY_M_POST, "a.test", "/api"), 1);
    CHECK_EQ_INT(match_id(&rt, FY_M_POST, "a.test", "/other"), 4);
    CHECK_EQ_INT(match_id(&rt, FY_M_POST, "test", "/other"), 5);

    /* no catch-all: no match */
    fy_router_t rt2 = {routes, 5};
    CHECK_EQ_INT(match_id(&rt2, FY_M_GET, "x", "/nothing"), -1);
    fy_router_t empty = {NULL, 0};
    CHECK_EQ_INT(match_id(&empty, FY_M_GET, "x", "/"), -1);

    /* fy_router_free destroys each handler once and empties the router */
    fy_route_t *owned = malloc(sizeof routes);
    memcpy(owned, routes, sizeof routes);
    owned[2].handler = NULL; /* a route without a handler is skipped */
    fy_router_t rt3 = {owned, sizeof routes / sizeof routes[0]};
    destroyed = 0;
    fy_router_free(&rt3);
    CHECK_EQ_INT(destroyed, 5);
    CHECK(rt3.routes == NULL && rt3.n == 0);
}

/* ---- methods and reasons ---- */

static void test_method_reason(void)
{
    CHECK_EQ_INT(fy_http_method_id(S("GET")), FY_M_GET);
    CHECK_EQ_INT(fy_http_method_id(S("HEAD")), FY_M_HEAD);
    CHECK_EQ_INT(fy_http_method_id(S("POST")), FY_M_POST);
    CHECK_EQ_INT(fy_http_method_id(S("PUT")), FY_M_PUT);
    CHECK_EQ_INT(fy_http_method_id(S("DELETE")), FY_M_DELETE);
    CHECK_EQ_INT(fy_http_method_id(S("OPTIONS")), FY_M_OPTIONS);
    CHECK_EQ_INT(fy_http_method_id(S("PATCH")), FY_M_PATCH);
    CHECK_EQ_INT(fy_http_method_id(S("CONNECT")), FY_M_CONNECT);
    CHECK_EQ_INT(fy_http_method_id(S("TRACE")), FY_M_TRACE);
    /* methods are case-sensitive */
    CHECK_EQ_INT(fy_http_method_id(S("get")), FY_M_OTHER);
    CHECK_EQ_INT(fy_http_method_id(S("Get")), FY_M_OTHER);
    CHECK_EQ_INT(fy_http_method_id(S("GETS")), FY_M_OTHER);
    CHECK_EQ_INT(fy_http_method_id(S("GE")), FY_M_OTHER);
    CHECK_EQ_INT(fy_http_method_id(S("PROPFIND")), FY_M_OTHER);
    CHECK_EQ_INT(fy_http_method_id(S("")), FY_M_OTHER);
    CHECK_EQ_INT(fy_http_method_id(fy_str("GETX", 3)), FY_M_GET);
    CHECK_EQ_INT(fy_http_method_id(fy_str("POST", 3)), FY_M_OTHER);
    /* every id fits the route methods mask */
    CHECK(FY_M_TRACE < 32);

    CHECK(strcmp(fy_http_reason(200), "OK") == 0);
    CHECK(strcmp(fy_http_reason(206), "Partial Content") == 0);
    CHECK(strcmp(fy_http_reason(304), "Not Modified") == 0);
    CHECK(strcmp(fy_http_reason(404), "Not Found") == 0);
    CHECK(strcmp(fy_http_reason(413), "Content Too Large") == 0);
    CHECK(strcmp(fy_http_reason(416), "Range Not Satisfiable") == 0);
    CHECK(strcmp(fy_http_reason(431), "Request Header Fields Too Large") == 0);
    CHECK(strcmp(fy_http_reason(505), "HTTP Version Not Supported") == 0);
    CHECK(strcmp(fy_http_reason(299), "Unknown") == 0);
    CHECK(strcmp(fy_http_reason(0), "Unknown") == 0);
    CHECK(strcmp(fy_http_reason(-404), "Unknown") == 0);
    /* every status the codecs and handlers produce has its phrase */
    static const int used[] = {100, 101, 200, 201, 204, 206, 301, 302, 304, 307, 308,
                               400, 401, 403, 404, 405, 408, 411, 412, 413, 414, 416,
                               417, 429, 431, 500, 501, 502, 503, 504, 505};
    int unknown = 0;
    for (size_t i = 0; i < sizeof used / sizeof used[0]; i++)
        if (strcmp(fy_http_reason(used[i]), "Unknown") == 0) unknown++;
    CHECK_EQ_INT(unknown, 0);
}

/* ---- dates ---- */

static void test_dates(void)
{
    char buf[32];
    memset(buf, 'x', sizeof buf);
    fy_http_date_fmt(0, buf);
    CHECK(strcmp(buf, "Thu, 01 Jan 1970 00:00:00 GMT") == 0);
    CHECK_EQ_INT(strlen(buf), 29);
    fy_http_date_fmt(784111777, buf);
    CHECK(strcmp(buf, "Sun, 06 Nov 1994 08:49:37 GMT") == 0);
    fy_http_date_fmt(951782400, buf); /* leap day */
    CHECK(strcmp(buf, "Tue, 29 Feb 2000 00:00:00 GMT") == 0);
    fy_http_date_fmt(253402300799, buf);
    CHECK(strcmp(buf, "Fri, 31 Dec 9999 23:59:59 GMT") == 0);

    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 06 Nov 1994 08:49:37 GMT")), 784111777);
    CHECK_EQ_INT(fy_http_date_parse(S("Thu, 01 Jan 1970 00:00:00 GMT")), 0);
    CHECK_EQ_INT(fy_http_date_parse(S("Tue, 29 Feb 2000 00:00:00 GMT")), 951782400);

    /* round trip */
    uint64_t x = 88172645463325252ull;
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        time_t t = (time_t)(x % 253402300800ull);
        if (i == 0) t = 0;
        if (i == 1) t = 253402300799;
        fy_http_date_fmt(t, buf);
        if (fy_http_date_parse(fy_str(buf, 29)) != t) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    /* the per-thread cached variant */
    CHECK(strcmp(fy_http_date(784111777), "Sun, 06 Nov 1994 08:49:37 GMT") == 0);
    CHECK(strcmp(fy_http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT") == 0);
    CHECK(strcmp(fy_http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT") == 0);

    /* invalid: other formats, wrong length, bad pieces */
    CHECK_EQ_INT(fy_http_date_parse(S("")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sunday, 06-Nov-94 08:49:37 GMT")), -1); /* RFC 850 */
    CHECK_EQ_INT(fy_http_date_parse(S("Sun Nov  6 08:49:37 1994")), -1);       /* asctime */
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 06 Nov 1994 08:49:37 GMT ")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 06 Nov 1994 08:49:37 UTC")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 06 Nov 1994 08:49:37 gmt")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun; 06 Nov 1994 08:49:37 GMT")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 06 Foo 1994 08:49:37 GMT")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 06 nov 1994 08:49:37 GMT")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, xx Nov 1994 08:49:37 GMT")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 06 Nov 19x4 08:49:37 GMT")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 06 Nov 1994 08:4x:37 GMT")), -1);
    CHECK_EQ_INT(fy_http_date_parse(fy_str("Sun, 06 Nov 1994 08:49:37 GMT", 28)), -1);
    /* out-of-range fields are not a date (timegm would silently normalise them) */
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 32 Nov 1994 08:49:37 GMT")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 00 Nov 1994 08:49:37 GMT")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 06 Nov 1994 25:49:37 GMT")), -1);
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, 06 Nov 1994 08:99:37 GMT")), -1);
    /* IMF-fixdate fields are exactly two digits: no sign or space */
    CHECK_EQ_INT(fy_http_date_parse(S("Sun, -6 Nov 1994 08:49:37 GMT")), -1);
}

/* ---- header lists ---- */

static void test_headers(void)
{
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 512);
    fy_headers_t hs = {0};
    CHECK(FY_HDR_FIND(&hs, "host") == NULL);
    static char names[200][16], values[200][16];
    for (int i = 0; i < 200; i++) {
        int nl = snprintf(names[i], sizeof names[i], "X-Hdr-%d", i);
        int vl = snprintf(values[i], sizeof values[i], "v%d", i);
        fy_headers_add(&a, &hs, names[i], (size_t)nl, values[i], (size_t)vl);
    }
    CHECK_EQ_INT(hs.n, 200);
    CHECK(hs.cap >= 200);
    int bad = 0;
    for (int i = 0; i < 200; i++) {
        char lower[16];
        int nl = snprintf(lower, sizeof lower, "x-hdr-%d", i);
        const fy_header_t *h = fy_headers_find(&hs, lower, (size_t)nl);
        if (!h || h != &hs.v[i] || !fy_str_eq(h->value, values[i], strlen(values[i]))) bad++;
    }
    CHECK_EQ_INT(bad, 0); /* nothing lost across growth */

    fy_headers_t h2 = {0};
    FY_HDR_ADD(&a, &h2, "content-type", "text/plain", 10);
    fy_headers_add(&a, &h2, "Set-Cookie", 10, "a=1", 3);
    fy_headers_add(&a, &h2, "SET-COOKIE", 10, "b=2", 3);
    const fy_header_t *ct = FY_HDR_FIND(&h2, "content-type");
    CHECK(ct && fy_str_eq(ct->value, "text/plain", 10));
    const fy_header_t *sc = FY_HDR_FIND(&h2, "set-cookie");
    CHECK(sc && fy_str_eq(sc->value, "a=1", 3)); /* the first one */
    CHECK(FY_HDR_FIND(&h2, "content") == NULL);
    CHECK(FY_HDR_FIND(&h2, "content-type-x") == NULL);
    CHECK(FY_HDR_FIND(&h2, "x") == NULL);
    /* an empty value is kept as a header */
    fy_headers_add(&a, &h2, "x-empty", 7, "", 0);
    const fy_header_t *e = FY_HDR_FIND(&h2, "x-empty");
    CHECK(e && e->value.len == 0);
    fy_arena_free(&a);
}

FY_TEST_MAIN(test_host_matches(); test_router_match(); test_method_reason(); test_dates();
             test_headers())
