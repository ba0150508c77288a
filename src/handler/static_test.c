/* Tests for static.c: path normalisation (table-driven, plus the output-capacity edge), MIME
 * types, and, through #include, the static Range parser and If-None-Match list matcher. */
#include "static.c"

#include "core/test.h"

/* ---- fy_static_normalize ---- */

typedef struct norm_case {
    const char *in;
    int want;        /* length, or -400 / -403 / -404 */
    const char *out; /* when want >= 0 */
} norm_case_t;

static const norm_case_t norm_cases[] = {
    {"/", 0, ""},
    {"", 0, ""},
    {"//", 0, ""},
    {"/a", 1, "a"},
    {"/a/b", 3, "a/b"},
    {"//a//b/", 4, "a/b/"},
    {"/a/b/", 4, "a/b/"}, /* trailing slash kept */
    {"/a/./b", 3, "a/b"},
    {"/./a", 1, "a"},
    {"/.", 0, ""},
    {"/./", 0, ""},
    {"/a/.", 2, "a/"},
    {"/a/../b", 1, "b"},
    {"/a/b/..", 2, "a/"},
    {"/a/b/../", 2, "a/"},
    {"/a/b/../..", 0, ""},
    {"/a/b/../../c/", 2, "c/"},
    {"/aa/bb/../cc", 5, "aa/cc"},
    {"/..", -403, NULL},
    {"/../", -403, NULL},
    {"/../a", -403, NULL},
    {"/a/../../b", -403, NULL},
    {"/a/b/../../..", -403, NULL},
    {"//..//a", -403, NULL},
    {"/./..", -403, NULL},
    /* dot-like names that are plain segments */
    {"/...", 3, "..."},
    {"/..a", 3, "..a"},
    {"/a..", 3, "a.."},
    {"/.hidden", 7, ".hidden"},
    /* percent-decoding happens before dot-segment handling */
    {"/%2e%2e", -403, NULL},
    {"/%2E%2e/x", -403, NULL},
    {"/.%2e", -403, NULL},
    {"/%2e", 0, ""},
    {"/a/%2e%2e/b", 1, "b"},
    {"/a%20b", 3, "a b"},
    {"/%41%62c", 3, "Abc"},
    {"/%e2%82%ac", 3, "\xe2\x82\xac"},
    {"/a%2Fb", -404, NULL},
    {"/a%2fb", -404, NULL},
    {"/%2F", -404, NULL},
    {"/..%2F", -404, NULL},
    {"/a%00", -400, NULL},
    {"/%00/b", -400, NULL},
    {"/%zz", -400, NULL},
    {"/%g1", -400, NULL},
    {"/%1g", -400, NULL},
    {"/%4", -400, NULL},
    {"/a%", -400, NULL},
    {"/a%/b", -400, NULL},
    {"/%%41", -400, NULL},
};

static void test_normalize_table(void)
{
    char out[256];
    for (size_t i = 0; i < sizeof norm_cases / sizeof norm_cases[0]; i++) {
        const norm_case_t *c = &norm_cases[i];
        memset(out, 'X', sizeof out);
        int n = fy_static_normalize(c->in, strlen(c->in), out, sizeof out);
        if (n != c->want) fprintf(stderr, "  normalize(\"%s\") = %d, want %d\n", c->in, n, c->want);
        CHECK_EQ_INT(n, c->want);
        if (c->want >= 0 && n == c->want) {
            if (memcmp(out, c->out, (size_t)n + 1) != 0)
                fprintf(stderr, "  normalize(\"%s\") = \"%.*s\", want \"%s\"\n", c->in, n, out,
                        c->out);
            CHECK(memcmp(out, c->out, (size_t)n + 1) == 0); /* NUL-terminated */
        }
    }
}

static void test_normalize_edges(void)
{
    char out[64];
    /* length-delimited: bytes after len are not read */
    CHECK_EQ_INT(fy_static_normalize("/a/..", 3, out, sizeof out), 2);
    CHECK(strcmp(out, "a/") == 0);
    CHECK_EQ_INT(fy_static_normalize("/%41", 3, out, sizeof out), -400); /* "%4" */

    /* A raw NUL byte is refused like %00: the result is used as a C string (openat2), so
     * "/secret\0.png" would otherwise open "secret" with the .png MIME type. */
    CHECK_EQ_INT(fy_static_normalize("/a\0b", 4, out, sizeof out), -400);

    /* capacity: the result and its NUL must fit in `cap` */
    char path[300];
    path[0] = '/';
    memset(path + 1, 'a', sizeof path - 1);
    CHECK_EQ_INT(fy_static_normalize(path, 16, out, 16), 15); /* 15 bytes + NUL */
    CHECK_EQ_INT(strlen(out), 15);
    CHECK_EQ_INT(fy_static_normalize(path, 17, out, 16), -400);
    CHECK_EQ_INT(fy_static_normalize(path, 300, out, sizeof out), -400);
    /* the trailing '/' counts */
    path[16] = '/'; /* "/" + 15 x "a" + "/" */
    CHECK_EQ_INT(fy_static_normalize(path, 17, out, 17), 16);
    CHECK(out[15] == '/' && out[16] == '\0');
    CHECK_EQ_INT(fy_static_normalize(path, 17, out, 16), -400);
    path[16] = 'a';
    /* decoded length is what counts, not the encoded one */
    const char *enc = "/%61%61%61%61%61%61%61%61%61%61%61%61%61%61%61"; /* 15 x "a" */
    CHECK_EQ_INT(fy_static_normalize(enc, strlen(enc), out, 16), 15);
    /* ".." resolved at the cap edge */
    CHECK_EQ_INT(fy_static_normalize("/aaaa/..", 8, out, 8), 0);
    /* long, deep paths within the cap */
    static char deep[6000], dout[4096];
    size_t o = 0;
    for (int i = 0; i < 1000; i++) {
        memcpy(deep + o, "/a/.", 4);
        o += 4;
    }
    int n = fy_static_normalize(deep, o, dout, sizeof dout);
    CHECK_EQ_INT(n, 2000); /* "a/" x 1000 */
    o = 0;
    for (int i = 0; i < 999; i++) {
        memcpy(deep + o, "/a/..", 5);
        o += 5;
    }
    CHECK_EQ_INT(fy_static_normalize(deep, o, dout, sizeof dout), 0);
    memcpy(deep + o, "/../..", 6);
    CHECK_EQ_INT(fy_static_normalize(deep, o + 6, dout, sizeof dout), -403);
}

/* ---- fy_static_mime_type ---- */

static const char *mime(const char *name)
{
    return fy_static_mime_type(name, strlen(name));
}

static void test_mime(void)
{
    const char *oct = "application/octet-stream";
    CHECK(strcmp(mime("index.html"), "text/html; charset=utf-8") == 0);
    CHECK(strcmp(mime("a/b/page.htm"), "text/html; charset=utf-8") == 0);
    CHECK(strcmp(mime("STYLE.CSS"), "text/css; charset=utf-8") == 0);
    CHECK(strcmp(mime("x.Css"), "text/css; charset=utf-8") == 0);
    CHECK(strcmp(mime("app.js"), "text/javascript; charset=utf-8") == 0);
    CHECK(strcmp(mime("img.JPEG"), "image/jpeg") == 0);
    CHECK(strcmp(mime("font.woff2"), "font/woff2") == 0);
    CHECK(strcmp(mime("font.woff"), "font/woff") == 0);
    CHECK(strcmp(mime("a.tar.gz"), "application/gzip") == 0); /* last extension */
    CHECK(strcmp(mime("README"), oct) == 0);
    CHECK(strcmp(mime(""), oct) == 0);
    CHECK(strcmp(mime("file."), oct) == 0);
    CHECK(strcmp(mime(".bashrc"), oct) == 0);
    CHECK(strcmp(mime("dir/.gitignore"), oct) == 0);
    CHECK(strcmp(mime("dir.d/file"), oct) == 0); /* the dot is in a directory name */
    CHECK(strcmp(mime("dir.html/"), oct) == 0);
    CHECK(strcmp(mime("x.unknownext"), oct) == 0);
    CHECK(strcmp(mime("x.htmlx"), oct) == 0);
    CHECK(strcmp(mime("x.ht"), oct) == 0);
    /* length-delimited */
    CHECK(strcmp(fy_static_mime_type("a.html.gz", 6), "text/html; charset=utf-8") == 0);
}

/* ---- parse_range ---- */

static int range(const char *v, uint64_t size, uint64_t *a, uint64_t *b)
{
    *a = *b = 12345;
    return parse_range(fy_str(v, strlen(v)), size, a, b);
}

static void test_parse_range(void)
{
    uint64_t a, b;
    CHECK_EQ_INT(range("bytes=0-9", 100, &a, &b), 1);
    CHECK(a == 0 && b == 9);
    CHECK_EQ_INT(range("bytes=5-", 100, &a, &b), 1);
    CHECK(a == 5 && b == 99);
    CHECK_EQ_INT(range("bytes=-5", 100, &a, &b), 1);
    CHECK(a == 95 && b == 99);
    CHECK_EQ_INT(range("bytes=-500", 100, &a, &b), 1); /* suffix longer than the file */
    CHECK(a == 0 && b == 99);
    CHECK_EQ_INT(range("bytes=0-0", 100, &a, &b), 1);
    CHECK(a == 0 && b == 0);
    CHECK_EQ_INT(range("bytes=99-99", 100, &a, &b), 1);
    CHECK(a == 99 && b == 99);
    CHECK_EQ_INT(range("bytes=10-1000", 50, &a, &b), 1); /* end clamped to size - 1 */
    CHECK(a == 10 && b == 49);
    CHECK_EQ_INT(range("bytes=0-18446744073709551609", 50, &a, &b), 1);
    CHECK(a == 0 && b == 49);
    CHECK_EQ_INT(range("Bytes=1-2", 10, &a, &b), 1); /* the unit is case-insensitive */
    CHECK(a == 1 && b == 2);
    CHECK_EQ_INT(range("bytes= 1-2 ", 10, &a, &b), 1);
    CHECK(a == 1 && b == 2);

    /* unsatisfiable: -1 (416) */
    CHECK_EQ_INT(range("bytes=-0", 100, &a, &b), -1);
    CHECK_EQ_INT(range("bytes=100-", 50, &a, &b), -1);
    CHECK_EQ_INT(range("bytes=50-", 50, &a, &b), -1);
    CHECK_EQ_INT(range("bytes=50-60", 50, &a, &b), -1);
    CHECK_EQ_INT(range("bytes=0-", 0, &a, &b), -1);
    CHECK_EQ_INT(range("bytes=-5", 0, &a, &b), -1);

    /* ignored: 0 (full 200) */
    CHECK_EQ_INT(range("bytes=1-2,3-4", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=1-2, 3-4", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=5-3", 100, &a, &b), 0); /* last < first */
    CHECK_EQ_INT(range("bytes=", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=-", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=abc", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=1-2x", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=1--2", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=+1-2", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=1", 100, &a, &b), 0);
    CHECK_EQ_INT(range("items=0-9", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes 0-9", 100, &a, &b), 0);
    CHECK_EQ_INT(range("", 100, &a, &b), 0);
    CHECK_EQ_INT(range("garbage", 100, &a, &b), 0);
    /* digits that overflow 64 bits */
    CHECK_EQ_INT(range("bytes=99999999999999999999-", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=0-99999999999999999999", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=-99999999999999999999", 100, &a, &b), 0);
    CHECK_EQ_INT(range("bytes=18446744073709551616-", 100, &a, &b), 0);
    /* largest value still parsed */
    CHECK_EQ_INT(range("bytes=18446744073709551609-", 100, &a, &b), -1);
    /* length-delimited */
    CHECK_EQ_INT(parse_range(fy_str("bytes=0-9,1-2", 9), 100, &a, &b), 1);
    CHECK(a == 0 && b == 9);
}

/* ---- etag_list_matches ---- */

static bool inm(const char *list, const char *etag)
{
    return etag_list_matches(fy_str(list, strlen(list)), etag, strlen(etag));
}

static void test_etag_list(void)
{
    const char *et = "\"5f3a-1c\"";
    CHECK(inm("\"5f3a-1c\"", et));
    CHECK(inm("*", et));
    CHECK(inm(" * ", et));
    CHECK(inm("W/\"5f3a-1c\"", et)); /* weak comparison */
    CHECK(inm("\"aaa\", \"5f3a-1c\"", et));
    CHECK(inm("\"aaa\",\"5f3a-1c\"", et));
    CHECK(inm("  \"aaa\" ,\t W/\"5f3a-1c\" , \"bbb\"", et));
    CHECK(inm("\"a,b\", \"5f3a-1c\"", et)); /* a comma inside an entity tag */
    CHECK(!inm("\"5f3a-1d\"", et));
    CHECK(!inm("\"5f3a-1c", et));
    CHECK(!inm("5f3a-1c", et));
    CHECK(!inm("\"5F3A-1C\"", et)); /* opaque: case-sensitive */
    CHECK(!inm("w/\"5f3a-1c\"", et));
    CHECK(!inm("\"aaa\", \"bbb\"", et));
    CHECK(!inm("", et));
    CHECK(!inm(" , ,", et));
    CHECK(!inm("W/", et));
    CHECK(!inm("W", et));
    CHECK(!inm("\"\"", et));
    CHECK(inm("\"\"", "\"\""));
}

FY_TEST_MAIN(test_normalize_table(); test_normalize_edges(); test_mime(); test_parse_range();
             test_etag_list())
