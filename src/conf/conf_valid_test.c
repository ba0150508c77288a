/* Unit tests of the shared wire/file validators (conf_valid.c): each predicate at its edges,
 * and the table validators reporting the entry's own file:line:col. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf_valid.h"
#include "core/test.h"

static void test_token(void)
{
    CHECK(!fy_conf_why_not_token("x-forwarded-for"));
    CHECK(!fy_conf_why_not_token("A!#$%&'*+-.^_`|~9"));
    CHECK(fy_conf_why_not_token(""));
    CHECK(fy_conf_why_not_token("x\r\ny: 1"));
    CHECK(strstr(fy_conf_why_not_token("a\nb"), "line break"));
    CHECK(fy_conf_why_not_token("a b"));
    CHECK(fy_conf_why_not_token("a:b"));
    CHECK(fy_conf_why_not_token("a\tb"));
    CHECK(fy_conf_why_not_token("a\x01"));
    CHECK(fy_conf_why_not_token("caf\xc3\xa9"));
    CHECK(fy_conf_why_not_token("a\"b"));
    CHECK(fy_conf_why_not_token("(a)"));
}

static void test_field_value(void)
{
    CHECK(!fy_conf_why_not_field_value(""));
    CHECK(!fy_conf_why_not_field_value("max-age=3600, public"));
    CHECK(!fy_conf_why_not_field_value("a\tb"));
    CHECK(!fy_conf_why_not_field_value("caf\xc3\xa9")); /* obs-text is allowed */
    CHECK(strstr(fy_conf_why_not_field_value("a\r\nSet-Cookie: x"), "line break"));
    CHECK(fy_conf_why_not_field_value("a\rb"));
    CHECK(fy_conf_why_not_field_value("a\nb"));
    CHECK(fy_conf_why_not_field_value("a\x7f"));
    CHECK(fy_conf_why_not_field_value("a\x1b[0m"));
    CHECK(fy_conf_why_not_field_value(" a"));
    CHECK(fy_conf_why_not_field_value("a "));
    CHECK(fy_conf_why_not_field_value("\ta"));
}

static void test_path(void)
{
    CHECK(!fy_conf_why_not_path("/"));
    CHECK(!fy_conf_why_not_path("/api/v1;x=1/~me/a%20b/@:!$&'()*+,="));
    CHECK(fy_conf_why_not_path("api"));
    CHECK(fy_conf_why_not_path(""));
    CHECK(fy_conf_why_not_path("/a b"));
    CHECK(fy_conf_why_not_path("/a HTTP/1.1\r\nHost: evil\r\n\r\nGET /"));
    CHECK(fy_conf_why_not_path("/a?b"));
    CHECK(fy_conf_why_not_path("/a#b"));
    CHECK(fy_conf_why_not_path("/a%2"));
    CHECK(fy_conf_why_not_path("/a%zz"));
    CHECK(fy_conf_why_not_path("/a\x01"));
    CHECK(fy_conf_why_not_path("/\xc3\xa9"));
    CHECK(fy_conf_why_not_path("/a\"b"));
    CHECK(fy_conf_why_not_path("/a<b>"));
    /* a request target may carry a query (health checks), never a fragment or a line break */
    CHECK(!fy_conf_why_not_target("/info?probe"));
    CHECK(!fy_conf_why_not_target("/h?a=1&b=/x?y"));
    CHECK(!fy_conf_why_not_target("/"));
    CHECK(fy_conf_why_not_target("/h?a#b"));
    CHECK(fy_conf_why_not_target("/h?a b"));
    CHECK(fy_conf_why_not_target("/h?a\r\nX: y"));
    CHECK(fy_conf_why_not_target("h?a"));
}

static void test_hostname(void)
{
    CHECK(!fy_conf_why_not_hostname("example.com"));
    CHECK(!fy_conf_why_not_hostname("example.com."));
    CHECK(!fy_conf_why_not_hostname("a-b_c.d9"));
    CHECK(!fy_conf_why_not_hostname("127.0.0.1"));
    CHECK(fy_conf_why_not_hostname(""));
    CHECK(fy_conf_why_not_hostname("."));
    CHECK(fy_conf_why_not_hostname("a..b"));
    CHECK(fy_conf_why_not_hostname(".a"));
    CHECK(fy_conf_why_not_hostname("a b"));
    CHECK(fy_conf_why_not_hostname("a\r\nb"));
    CHECK(fy_conf_why_not_hostname("a:443"));
    CHECK(fy_conf_why_not_hostname("[::1]"));
    char lab[80];
    memset(lab, 'a', 64);
    lab[64] = '\0';
    CHECK(fy_conf_why_not_hostname(lab));
    lab[63] = '\0';
    CHECK(!fy_conf_why_not_hostname(lab));
    char longname[300];
    for (int i = 0; i < 127; i++) memcpy(longname + 2 * i, "a.", 2);
    longname[253] = 'a';
    longname[254] = '\0';
    CHECK(fy_conf_why_not_hostname(longname)); /* 254 bytes, no trailing dot */
}

/* ---- the validators on a table, through the real engine ---- */

struct t {
    char *tok, *val, *path, *host, *file, *log, *dir;
    fy_conf_strmap_t hdrs;
    fy_conf_strlist_t names;
};

static const fy_conf_directive_t table[] = {
    {.key = "tok",
     .type = FY_CT_STRING,
     .offset = offsetof(struct t, tok),
     .validate = fy_conf_valid_token},
    {.key = "val",
     .type = FY_CT_STRING,
     .offset = offsetof(struct t, val),
     .validate = fy_conf_valid_field_value},
    {.key = "path",
     .type = FY_CT_STRING,
     .offset = offsetof(struct t, path),
     .validate = fy_conf_valid_path},
    {.key = "host",
     .type = FY_CT_STRING,
     .offset = offsetof(struct t, host),
     .validate = fy_conf_valid_hostname},
    {.key = "file",
     .type = FY_CT_STRING,
     .offset = offsetof(struct t, file),
     .validate = fy_conf_valid_readable_file},
    {.key = "log",
     .type = FY_CT_STRING,
     .offset = offsetof(struct t, log),
     .validate = fy_conf_valid_log_target},
    {.key = "dir",
     .type = FY_CT_STRING,
     .offset = offsetof(struct t, dir),
     .validate = fy_conf_valid_state_dir},
    {.key = "hdrs",
     .type = FY_CT_STRMAP,
     .offset = offsetof(struct t, hdrs),
     .validate = fy_conf_valid_header_map},
    {.key = "names",
     .type = FY_CT_STRLIST,
     .offset = offsetof(struct t, names),
     .validate = fy_conf_valid_token_list},
    {.key = NULL},
};

/* Apply `yaml`; return the error text ("" when it loaded) in buf. */
static const char *apply(const char *yaml, char *buf, size_t cap)
{
    fy_conf_arena_t *a = fy_conf_arena_new();
    char err[256];
    fy_conf_node_t *root = fy_conf_parse(a, "t.yaml", yaml, strlen(yaml), err, sizeof err);
    if (!root) {
        snprintf(buf, cap, "PARSE %s", err);
    } else {
        fy_conf_ctx_t *ctx = fy_conf_ctx_new(a);
        struct t obj = {0};
        fy_conf_apply(ctx, table, root, &obj);
        snprintf(buf, cap, "%s", fy_conf_errors(ctx));
    }
    fy_conf_arena_free(a);
    return buf;
}

static void test_table(void)
{
    char b[2048];
    CHECK(!strcmp(apply("tok: x-a\nval: ok\npath: /p/\nhost: a.b\nhdrs: {a: b}\nnames: [a, b]\n", b,
                        sizeof b),
                  ""));
    CHECK(strstr(apply("tok: \"a\\r\\nb\"\n", b, sizeof b), "t.yaml:1:6: tok: name \"a\\r\\nb\""));
    CHECK(strstr(apply("val: \"x\\r\\nSet-Cookie: y\"\n", b, sizeof b), "t.yaml:1:6: val: "));
    CHECK(strstr(apply("path: \"/a b\"\n", b, sizeof b), "t.yaml:1:7: path: "));
    CHECK(strstr(apply("host: \"a\\nb\"\n", b, sizeof b), "t.yaml:1:7: host: "));
    /* a map's entry: the key's or the value's own position, the header named */
    apply("hdrs:\n  good: 1\n  \"x\\ry\": 2\n  z: \"3\\n\"\n", b, sizeof b);
    CHECK(strstr(b, "t.yaml:3:3: hdrs: header name \"x\\ry\""));
    CHECK(strstr(b, "t.yaml:4:6: hdrs.z: value \"3\\n\""));
    apply("names: [a, \"b c\"]\n", b, sizeof b);
    CHECK(strstr(b, "t.yaml:1:12: names: name \"b c\""));
    /* files */
    CHECK(strstr(apply("file: /nonexistent/x.pem\n", b, sizeof b),
                 "t.yaml:1:7: file: cannot read '/nonexistent/x.pem': No such file"));
    CHECK(strstr(apply("file: /\n", b, sizeof b), "Is a directory"));
    CHECK(!strcmp(apply("file: /dev/null\n", b, sizeof b), ""));
    CHECK(!strcmp(apply("log: off\n", b, sizeof b), ""));
    CHECK(!strcmp(apply("log: /tmp/ferry-conf-valid-test.log\n", b, sizeof b), ""));
    CHECK(strstr(apply("log: /nonexistent/dir/a.log\n", b, sizeof b),
                 "folder '/nonexistent/dir' does not exist"));
    CHECK(strstr(apply("log: /tmp\n", b, sizeof b), "is a folder"));
    CHECK(!strcmp(apply("dir: /tmp\n", b, sizeof b), ""));
    CHECK(!strcmp(apply("dir: /tmp/ferry-conf-valid-test/a/b\n", b, sizeof b), ""));
    CHECK(strstr(apply("dir: /dev/null\n", b, sizeof b), "'/dev/null' is not a folder"));
    CHECK(strstr(apply("dir: /dev/null/a/b\n", b, sizeof b),
                 "cannot create '/dev/null/a/b': '/dev/null' is not a folder"));
}

FY_TEST_MAIN(test_token(); test_field_value(); test_path(); test_hostname(); test_table())
