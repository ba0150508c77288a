/* Unit tests of handler/mitm_dest.c: first match decides, names decide without an address
 * only when no address rule comes first, IP literals and IPv4-mapped / unspecified addresses
 * are matched as the address they reach, keywords and port ranges. */
#include "mitm_dest.c"

#include "core/test.h"

static fy_mitm_dest_rule_t rule(int action, const char **hosts, const char **ports)
{
    fy_mitm_dest_rule_t r = {.action = action, .line = 7};
    for (; hosts && hosts[r.hosts.n];) r.hosts.n++;
    r.hosts.v = (char **)hosts;
    for (; ports && ports[r.ports.n];) r.ports.n++;
    r.ports.v = (char **)ports;
    return r;
}

static struct sockaddr_storage ip(const char *s)
{
    struct sockaddr_storage ss;
    if (!literal(s, &ss)) abort();
    return ss;
}

static void test_order_and_addresses(void)
{
    const char *pat[] = {"*.example.com", NULL}, *lo[] = {"loopback", NULL},
               *p22[] = {"22", "6000-6063", NULL};
    fy_mitm_dest_rule_t rs[] = {rule(0, pat, NULL), rule(1, lo, NULL), rule(1, NULL, p22)};
    fy_conf_list_t l = {.v = rs, .n = 3};
    fy_mitm_dest_t *d = fy__mitm_dest_new(&l);
    char why[300];
    /* the name decides at once: allowed by rule 0, before the address rule */
    CHECK_EQ_INT(fy__mitm_dest_check(d, "a.example.com", 22, NULL, why, sizeof why), FY_DEST_ALLOW);
    /* another name: rule 1 needs the address */
    CHECK_EQ_INT(fy__mitm_dest_check(d, "db.internal", 443, NULL, why, sizeof why),
                 FY_DEST_NEED_ADDR);
    struct sockaddr_storage a = ip("127.0.0.1");
    CHECK_EQ_INT(fy__mitm_dest_check(d, "db.internal", 443, (struct sockaddr *)&a, why, sizeof why),
                 FY_DEST_DENY);
    CHECK(strstr(why, "db.internal:443 is denied by intercept.destinations[1] (line 7: hosts "
                      "loopback)") != NULL);
    /* literals are their own address, in every spelling */
    CHECK_EQ_INT(fy__mitm_dest_check(d, "::ffff:127.0.0.1", 443, NULL, why, sizeof why),
                 FY_DEST_DENY);
    CHECK(strstr(why, "[::ffff:127.0.0.1]:443") != NULL);
    CHECK_EQ_INT(fy__mitm_dest_check(d, "0.0.0.0", 443, NULL, why, sizeof why), FY_DEST_DENY);
    CHECK_EQ_INT(fy__mitm_dest_check(d, "::", 443, NULL, why, sizeof why), FY_DEST_DENY);
    CHECK_EQ_INT(fy__mitm_dest_check(d, "::1", 443, NULL, why, sizeof why), FY_DEST_DENY);
    /* ports: rule 2 */
    CHECK_EQ_INT(fy__mitm_dest_check(d, "192.0.2.1", 6063, NULL, why, sizeof why), FY_DEST_DENY);
    CHECK(strstr(why, "(line 7: any host, port 6063)") != NULL);
    CHECK_EQ_INT(fy__mitm_dest_check(d, "192.0.2.1", 6064, NULL, why, sizeof why), FY_DEST_ALLOW);
    CHECK_EQ_INT(fy__mitm_dest_check(d, "192.0.2.1", 443, NULL, why, sizeof why), FY_DEST_ALLOW);
    fy__mitm_dest_free(d);
}

static void test_private_and_empty(void)
{
    const char *pv[] = {"private", "fd00::/8", NULL};
    fy_mitm_dest_rule_t rs[] = {rule(1, pv, NULL)};
    fy_conf_list_t l = {.v = rs, .n = 1};
    fy_mitm_dest_t *d = fy__mitm_dest_new(&l);
    const char *denied[] = {"10.0.0.1",        "172.31.255.255", "192.168.1.1", "100.64.0.1",
                            "169.254.169.254", "fe80::1",        "fc00::1",     "::ffff:10.2.3.4"};
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++)
        CHECK_EQ_INT(fy__mitm_dest_check(d, denied[i], 80, NULL, NULL, 0), FY_DEST_DENY);
    const char *allowed[] = {"172.32.0.1", "8.8.8.8", "127.0.0.1", "2001:db8::1"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        CHECK_EQ_INT(fy__mitm_dest_check(d, allowed[i], 80, NULL, NULL, 0), FY_DEST_ALLOW);
    fy__mitm_dest_free(d);
    fy_conf_list_t none = {0};
    d = fy__mitm_dest_new(&none);
    CHECK_EQ_INT(fy__mitm_dest_check(d, "anything", 22, NULL, NULL, 0), FY_DEST_ALLOW);
    fy__mitm_dest_free(d);
}

FY_TEST_MAIN(test_order_and_addresses(); test_private_and_empty())
