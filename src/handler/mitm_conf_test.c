/* Unit tests of the intercept config helpers: CIDR parsing and matching (IPv4, IPv6,
 * IPv4-mapped), host patterns, and the SOCKS5 parser's edges (whole, byte by byte). */
#include "handler/mitm_conf.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "core/test.h"
#include "handler/socks5.h"

static struct sockaddr_storage v4(const char *a)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *s = (struct sockaddr_in *)&ss;
    s->sin_family = AF_INET;
    inet_pton(AF_INET, a, &s->sin_addr);
    return ss;
}

static struct sockaddr_storage v6(const char *a)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
    s->sin6_family = AF_INET6;
    inet_pton(AF_INET6, a, &s->sin6_addr);
    return ss;
}

static void test_cidr(void)
{
    fy_cidr_t c;
    CHECK(fy_cidr_parse("10.0.0.0/8", &c) == 0 && c.bits == 8);
    struct sockaddr_storage a = v4("10.200.1.1"), b = v4("11.0.0.1");
    CHECK(fy_cidr_match(&c, (struct sockaddr *)&a));
    CHECK(!fy_cidr_match(&c, (struct sockaddr *)&b));
    struct sockaddr_storage m = v6("::ffff:10.1.2.3"), m2 = v6("::1");
    CHECK(fy_cidr_match(&c, (struct sockaddr *)&m)); /* IPv4-mapped */
    CHECK(!fy_cidr_match(&c, (struct sockaddr *)&m2));
    CHECK(fy_cidr_parse("::1", &c) == 0 && c.bits == 128);
    CHECK(fy_cidr_match(&c, (struct sockaddr *)&m2));
    CHECK(!fy_cidr_match(&c, (struct sockaddr *)&a));
    CHECK(fy_cidr_parse("192.168.1.7", &c) == 0 && c.bits == 32);
    CHECK(fy_cidr_parse("0.0.0.0/0", &c) == 0);
    CHECK(fy_cidr_match(&c, (struct sockaddr *)&b));
    CHECK(fy_cidr_parse("10.0.0.0/33", &c) < 0);
    CHECK(fy_cidr_parse("10.0.0.300/8", &c) < 0);
    CHECK(fy_cidr_parse("10.0.0.0/", &c) < 0);
    CHECK(fy_cidr_parse("", &c) < 0);
    CHECK(fy_cidr_parse("fe80::/129", &c) < 0);
    CHECK(fy_cidr_parse("fe80::/10", &c) == 0);
    struct sockaddr_storage ll = v6("fe80::1");
    CHECK(fy_cidr_match(&c, (struct sockaddr *)&ll));
}

static void test_hosts(void)
{
    char *pats[] = {"example.com", "*.bank.test"};
    fy_conf_strlist_t l = {pats, 2};
    CHECK(fy_host_list_match(&l, "EXAMPLE.com"));
    CHECK(!fy_host_list_match(&l, "www.example.com"));
    CHECK(fy_host_list_match(&l, "a.b.bank.test"));
    CHECK(!fy_host_list_match(&l, "bank.test")); /* the wildcard needs a label */
    CHECK(!fy_host_list_match(&l, "xbank.test"));
    char *any[] = {"*"};
    fy_conf_strlist_t all = {any, 1};
    CHECK(fy_host_list_match(&all, "anything"));
    fy_conf_strlist_t none = {NULL, 0};
    CHECK(!fy_host_list_match(&none, "x"));
}

static void test_socks5(void)
{
    static const unsigned char req[] = {5,   1,   0,   3,   9,   'L', 'o', 'c',
                                        'a', 'l', 'h', 'o', 's', 't', 1,   187};
    fy_socks5_msg_t m;
    for (size_t n = 0; n < sizeof req; n++)
        CHECK_EQ_INT(fy_socks5_parse(FY_SOCKS5_REQUEST, req, n, &m), 0);
    CHECK_EQ_INT(fy_socks5_parse(FY_SOCKS5_REQUEST, req, sizeof req, &m), (int)sizeof req);
    CHECK(strcmp(m.host, "localhost") == 0 && m.port == 443 && m.cmd == 1);
    static const unsigned char v6req[] = {5, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0,
                                          0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 80};
    CHECK_EQ_INT(fy_socks5_parse(FY_SOCKS5_REQUEST, v6req, sizeof v6req, &m), (int)sizeof v6req);
    CHECK(strcmp(m.host, "::1") == 0 && m.port == 80);
    static const unsigned char port0[] = {5, 1, 0, 1, 127, 0, 0, 1, 0, 0};
    CHECK_EQ_INT(fy_socks5_parse(FY_SOCKS5_REQUEST, port0, sizeof port0, &m), FY_SOCKS5_EBAD);
    static const unsigned char atyp[] = {5, 1, 0, 9};
    CHECK_EQ_INT(fy_socks5_parse(FY_SOCKS5_REQUEST, atyp, sizeof atyp, &m), FY_SOCKS5_EATYP);
    static const unsigned char greet[] = {5, 2, 0, 2};
    CHECK_EQ_INT(fy_socks5_parse(FY_SOCKS5_GREETING, greet, sizeof greet, &m), 4);
    CHECK(m.methods == (FY_SOCKS5_M_NOAUTH | FY_SOCKS5_M_USERPASS));
    static const unsigned char v4greet[] = {4, 1, 0};
    CHECK_EQ_INT(fy_socks5_parse(FY_SOCKS5_GREETING, v4greet, 3, &m), FY_SOCKS5_EBAD);
    static const unsigned char auth[] = {1, 1, 'u', 0};
    CHECK_EQ_INT(fy_socks5_parse(FY_SOCKS5_AUTH, auth, sizeof auth, &m), 4);
    CHECK(m.user_len == 1 && m.pass_len == 0);
}

FY_TEST_MAIN(test_cidr(); test_hosts(); test_socks5())
