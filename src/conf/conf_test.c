/* Unit tests of the YAML node tree and the directive engine, on a test table that uses every
 * directive type. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "core/test.h"

/* ---- a test table with every type ---- */

struct inner {
    int64_t n;
    char *s;
    bool b;
};

struct item {
    char *name;
    int64_t port;
};

struct t {
    char *str;
    bool flag;
    int64_t num;
    uint64_t size;
    uint64_t dur;
    int color;
    fy_conf_strlist_t list;
    fy_conf_strlist_t csv;
    fy_conf_strmap_t map;
    struct inner in;
    struct inner *ptr;
    struct inner *flagged;
    fy_conf_list_t items;
    int custom;
    char *opt;
};

static const char *const colors[] = {"red", "green", "blue", NULL};

static const fy_conf_directive_t inner_table[] = {
    {.key = "n", .type = FY_CT_INT, .offset = offsetof(struct inner, n), .dflt = "7"},
    {.key = "s", .type = FY_CT_STRING, .offset = offsetof(struct inner, s), .dflt = "dflt"},
    {.key = "b", .type = FY_CT_BOOL, .offset = offsetof(struct inner, b)},
    {.key = NULL},
};

static int check_item(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const struct item *it = obj;
    if (it->port == 13) {
        fy_conf_error(ctx, map, NULL, "unlucky port");
        return -1;
    }
    return 0;
}

static const fy_conf_directive_t item_table[] = {
    {.key = "name", .type = FY_CT_STRING, .offset = offsetof(struct item, name), .required = true},
    {.key = "port", .type = FY_CT_INT, .offset = offsetof(struct item, port), .dflt = "80"},
    {.key = NULL, .check = check_item},
};

/* CUSTOM: "one" | "two" -> 1 | 2 */
static int parse_custom(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field)
{
    if (node->kind == FY_CONF_SCALAR && !strcmp(node->str, "one")) {
        *(int *)field = 1;
        return 0;
    }
    if (node->kind == FY_CONF_SCALAR && !strcmp(node->str, "two")) {
        *(int *)field = 2;
        return 0;
    }
    fy_conf_error(ctx, node, NULL, "expected one or two");
    return -1;
}

static void dump_custom(const void *field, void *file)
{
    fputs(*(const int *)field == 1 ? "one" : "two", file);
}

static int validate_opt(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    if (!strcmp(*(char **)field, "bad")) {
        fy_conf_error(ctx, node, NULL, "may not be 'bad'");
        return -1;
    }
    return 0;
}

#define O(f) offsetof(struct t, f)

static const fy_conf_directive_t t_table[] = {
    {.key = "str", .type = FY_CT_STRING, .offset = O(str), .dflt = "hello", .doc = "A string."},
    {.key = "flag", .type = FY_CT_BOOL, .offset = O(flag), .dflt = "true"},
    {.key = "num", .type = FY_CT_INT, .offset = O(num), .dflt = "5", .min = 1, .max = 10},
    {.key = "size",
     .type = FY_CT_SIZE,
     .offset = O(size),
     .dflt = "4k",
     .min = 1024,
     .max = 1 << 20,
     .doc = "A size | with a pipe."},
    {.key = "dur",
     .type = FY_CT_DURATION,
     .offset = O(dur),
     .dflt = "1500ms",
     .min = 0,
     .max = 60000},
    {.key = "color", .type = FY_CT_ENUM, .offset = O(color), .dflt = "green", .enums = colors},
    {.key = "list", .type = FY_CT_STRLIST, .offset = O(list), .dflt = "[x, y]"},
    {.key = "csv", .type = FY_CT_STRLIST, .offset = O(csv), .dflt = "a,b", .csv = true},
    {.key = "map", .type = FY_CT_STRMAP, .offset = O(map), .dflt = "{k: v}"},
    {.key = "in", .type = FY_CT_TABLE, .offset = O(in), .sub = inner_table},
    {.key = "ptr",
     .type = FY_CT_TABLE_PTR,
     .offset = O(ptr),
     .sub = inner_table,
     .sub_size = sizeof(struct inner),
     .shorthand_key = "s"},
    {.key = "flagged",
     .type = FY_CT_TABLE_PTR,
     .offset = O(flagged),
     .sub = inner_table,
     .sub_size = sizeof(struct inner),
     .shorthand_key = "b"},
    {.key = "items",
     .type = FY_CT_TABLE_LIST,
     .offset = O(items),
     .sub = item_table,
     .sub_size = sizeof(struct item),
     .shorthand_key = "name"},
    {.key = "custom",
     .type = FY_CT_CUSTOM,
     .offset = O(custom),
     .dflt = "one",
     .parse = parse_custom,
     .dump = dump_custom,
     .type_name = "`one` or `two`"},
    {.key = "opt", .type = FY_CT_STRING, .offset = O(opt), .validate = validate_opt},
    {.key = NULL},
};

/* ---- helpers ---- */

static fy_conf_arena_t *arena;
static fy_conf_ctx_t *ctx;
static struct t obj;

static fy_conf_node_t *parse(const char *yaml, char *err, size_t errlen)
{
    fy_conf_arena_free(arena);
    arena = fy_conf_arena_new();
    return fy_conf_parse(arena, "t.yaml", yaml, strlen(yaml), err, errlen);
}

/* Apply t_table to yaml; returns the errors ("" when none). */
static const char *apply(const char *yaml)
{
    char err[256];
    fy_conf_node_t *root = parse(yaml, err, sizeof err);
    if (!root) return "PARSE ERROR";
    ctx = fy_conf_ctx_new(arena);
    memset(&obj, 0, sizeof obj);
    fy_conf_apply(ctx, t_table, root, &obj);
    return fy_conf_errors(ctx);
}

static bool streq(const char *got, const char *want)
{
    if (!strcmp(got, want)) return true;
    fprintf(stderr, "  got:  [%s]\n  want: [%s]\n", got, want);
    return false;
}

#define CHECK_STR(got, want) CHECK(streq((got), (want)))
#define CHECK_ERR(yaml, want) CHECK_STR(apply(yaml), want)

static const char *parse_err(const char *yaml)
{
    static char err[256];
    return parse(yaml, err, sizeof err) ? "OK" : err;
}

/* ---- node tree ---- */

static void test_parse_tree(void)
{
    char err[256];
    fy_conf_node_t *r = parse("a: 1\nb:\n  c: 'x'\n  d: [p, \"q\"]\n", err, sizeof err);
    CHECK(r != NULL);
    if (!r) return;
    CHECK_EQ_INT(r->kind, FY_CONF_MAP);
    CHECK_EQ_INT(r->n, 2);
    CHECK_STR(r->keys[0]->str, "a");
    CHECK_EQ_INT(r->keys[0]->line, 1);
    CHECK_EQ_INT(r->keys[0]->col, 1);
    CHECK_EQ_INT(r->items[0]->col, 4);
    CHECK(!r->items[0]->quoted);
    const fy_conf_node_t *b = r->items[1];
    CHECK_EQ_INT(b->kind, FY_CONF_MAP);
    CHECK_EQ_INT(b->line, 3);
    CHECK_EQ_INT(b->col, 3);
    CHECK(b->items[0]->quoted);
    CHECK_STRN(b->items[0]->str, b->items[0]->len, "x");
    const fy_conf_node_t *d = b->items[1];
    CHECK_EQ_INT(d->kind, FY_CONF_SEQ);
    CHECK_EQ_INT(d->n, 2);
    CHECK_EQ_INT(d->items[1]->line, 4);
    CHECK_EQ_INT(d->items[1]->col, 10);
    CHECK(d->items[1]->quoted);
    CHECK_STR(r->file, "t.yaml");

    /* many children: arrays grow */
    char big[8192];
    size_t l = 0;
    for (int i = 0; i < 500; i++) l += (size_t)snprintf(big + l, sizeof big - l, "k%d: %d\n", i, i);
    r = parse(big, err, sizeof err);
    CHECK(r && r->n == 500);
    if (r) CHECK_STR(r->keys[499]->str, "k499");
    if (r) CHECK_STR(r->items[250]->str, "250");

    /* empty inputs are empty maps */
    static const char *const empties[] = {"", "# only a comment\n", "---\n", "---\n...\n"};
    for (size_t i = 0; i < 4; i++) {
        r = parse(empties[i], err, sizeof err);
        CHECK(r && r->kind == FY_CONF_MAP && r->n == 0);
    }
    r = parse("just a scalar", err, sizeof err);
    CHECK(r && r->kind == FY_CONF_SCALAR);
}

static void test_parse_errors(void)
{
    CHECK_STR(parse_err("a: &x 1\nb: *x\n"), "t.yaml:1:4: yaml: anchors are not allowed");
    CHECK_STR(parse_err("a: 1\nb: *x\n"), "t.yaml:2:4: yaml: aliases are not allowed");
    CHECK_STR(parse_err("a: &m {b: 1}\n"), "t.yaml:1:4: yaml: anchors are not allowed");
    CHECK_STR(parse_err("a:\n  - &s [1]\n"), "t.yaml:2:5: yaml: anchors are not allowed");
    CHECK_STR(parse_err("a: !!str 1\n"), "t.yaml:1:4: yaml: tags are not allowed");
    CHECK_STR(parse_err("a: !foo {b: 1}\n"), "t.yaml:1:4: yaml: tags are not allowed");
    CHECK_STR(parse_err("a: 1\nb: 2\na: 3\n"), "t.yaml:3:1: yaml: duplicate key 'a'");
    CHECK_STR(parse_err("x:\n  a: 1\n  a: 2\nx: 3\n"), "t.yaml:3:3: yaml: duplicate key 'a'");
    CHECK_STR(parse_err("a: 1\n'a': 2\n"), "t.yaml:2:1: yaml: duplicate key 'a'");
    CHECK_STR(parse_err("a: 1\n---\nb: 2\n"), "t.yaml:2:1: yaml: only one document is allowed");
    CHECK_STR(parse_err("? [a]\n: 1\n"), "t.yaml:1:3: yaml: a map key must be a plain value");
    CHECK_STR(parse_err("? {a: 1}\n: 1\n"), "t.yaml:1:3: yaml: a map key must be a plain value");
    CHECK_STR(parse_err("a: \"x\\0y\"\n"), "t.yaml:1:4: yaml: a value contains a NUL character");
    CHECK_STR(parse_err("a: [1, 2\n"),
              "t.yaml:2:1: yaml: did not find expected ',' or ']' (while parsing a flow sequence "
              "at line 1); inside { } or [ ], quote a value that holds ':' or ',', and close the "
              "bracket");
    CHECK_STR(parse_err("a: b: c\n"),
              "t.yaml:1:5: yaml: mapping values are not allowed in this context; a 'key:' where a "
              "plain value was expected: check this line's indentation, or quote a value that "
              "holds ': '");
    /* hints: tabs, indentation */
    CHECK(strstr(parse_err("a:\n\tb: 1\n"), "t.yaml:2:1: yaml: ") &&
          strstr(parse_err("a:\n\tb: 1\n"), "tabs are not allowed for indentation"));
    CHECK(strstr(parse_err("a:\n  b: 1\n \t c: 2\n"), "tabs are not allowed for indentation"));
    CHECK(strstr(parse_err("a:\n  b: 1\n c: 2\n"),
                 "t.yaml:3:2: yaml: did not find expected key (while parsing a block mapping at "
                 "line 1); check the indentation"));
    CHECK(strstr(parse_err("a:\n  - 1\n - 2\n"), "check the indentation"));
    CHECK(strstr(parse_err("a: \"x\n"), "is not closed"));

    /* depth: 64 levels fine, 65 refused */
    char deep[200];
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    deep[128] = '\0';
    CHECK_STR(parse_err(deep), "OK");
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    deep[130] = '\0';
    CHECK_STR(parse_err(deep), "t.yaml:1:65: yaml: nesting deeper than 64 levels");

    /* a tiny error buffer is truncated, never overrun */
    char small[8];
    CHECK(parse("a: *x", small, sizeof small) == NULL);
    CHECK_STR(small, "t.yaml:");
}

static void test_parse_file(void)
{
    char err[256];
    fy_conf_arena_t *a = fy_conf_arena_new();
    CHECK(fy_conf_parse_file(a, "/nonexistent/x.yaml", err, sizeof err) == NULL);
    CHECK_STR(err, "/nonexistent/x.yaml: cannot read: No such file or directory");
    char path[] = "/tmp/fy_conf_test_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    /* bigger than the first read buffer */
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 1000; i++) fprintf(f, "key%d: value%d\n", i, i);
    fprintf(f, "bad: *x\n");
    fclose(f);
    CHECK(fy_conf_parse_file(a, path, err, sizeof err) == NULL);
    char want[128];
    snprintf(want, sizeof want, "%s:1001:6: yaml: aliases are not allowed", path);
    CHECK_STR(err, want);
    unlink(path);
    fy_conf_arena_free(a);
}

/* ---- converters ---- */

static void test_sizes(void)
{
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {
        {"0", 0},
        {"512", 512},
        {"1b", 1},
        {"1B", 1},
        {"16k", 16384},
        {"16K", 16384},
        {"16kb", 16384},
        {"16KB", 16384},
        {"16KiB", 16384},
        {"16kib", 16384},
        {"4m", 4u << 20},
        {"4MiB", 4u << 20},
        {"1g", 1u << 30},
        {"2G", 2ull << 30},
        {"1t", 1ull << 40},
        {"18446744073709551615", UINT64_MAX},
        {"16777215t", 16777215ull << 40},
        {"007", 7},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        uint64_t v = 12345;
        CHECK(fy_conf_parse_size(ok[i].s, &v) == 0 && v == ok[i].v);
    }
    static const char *const bad[] = {"",
                                      "k",
                                      "-1",
                                      "+1",
                                      "1.5k",
                                      "16 k",
                                      " 16",
                                      "16 ",
                                      "16kk",
                                      "16x",
                                      "16ki",
                                      "16bb",
                                      "1kibx",
                                      "16777216t",
                                      "18446744073709551616",
                                      "99999999999999999999999",
                                      "0x10",
                                      "1e3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t v = 12345;
        CHECK(fy_conf_parse_size(bad[i], &v) == -1 && v == 12345);
    }
}

static void test_durations(void)
{
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {
        {"0", 0},
        {"10", 10000},
        {"250ms", 250},
        {"10s", 10000},
        {"5m", 300000},
        {"1h", 3600000},
        {"1d", 86400000},
        {"1m30s", 90000},
        {"1h1ms", 3600001},
        {"0ms", 0},
        {"18446744073709551ms", 18446744073709551ull},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        uint64_t v = 12345;
        CHECK(fy_conf_parse_duration_ms(ok[i].s, &v) == 0 && v == ok[i].v);
    }
    static const char *const bad[] = {"",
                                      "s",
                                      "ms",
                                      "10x",
                                      "1.5s",
                                      "-1s",
                                      "10 s",
                                      "1m30",
                                      "10S",
                                      "18446744073709552",
                                      "18446744073709552s",
                                      "213503982335d",
                                      "18446744073709551615ms1ms"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t v = 12345;
        CHECK(fy_conf_parse_duration_ms(bad[i], &v) == -1 && v == 12345);
    }
}

static void test_bools(void)
{
    static const char *const t[] = {"true", "yes", "on", "True", "YES", "On"};
    static const char *const f[] = {"false", "no", "off", "FALSE", "No"};
    bool v;
    for (size_t i = 0; i < 6; i++) CHECK(fy_conf_parse_bool(t[i], &v) == 0 && v);
    for (size_t i = 0; i < 5; i++) CHECK(fy_conf_parse_bool(f[i], &v) == 0 && !v);
    v = true;
    CHECK(fy_conf_parse_bool("1", &v) == -1 && v);
    CHECK(fy_conf_parse_bool("", &v) == -1);
    CHECK(fy_conf_parse_bool("y", &v) == -1);
}

/* ---- engine: values ---- */

static void test_defaults(void)
{
    CHECK_ERR("", "");
    CHECK_STR(obj.str, "hello");
    CHECK(obj.flag);
    CHECK_EQ_INT(obj.num, 5);
    CHECK_EQ_INT(obj.size, 4096);
    CHECK_EQ_INT(obj.dur, 1500);
    CHECK_EQ_INT(obj.color, 1);
    CHECK(obj.list.n == 2 && !strcmp(obj.list.v[0], "x") && !strcmp(obj.list.v[1], "y"));
    CHECK(obj.csv.n == 2 && !strcmp(obj.csv.v[0], "a") && !strcmp(obj.csv.v[1], "b"));
    CHECK(obj.map.n == 1 && !strcmp(obj.map.keys[0], "k") && !strcmp(obj.map.values[0], "v"));
    /* an absent nested TABLE still gets its defaults */
    CHECK_EQ_INT(obj.in.n, 7);
    CHECK_STR(obj.in.s, "dflt");
    CHECK(!obj.in.b);
    CHECK(obj.ptr == NULL && obj.flagged == NULL);
    CHECK(obj.items.n == 0);
    CHECK_EQ_INT(obj.custom, 1);
    CHECK(obj.opt == NULL);

    /* null values mean absent */
    CHECK_ERR("str:\nnum: ~\nin: null\nptr:\nitems: ~\nopt: NULL\n", "");
    CHECK_STR(obj.str, "hello");
    CHECK_EQ_INT(obj.num, 5);
    CHECK_EQ_INT(obj.in.n, 7);
    CHECK(obj.ptr == NULL && obj.items.n == 0 && obj.opt == NULL);
    /* quoted null-looking words are strings */
    CHECK_ERR("str: 'null'\nopt: \"~\"\n", "");
    CHECK_STR(obj.str, "null");
    CHECK_STR(obj.opt, "~");
}

static void test_values(void)
{
    CHECK_ERR("str: yes\n"
              "flag: off\n"
              "num: 10\n"
              "size: 1m\n"
              "dur: 1m\n"
              "color: blue\n"
              "list: [p, 'q r']\n"
              "csv: [c, d, e]\n"
              "map: {Content-Type: text/plain, x: ''}\n"
              "in: {n: -3, s: in, b: true}\n"
              "ptr: {n: 1}\n"
              "items:\n"
              "  - name: a\n"
              "    port: 1\n"
              "  - b\n"
              "custom: two\n"
              "opt: ok\n",
              "");
    CHECK_STR(obj.str, "yes"); /* typed as a string: no bool guessing */
    CHECK(!obj.flag);
    CHECK_EQ_INT(obj.num, 10);
    CHECK_EQ_INT(obj.size, 1 << 20);
    CHECK_EQ_INT(obj.dur, 60000);
    CHECK_EQ_INT(obj.color, 2);
    CHECK(obj.list.n == 2 && !strcmp(obj.list.v[1], "q r"));
    CHECK(obj.csv.n == 3 && !strcmp(obj.csv.v[2], "e"));
    CHECK(obj.map.n == 2 && !strcmp(obj.map.keys[0], "Content-Type") &&
          !strcmp(obj.map.values[0], "text/plain") && !strcmp(obj.map.values[1], ""));
    CHECK_EQ_INT(obj.in.n, -3);
    CHECK_STR(obj.in.s, "in");
    CHECK(obj.in.b);
    CHECK(obj.ptr && obj.ptr->n == 1 && !strcmp(obj.ptr->s, "dflt"));
    CHECK_EQ_INT(obj.items.n, 2);
    const struct item *it = obj.items.v;
    CHECK(!strcmp(it[0].name, "a") && it[0].port == 1);
    CHECK(!strcmp(it[1].name, "b") && it[1].port == 80); /* shorthand item, default port */
    CHECK_EQ_INT(obj.custom, 2);
    CHECK_STR(obj.opt, "ok");

    /* strlist: one scalar is one item; csv splits and trims; a quoted csv scalar is one item */
    CHECK_ERR("list: a,b\ncsv: ' a , b,c '\n", "");
    CHECK(obj.list.n == 1 && !strcmp(obj.list.v[0], "a,b"));
    CHECK(obj.csv.n == 1 && !strcmp(obj.csv.v[0], " a , b,c "));
    CHECK_ERR("csv: a , b,c\n", "");
    CHECK(obj.csv.n == 3 && !strcmp(obj.csv.v[0], "a") && !strcmp(obj.csv.v[1], "b"));
    CHECK_ERR("list: []\nmap: {}\nitems: []\n", "");
    CHECK(obj.list.n == 0 && obj.map.n == 0 && obj.items.n == 0);
    CHECK_ERR("num: 1\n", "");
    CHECK_EQ_INT(obj.num, 1);
    CHECK_ERR("size: 1k\ndur: 0\n", "");
    CHECK_EQ_INT(obj.size, 1024);
    CHECK_EQ_INT(obj.dur, 0);
}

static void test_shorthand(void)
{
    CHECK_ERR("ptr: hi\n", "");
    CHECK(obj.ptr && !strcmp(obj.ptr->s, "hi") && obj.ptr->n == 7);
    CHECK_ERR("flagged: b\n", "");
    CHECK(obj.flagged && obj.flagged->b && obj.flagged->n == 7);
    CHECK_ERR("flagged: x\n", "t.yaml:1:10: flagged: expected a map or 'b', got 'x'\n");
    CHECK_ERR("flagged: [b]\n", "t.yaml:1:10: flagged: expected a map, got a list\n");
    CHECK_ERR("in: x\n", "t.yaml:1:5: in: expected a map, got 'x'\n");
    CHECK_ERR("items: [a, [b], {name: c, port: 9}]\n",
              "t.yaml:1:12: items[1]: expected a map, got a list\n");
    CHECK_ERR("items: [a, {name: c, port: x}]\n",
              "t.yaml:1:28: items[1].port: expected an integer, got 'x'\n");
}

/* ---- engine: error messages ---- */

static void test_errors(void)
{
    CHECK_ERR("bogus: 1\n",
              "t.yaml:1:1: bogus: unknown key 'bogus'; expected one of: str, flag, num, size, dur, "
              "color, list, csv, map, in, ptr, flagged, items, custom, opt\n");
    CHECK_ERR("in:\n  zz: 1\n", "t.yaml:2:3: in.zz: unknown key 'zz'; expected one of: n, s, b\n");
    CHECK_ERR("items:\n  - name: a\n    zz: 1\n",
              "t.yaml:3:5: items[0].zz: unknown key 'zz'; expected one of: name, port\n");
    CHECK_ERR("str: {a: 1}\n", "t.yaml:1:6: str: expected a string, got a map\n");
    CHECK_ERR("str: [a]\n", "t.yaml:1:6: str: expected a string, got a list\n");
    CHECK_ERR("flag: maybe\n", "t.yaml:1:7: flag: expected true or false, got 'maybe'\n");
    CHECK_ERR("flag: \"true\"\n",
              "t.yaml:1:7: flag: expected true or false, got a quoted 'true'\n");
    CHECK_ERR("flag: [true]\n", "t.yaml:1:7: flag: expected true or false, got a list\n");
    CHECK_ERR("num: ten\n", "t.yaml:1:6: num: expected an integer, got 'ten'\n");
    CHECK_ERR("num: '5'\n", "t.yaml:1:6: num: expected an integer, got a quoted '5'\n");
    CHECK_ERR("num: 1.0\n", "t.yaml:1:6: num: expected an integer, got '1.0'\n");
    CHECK_ERR("num: 11\n", "t.yaml:1:6: num: must be between 1 and 10, got 11\n");
    CHECK_ERR("num: 0\n", "t.yaml:1:6: num: must be between 1 and 10, got 0\n");
    CHECK_ERR("num: 99999999999999999999\n",
              "t.yaml:1:6: num: expected an integer, got '99999999999999999999'\n");
    CHECK_ERR("size: abc\n", "t.yaml:1:7: size: expected a size like 16k, got 'abc'\n");
    CHECK_ERR("size: 2m\n", "t.yaml:1:7: size: must be between 1k and 1m, got 2m\n");
    CHECK_ERR("size: 1023\n", "t.yaml:1:7: size: must be between 1k and 1m, got 1023\n");
    CHECK_ERR("size: {a: 1}\n", "t.yaml:1:7: size: expected a size like 16k, got a map\n");
    CHECK_ERR("dur: soon\n",
              "t.yaml:1:6: dur: expected a duration like 10s or 250ms, got 'soon'\n");
    CHECK_ERR("dur: 61s\n", "t.yaml:1:6: dur: must be between 0s and 1m, got 61s\n");
    CHECK_ERR("color: pink\n",
              "t.yaml:1:8: color: expected one of: red, green, blue; got 'pink'\n");
    CHECK_ERR("color: [red]\n",
              "t.yaml:1:8: color: expected one of: red, green, blue; got a list\n");
    CHECK_ERR("list: {a: 1}\n",
              "t.yaml:1:7: list: expected a string or a list of strings, got a map\n");
    CHECK_ERR("list: [a, {b: 1}, ~]\n", "t.yaml:1:11: list[1]: expected a string, got a map\n"
                                        "t.yaml:1:19: list[2]: expected a string, got null\n");
    CHECK_ERR("csv: {a: 1}\n",
              "t.yaml:1:6: csv: expected a list of strings or a comma-separated string, got a "
              "map\n");
    CHECK_ERR("csv: a,,b\n", "t.yaml:1:6: csv: empty item in 'a,,b'\n");
    CHECK_ERR("map: x\n", "t.yaml:1:6: map: expected a map of strings, got 'x'\n");
    CHECK_ERR("map:\n  a: [1]\n", "t.yaml:2:6: map.a: expected a string, got a list\n");
    CHECK_ERR("in: [1]\n", "t.yaml:1:5: in: expected a map, got a list\n");
    CHECK_ERR("items: {name: a}\n", "t.yaml:1:8: items: expected a list of maps, got a map\n");
    CHECK_ERR("items:\n  - port: 1\n", "t.yaml:2:5: items[0].name: is required\n");
    CHECK_ERR("items:\n  - name:\n", "t.yaml:2:5: items[0].name: is required\n");
    CHECK_ERR("custom: three\n", "t.yaml:1:9: custom: expected one or two\n");
    CHECK_ERR("opt: bad\n", "t.yaml:1:6: opt: may not be 'bad'\n");
    CHECK_ERR("- 1\n", "t.yaml:1:1: expected a map, got a list\n");
    CHECK_ERR("'x'\n", "t.yaml:1:1: expected a map, got 'x'\n");

    /* table check runs after the fields, and only when they all converted */
    CHECK_ERR("items:\n  - name: a\n    port: 13\n", "t.yaml:2:5: items[0]: unlucky port\n");
    CHECK_ERR("items:\n  - {name: a, port: 13, x: 1}\n",
              "t.yaml:2:25: items[0].x: unknown key 'x'; expected one of: name, port\n");

    /* every error is collected, in document order per table */
    CHECK_ERR("num: 0\nsize: x\nin: {n: q}\nitems: [{port: 13}, {name: z, port: 13}]\n",
              "t.yaml:1:6: num: must be between 1 and 10, got 0\n"
              "t.yaml:2:7: size: expected a size like 16k, got 'x'\n"
              "t.yaml:3:9: in.n: expected an integer, got 'q'\n"
              "t.yaml:4:9: items[0].name: is required\n"
              "t.yaml:4:21: items[1]: unlucky port\n");
    CHECK_EQ_INT(fy_conf_error_count(ctx), 5);

    /* a long value is shortened in messages */
    CHECK_ERR("num: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
              "t.yaml:1:6: num: expected an integer, got "
              "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'\n");
}

static void test_error_api(void)
{
    fy_conf_arena_t *a = fy_conf_arena_new();
    fy_conf_ctx_t *c = fy_conf_ctx_new(a);
    CHECK(fy_conf_ctx_arena(c) == a);
    CHECK_STR(fy_conf_errors(c), "");
    fy_conf_error(c, NULL, NULL, "plain %d", 1);
    fy_conf_error(c, NULL, "key", "with key");
    fy_conf_node_t n = {.kind = FY_CONF_SCALAR, .file = "f", .line = 3, .col = 4, .str = ""};
    fy_conf_error(c, &n, "k", "at %s", "node");
    CHECK_STR(fy_conf_errors(c), "plain 1\nkey: with key\nf:3:4: k: at node\n");
    CHECK_EQ_INT(fy_conf_error_count(c), 3);
    for (int i = 0; i < 150; i++) fy_conf_error(c, NULL, NULL, "e%d", i);
    CHECK_EQ_INT(fy_conf_error_count(c), 153);
    const char *all = fy_conf_errors(c);
    size_t lines = 0;
    for (const char *p = all; *p; p++) lines += *p == '\n';
    CHECK_EQ_INT(lines, 101);
    CHECK(strstr(all, "e96\n... and 53 more errors\n") != NULL);
    fy_conf_arena_free(a);

    /* arena: big and small allocations are zeroed and usable */
    a = fy_conf_arena_new();
    for (int i = 0; i < 100; i++) {
        size_t sz = (size_t)(i % 10 == 0 ? 50000 : 24);
        unsigned char *p = fy_conf_alloc(a, sz);
        bool zero = true;
        for (size_t j = 0; j < sz; j++) zero = zero && p[j] == 0;
        CHECK(zero);
        memset(p, 0xab, sz);
    }
    CHECK_STR(fy_conf_strndup(a, "abcdef", 3), "abc");
    CHECK_STR(fy_conf_strdup(a, "xyz"), "xyz");
    fy_conf_arena_free(a);
    fy_conf_arena_free(NULL);
}

/* ---- dump and doc ---- */

static char *capture_dump(const struct t *o)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fy_conf_dump(t_table, o, 0, f);
    fclose(f);
    return buf;
}

static void test_dump(void)
{
    CHECK_ERR("str: \"two words: yes\"\n"
              "size: 1536\n"
              "dur: 50s\n"
              "list: ['1', 'true', '@x', '', \"a\\\"b\"]\n"
              "map: {}\n"
              "flagged: b\n"
              "items: [a, {name: 'b:', port: 8080}]\n"
              "custom: two\n",
              "");
    char *d = capture_dump(&obj);
    CHECK_STR(d, "str: \"two words: yes\"\n"
                 "flag: true\n"
                 "num: 5\n"
                 "size: 1536\n"
                 "dur: 50s\n"
                 "color: green\n"
                 "list: [\"1\", \"true\", \"@x\", \"\", \"a\\\"b\"]\n"
                 "csv: [a, b]\n"
                 "map: {}\n"
                 "in:\n"
                 "  n: 7\n"
                 "  s: dflt\n"
                 "  b: false\n"
                 "ptr: null\n"
                 "flagged:\n"
                 "  n: 7\n"
                 "  s: dflt\n"
                 "  b: true\n"
                 "items:\n"
                 "  - name: a\n"
                 "    port: 80\n"
                 "  - name: \"b:\"\n"
                 "    port: 8080\n"
                 "custom: two\n"
                 "opt: null\n");

    /* the dump loads back to the same values */
    CHECK_ERR(d, "");
    char *d2 = capture_dump(&obj);
    CHECK_STR(d2, d);
    free(d);
    free(d2);

    /* readable units */
    CHECK_ERR("size: 1024k\ndur: 60000ms\n", "");
    d = capture_dump(&obj);
    CHECK(strstr(d, "\nsize: 1m\n") && strstr(d, "\ndur: 1m\n"));
    free(d);
    CHECK_ERR("dur: 1001ms\nmap: {b: \"x\\ny\"}\n", "");
    d = capture_dump(&obj);
    CHECK(strstr(d, "\ndur: 1001ms\n") && strstr(d, "\nmap:\n  b: \"x\\ny\"\n"));
    free(d);

    /* a nested dump is indented */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fy_conf_dump(inner_table, &obj.in, 4, f);
    fclose(f);
    CHECK_STR(buf, "    n: 7\n    s: dflt\n    b: false\n");
    free(buf);
}

static void test_doc(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fy_conf_doc(t_table, "test", 2, f);
    fclose(f);
    static const char head[] = "## `test`\n\n| key | type | default | description |\n"
                               "|---|---|---|---|\n| `str` | string | `hello` | A string. |\n";
    CHECK(strncmp(buf, head, strlen(head)) == 0);
    CHECK(strstr(buf, "| `size` | size 1k..1m | `4k` | A size \\| with a pipe. |\n") != NULL);
    CHECK(strstr(buf, "| `num` | integer 1..10 | `5` |") != NULL);
    CHECK(strstr(buf, "| `color` | one of `red`, `green`, `blue` | `green` |") != NULL);
    CHECK(strstr(buf, "| `custom` | `one` or `two` | `one` |") != NULL);
    CHECK(strstr(buf, "Shorthand: `flagged: b`.") != NULL);
    CHECK(strstr(buf, "Shorthand: `ptr: VALUE` sets `s`.") != NULL);
    CHECK(strstr(buf, "\n## `test.in`\n") != NULL);
    CHECK(strstr(buf, "\n## `test.items[]`\n") != NULL);
    CHECK(strstr(buf, "| `name` | string | **required** |") != NULL);
    free(buf);
}

FY_TEST_MAIN(test_parse_tree(); test_parse_errors(); test_parse_file(); test_sizes();
             test_durations(); test_bools(); test_defaults(); test_values(); test_shorthand();
             test_errors(); test_error_api(); test_dump(); test_doc(); fy_conf_arena_free(arena))
