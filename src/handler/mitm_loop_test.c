/* Unit tests of the self-loop check of handler/mitm_loop.c: every spelling of a listener's address
 * (IPv4-mapped IPv6, the unspecified address, other loopback addresses, this host's interface
 * addresses behind a wildcard listener) is recognised; other ports and other hosts are not. */
#include "mitm_loop.c"

#include <arpa/inet.h>

#include "core/test.h"

static struct sockaddr_storage addr(const char *ip, int port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a = (void *)&ss;
    struct sockaddr_in6 *b = (void *)&ss;
    if (inet_pton(AF_INET, ip, &a->sin_addr) == 1) {
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
    } else {
        if (inet_pton(AF_INET6, ip, &b->sin6_addr) != 1) abort();
        b->sin6_family = AF_INET6;
        b->sin6_port = htons((uint16_t)port);
    }
    return ss;
}

static bool loops_to(fy__mitm_t *m, const char *ip, int port)
{
    struct sockaddr_storage ss = addr(ip, port);
    return fy__mitm_loops(m, (struct sockaddr *)&ss);
}

static void own(fy__mitm_t *m, const char *ip, int port)
{
    struct sockaddr_storage ss = addr(ip, port);
    m->own[m->nown++] = ss;
}

static void test_loopback_listener(void)
{
    fy__mitm_t *m = calloc(1, sizeof *m);
    own(m, "127.0.0.1", 8888);
    CHECK(loops_to(m, "127.0.0.1", 8888));
    CHECK(loops_to(m, "::ffff:127.0.0.1", 8888));
    CHECK(loops_to(m, "0.0.0.0", 8888));
    CHECK(loops_to(m, "::ffff:0.0.0.0", 8888));
    CHECK(!loops_to(m, "127.0.0.1", 8889));
    CHECK(!loops_to(m, "127.0.0.2", 8888)); /* refused by the kernel, not a loop */
    CHECK(!loops_to(m, "::1", 8888));       /* an IPv4 listener is not reached over IPv6 */
    CHECK(!loops_to(m, "192.0.2.77", 8888));
    own(m, "::1", 8888);
    CHECK(loops_to(m, "::1", 8888));
    CHECK(loops_to(m, "::", 8888));
    CHECK(!loops_to(m, "::1", 8889));
    free(m);
}

static void test_wildcard_listener(void)
{
    fy__mitm_t *m = calloc(1, sizeof *m);
    own(m, "0.0.0.0", 3128);
    CHECK(loops_to(m, "127.0.0.1", 3128));
    CHECK(loops_to(m, "127.9.8.7", 3128)); /* all of 127/8 is this host */
    CHECK(loops_to(m, "::ffff:127.0.0.5", 3128));
    CHECK(loops_to(m, "0.0.0.0", 3128));
    CHECK(!loops_to(m, "127.0.0.1", 3129));
    CHECK(!loops_to(m, "192.0.2.77", 3128)); /* TEST-NET: on no interface here */
    CHECK(!loops_to(m, "::1", 3128));        /* the IPv4 wildcard does not take IPv6 */
    /* every IPv4 address of this host's interfaces */
    struct ifaddrs *ifs;
    CHECK(getifaddrs(&ifs) == 0);
    int n = 0;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        struct sockaddr_in a = *(struct sockaddr_in *)i->ifa_addr;
        a.sin_port = htons(3128);
        CHECK(fy__mitm_loops(m, (struct sockaddr *)&a));
        n++;
    }
    freeifaddrs(ifs);
    CHECK(n >= 1);
    own(m, "::", 3128);
    CHECK(loops_to(m, "::1", 3128));
    CHECK(loops_to(m, "::", 3128));
    CHECK(!loops_to(m, "2001:db8::1", 3128));
    free(m);
}

FY_TEST_MAIN(test_loopback_listener(); test_wildcard_listener())
