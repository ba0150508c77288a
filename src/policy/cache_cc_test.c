/* Tests for cache_cc.c: Cache-Control members and their odd forms (quoted delta-seconds,
 * duplicates, overflow, bad syntax skipped to the next comma), targeted fields (RFC 9213:
 * stricter, all or nothing), Age (§5.1). Every input is also parsed ending at a guard page
 * and as two field lines split at every byte (a header may come in several lines). */
#include "policy/cache_cc.h"
#include "core/test.h"
#include "core/test_guard.h"

static fy_cache_cc_t P(const char *s)
{
    fy_cache_cc_t cc;
    fy_cache_cc_init(&cc);
    size_t n = strlen(s);
    fy_cache_cc_parse(&cc, at_guard(s, n), n);
    return cc;
}

static void test_basic(void)
{
    fy_cache_cc_t c = P("max-age=60, no-cache, Private");
    CHECK(c.flags & FY_CC_MAX_AGE);
    CHECK_EQ_INT(c.max_age, 60);
    CHECK(c.flags & FY_CC_NO_CACHE);
    CHECK(c.flags & FY_CC_PRIVATE);
    CHECK(!c.bad && !c.syntax_error);
    c = P("s-maxage=10,must-revalidate,proxy-revalidate,public,no-store,must-understand,"
          "no-transform,immutable,only-if-cached");
    CHECK_EQ_INT(c.s_maxage, 10);
    CHECK((c.flags &
           (FY_CC_MUST_REVALIDATE | FY_CC_PROXY_REVALIDATE | FY_CC_PUBLIC | FY_CC_NO_STORE |
            FY_CC_MUST_UNDERSTAND | FY_CC_NO_TRANSFORM | FY_CC_IMMUTABLE | FY_CC_ONLY_IF_CACHED)) ==
          (FY_CC_MUST_REVALIDATE | FY_CC_PROXY_REVALIDATE | FY_CC_PUBLIC | FY_CC_NO_STORE |
           FY_CC_MUST_UNDERSTAND | FY_CC_NO_TRANSFORM | FY_CC_IMMUTABLE | FY_CC_ONLY_IF_CACHED));
    c = P("stale-while-revalidate=30, stale-if-error=600, min-fresh=5, max-stale");
    CHECK_EQ_INT(c.swr, 30);
    CHECK_EQ_INT(c.sie, 600);
    CHECK_EQ_INT(c.min_fresh, 5);
    CHECK_EQ_INT(c.max_stale, FY_CC_DELTA_MAX);
    c = P("max-stale=7");
    CHECK_EQ_INT(c.max_stale, 7);
    c = P("");
    CHECK(c.flags == 0 && !c.syntax_error);
    c = P(" ,, ,");
    CHECK(c.flags == 0 && !c.syntax_error);
}

static void test_odd_values(void)
{
    fy_cache_cc_t c = P("max-age=\"60\"");
    CHECK_EQ_INT(c.max_age, 60);
    CHECK(!c.bad);
    c = P("max-age=60, max-age=0");
    CHECK(c.bad & FY_CC_MAX_AGE);
    c = P("max-age=60, MAX-AGE=60");
    CHECK(!c.bad && c.max_age == 60);
    c = P("max-age=abc");
    CHECK(c.bad & FY_CC_MAX_AGE);
    c = P("max-age=-1");
    CHECK(c.bad & FY_CC_MAX_AGE);
    c = P("max-age=1.5");
    CHECK(c.bad & FY_CC_MAX_AGE);
    c = P("max-age");
    CHECK(c.bad & FY_CC_MAX_AGE);
    c = P("max-age=99999999999999999999999");
    CHECK_EQ_INT(c.max_age, FY_CC_DELTA_MAX);
    c = P("max-age=2147483648");
    CHECK_EQ_INT(c.max_age, FY_CC_DELTA_MAX);
    c = P("max-age=2147483647");
    CHECK_EQ_INT(c.max_age, 2147483647);
    c = P("no-cache=\"set-cookie, x-foo\", max-age=5");
    CHECK(c.flags & FY_CC_NO_CACHE);
    CHECK_EQ_INT(c.max_age, 5);
    c = P("private=\"a,\\\"b\", max-age=5");
    CHECK(c.flags & FY_CC_PRIVATE);
    CHECK_EQ_INT(c.max_age, 5);
    c = P("foo=\"bar, max-age=1\", max-age=9"); /* a comma inside quotes is not a separator */
    CHECK_EQ_INT(c.max_age, 9);
    CHECK(!c.bad);
    c = P("unknown-ext, x=y, max-age=3");
    CHECK_EQ_INT(c.max_age, 3);
}

/* The name lookup (one switch on length and a letter, then a compare): every directive in
   upper, lower and mixed case; names one letter off at any position, and names that share
   a length and the letter the switch looks at, are unknown (ignored, no flag). */
static void test_directive_names(void)
{
    static const struct {
        const char *name;
        uint32_t bit;
    } all[] = {
        {"no-store", FY_CC_NO_STORE},
        {"no-cache", FY_CC_NO_CACHE},
        {"private", FY_CC_PRIVATE},
        {"public", FY_CC_PUBLIC},
        {"must-revalidate", FY_CC_MUST_REVALIDATE},
        {"proxy-revalidate", FY_CC_PROXY_REVALIDATE},
        {"must-understand", FY_CC_MUST_UNDERSTAND},
        {"no-transform", FY_CC_NO_TRANSFORM},
        {"only-if-cached", FY_CC_ONLY_IF_CACHED},
        {"immutable", FY_CC_IMMUTABLE},
        {"max-age", FY_CC_MAX_AGE},
        {"s-maxage", FY_CC_S_MAXAGE},
        {"max-stale", FY_CC_MAX_STALE},
        {"min-fresh", FY_CC_MIN_FRESH},
        {"stale-while-revalidate", FY_CC_SWR},
        {"stale-if-error", FY_CC_SIE},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        size_t n = strlen(all[i].name);
        for (int form = 0; form < 3; form++) {
            for (size_t k = 0; k < n; k++) {
                char c = all[i].name[k];
                bool up = form == 1 || (form == 2 && k % 2);
                buf[k] = up && c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
            }
            memcpy(buf + n, "=7", 3);
            fy_cache_cc_t c = P(buf);
            CHECK_EQ_INT(c.flags, all[i].bit);
            CHECK(!c.syntax_error);
        }
        for (size_t k = 0; k < n; k++) { /* one letter off: unknown */
            memcpy(buf, all[i].name, n + 1);
            buf[k] = buf[k] == 'x' ? 'y' : 'x';
            fy_cache_cc_t c = P(buf);
            CHECK_EQ_INT(c.flags, 0);
            CHECK(!c.syntax_error);
        }
    }
    const char *unknown[] = {"publix",
                             "privatx",
                             "mix-age",
                             "s-maxagx",
                             "no-stork",
                             "no-cachy",
                             "imm-table",
                             "max-stalx",
                             "min-frest",
                             "only-if-cachet",
                             "stale-if-errar",
                             "must-revalidatx",
                             "must-understanx",
                             "xxxxxx",
                             "-------",
                             "12345678",
                             "x",
                             "no-transforms"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        fy_cache_cc_t c = P(unknown[i]);
        CHECK_EQ_INT(c.flags, 0);
    }
    /* whitespace (spaces and tabs) around members and commas; quoted commas; duplicates */
    fy_cache_cc_t c = P(" \tmax-age=5 ,\t no-cache=\"a, b\" ,private , max-age=5,, public\t");
    CHECK_EQ_INT(c.max_age, 5);
    CHECK_EQ_INT(c.flags, FY_CC_MAX_AGE | FY_CC_NO_CACHE | FY_CC_PRIVATE | FY_CC_PUBLIC);
    CHECK(!c.bad && !c.syntax_error);
    c = P("no-cache=\"a, max-age=1, b\", no-store, no-store");
    CHECK_EQ_INT(c.flags, FY_CC_NO_CACHE | FY_CC_NO_STORE);
    c = P("s-maxage=4294967296, max-age=\"99999999999999999999\"");
    CHECK_EQ_INT(c.s_maxage, FY_CC_DELTA_MAX);
    CHECK_EQ_INT(c.max_age, FY_CC_DELTA_MAX);
    CHECK(!c.bad);
    c = P("max-age=9, max-age=\"9\"");
    CHECK(!c.bad && c.max_age == 9);
    /* targeted fields compare exactly (sf-keys are lowercase) */
    fy_cache_cc_init(&c);
    CHECK_EQ_INT(fy_cache_cc_parse_targeted(&c, "s-maxage=3, no-cache", 20), 0);
    CHECK_EQ_INT(c.flags, FY_CC_S_MAXAGE | FY_CC_NO_CACHE);
}

static void test_syntax_errors(void)
{
    fy_cache_cc_t c = P("max-age=5 junk, no-store");
    CHECK(c.syntax_error);
    CHECK(!(c.flags & FY_CC_MAX_AGE));
    CHECK(c.flags & FY_CC_NO_STORE);
    c = P("=5, public");
    CHECK(c.syntax_error && (c.flags & FY_CC_PUBLIC));
    c = P("max-age=\"5, public");
    CHECK(c.syntax_error);
    c = P("max-age=, public");
    CHECK(c.syntax_error && (c.flags & FY_CC_PUBLIC));
    c = P("no cache");
    CHECK(c.syntax_error);
    c = P("max-age=\"5\"x, public");
    CHECK(c.syntax_error && (c.flags & FY_CC_PUBLIC));
}

static void test_split_lines(void)
{
    /* the same directives given as two field lines, split at every comma */
    const char *s = "max-age=60,no-cache,s-maxage=9";
    size_t n = strlen(s);
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != ',') continue;
        fy_cache_cc_t c;
        fy_cache_cc_init(&c);
        fy_cache_cc_parse(&c, at_guard(s, i), i);
        if (i < n) fy_cache_cc_parse(&c, at_guard(s + i + 1, n - i - 1), n - i - 1);
        CHECK_EQ_INT(c.max_age, 60);
        CHECK_EQ_INT(c.s_maxage, 9);
        CHECK(c.flags & FY_CC_NO_CACHE);
    }
    /* any prefix of any input: no read past the end */
    const char *odd = "max-age=\"6\\\"0\", private=\"x\", stale-if-error=1";
    for (size_t i = 0; i <= strlen(odd); i++) {
        fy_cache_cc_t c;
        fy_cache_cc_init(&c);
        fy_cache_cc_parse(&c, at_guard(odd, i), i);
        CHECK(1);
    }
}

static void test_targeted(void)
{
    fy_cache_cc_t c;
    fy_cache_cc_init(&c);
    CHECK_EQ_INT(fy_cache_cc_parse_targeted(&c, "max-age=60", 10), 0);
    CHECK_EQ_INT(c.max_age, 60);
    const char *bad[] = {"max-age=\"60\"",        "Max-Age=60", "max-age=60;a=b", "max-age=6 0",
                         "max-age=60, max-age=1", "max-age=x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fy_cache_cc_init(&c);
        CHECK_EQ_INT(fy_cache_cc_parse_targeted(&c, bad[i], strlen(bad[i])), -1);
    }
    fy_cache_cc_init(&c);
    CHECK_EQ_INT(fy_cache_cc_parse_targeted(&c, "no-store, x=\"A\"", 15), 0);
    CHECK(c.flags & FY_CC_NO_STORE);
}

static void test_age(void)
{
    CHECK_EQ_INT(fy_cache_parse_age("10", 2), 10);
    CHECK_EQ_INT(fy_cache_parse_age(" 10 ", 4), 10);
    CHECK_EQ_INT(fy_cache_parse_age("10, 20", 6), 10);
    CHECK_EQ_INT(fy_cache_parse_age("1.5", 3), -1);
    CHECK_EQ_INT(fy_cache_parse_age("-1", 2), -1);
    CHECK_EQ_INT(fy_cache_parse_age("", 0), -1);
    CHECK_EQ_INT(fy_cache_parse_age("abc", 3), -1);
    CHECK_EQ_INT(fy_cache_parse_age("99999999999999999999", 20), FY_CC_DELTA_MAX);
    const char *a = "12345";
    CHECK_EQ_INT(fy_cache_parse_age(at_guard(a, 5), 5), 12345);
}

FY_TEST_MAIN(guard_init(); test_basic(); test_odd_values(); test_syntax_errors();
             test_split_lines(); test_targeted(); test_age(); test_directive_names())
