/* fy_sock_host_str / fy_sock_addr_str: the hand-written IPv4 formatter must agree with
 * inet_ntop for every octet width, and IPv6 still goes through inet_ntop. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "core/test.h"
#include "net/sock.h"

static void check_v4(const char *ip, unsigned short port, const char *want_addr)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1);
    char b[64];
    fy_sock_host_str((struct sockaddr *)&a, b, sizeof b);
    CHECK(strcmp(b, ip) == 0);
    fy_sock_addr_str((struct sockaddr *)&a, b, sizeof b);
    CHECK(strcmp(b, want_addr) == 0);
}

static void test_all_octets(void)
{
    /* every value of one octet, in every position */
    for (int pos = 0; pos < 4; pos++)
        for (int v = 0; v < 256; v++) {
            unsigned char o[4] = {10, 200, 3, 45};
            o[pos] = (unsigned char)v;
            struct sockaddr_in a = {.sin_family = AF_INET};
            memcpy(&a.sin_addr, o, 4);
            char want[INET_ADDRSTRLEN], got[64];
            inet_ntop(AF_INET, &a.sin_addr, want, sizeof want);
            fy_sock_host_str((struct sockaddr *)&a, got, sizeof got);
            CHECK(strcmp(want, got) == 0);
        }
}

static void test_v6(void)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(8443)};
    CHECK(inet_pton(AF_INET6, "::1", &a.sin6_addr) == 1);
    char b[80];
    fy_sock_host_str((struct sockaddr *)&a, b, sizeof b);
    CHECK(strcmp(b, "::1") == 0);
    fy_sock_addr_str((struct sockaddr *)&a, b, sizeof b);
    CHECK(strcmp(b, "[::1]:8443") == 0);
}

FY_TEST_MAIN(check_v4("0.0.0.0", 80, "0.0.0.0:80"); check_v4("127.0.0.1", 8080, "127.0.0.1:8080");
             check_v4("255.255.255.255", 1, "255.255.255.255:1");
             check_v4("1.100.99.9", 65535, "1.100.99.9:65535"); test_all_octets(); test_v6())
