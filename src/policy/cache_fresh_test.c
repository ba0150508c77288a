/* Tests for cache_fresh.c: storability for a shared cache (§3, §3.5, must-understand, Vary: *,
 * Set-Cookie), the freshness lifetime's order of precedence and its odd inputs (§4.2.1,
 * Expires invalid or repeated, the heuristic), the age calculation (§4.2.3) and what a
 * request's directives allow (§5.2.1, RFC 5861). */
#include "policy/cache_fresh.h"
#include "core/test.h"

static fy_header_t hv[16];
static fy_headers_t hs;

static void H(const char *n, const char *v)
{
    hv[hs.n++] = (fy_header_t){fy_str(n, strlen(n)), fy_str(v, strlen(v))};
}

static void reset(void)
{
    hs.v = hv;
    hs.n = 0;
    hs.cap = 16;
}

static fy_cache_resp_info_t scan(const char *target)
{
    fy_cache_resp_info_t ri;
    fy_cache_resp_scan(&hs, target, &ri);
    return ri;
}

#define D2015 "Thu, 01 Jan 2015 00:00:00 GMT"
#define D2015B "Fri, 02 Jan 2015 00:00:00 GMT" /* + 86400 */

static void test_storable(void)
{
    fy_cache_req_info_t q = {0};
    reset();
    H("Cache-Control", "max-age=5");
    fy_cache_resp_info_t ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_storable(200, &ri, &q, false), FY_CACHE_STORE_OK);
    CHECK_EQ_INT(fy_cache_storable(206, &ri, &q, false), FY_CACHE_NS_STATUS);
    CHECK_EQ_INT(fy_cache_storable(304, &ri, &q, false), FY_CACHE_NS_STATUS);
    q.authorization = true;
    CHECK_EQ_INT(fy_cache_storable(200, &ri, &q, false), FY_CACHE_NS_AUTH);
    reset();
    H("cache-control", "s-maxage=5");
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_storable(200, &ri, &q, false), FY_CACHE_STORE_OK);
    q.authorization = false;
    reset();
    H("Cache-Control", "no-store, max-age=5");
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_storable(200, &ri, &q, false), FY_CACHE_NS_NO_STORE);
    reset();
    H("Cache-Control", "no-store, must-understand, max-age=5");
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_storable(200, &ri, &q, false), FY_CACHE_STORE_OK);
    CHECK_EQ_INT(fy_cache_storable(299, &ri, &q, false), FY_CACHE_NS_STATUS);
    reset();
    H("Cache-Control", "private, max-age=5");
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_storable(200, &ri, &q, false), FY_CACHE_NS_PRIVATE);
    reset();
    H("Cache-Control", "max-age=5");
    H("Vary", "accept, *");
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_storable(200, &ri, &q, false), FY_CACHE_NS_VARY_STAR);
    reset();
    H("Cache-Control", "max-age=5");
    H("Set-Cookie", "a=b");
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_storable(200, &ri, &q, false), FY_CACHE_NS_SET_COOKIE);
    CHECK_EQ_INT(fy_cache_storable(200, &ri, &q, true), FY_CACHE_STORE_OK);
    reset();
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_storable(302, &ri, &q, false), FY_CACHE_NS_NO_FRESH);
    CHECK_EQ_INT(fy_cache_storable(404, &ri, &q, false), FY_CACHE_STORE_OK);
    q.cc.flags = FY_CC_NO_STORE;
    CHECK_EQ_INT(fy_cache_storable(404, &ri, &q, false), FY_CACHE_NS_NO_STORE);
}

static void test_lifetime(void)
{
    time_t now = fy_http_date_parse(FY_STR_LIT(D2015B));
    reset();
    H("Cache-Control", "max-age=10, s-maxage=20");
    H("Expires", "Thu, 01 Jan 2099 00:00:00 GMT");
    fy_cache_resp_info_t ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 10, 3600, 0, NULL), 20);
    reset();
    H("Cache-Control", "max-age=10");
    H("Expires", "Thu, 01 Jan 2099 00:00:00 GMT");
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 10, 3600, 0, NULL), 10);
    reset();
    H("Date", D2015);
    H("Expires", D2015B);
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 10, 3600, 0, NULL), 86400);
    reset();
    H("Expires", "0");
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 10, 3600, 600, NULL), 0);
    reset();
    H("Expires", D2015B);
    H("Expires", D2015);
    ri = scan(NULL);
    CHECK(ri.expires_conflict);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now - 5, 10, 3600, 0, NULL), 0);
    reset();
    H("Last-Modified", D2015);
    ri = scan(NULL);
    bool h = false;
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 10, 3600, 0, &h), 3600); /* capped */
    CHECK(h);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 1, 100000, 0, NULL), 864);
    CHECK_EQ_INT(fy_cache_lifetime(302, &ri, now, 10, 3600, 0, NULL), 0);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 10, 3600, 77, NULL), 77); /* default-ttl */
    reset();
    H("Cache-Control", "max-age=5, max-age=6");
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 10, 3600, 0, NULL), 0);
    /* targeted field replaces Cache-Control; invalid one is ignored */
    reset();
    H("Cache-Control", "max-age=5");
    H("CDN-Cache-Control", "max-age=50");
    ri = scan("cdn-cache-control");
    CHECK(ri.targeted);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 10, 3600, 0, NULL), 50);
    ri = scan(NULL);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 10, 3600, 0, NULL), 5);
    reset();
    H("Cache-Control", "max-age=5");
    H("cdn-cache-control", "max-age=\"50\"");
    ri = scan("cdn-cache-control");
    CHECK(!ri.targeted);
    CHECK_EQ_INT(fy_cache_lifetime(200, &ri, now, 10, 3600, 0, NULL), 5);
    /* Age: first line counts */
    reset();
    H("Age", "7");
    H("Age", "9");
    ri = scan(NULL);
    CHECK_EQ_INT(ri.age, 7);
}

static void test_age(void)
{
    CHECK_EQ_INT(fy_cache_current_age(-1, 100, 100, 100, 100), 0);
    CHECK_EQ_INT(fy_cache_current_age(10, 100, 100, 100, 105), 15);
    CHECK_EQ_INT(fy_cache_current_age(0, 90, 100, 100, 100), 10); /* apparent age */
    CHECK_EQ_INT(fy_cache_current_age(0, 100, 98, 100, 100), 2);  /* response delay */
    CHECK_EQ_INT(fy_cache_current_age(0, 200, 100, 100, 100), 0); /* Date in the future */
    CHECK_EQ_INT(fy_cache_current_age(FY_CC_DELTA_MAX, 0, 0, 100, 200), FY_CC_DELTA_MAX);
}

static void test_use(void)
{
    fy_cache_fresh_t f = {.lifetime = 60};
    fy_cache_req_info_t q = {0};
    CHECK_EQ_INT(fy_cache_use(&f, 10, &q, false), FY_CACHE_USE_FRESH);
    CHECK_EQ_INT(fy_cache_use(&f, 60, &q, false), FY_CACHE_USE_REVALIDATE);
    q.cc.flags = FY_CC_NO_CACHE;
    CHECK_EQ_INT(fy_cache_use(&f, 10, &q, false), FY_CACHE_USE_REVALIDATE);
    CHECK_EQ_INT(fy_cache_use(&f, 10, &q, true), FY_CACHE_USE_FRESH);
    q.cc.flags = FY_CC_MAX_AGE;
    q.cc.max_age = 5;
    CHECK_EQ_INT(fy_cache_use(&f, 10, &q, false), FY_CACHE_USE_REVALIDATE);
    CHECK_EQ_INT(fy_cache_use(&f, 5, &q, false), FY_CACHE_USE_FRESH);
    q.cc.flags = FY_CC_MIN_FRESH;
    q.cc.min_fresh = 55;
    CHECK_EQ_INT(fy_cache_use(&f, 10, &q, false), FY_CACHE_USE_REVALIDATE);
    CHECK_EQ_INT(fy_cache_use(&f, 4, &q, false), FY_CACHE_USE_FRESH);
    q.cc.flags = FY_CC_MAX_STALE;
    q.cc.max_stale = 10;
    CHECK_EQ_INT(fy_cache_use(&f, 65, &q, false), FY_CACHE_USE_STALE);
    CHECK_EQ_INT(fy_cache_use(&f, 75, &q, false), FY_CACHE_USE_REVALIDATE);
    f.never_stale = true;
    CHECK_EQ_INT(fy_cache_use(&f, 65, &q, false), FY_CACHE_USE_REVALIDATE);
    f.never_stale = false;
    q.cc.flags = 0;
    f.swr = 30;
    CHECK_EQ_INT(fy_cache_use(&f, 80, &q, false), FY_CACHE_USE_SWR);
    CHECK_EQ_INT(fy_cache_use(&f, 95, &q, false), FY_CACHE_USE_REVALIDATE);
    f.no_cache = true;
    CHECK_EQ_INT(fy_cache_use(&f, 1, &q, false), FY_CACHE_USE_REVALIDATE);
    fy_cache_fresh_t g = {.lifetime = 60, .sie = 100};
    CHECK(fy_cache_stale_if_error(&g, 150, NULL));
    CHECK(!fy_cache_stale_if_error(&g, 170, NULL));
    g.never_stale = true;
    CHECK(!fy_cache_stale_if_error(&g, 70, NULL));
    fy_cache_fresh_t k = {.lifetime = 60};
    fy_cache_req_info_t qs = {0};
    qs.cc.flags = FY_CC_SIE;
    qs.cc.sie = 20;
    CHECK(fy_cache_stale_if_error(&k, 70, &qs));
    CHECK(!fy_cache_stale_if_error(&k, 70, NULL));
}

static void test_request(void)
{
    reset();
    H("Pragma", "no-cache");
    fy_cache_req_info_t q;
    fy_cache_req_scan(&hs, &q);
    CHECK(q.cc.flags & FY_CC_NO_CACHE);
    H("Cache-Control", "max-age=5");
    fy_cache_req_scan(&hs, &q);
    CHECK(!(q.cc.flags & FY_CC_NO_CACHE)); /* Cache-Control present: Pragma ignored */
    H("AUTHORIZATION", "Basic x");
    fy_cache_req_scan(&hs, &q);
    CHECK(q.authorization);
}

FY_TEST_MAIN(test_storable(); test_lifetime(); test_age(); test_use(); test_request())
