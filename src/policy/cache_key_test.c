/* Tests for cache_key.c: what the primary key holds (scheme, lowercased authority without the
 * default port or a trailing dot, path, query, configured headers), Vary name lists
 * normalised (case, whitespace, empty members, duplicates, order) and secondary keys (absent
 * vs empty, member whitespace, several lines). */
#include "policy/cache_key.h"
#include "core/test.h"

static fy_arena_t A;

static fy_request_t req(const char *scheme, const char *au, const char *path, const char *q)
{
    fy_request_t r;
    memset(&r, 0, sizeof r);
    r.scheme = fy_str(scheme, strlen(scheme));
    r.authority = fy_str(au, strlen(au));
    r.path = fy_str(path, strlen(path));
    r.query = fy_str(q, strlen(q));
    return r;
}

static void test_primary(void)
{
    size_t l;
    fy_request_t r = req("http", "Example.COM:80", "/a", "x=1");
    char *k = fy_cache_key(&A, &r, NULL, 0, &l);
    CHECK_STRN(k, l, "http://example.com/a?x=1");
    r = req("https", "example.com:443", "/a", "");
    k = fy_cache_key(&A, &r, NULL, 0, &l);
    CHECK_STRN(k, l, "https://example.com/a");
    r = req("https", "example.com:80", "/a", "");
    k = fy_cache_key(&A, &r, NULL, 0, &l);
    CHECK_STRN(k, l, "https://example.com:80/a");
    r = req("http", "example.com.", "/", "");
    k = fy_cache_key(&A, &r, NULL, 0, &l);
    CHECK_STRN(k, l, "http://example.com/");
    r = req("http", "h:8080", "/p", "");
    fy_header_t hv[2] = {{FY_STR_LIT("X-Tenant"), FY_STR_LIT("a")}};
    r.headers = (fy_headers_t){hv, 1, 2};
    char *extra[] = {"x-tenant", "x-other"};
    k = fy_cache_key(&A, &r, extra, 2, &l);
    CHECK_STRN(k, l, "http://h:8080/p\nx-tenant:a\nx-other!");
    /* an empty value differs from an absent field */
    hv[1] = (fy_header_t){FY_STR_LIT("x-other"), FY_STR_LIT("")};
    r.headers.n = 2;
    k = fy_cache_key(&A, &r, extra, 2, &l);
    CHECK_STRN(k, l, "http://h:8080/p\nx-tenant:a\nx-other:");
    CHECK(fy_cache_hash("a", 1) != fy_cache_hash("b", 1));
}

static void test_vary(void)
{
    fy_header_t hv[3] = {{FY_STR_LIT("Vary"), FY_STR_LIT(" Accept-Language ,, accept-encoding")},
                         {FY_STR_LIT("vary"), FY_STR_LIT("ACCEPT-LANGUAGE, X-A,")},
                         {FY_STR_LIT("Content-Type"), FY_STR_LIT("text/plain")}};
    fy_headers_t hs = {hv, 3, 3};
    size_t l;
    char *n = fy_cache_vary_names(&A, &hs, &l);
    CHECK_STRN(n, l, "accept-encoding\naccept-language\nx-a");
    hs.n = 3;
    hv[0].value = FY_STR_LIT("");
    hv[1].value = FY_STR_LIT(" , ");
    n = fy_cache_vary_names(&A, &hs, &l);
    CHECK(n == NULL && l == 0);
    hv[0].value = FY_STR_LIT("*");
    n = fy_cache_vary_names(&A, &hs, &l);
    CHECK_STRN(n, l, "*");

    fy_header_t rq[4] = {{FY_STR_LIT("Accept-Encoding"), FY_STR_LIT(" gzip ,  br ")},
                         {FY_STR_LIT("accept-encoding"), FY_STR_LIT("zstd")},
                         {FY_STR_LIT("X-A"), FY_STR_LIT("")},
                         {FY_STR_LIT("Host"), FY_STR_LIT("h")}};
    fy_headers_t rh = {rq, 4, 4};
    const char *names = "accept-encoding\naccept-language\nx-a";
    char *k = fy_cache_vary_key(&A, &rh, names, strlen(names), &l);
    CHECK_STRN(k, l, ":br,gzip,identity,zstd\n!\n:\n");
    rq[0].value = FY_STR_LIT("gzip,br");
    char *k2 = fy_cache_vary_key(&A, &rh, names, strlen(names), &l);
    CHECK_STRN(k2, l, ":br,gzip,identity,zstd\n!\n:\n");
}

/* Accept-Encoding is keyed by what it means, so spelling, order, case, unknown codings and
   redundant q=1 make no new variant, while what a negotiator would choose by does. */
static void test_accept_encoding(void)
{
    static const struct {
        const char *ae, *key;
    } cases[] = {
        {"gzip, deflate, br", ":br,deflate,gzip,identity\n"},
        {"br;q=1.0,GZIP , Deflate,sdch", ":br,deflate,gzip,identity\n"},
        {"x-gzip", ":gzip,identity\n"},
        {"gzip;q=0.5, br", ":br,identity>gzip\n"},
        {"gzip;q=0.5, br;q=0.500", ":identity>br,gzip\n"},
        {"gzip;q=0", ":identity\n"},
        {"gzip, identity;q=0", ":gzip\n"},
        {"*;q=0", ":-\n"},
        {"*", ":br,compress,deflate,gzip,identity,zstd\n"},
        {"gzip;q=0.8, *;q=0.1", ":gzip>br,compress,deflate,identity,zstd\n"},
        {"gzip;q=2", ":identity\n"}, /* malformed q: not acceptable */
        {"gzip;q=abc", ":identity\n"},
        {"", ":identity\n"},
        {"  ,, ", ":identity\n"},
        {"gzip ; q=0.3 ; foo=bar", ":identity>gzip\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fy_header_t rq[1] = {
            {FY_STR_LIT("accept-encoding"), fy_str(cases[i].ae, strlen(cases[i].ae))}};
        fy_headers_t rh = {rq, 1, 1};
        size_t l;
        char *k = fy_cache_vary_key(&A, &rh, "accept-encoding", 15, &l);
        if (l != strlen(cases[i].key) || memcmp(k, cases[i].key, l))
            fprintf(stderr, "case %zu: %s -> %.*s\n", i, cases[i].ae, (int)l, k);
        CHECK_STRN(k, l, cases[i].key);
    }
    fy_headers_t none = {0};
    size_t l;
    char *k = fy_cache_vary_key(&A, &none, "accept-encoding", 15, &l);
    CHECK_STRN(k, l, "!\n"); /* absent differs from empty */
}

FY_TEST_MAIN(fy_arena_init(&A, NULL, 0, 0); test_primary(); test_vary(); test_accept_encoding();
             fy_arena_free(&A))
