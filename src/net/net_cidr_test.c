/* fy_net_cidr_parse / fy_net_cidr_match: prefixes on and off byte boundaries, hosts without a
 * prefix, v4-mapped IPv6 peers against IPv4 lists, and the strings the parser refuses. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "core/test.h"
#include "net/net_cidr.h"

static bool match4(const fy_net_cidr_t *c, size_t n, const char *ip)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1);
    return fy_net_cidr_match(c, n, (const struct sockaddr *)&a);
}

static bool match6(const fy_net_cidr_t *c, size_t n, const char *ip)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    CHECK(inet_pton(AF_INET6, ip, &a.sin6_addr) == 1);
    return fy_net_cidr_match(c, n, (const struct sockaddr *)&a);
}

static void test_match(void)
{
    fy_net_cidr_t c[3];
    CHECK(fy_net_cidr_parse("10.0.0.0/8", &c[0]) == 0);
    CHECK(fy_net_cidr_parse("192.168.1.128/25", &c[1]) == 0);
    CHECK(fy_net_cidr_parse("2001:db8::/33", &c[2]) == 0);
    CHECK(match4(c, 3, "10.255.1.2"));
    CHECK(!match4(c, 3, "11.0.0.1"));
    CHECK(match4(c, 3, "192.168.1.200"));
    CHECK(!match4(c, 3, "192.168.1.127"));
    CHECK(match6(c, 3, "2001:db8:7fff::1"));
    CHECK(!match6(c, 3, "2001:db8:8000::1"));
    CHECK(match6(c, 3, "::ffff:10.1.2.3")); /* v4-mapped: matched as IPv4 */
    CHECK(!match6(c, 3, "::ffff:11.1.2.3"));
    fy_net_cidr_t host, all;
    CHECK(fy_net_cidr_parse("127.0.0.1", &host) == 0 && host.bits == 32);
    CHECK(match4(&host, 1, "127.0.0.1") && !match4(&host, 1, "127.0.0.2"));
    CHECK(fy_net_cidr_parse("0.0.0.0/0", &all) == 0);
    CHECK(match4(&all, 1, "8.8.8.8") && !match6(&all, 1, "::1"));
    CHECK(!match4(c, 0, "10.0.0.1"));
}

static void test_refused(void)
{
    fy_net_cidr_t c;
    const char *bad[] = {"",
                         "/8",
                         "10.0.0.0/",
                         "10.0.0.0/33",
                         "::/129",
                         "10.0.0.0/-1",
                         "10.0.0.0/8x",
                         "10.0.0/8",
                         "host.example",
                         "10.0.0.0/0008"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK(fy_net_cidr_parse(bad[i], &c) < 0);
}

FY_TEST_MAIN(test_match(); test_refused())
