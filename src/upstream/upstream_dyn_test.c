/* Unit tests of upstream/upstream_dyn.c: the lookup key (every field tells origins apart, a NULL
 * SNI equals "", h2 counts only with TLS), most-recent ordering, the LRU bound that spares
 * entries in use, and TLS client contexts made once for all entries. */
#include "upstream_dyn.c"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "core/test.h"

static struct sockaddr_in addr(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static fy_upstream_dyn_entry_t *add(fy_upstream_dyn_t *d, const char *host, int port, bool tls,
                                    bool h2, const char *sni, bool insecure)
{
    struct sockaddr_in a = addr(port);
    const char *err = NULL;
    fy_upstream_dyn_entry_t *e = fy_upstream_dyn_add(d, 0, host, port, tls, h2, sni, insecure,
                                                     (struct sockaddr *)&a, sizeof a, &err);
    CHECK(e != NULL);
    return e;
}

static void test_key(void)
{
    fy_upstream_dyn_t *d = fy_upstream_dyn_new(1, 64, NULL, 1000, NULL);
    /* made once, shared by the entries (verifying and insecure; http/1.1 and h2 ALPN) */
    CHECK(d->tls[0] && d->tls[1] && d->tls_h2[0] && d->tls_h2[1]);
    fy_upstream_dyn_entry_t *a = add(d, "a.example", 443, true, false, "a.example", true);
    CHECK(fy_upstream_dyn_find(d, 0, "a.example", 443, true, false, "a.example", true) == a);
    /* each field of the key on its own makes another origin */
    CHECK(!fy_upstream_dyn_find(d, 0, "b.example", 443, true, false, "a.example", true));
    CHECK(!fy_upstream_dyn_find(d, 0, "a.example", 444, true, false, "a.example", true));
    CHECK(!fy_upstream_dyn_find(d, 0, "a.example", 443, false, false, "a.example", true));
    CHECK(!fy_upstream_dyn_find(d, 0, "a.example", 443, true, true, "a.example", true));
    CHECK(!fy_upstream_dyn_find(d, 0, "a.example", 443, true, false, "b.example", true));
    CHECK(!fy_upstream_dyn_find(d, 0, "a.example", 443, true, false, NULL, true));
    CHECK(!fy_upstream_dyn_find(d, 0, "a.example", 443, true, false, "a.example", false));
    CHECK(!fy_upstream_dyn_find(d, 0, "a.exampl", 443, true, false, "a.example", true));
    /* a NULL SNI and "" are one key; adding an existing origin returns it */
    fy_upstream_dyn_entry_t *n = add(d, "a.example", 443, true, false, NULL, true);
    CHECK(n != a);
    CHECK(fy_upstream_dyn_find(d, 0, "a.example", 443, true, false, "", true) == n);
    CHECK(add(d, "a.example", 443, true, false, "", true) == n);
    /* h2 only counts with TLS (h2c origins are never learned) */
    fy_upstream_dyn_entry_t *p = add(d, "a.example", 80, false, true, NULL, false);
    CHECK(fy_upstream_dyn_find(d, 0, "a.example", 80, false, false, NULL, false) == p);
    fy_upstream_dyn_entry_t *h2 = add(d, "a.example", 443, true, true, NULL, true);
    CHECK(h2 != n && fy_upstream_dyn_find(d, 0, "a.example", 443, true, true, NULL, true) == h2);
    CHECK_EQ_INT(fy_upstream_dyn_count(d, 0), 4);
    fy_upstream_dyn_worker_close(d, 0);
    fy_upstream_dyn_free(d);
}

static void test_lru(void)
{
    fy_upstream_dyn_t *d = fy_upstream_dyn_new(1, 2, NULL, 1000, NULL);
    fy_upstream_dyn_entry_t *a = add(d, "a", 80, false, false, NULL, false);
    add(d, "b", 80, false, false, NULL, false);
    CHECK(fy_upstream_dyn_find(d, 0, "a", 80, false, false, NULL, false) == a); /* a: recent */
    add(d, "c", 80, false, false, NULL, false);                                 /* evicts b */
    CHECK(!fy_upstream_dyn_find(d, 0, "b", 80, false, false, NULL, false));
    CHECK(fy_upstream_dyn_find(d, 0, "a", 80, false, false, NULL, false) == a);
    CHECK_EQ_INT(fy_upstream_dyn_count(d, 0), 2);
    /* both in use: no room, an error rather than an eviction */
    fy_upstream_dyn_find(d, 0, "c", 80, false, false, NULL, false)->inflight++;
    a->inflight++;
    struct sockaddr_in sa = addr(80);
    const char *err = NULL;
    CHECK(!fy_upstream_dyn_add(d, 0, "d", 80, false, false, NULL, false, (struct sockaddr *)&sa,
                               sizeof sa, &err));
    CHECK(err && strstr(err, "max-origins"));
    fy_upstream_dyn_worker_close(d, 0);
    fy_upstream_dyn_free(d);
}

FY_TEST_MAIN(test_key(); test_lru())
