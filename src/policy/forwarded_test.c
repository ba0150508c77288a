/* Tests for forwarded.c: X-Forwarded-For and RFC 7239 Forwarded parsing (ports, brackets,
 * quoted-pairs, obfuscated and unknown nodes, syntax errors, hop cap), and the rightmost-
 * untrusted walk: untrusted peer, trusted chains, spoofed left parts, garbage, all trusted. */
#include "policy/forwarded.h"

#include "core/test.h"

static fy_ip_t ip(const char *s)
{
    fy_ip_t a = {0, 0};
    CHECK(fy_ip_parse(s, strlen(s), &a) == 0);
    return a;
}

static bool same(fy_ip_t a, const char *s)
{
    fy_ip_t b = ip(s);
    return a.hi == b.hi && a.lo == b.lo;
}

static size_t xff(const char *v, fy_forwarded_hop_t *h)
{
    size_t n = 0;
    bool d = false;
    fy_forwarded_parse_xff(v, strlen(v), h, 8, &n, &d);
    return n;
}

static size_t fwd(const char *v, fy_forwarded_hop_t *h)
{
    size_t n = 0;
    bool d = false;
    fy_forwarded_parse_rfc7239(v, strlen(v), h, 8, &n, &d);
    return n;
}

static void test_xff(void)
{
    fy_forwarded_hop_t h[8];
    CHECK_EQ_INT(xff("203.0.113.7, 10.0.0.1", h), 2);
    CHECK(same(h[0].ip, "203.0.113.7") && !h[0].invalid && same(h[1].ip, "10.0.0.1"));
    CHECK_EQ_INT(xff(" 1.2.3.4:80 ,[2001:db8::1]:443,2001:db8::2 ,, [::1]", h), 4);
    CHECK(same(h[0].ip, "1.2.3.4") && same(h[1].ip, "2001:db8::1") && same(h[2].ip, "2001:db8::2"));
    CHECK(same(h[3].ip, "::1") && !h[3].invalid);
    CHECK_EQ_INT(xff("garbage, 1.2.3.4:99999x, 1.2.3", h), 3);
    CHECK(h[0].invalid && h[1].invalid && h[2].invalid);
    CHECK_EQ_INT(xff("", h), 0);
    CHECK_EQ_INT(xff("[::1", h), 1);
    CHECK(h[0].invalid);
    /* more hops than fit: the rightmost kept */
    size_t n = 0;
    bool d = false;
    const char *many = "1.1.1.1, 2.2.2.2, 3.3.3.3, 4.4.4.4";
    fy_forwarded_parse_xff(many, strlen(many), h, 2, &n, &d);
    CHECK(n == 2 && d && same(h[0].ip, "3.3.3.3") && same(h[1].ip, "4.4.4.4"));
}

static void test_rfc7239(void)
{
    fy_forwarded_hop_t h[8];
    CHECK_EQ_INT(fwd("for=192.0.2.60;proto=http;by=203.0.113.43", h), 1);
    CHECK(same(h[0].ip, "192.0.2.60") && !h[0].invalid);
    CHECK_EQ_INT(fwd("for=\"[2001:db8:cafe::17]:4711\", For=198.51.100.17 ;by=x", h), 2);
    CHECK(same(h[0].ip, "2001:db8:cafe::17") && same(h[1].ip, "198.51.100.17"));
    CHECK_EQ_INT(fwd("for=\"192.0.2.43:47011\"", h), 1);
    CHECK(same(h[0].ip, "192.0.2.43"));
    CHECK_EQ_INT(fwd("for=\"\\[::1\\]\"", h), 1); /* quoted-pairs */
    CHECK(same(h[0].ip, "::1") && !h[0].invalid);
    CHECK_EQ_INT(fwd("for=unknown, for=_hidden, proto=https, for=\"[::1\"", h), 4);
    CHECK(h[0].invalid && h[1].invalid && h[2].invalid && h[3].invalid);
    CHECK_EQ_INT(fwd("for=1.2.3.4;for=5.6.7.8", h), 1); /* two `for` in one element */
    CHECK(h[0].invalid);
    CHECK_EQ_INT(fwd("for=[::1], for=9.9.9.9", h), 2); /* unquoted brackets: a syntax error */
    CHECK(h[0].invalid && same(h[1].ip, "9.9.9.9") && !h[1].invalid);
    CHECK_EQ_INT(fwd("for=\"a,b\", for=8.8.8.8", h), 2); /* a comma inside quotes */
    CHECK(h[0].invalid && same(h[1].ip, "8.8.8.8"));
    CHECK_EQ_INT(fwd("for=\"unterminated", h), 1);
    CHECK(h[0].invalid);
    CHECK_EQ_INT(fwd("", h), 0);
    CHECK_EQ_INT(fwd(" , ;", h), 0);
}

static fy_headers_t hs;
static fy_header_t hv[8];

static void set_headers(const char *n1, const char *v1, const char *n2, const char *v2)
{
    hs.v = hv;
    hs.n = 0;
    hs.cap = 8;
    if (n1) hv[hs.n++] = (fy_header_t){{n1, strlen(n1)}, {v1, strlen(v1)}};
    if (n2) hv[hs.n++] = (fy_header_t){{n2, strlen(n2)}, {v2, strlen(v2)}};
}

static void test_walk(void)
{
    fy_cidr_trie_t *t = fy_cidr_trie_new();
    fy_ip_t a;
    unsigned len;
    const char *why;
    CHECK(fy_ip_parse_cidr("10.0.0.0/8", &a, &len, &why) == 0);
    fy_cidr_trie_add(t, &a, len, 1);
    CHECK(fy_ip_parse_cidr("::1", &a, &len, &why) == 0);
    fy_cidr_trie_add(t, &a, len, 1);
    fy_cidr_trie_compile(t);
    fy_ip_t trusted_peer = ip("10.1.1.1"), stranger = ip("198.51.100.9");

    /* an untrusted peer's header is ignored (spoofing from outside) */
    set_headers("X-Forwarded-For", "127.0.0.1", NULL, NULL);
    CHECK(same(fy_forwarded_client(&hs, &stranger, t), "198.51.100.9"));
    /* trusted peer: the rightmost untrusted, whatever the client put on the left */
    set_headers("X-Forwarded-For", "127.0.0.1, 203.0.113.5, 10.2.2.2", NULL, NULL);
    CHECK(same(fy_forwarded_client(&hs, &trusted_peer, t), "203.0.113.5"));
    /* two header lines are one list, in order */
    set_headers("x-forwarded-for", "203.0.113.5", "X-Forwarded-For", "10.3.3.3");
    CHECK(same(fy_forwarded_client(&hs, &trusted_peer, t), "203.0.113.5"));
    /* garbage stops the walk at the trusted hop to its right */
    set_headers("X-Forwarded-For", "203.0.113.5, junk, 10.4.4.4", NULL, NULL);
    CHECK(same(fy_forwarded_client(&hs, &trusted_peer, t), "10.4.4.4"));
    /* all trusted: the leftmost */
    set_headers("X-Forwarded-For", "10.5.5.5, 10.6.6.6", NULL, NULL);
    CHECK(same(fy_forwarded_client(&hs, &trusted_peer, t), "10.5.5.5"));
    /* no header: the peer */
    set_headers(NULL, NULL, NULL, NULL);
    CHECK(same(fy_forwarded_client(&hs, &trusted_peer, t), "10.1.1.1"));
    /* Forwarded is preferred over X-Forwarded-For when both are there */
    set_headers("X-Forwarded-For", "192.0.2.1", "Forwarded", "for=\"[2001:db8::9]:80\"");
    CHECK(same(fy_forwarded_client(&hs, &trusted_peer, t), "2001:db8::9"));
    fy_ip_t v6peer = ip("::1");
    set_headers("Forwarded", "for=192.0.2.77;proto=https", NULL, NULL);
    CHECK(same(fy_forwarded_client(&hs, &v6peer, t), "192.0.2.77"));
    fy_cidr_trie_free(t);
}

FY_TEST_MAIN(test_xff(); test_rfc7239(); test_walk())
