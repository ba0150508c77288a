/* Unit tests of the layer-4 peers' parsers: ClientHello peek (whole, every prefix, split across
 * records, ending at a guard page, bounds), SNI patterns, CIDRs, PROXY protocol v1/v2. */
#include <arpa/inet.h>
#include <netinet/in.h>

#include "core/test.h"
#include "core/test_guard.h"
#include "l4/l4_conf.h"
#include "l4/l4_hello.h"
#include "l4/l4_proxy.h"
#include "l4/l4_quic.h"

static uint8_t hello[1024];
static size_t hello_len;

static void put16(uint8_t *p, size_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* A TLS 1.3-shaped ClientHello with SNI `sni` and ALPN h2,http/1.1, in one record. */
static void make_hello(const char *sni)
{
    uint8_t body[900], *p = body;
    *p++ = 3, *p++ = 3;
    memset(p, 0x11, 32), p += 32;               /* random */
    *p++ = 0;                                   /* session id */
    put16(p, 2), p[2] = 0x13, p[3] = 1, p += 4; /* one cipher suite */
    *p++ = 1, *p++ = 0;                         /* null compression */
    uint8_t *ext_len = p;
    p += 2;
    size_t sl = strlen(sni);
    put16(p, 0), put16(p + 2, sl + 5), put16(p + 4, sl + 3), p[6] = 0, put16(p + 7, sl);
    memcpy(p + 9, sni, sl);
    p += 9 + sl;
    static const uint8_t alpn[] = "\x02h2\x08http/1.1";
    put16(p, 16), put16(p + 2, sizeof alpn - 1 + 2), put16(p + 4, sizeof alpn - 1);
    memcpy(p + 6, alpn, sizeof alpn - 1);
    p += 6 + sizeof alpn - 1;
    put16(ext_len, (size_t)(p - ext_len - 2));
    size_t bl = (size_t)(p - body);
    uint8_t *h = hello;
    h[0] = 22, h[1] = 3, h[2] = 1, put16(h + 3, bl + 4);
    h[5] = 1, h[6] = 0, put16(h + 7, bl);
    memcpy(h + 9, body, bl);
    hello_len = 9 + bl;
}

static void test_whole_and_prefixes(void)
{
    static uint8_t scratch[4096];
    fy_l4_hello_t h;
    make_hello("Alpha.Example.com");
    CHECK_EQ_INT(fy_l4_hello_parse_records(hello, hello_len, 16384, scratch, &h), 1);
    CHECK(strcmp(h.sni, "alpha.example.com") == 0);
    CHECK_EQ_INT(h.alpn_len, 12);
    CHECK(memcmp(h.alpn, "\x02h2\x08http/1.1", 12) == 0);
    for (size_t n = 0; n < hello_len; n++) {
        const uint8_t *g = (const uint8_t *)at_guard((const char *)hello, n);
        CHECK_EQ_INT(fy_l4_hello_parse_records(g, n, 16384, scratch, &h), FY_L4_HELLO_NEED_MORE);
    }
    const uint8_t *g = (const uint8_t *)at_guard((const char *)hello, hello_len);
    CHECK_EQ_INT(fy_l4_hello_parse_records(g, hello_len, 16384, scratch, &h), 1);
    /* bound: a hello longer than max */
    CHECK_EQ_INT(fy_l4_hello_parse_records(hello, hello_len, 64, scratch, &h), FY_L4_HELLO_ELIMIT);
    /* split into two records */
    uint8_t two[2048];
    size_t cut = 30, bl = hello_len - 5;
    memcpy(two, hello, 5);
    put16(two + 3, cut);
    memcpy(two + 5, hello + 5, cut);
    two[5 + cut] = 22, two[6 + cut] = 3, two[7 + cut] = 1, put16(two + 8 + cut, bl - cut);
    memcpy(two + 10 + cut, hello + 5 + cut, bl - cut);
    CHECK_EQ_INT(fy_l4_hello_parse_records(two, hello_len + 5, 16384, scratch, &h), 1);
    CHECK(strcmp(h.sni, "alpha.example.com") == 0);
    for (size_t n = 0; n < hello_len + 5; n++)
        CHECK_EQ_INT(fy_l4_hello_parse_records(two, n, 16384, scratch, &h), FY_L4_HELLO_NEED_MORE);
    /* bare handshake (QUIC CRYPTO) */
    CHECK_EQ_INT(fy_l4_hello_parse_handshake(hello + 5, hello_len - 5, 16384, &h), 1);
    /* not TLS; a bad inner length */
    CHECK_EQ_INT(fy_l4_hello_parse_records((const uint8_t *)"GET / ", 6, 16384, scratch, &h),
                 FY_L4_HELLO_EBAD);
    uint8_t bad[1024];
    memcpy(bad, hello, hello_len);
    bad[9 + 34] = 33; /* session id longer than 32 */
    CHECK_EQ_INT(fy_l4_hello_parse_records(bad, hello_len, 16384, scratch, &h), FY_L4_HELLO_EBAD);
}

static void test_patterns(void)
{
    CHECK(fy_l4_sni_match("a.example.com", "a.example.com"));
    CHECK(!fy_l4_sni_match("a.example.com", "b.example.com"));
    CHECK(fy_l4_sni_match("*.example.com", "a.example.com"));
    CHECK(!fy_l4_sni_match("*.example.com", "example.com"));
    CHECK(!fy_l4_sni_match("*.example.com", "a.b.example.com"));
    CHECK(fy_l4_sni_match("*", ""));
    fy_l4_cidr_t c[2] = {{.family = AF_INET, .bits = 8}, {.family = AF_INET6, .bits = 128}};
    c[0].addr[0] = 10;
    c[1].addr[15] = 1;
    struct sockaddr_in a4 = {.sin_family = AF_INET};
    inet_pton(AF_INET, "10.200.3.4", &a4.sin_addr);
    CHECK(fy_l4_cidr_match(c, 2, (struct sockaddr *)&a4));
    inet_pton(AF_INET, "11.0.0.1", &a4.sin_addr);
    CHECK(!fy_l4_cidr_match(c, 2, (struct sockaddr *)&a4));
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "::1", &a6.sin6_addr);
    CHECK(fy_l4_cidr_match(c, 2, (struct sockaddr *)&a6));
    inet_pton(AF_INET6, "::ffff:10.1.1.1", &a6.sin6_addr); /* v4-mapped */
    CHECK(fy_l4_cidr_match(c, 2, (struct sockaddr *)&a6));
}

static void test_proxy(void)
{
    struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(1234)},
                       d = {.sin_family = AF_INET, .sin_port = htons(443)};
    inet_pton(AF_INET, "192.0.2.1", &s.sin_addr);
    inet_pton(AF_INET, "198.51.100.2", &d.sin_addr);
    uint8_t out[FY_L4_PROXY_MAX];
    size_t n = fy_l4_proxy_build(1, (struct sockaddr *)&s, (struct sockaddr *)&d, out);
    CHECK_STRN(out, n, "PROXY TCP4 192.0.2.1 198.51.100.2 1234 443\r\n");
    struct sockaddr_storage ps, pd;
    bool has;
    for (int v = 1; v <= 2; v++) {
        n = fy_l4_proxy_build(v, (struct sockaddr *)&s, (struct sockaddr *)&d, out);
        for (size_t k = 0; k < n; k++) {
            const uint8_t *g = (const uint8_t *)at_guard((const char *)out, k);
            CHECK_EQ_INT(fy_l4_proxy_parse(g, k, &ps, &pd, &has), 0);
        }
        const uint8_t *g = (const uint8_t *)at_guard((const char *)out, n);
        CHECK_EQ_INT(fy_l4_proxy_parse(g, n, &ps, &pd, &has), (int)n);
        CHECK(has && ((struct sockaddr_in *)&ps)->sin_port == htons(1234));
        CHECK(((struct sockaddr_in *)&pd)->sin_addr.s_addr == d.sin_addr.s_addr);
    }
    CHECK_EQ_INT(fy_l4_proxy_parse((const uint8_t *)"PROXY TCP4 1.2.3.4 5.6.7.8 99999 1\r\n", 36,
                                   &ps, &pd, &has),
                 -1);
    CHECK_EQ_INT(fy_l4_proxy_parse((const uint8_t *)"GET / HTTP/1.1\r\n", 16, &ps, &pd, &has), -1);
    uint8_t v1long[120];
    memcpy(v1long, "PROXY ", 6);
    memset(v1long + 6, 'x', sizeof v1long - 6);
    CHECK_EQ_INT(fy_l4_proxy_parse(v1long, sizeof v1long, &ps, &pd, &has), -1);
}

static void test_quic_hdr(void)
{
    fy_quic_hdr_t h;
    static const uint8_t pkt[] = {0xc3, 0, 0, 0, 1, 4, 1, 2, 3, 4, 2, 9, 9, 0};
    CHECK_EQ_INT(fy_quic_parse_hdr(pkt, sizeof pkt, &h), 0);
    CHECK(h.is_long && h.version == 1 && h.type == 0 && h.dcid_len == 4 && h.scid_len == 2);
    static const uint8_t bad[] = {0xc3, 0, 0, 0, 1, 21};
    CHECK_EQ_INT(fy_quic_parse_hdr(bad, sizeof bad, &h), -1);
    /* garbage never decrypts */
    fy_quic_crypto_t c;
    CHECK_EQ_INT(fy_quic_crypto_init(&c, 1024), 0);
    uint8_t junk[1300];
    memset(junk, 0x5a, sizeof junk);
    junk[0] = 0xc3, junk[1] = junk[2] = junk[3] = 0, junk[4] = 1, junk[5] = 8;
    fy_l4_hello_t hl;
    CHECK_EQ_INT(fy_quic_initial_feed(&c, junk, sizeof junk, &hl), FY_L4_HELLO_EBAD);
    fy_quic_crypto_free(&c);
}

FY_TEST_MAIN(guard_init(); test_whole_and_prefixes(); test_patterns(); test_proxy();
             test_quic_hdr())
