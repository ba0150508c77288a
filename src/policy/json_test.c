/* Unit tests of the strict JSON parser: valid documents whole, every refusal, the depth and
 * memory bounds, and each valid input cut at every length (a prefix must never parse as the
 * whole, nor read past the end). */
#include "policy/json.c"

#include "core/test.h"

static char mem[1 << 16];

static fy_json_t *parse(const char *s, const char **err)
{
    return fy_json_parse(s, strlen(s), mem, sizeof mem, 16, err, NULL);
}

static void test_valid(void)
{
    const char *err = NULL;
    fy_json_t *v = parse(" {\"alg\":\"ES256\",\"n\":-12,\"f\":1.5e2,\"a\":[true,false,null],"
                         "\"u\":\"\\u00e9\\ud83d\\ude00\\n\",\"o\":{}} ",
                         &err);
    CHECK(v != NULL);
    if (!v) return;
    CHECK_EQ_INT(v->type, FY_JSON_OBJECT);
    CHECK_EQ_INT(v->len, 6);
    CHECK(!strcmp(fy_json_get_str(v, "alg"), "ES256"));
    const fy_json_t *n = fy_json_get(v, "n");
    CHECK(n && n->is_int && n->i == -12);
    const fy_json_t *f = fy_json_get(v, "f");
    CHECK(f && !f->is_int && f->num == 150.0);
    const fy_json_t *a = fy_json_get(v, "a");
    CHECK(a && a->type == FY_JSON_ARRAY && a->len == 3 && a->child->type == FY_JSON_TRUE &&
          a->child->next->type == FY_JSON_FALSE && a->child->next->next->type == FY_JSON_NULL);
    const fy_json_t *u = fy_json_get(v, "u");
    CHECK(u && u->len == 7 && !memcmp(u->str, "\xc3\xa9\xf0\x9f\x98\x80\n", 7));
    CHECK(fy_json_get(v, "missing") == NULL);
    CHECK(fy_json_get_str(v, "n") == NULL);
    v = parse("9223372036854775807", &err);
    CHECK(v && v->is_int && v->i == INT64_MAX);
    v = parse("-9223372036854775808", &err);
    CHECK(v && v->is_int && v->i == INT64_MIN);
    v = parse("9223372036854775808", &err);
    CHECK(v && !v->is_int);
    v = parse("\"a\\\"b\\\\\"", &err);
    CHECK(v && v->len == 4 && !memcmp(v->str, "a\"b\\", 4));
}

static void test_refused(void)
{
    static const char *bad[] = {
        "",
        " ",
        "{",
        "}",
        "[1,]",
        "{\"a\":1,}",
        "01",
        "-",
        "1.",
        ".5",
        "1e",
        "+1",
        "tru",
        "nul",
        "\"abc",
        "\"\\x\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\ud800\\u0041\"",
        "\"\x01\"",
        "\"\xc0\xaf\"",
        "\"\xed\xa0\x80\"",
        "\"\xff\"",
        "\"\xe2\x82\"",
        "{\"a\":1,\"a\":2}",
        "[1] x",
        "{a:1}",
        "{\"a\" 1}",
        "[1 2]",
        "NaN",
        "1e999",
        "\"\\u12\"",
        "'a'",
        "[1,,2]",
        "\"\\",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *err = NULL;
        fy_json_t *v = parse(bad[i], &err);
        if (v) fprintf(stderr, "accepted: %s\n", bad[i]);
        CHECK(v == NULL && err != NULL);
    }
    const char *err = NULL;
    CHECK(parse("{\"a\":1,\"a\":2}", &err) == NULL && !strcmp(err, "duplicate key"));
}

static void test_bounds(void)
{
    char deep[64];
    memset(deep, '[', 17);
    memset(deep + 17, ']', 17);
    deep[34] = '\0';
    const char *err = NULL;
    CHECK(parse(deep, &err) == NULL && !strcmp(err, "nesting too deep"));
    deep[16] = '\0';
    memset(deep, '[', 16);
    char ok[40];
    memset(ok, '[', 16);
    memset(ok + 16, ']', 16);
    ok[32] = '\0';
    CHECK(parse(ok, &err) != NULL);
    char small[64];
    CHECK(fy_json_parse("[1,2,3]", 7, small, sizeof small, 8, &err, NULL) == NULL &&
          strstr(err, "memory"));
}

static void test_prefixes(void)
{
    static const char *docs[] = {
        "{\"kid\":\"k1\",\"alg\":\"RS256\",\"typ\":\"JWT\"}",
        "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"ab\",\"y\":\"cd\"}]}",
        "[\"\\u00e9\",1.25e-3,{\"x\":[[]]}]",
    };
    for (size_t d = 0; d < sizeof docs / sizeof docs[0]; d++) {
        size_t n = strlen(docs[d]);
        for (size_t k = 0; k < n; k++) {
            char *cut = malloc(k ? k : 1); /* exactly k bytes: ASan sees a read past the end */
            memcpy(cut, docs[d], k);
            const char *err = NULL;
            CHECK(fy_json_parse(cut, k, mem, sizeof mem, 16, &err, NULL) == NULL);
            free(cut);
        }
        const char *err = NULL;
        CHECK(fy_json_parse(docs[d], n, mem, sizeof mem, 16, &err, NULL) != NULL);
    }
}

FY_TEST_MAIN(test_valid(); test_refused(); test_bounds(); test_prefixes())
