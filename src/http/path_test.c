/* Tests for path.c: RFC 3986 §5.2.4 dot-segment removal (the §5.4 examples, as merged paths),
 * percent-decoding of unreserved characters only, the encoded-slash options, slash merging,
 * climbing above the root, and every input fed at a length that ends it early. */
#include "http/path.h"
#include "core/test.h"

static const fy_path_opts_t DFLT = {FY_PATH_SLASH_REJECT, true};
static const fy_path_opts_t RFC = {FY_PATH_SLASH_KEEP, false}; /* no merging: plain §5.2.4 */

static int norm(const char *in, const fy_path_opts_t *o, char *out, size_t cap)
{
    return fy_path_normalize(in, strlen(in), out, cap, o);
}

static void check(const char *in, const fy_path_opts_t *o, const char *want)
{
    char out[256];
    int n = norm(in, o, out, sizeof out);
    /* the fast path's verdict: "normal" exactly when normalising changes nothing (a path
       with an escape is never "normal", even when it survives unchanged) */
    bool same = n >= 0 && strlen(in) == (size_t)n && memcmp(in, out, (size_t)n) == 0;
    bool normal = fy_path_is_normal(in, strlen(in), o->merge_slashes);
    CHECK(!normal || same);
    if (same && !strchr(in, '%')) CHECK(normal);
    if (n < 0 || (size_t)n != strlen(want) || memcmp(out, want, (size_t)n) != 0)
        fprintf(stderr, "  %s -> %.*s (%d), want %s\n", in, n > 0 ? n : 0, out, n, want);
    CHECK(n >= 0);
    if (n >= 0) CHECK_STRN(out, (size_t)n, want);
}

static void check_err(const char *in, const fy_path_opts_t *o, int want)
{
    char out[256];
    CHECK_EQ_INT(norm(in, o, out, sizeof out), want);
}

/* RFC 3986 §5.4.1/§5.4.2 with base "http://a/b/c/d;p?q": the merged path (base directory +
 * reference) before remove_dot_segments, and the path of the listed result. */
static void test_rfc3986_examples(void)
{
    static const char *const cases[][2] = {
        {"/b/c/g", "/b/c/g"},
        {"/b/c/./g", "/b/c/g"},
        {"/b/c/g/", "/b/c/g/"},
        {"/g", "/g"},
        {"/b/c/d;p", "/b/c/d;p"},
        {"/b/c/g;x", "/b/c/g;x"},
        {"/b/c/.", "/b/c/"},
        {"/b/c/./", "/b/c/"},
        {"/b/c/..", "/b/"},
        {"/b/c/../", "/b/"},
        {"/b/c/../g", "/b/g"},
        {"/b/c/../..", "/"},
        {"/b/c/../../", "/"},
        {"/b/c/../../g", "/g"},
        /* §5.4.2 abnormal examples that stay inside the root */
        {"/./g", "/g"},
        {"/b/c/g.", "/b/c/g."},
        {"/b/c/.g", "/b/c/.g"},
        {"/b/c/g..", "/b/c/g.."},
        {"/b/c/..g", "/b/c/..g"},
        {"/b/c/./../g", "/b/g"},
        {"/b/c/./g/.", "/b/c/g/"},
        {"/b/c/g/./h", "/b/c/g/h"},
        {"/b/c/g/../h", "/b/c/h"},
        {"/b/c/g;x=1/./y", "/b/c/g;x=1/y"},
        {"/b/c/g;x=1/../y", "/b/c/y"},
        /* §5.2.4's own walk-through */
        {"/a/b/c/./../../g", "/a/g"},
        {"/mid/content=5/../6", "/mid/6"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check(cases[i][0], &RFC, cases[i][1]);
    /* §5.4.2 "../../../g" and "/../g" resolve to "/g" in a browser; a server refuses them */
    check_err("/b/c/../../../g", &RFC, FY_PATH_EABOVE);
    check_err("/../g", &RFC, FY_PATH_EABOVE);
    check_err("/..", &RFC, FY_PATH_EABOVE);
    check_err("/./..", &RFC, FY_PATH_EABOVE);
    check_err("/a/../../etc/passwd", &DFLT, FY_PATH_EABOVE);
}

static void test_decoding(void)
{
    check("/%41%62%7e%2d%2E%5F%30", &DFLT, "/Ab~-._0"); /* unreserved: decoded */
    check("/a%20b", &DFLT, "/a%20b");                   /* reserved/other: kept */
    check("/a%3fb%3F", &DFLT, "/a%3Fb%3F");             /* hex upper-cased */
    check("/%e2%82%ac", &DFLT, "/%E2%82%AC");
    check("/%00", &DFLT, "/%00");
    check_err("/%2e%2e/x", &RFC, FY_PATH_EABOVE); /* "/../x" */
    check("/public/%2e%2e/admin", &DFLT, "/admin");
    check("/public/.%2E/admin", &DFLT, "/admin");
    check("/a/%2e/b", &DFLT, "/a/b");
    check_err("/%", &DFLT, FY_PATH_EBAD);
    check_err("/%4", &DFLT, FY_PATH_EBAD);
    check_err("/%4g", &DFLT, FY_PATH_EBAD);
    check_err("/%g4", &DFLT, FY_PATH_EBAD);
    check_err("", &DFLT, FY_PATH_EBAD);
    check_err("a/b", &DFLT, FY_PATH_EBAD);
    check_err("*", &DFLT, FY_PATH_EBAD);
}

static void test_encoded_slash(void)
{
    fy_path_opts_t keep = {FY_PATH_SLASH_KEEP, true}, dec = {FY_PATH_SLASH_DECODE, true};
    check_err("/a%2Fb", &DFLT, FY_PATH_ESLASH);
    check_err("/a%2fb", &DFLT, FY_PATH_ESLASH);
    check_err("/a%5cb", &DFLT, FY_PATH_ESLASH);
    check("/a%2fb", &keep, "/a%2Fb");
    check("/a%5c..", &keep, "/a%5C..");
    check("/a/..%2f..%2fetc", &keep, "/a/..%2F..%2Fetc"); /* one segment, not a climb */
    check("/a%2fb", &dec, "/a/b");
    check("/a%5cb", &dec, "/a\\b"); /* a separator for Windows origins, not for us */
    check("/a/b%2f..%2f..%2fc", &dec, "/c");
    check_err("/a%2f..%2f..%2fc", &dec, FY_PATH_EABOVE);
    check("/a%2f%2fb", &dec, "/a/b"); /* decoded slashes merge too */
}

static void test_slashes(void)
{
    check("//a///b//", &DFLT, "/a/b/");
    check("//", &DFLT, "/");
    check("/", &DFLT, "/");
    check("//a///b//", &RFC, "//a///b//");
    check("/a//..", &RFC, "/a/");
    check("//..", &RFC, "/");
    check("//admin", &DFLT, "/admin");
    check("/public/../admin", &DFLT, "/admin");
    check("/public/./../admin/", &DFLT, "/admin/");
    check("/.well-known/x", &DFLT, "/.well-known/x");
    check("/a/.../b", &DFLT, "/a/.../b");
}

/* The output never outgrows the input, so cap == len always fits; cap == len - 1 must say
 * ENOSPC (or a smaller result) and never write past it. Every prefix of every input is also a
 * valid call (ending mid-escape gives EBAD). */
static void test_bounds_and_prefixes(void)
{
    static const char *const inputs[] = {
        "/public/%2e%2e/admin", "/a/b/c/./../../g", "//a///b//", "/%e2%82%ac/x", "/a%2Fb",
    };
    for (size_t k = 0; k < sizeof inputs / sizeof inputs[0]; k++) {
        const char *in = inputs[k];
        size_t len = strlen(in);
        for (size_t l = 1; l <= len; l++) {
            char out[64];
            memset(out, 'Z', sizeof out);
            int n = fy_path_normalize(in, l, out, l, &DFLT);
            CHECK(n != FY_PATH_ENOSPC);
            CHECK(n < 0 || (n > 0 && (size_t)n <= l && out[0] == '/'));
            CHECK(out[l] == 'Z');
        }
        char out[64];
        memset(out, 'Z', sizeof out);
        int n = fy_path_normalize(in, len, out, 3, &DFLT);
        CHECK(n == FY_PATH_ENOSPC || n == FY_PATH_ESLASH || (n >= 0 && n <= 3));
        CHECK(out[3] == 'Z');
    }
}

FY_TEST_MAIN(test_rfc3986_examples(); test_decoding(); test_encoded_slash(); test_slashes();
             test_bounds_and_prefixes())
