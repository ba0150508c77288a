/* Tests for cidr.c: address and prefix parsing (v4, v6, v4-mapped, host bits, lengths), the
 * compiled trie against a brute-force longest-prefix match over random prefix sets, and the
 * path compression (nodes <= 2 * prefixes). */
#include "policy/cidr.h"

#include <stdlib.h>

#include "core/test.h"

static fy_ip_t ip(const char *s)
{
    fy_ip_t a = {0, 0};
    CHECK(fy_ip_parse(s, strlen(s), &a) == 0);
    return a;
}

static void test_parse(void)
{
    fy_ip_t a, b;
    unsigned len;
    const char *why;
    CHECK(fy_ip_parse_cidr("10.0.0.0/8", &a, &len, &why) == 0 && len == 104);
    CHECK(fy_ip_is_v4(&a));
    CHECK(fy_ip_parse_cidr("::1", &a, &len, &why) == 0 && len == 128 && a.hi == 0 && a.lo == 1);
    CHECK(fy_ip_parse_cidr("192.0.2.7", &a, &len, &why) == 0 && len == 128);
    CHECK(fy_ip_parse_cidr("2001:db8::/32", &a, &len, &why) == 0 && len == 32);
    CHECK(fy_ip_parse_cidr("0.0.0.0/0", &a, &len, &why) == 0 && len == 96);
    CHECK(fy_ip_parse_cidr("::/0", &a, &len, &why) == 0 && len == 0);
    CHECK(fy_ip_parse_cidr("10.0.0.1/8", &a, &len, &why) < 0); /* host bits */
    CHECK(fy_ip_parse_cidr("10.0.0.0/33", &a, &len, &why) < 0);
    CHECK(fy_ip_parse_cidr("10.0.0.0/", &a, &len, &why) < 0);
    CHECK(fy_ip_parse_cidr("10.0.0.0/08", &a, &len, &why) < 0);
    CHECK(fy_ip_parse_cidr("::/129", &a, &len, &why) < 0);
    CHECK(fy_ip_parse_cidr("10.0.0", &a, &len, &why) < 0);
    CHECK(fy_ip_parse_cidr("010.0.0.1", &a, &len, &why) < 0);
    CHECK(fy_ip_parse_cidr("example.com", &a, &len, &why) < 0);
    CHECK(fy_ip_parse_cidr("", &a, &len, &why) < 0);
    /* a v4-mapped v6 address is the v4 address */
    a = ip("::ffff:192.0.2.1");
    b = ip("192.0.2.1");
    CHECK(a.hi == b.hi && a.lo == b.lo);
    char buf[64];
    fy_ip_format(&a, buf, sizeof buf);
    CHECK(!strcmp(buf, "192.0.2.1"));
    a = ip("2001:db8::5");
    fy_ip_format(&a, buf, sizeof buf);
    CHECK(!strcmp(buf, "2001:db8::5"));
}

static int look(const fy_cidr_trie_t *t, const char *s)
{
    fy_ip_t a = ip(s);
    return fy_cidr_trie_lookup(t, &a);
}

static void test_basic(void)
{
    fy_cidr_trie_t *t = fy_cidr_trie_new();
    CHECK(fy_cidr_trie_lookup(t, &(fy_ip_t){0, 1}) == -1); /* not compiled, empty */
    fy_ip_t a;
    unsigned len;
    const char *why;
    const char *rules[][2] = {{"10.0.0.0/8", "0"},    {"10.9.0.0/16", "1"}, {"10.9.9.0/24", "0"},
                              {"2001:db8::/32", "1"}, {"::1", "0"},         {"0.0.0.0/0", "5"},
                              {"10.9.9.9", "1"},      {"10.9.9.9", "0"}};
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        CHECK(fy_ip_parse_cidr(rules[i][0], &a, &len, &why) == 0);
        fy_cidr_trie_add(t, &a, len, rules[i][1][0] - '0');
    }
    fy_cidr_trie_compile(t);
    CHECK_EQ_INT(look(t, "10.1.2.3"), 0);
    CHECK_EQ_INT(look(t, "10.9.2.3"), 1);
    CHECK_EQ_INT(look(t, "10.9.9.3"), 0);
    CHECK_EQ_INT(look(t, "10.9.9.9"), 1); /* larger value wins */
    CHECK_EQ_INT(look(t, "11.0.0.1"), 5);
    CHECK_EQ_INT(look(t, "::ffff:10.1.0.1"), 0);
    CHECK_EQ_INT(look(t, "2001:db8:1::1"), 1);
    CHECK_EQ_INT(look(t, "2001:db9::1"), -1);
    CHECK_EQ_INT(look(t, "::1"), 0);
    CHECK_EQ_INT(look(t, "::2"), -1);
    fy_cidr_trie_free(t);
}

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static bool in_prefix(const fy_ip_t *a, const fy_ip_t *p, unsigned len)
{
    for (unsigned i = 0; i < len; i++) {
        unsigned ba = i < 64 ? (a->hi >> (63 - i)) & 1 : (a->lo >> (127 - i)) & 1;
        unsigned bp = i < 64 ? (p->hi >> (63 - i)) & 1 : (p->lo >> (127 - i)) & 1;
        if (ba != bp) return false;
    }
    return true;
}

/* Random prefixes clustered in a few regions (so that they nest and branch), compared with a
   brute-force longest match for random addresses drawn near them. */
static void test_random(void)
{
    for (int round = 0; round < 40; round++) {
        size_t n = 1 + rnd() % 200;
        fy_ip_t *p = calloc(n, sizeof *p);
        unsigned *len = calloc(n, sizeof *len);
        int *val = calloc(n, sizeof *val);
        fy_cidr_trie_t *t = fy_cidr_trie_new();
        fy_ip_t bases[3] = {
            {rnd(), rnd()}, {0, 0xffff00000000ull | (rnd() & 0xffffffff)}, {rnd(), rnd()}};
        for (size_t i = 0; i < n; i++) {
            fy_ip_t b = bases[rnd() % 3];
            b.lo ^= rnd() & ((rnd() % 2) ? 0xffff : 0xffffffffffull);
            if (rnd() % 4 == 0) b.hi ^= rnd() & 0xff;
            len[i] = (unsigned)(rnd() % 129);
            val[i] = (int)(rnd() % 3);
            /* the reference keeps the masked prefix */
            for (unsigned k = len[i]; k < 128; k++) {
                if (k < 64)
                    b.hi &= ~(1ull << (63 - k));
                else
                    b.lo &= ~(1ull << (127 - k));
            }
            p[i] = b;
            fy_cidr_trie_add(t, &b, len[i], val[i]);
        }
        fy_cidr_trie_compile(t);
        CHECK(fy_cidr_trie_nodes(t) <= 2 * n);
        for (int q = 0; q < 2000; q++) {
            fy_ip_t a = p[rnd() % n];
            if (rnd() % 2) a.lo ^= rnd() & 0xfff;
            if (rnd() % 8 == 0) a.hi ^= rnd();
            int best = -1, bestlen = -1;
            for (size_t i = 0; i < n; i++)
                if (in_prefix(&a, &p[i], len[i]) &&
                    ((int)len[i] > bestlen || ((int)len[i] == bestlen && val[i] > best))) {
                    best = val[i];
                    bestlen = (int)len[i];
                }
            int got = fy_cidr_trie_lookup(t, &a);
            if (got != best) {
                CHECK_EQ_INT(got, best);
                break;
            }
            fy_test_pass++;
        }
        fy_cidr_trie_free(t);
        free(p);
        free(len);
        free(val);
    }
}

FY_TEST_MAIN(test_parse(); test_basic(); test_random())
