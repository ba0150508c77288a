/* Unit tests of the origin-probe cache of handler/mitm_probe.c: 200 origins whose names differ only
 * in their last digits are all remembered (a direct-mapped table kept a third of them), a
 * probe is per host, name and port, and it expires. */
#include "mitm_probe.c"

#include "core/test.h"

static fy__mitm_tunnel_info_t info(const char *host, int port)
{
    fy__mitm_tunnel_info_t ti = {.port = port};
    snprintf(ti.host, sizeof ti.host, "%s", host);
    snprintf(ti.name, sizeof ti.name, "%s", host);
    return ti;
}

static void test_many_similar_hosts(void)
{
    fy__mitm_t *m = calloc(1, sizeof *m);
    pthread_mutex_init(&m->pin_lock, NULL);
    for (int port = 443; port <= 41721; port += 41278) {
        for (int i = 1; i <= 200; i++) {
            char h[32];
            snprintf(h, sizeof h, "127.0.1.%d", i);
            fy__mitm_tunnel_info_t ti = info(h, port);
            ti.origin_alpn_h2 = i % 2;
            probe_remember(m, &ti, 1000);
        }
        int hits = 0, h2ok = 0;
        for (int i = 1; i <= 200; i++) {
            char h[32];
            snprintf(h, sizeof h, "127.0.1.%d", i);
            fy__mitm_tunnel_info_t ti = info(h, port);
            bool h2 = false;
            if (probe_cached(m, &ti, 2000, &h2)) {
                hits++;
                h2ok += h2 == (i % 2);
            }
        }
        CHECK_EQ_INT(hits, 200);
        CHECK_EQ_INT(h2ok, 200);
    }
    for (size_t i = 0; i < FY__MITM_PROBE_CACHE; i++) free(m->probed[i].tls);
    pthread_mutex_destroy(&m->pin_lock);
    free(m);
}

static void test_key_and_ttl(void)
{
    fy__mitm_t *m = calloc(1, sizeof *m);
    pthread_mutex_init(&m->pin_lock, NULL);
    fy__mitm_tunnel_info_t a = info("a.example", 443);
    probe_remember(m, &a, 1000);
    bool h2;
    CHECK(probe_cached(m, &a, 1000 + PROBE_TTL_MS - 1, &h2));
    CHECK(!probe_cached(m, &a, 1000 + PROBE_TTL_MS, &h2)); /* expired */
    fy__mitm_tunnel_info_t other_port = info("a.example", 8443);
    CHECK(!probe_cached(m, &other_port, 1001, &h2));
    fy__mitm_tunnel_info_t other_name = a;
    snprintf(other_name.name, sizeof other_name.name, "b.example");
    CHECK(!probe_cached(m, &other_name, 1001, &h2));
    fy__mitm_tunnel_info_t insecure = a;
    insecure.insecure = true;
    CHECK(!probe_cached(m, &insecure, 1001, &h2));
    /* remembering again refreshes the same entry */
    probe_remember(m, &a, 50000);
    CHECK(probe_cached(m, &a, 50000 + PROBE_TTL_MS - 1, &h2));
    for (size_t i = 0; i < FY__MITM_PROBE_CACHE; i++) free(m->probed[i].tls);
    pthread_mutex_destroy(&m->pin_lock);
    free(m);
}

FY_TEST_MAIN(test_many_similar_hosts(); test_key_and_ttl())
