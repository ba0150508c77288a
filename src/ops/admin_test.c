/* Unit tests of the admin API's pure parts: request targets (peer bytes: whole, every prefix,
 * hostile ones), server indexes, JSON strings, and the config diff over a toy table. */
#include "ops/admin.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/test.h"

static int split(const char *t, const char **seg, bool *dry, char *buf)
{
    return fy_admin_split_target(t, strlen(t), buf, seg, 8, dry);
}

static void test_targets(void)
{
    char buf[FY_ADMIN_MAX_TARGET + 1];
    const char *seg[8];
    bool dry;
    CHECK_EQ_INT(split("/metrics", seg, &dry, buf), 1);
    CHECK(!strcmp(seg[0], "metrics") && !dry);
    CHECK_EQ_INT(split("/config?dry-run=1", seg, &dry, buf), 1);
    CHECK(!strcmp(seg[0], "config") && dry);
    CHECK_EQ_INT(split("/config?a=b&dry-run=true&c", seg, &dry, buf), 1);
    CHECK(dry);
    CHECK_EQ_INT(split("/config?dry-run=0", seg, &dry, buf), 1);
    CHECK(!dry);
    CHECK_EQ_INT(split("/config?x=dry-run=1", seg, &dry, buf), 1);
    CHECK(!dry);
    CHECK_EQ_INT(split("/upstreams/app/servers/10/drain", seg, &dry, buf), 5);
    CHECK(!strcmp(seg[1], "app") && !strcmp(seg[3], "10") && !strcmp(seg[4], "drain"));
    CHECK_EQ_INT(split("/", seg, &dry, buf), 0);
    CHECK_EQ_INT(split("/?dry-run", seg, &dry, buf), 0);
    CHECK(dry);
    /* refused: no leading slash, empty segments, escapes, controls, too many segments */
    CHECK_EQ_INT(split("metrics", seg, &dry, buf), -1);
    CHECK_EQ_INT(split("", seg, &dry, buf), -1);
    CHECK_EQ_INT(split("//metrics", seg, &dry, buf), -1);
    CHECK_EQ_INT(split("/metrics/", seg, &dry, buf), -1);
    CHECK_EQ_INT(split("/a//b", seg, &dry, buf), -1);
    CHECK_EQ_INT(split("/config%2frollback", seg, &dry, buf), -1);
    CHECK_EQ_INT(split("/a\x7f", seg, &dry, buf), -1);
    CHECK_EQ_INT(split("/a\xc3\xa9", seg, &dry, buf), -1);
    CHECK_EQ_INT(split("/1/2/3/4/5/6/7/8/9", seg, &dry, buf), -1);
    CHECK_EQ_INT(fy_admin_split_target("/a\0b", 4, buf, seg, 8, &dry), -1);
    /* the longest accepted, one over it */
    char *big = malloc(FY_ADMIN_MAX_TARGET + 2);
    memset(big, 'a', FY_ADMIN_MAX_TARGET + 1);
    big[0] = '/';
    CHECK_EQ_INT(fy_admin_split_target(big, FY_ADMIN_MAX_TARGET, buf, seg, 8, &dry), 1);
    CHECK_EQ_INT(fy_admin_split_target(big, FY_ADMIN_MAX_TARGET + 1, buf, seg, 8, &dry), -1);
    free(big);
    /* every prefix of a valid target parses or is refused, never reads past its length */
    const char *t = "/upstreams/app/servers/1/enable?dry-run=1";
    for (size_t n = 0; n <= strlen(t); n++) {
        char *p = malloc(n ? n : 1);
        memcpy(p, t, n);
        int r = fy_admin_split_target(p, n, buf, seg, 8, &dry);
        CHECK(r >= -1 && r <= 5);
        free(p);
    }
}

static void test_index(void)
{
    CHECK_EQ_INT(fy_admin_parse_index("0"), 0);
    CHECK_EQ_INT(fy_admin_parse_index("7"), 7);
    CHECK_EQ_INT(fy_admin_parse_index("999"), 999);
    CHECK_EQ_INT(fy_admin_parse_index("1000"), -1);
    CHECK_EQ_INT(fy_admin_parse_index("01"), -1);
    CHECK_EQ_INT(fy_admin_parse_index(""), -1);
    CHECK_EQ_INT(fy_admin_parse_index("-1"), -1);
    CHECK_EQ_INT(fy_admin_parse_index("1a"), -1);
}

static char *capture_json(const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fy_admin_json_str(f, s);
    fclose(f);
    return buf;
}

static void test_json(void)
{
    char *j = capture_json("a\"b\\c\nd\x01\te");
    CHECK(!strcmp(j, "\"a\\\"b\\\\c\\nd\\u0001\\te\""));
    free(j);
    j = capture_json(NULL);
    CHECK(!strcmp(j, "\"\""));
    free(j);
}

/* a toy config: the diff only knows directive tables */
typedef struct {
    char *name, *address, *body;
    char *path;
} item_t;
typedef struct {
    char *path;
} match_t;
typedef struct {
    match_t match;
    char *body;
} route_t;
typedef struct {
    fy_conf_list_t listeners, routes, upstreams;
    int64_t workers;
} toy_t;

static const fy_conf_directive_t lst_t[] = {
    {.key = "address", .type = FY_CT_STRING, .offset = offsetof(item_t, address)},
    {.key = "name", .type = FY_CT_STRING, .offset = offsetof(item_t, name)},
    {.key = "body", .type = FY_CT_STRING, .offset = offsetof(item_t, body)},
    {.key = NULL},
};
static const fy_conf_directive_t match_t_[] = {
    {.key = "path", .type = FY_CT_STRING, .offset = offsetof(match_t, path), .dflt = "/"},
    {.key = NULL},
};
static const fy_conf_directive_t route_t_[] = {
    {.key = "match", .type = FY_CT_TABLE, .offset = offsetof(route_t, match), .sub = match_t_},
    {.key = "body", .type = FY_CT_STRING, .offset = offsetof(route_t, body)},
    {.key = NULL},
};
static const fy_conf_directive_t toy_table[] = {
    {.key = "workers", .type = FY_CT_INT, .offset = offsetof(toy_t, workers), .dflt = "1"},
    {.key = "listeners",
     .type = FY_CT_TABLE_LIST,
     .offset = offsetof(toy_t, listeners),
     .sub = lst_t,
     .sub_size = sizeof(item_t)},
    {.key = "routes",
     .type = FY_CT_TABLE_LIST,
     .offset = offsetof(toy_t, routes),
     .sub = route_t_,
     .sub_size = sizeof(route_t)},
    {.key = "upstreams",
     .type = FY_CT_TABLE_LIST,
     .offset = offsetof(toy_t, upstreams),
     .sub = lst_t,
     .sub_size = sizeof(item_t)},
    {.key = NULL},
};

static toy_t *load(fy_conf_arena_t *a, const char *yaml)
{
    char err[256];
    fy_conf_node_t *root = fy_conf_parse(a, "t", yaml, strlen(yaml), err, sizeof err);
    if (!root) return NULL;
    toy_t *t = fy_conf_alloc(a, sizeof *t);
    fy_conf_ctx_t *ctx = fy_conf_ctx_new(a);
    return fy_conf_apply(ctx, toy_table, root, t) == 0 ? t : NULL;
}

static char *diff(const char *x, const char *y)
{
    fy_conf_arena_t *a = fy_conf_arena_new();
    toy_t *p = load(a, x), *q = load(a, y);
    CHECK(p && q);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (p && q) fy_admin_diff(toy_table, p, q, f);
    fclose(f);
    fy_conf_arena_free(a);
    return buf;
}

#define EMPTY "{\"added\": [], \"removed\": [], \"changed\": []}"

static void test_diff(void)
{
    const char *base = "listeners: [{address: a:1, name: web}, {address: b:2}]\n"
                       "routes: [{match: {path: /x/}, body: x}, {body: all}]\n"
                       "upstreams: [{name: u1, address: o:1}, {name: u2, address: o:2}]\n";
    char *d = diff(base, base);
    CHECK(!strcmp(d, "{\"listeners\": " EMPTY ", \"routes\": " EMPTY ", \"upstreams\": " EMPTY
                     ", \"sections\": []}"));
    free(d);
    d = diff(base, "workers: 2\n"
                   "listeners: [{address: b:2, body: changed}, {address: c:3}, {address: z:9, "
                   "name: web}]\n"
                   "routes: [{match: {path: /y/}, body: y}, {match: {path: /x/}, body: x}, "
                   "{body: every}]\n"
                   "upstreams: [{name: u2, address: o:2}, {name: u3, address: o:3}]\n");
    CHECK(!strcmp(d, "{\"listeners\": {\"added\": [\"c:3\"], \"removed\": [], \"changed\": "
                     "[\"b:2\", \"web\"]}, \"routes\": {\"added\": [{\"index\": 0, \"match\": "
                     "\"path: /y/\"}], \"removed\": [], \"changed\": [{\"index\": 2, \"match\": "
                     "\"path: /\"}]}, \"upstreams\": {\"added\": [\"u3\"], \"removed\": "
                     "[\"u1\"], \"changed\": []}, \"sections\": [\"workers\"]}"));
    if (strstr(d, "sections") == NULL) fprintf(stderr, "%s\n", d);
    free(d);
    /* two routes with the same match pair in order; the extra one is added */
    d = diff("routes: [{body: a}]\n", "routes: [{body: a}, {body: b}]\n");
    CHECK(strstr(d, "\"routes\": {\"added\": [{\"index\": 1, \"match\": \"path: /\"}], "
                    "\"removed\": [], \"changed\": []}") != NULL);
    free(d);
    /* everything removed */
    d = diff(base, "{}\n");
    CHECK(strstr(d, "\"listeners\": {\"added\": [], \"removed\": [\"web\", \"b:2\"]") != NULL);
    free(d);
}

FY_TEST_MAIN(test_targets(); test_index(); test_json(); test_diff())
