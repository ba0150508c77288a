/* Tests for resolve.c with a real loop and its c-ares channel: literals answer at once, a name
 * from /etc/hosts (localhost) comes back from the loop with the port set and is then
 * cached, a cache of 0 or a TTL of 0 asks again, a record's TTL below resolve-ttl bounds the
 * cache entry (a DNS server on loopback in the same loop), failures name the host and are
 * not cached, a cancelled query never calls back, and the cache holds at most cache_max names.
 * Every loop run has a timer that stops it: nothing can hang ctest. No check asserts a time. */
#include "resolve.c"

#include "core/test.h"

#include <unistd.h>

typedef struct seen {
    int calls;
    bool ok;
    int port;
    char err[400];
    fy_loop_t *loop;
} seen_t;

static void on_answer(fy_resolve_req_t *q, const struct sockaddr *sa, socklen_t len,
                      const char *err)
{
    seen_t *s = q->data;
    s->calls++;
    s->ok = sa != NULL;
    if (sa) {
        CHECK(len == q->addrlen);
        s->port = ntohs(sa->sa_family == AF_INET ? ((const struct sockaddr_in *)sa)->sin_port
                                                 : ((const struct sockaddr_in6 *)sa)->sin6_port);
    } else {
        snprintf(s->err, sizeof s->err, "%s", err);
    }
    fy_loop_stop(s->loop);
}

static void on_guard(fy_timer_t *t)
{
    fy_loop_stop(t->data);
}

/* Run the loop until the answer (or a generous guard). */
static void run(fy_loop_t *loop)
{
    fy_timer_t guard;
    fy_timer_init(&guard, on_guard, loop);
    fy_timer_start(loop, &guard, 20000);
    loop->stop = false;
    fy_loop_run(loop);
    fy_timer_stop(loop, &guard);
}

static void test_literals(void)
{
    fy_loop_t loop;
    CHECK(fy_loop_init(&loop) == 0);
    fy_resolver_t *r = fy_resolver_new(1, 1, 8, 60000, 5000);
    fy_resolve_req_t q = {0};
    CHECK_EQ_INT(fy_resolve(r, 0, &loop, "127.0.0.1", 8080, &q), 1);
    CHECK(q.addr.ss_family == AF_INET);
    CHECK_EQ_INT(ntohs(((struct sockaddr_in *)&q.addr)->sin_port), 8080);
    CHECK_EQ_INT(fy_resolve(r, 0, &loop, "[::1]", 443, &q), 1);
    CHECK(q.addr.ss_family == AF_INET6);
    CHECK_EQ_INT(fy_resolve(r, 0, &loop, "::1", 443, &q), 1);
    CHECK_EQ_INT(fy_resolve(r, 0, &loop, "", 443, &q), -1);
    CHECK(strstr(q.err, "bad host name") != NULL);
    CHECK_EQ_INT(fy_resolver_cached(r), 0); /* literals are never cached */
    fy_resolver_worker_close(r, 0);
    fy_resolver_free(r);
    fy_loop_destroy(&loop);
}

static void test_names_cache_ttl(void)
{
    fy_loop_t loop;
    CHECK(fy_loop_init(&loop) == 0);
    seen_t s = {.loop = &loop};
    fy_resolve_req_t q = {.cb = on_answer, .data = &s};

    /* cache of one name */
    fy_resolver_t *r = fy_resolver_new(1, 2, 1, 60000, 15000);
    CHECK_EQ_INT(fy_resolve(r, 0, &loop, "LocalHost", 81, &q), 0);
    CHECK_EQ_INT(s.calls, 0); /* never from inside fy_resolve */
    run(&loop);
    CHECK_EQ_INT(s.calls, 1);
    CHECK(s.ok);
    CHECK_EQ_INT(s.port, 81);
    CHECK_EQ_INT(fy_resolver_cached(r), 1);
    CHECK_EQ_INT(fy_resolve(r, 0, &loop, "localhost", 82, &q), 1); /* cached, any case */
    CHECK_EQ_INT(ntohs(((struct sockaddr_in *)&q.addr)->sin_port), 82);

    /* a failure names the host and is not cached; the cached name stays */
    s.calls = 0;
    CHECK_EQ_INT(fy_resolve(r, 0, &loop, "nosuch-name.invalid", 80, &q), 0);
    run(&loop);
    CHECK_EQ_INT(s.calls, 1);
    CHECK(!s.ok);
    CHECK(strstr(s.err, "cannot resolve nosuch-name.invalid: ") == s.err);
    CHECK_EQ_INT(fy_resolver_cached(r), 1);

    /* cancelled: no callback; a later query still works */
    s.calls = 0;
    fy_resolve_req_t q2 = {.cb = on_answer, .data = &s};
    CHECK_EQ_INT(fy_resolve(r, 0, &loop, "nosuch-other.invalid", 80, &q2), 0);
    fy_resolve_cancel(&q2);
    fy_resolve_cancel(&q2); /* idempotent */
    CHECK_EQ_INT(fy_resolve(r, 0, &loop, "nosuch-third.invalid", 80, &q), 0);
    run(&loop);
    CHECK_EQ_INT(s.calls, 1); /* only q's */
    fy_resolver_worker_close(r, 0);
    fy_resolver_free(r);

    /* cache_max 0 and ttl 0: every query goes to the threads */
    for (int k = 0; k < 2; k++) {
        r = k ? fy_resolver_new(1, 1, 4, 0, 15000) : fy_resolver_new(1, 1, 0, 60000, 15000);
        for (int i = 0; i < 2; i++) {
            s.calls = 0;
            CHECK_EQ_INT(fy_resolve(r, 0, &loop, "localhost", 80, &q), 0);
            run(&loop);
            CHECK_EQ_INT(s.calls, 1);
            CHECK(s.ok);
        }
        CHECK_EQ_INT(fy_resolver_cached(r), 0);
        fy_resolver_worker_close(r, 0);
        fy_resolver_free(r);
    }

    /* closing a worker with a query in flight: dropped silently, freed by the thread */
    r = fy_resolver_new(1, 1, 4, 60000, 15000);
    s.calls = 0;
    CHECK_EQ_INT(fy_resolve(r, 0, &loop, "nosuch-late.invalid", 80, &q), 0);
    fy_resolve_cancel(&q);
    fy_resolver_worker_close(r, 0);
    fy_resolver_free(r);
    CHECK_EQ_INT(s.calls, 0);
    fy_loop_destroy(&loop);
}

/* A DNS server answering every A query with 10.1.2.3, TTL 2 s. */
static void on_dns_query(fy_io_t *io, uint32_t ev)
{
    (void)ev;
    unsigned char q[512];
    struct sockaddr_storage from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(io->fd, q, sizeof q - 32, 0, (struct sockaddr *)&from, &fl);
    if (n < 17) return;
    size_t qe = 12;
    while (qe < (size_t)n && q[qe]) qe += q[qe] + 1u;
    qe += 5;
    if (qe > (size_t)n) return;
    q[2] = 0x81;
    q[3] = 0x80;
    q[7] = q[qe - 3] == 1; /* one answer for A, none for AAAA */
    q[9] = q[11] = 0;
    static const unsigned char a[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 2, 0, 4, 10, 1, 2, 3};
    size_t len = qe;
    if (q[7]) {
        memcpy(q + qe, a, sizeof a);
        len += sizeof a;
    }
    sendto(io->fd, q, len, 0, (struct sockaddr *)&from, fl);
}

static void test_record_ttl_bounds_cache(void)
{
    fy_loop_t loop;
    CHECK(fy_loop_init(&loop) == 0);
    fy_io_t io = {.fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), .cb = on_dns_query};
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(io.fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    socklen_t sl = sizeof sa;
    getsockname(io.fd, (struct sockaddr *)&sa, &sl);
    fy_io_set(&loop, &io, EPOLLIN);
    static char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%d", ntohs(sa.sin_port));
    dns_servers = servers;
    seen_t s = {.loop = &loop};
    fy_resolve_req_t q = {.cb = on_answer, .data = &s};
    for (int k = 0; k < 2; k++) {
        /* resolve-ttl 60 s: the record's 2 s win; resolve-ttl 1 s: the bound wins */
        uint64_t ttl = k ? 1000 : 60000, want = k ? 1000 : 2000;
        fy_resolver_t *r = fy_resolver_new(1, 1, 4, ttl, 5000);
        s.calls = 0;
        uint64_t before = mono_ms();
        CHECK_EQ_INT(fy_resolve(r, 0, &loop, "ttl.test", 443, &q), 0);
        run(&loop);
        uint64_t after = mono_ms();
        CHECK(s.ok && s.port == 443);
        CHECK(((struct sockaddr_in *)&q.addr)->sin_addr.s_addr == htonl(0x0a010203));
        const centry_t *c = &r->cache[host_hash("ttl.test") % r->cache_max];
        CHECK(c->until_ms >= before + want && c->until_ms <= after + want);
        fy_resolver_worker_close(r, 0);
        fy_resolver_free(r);
    }
    dns_servers = NULL;
    fy_io_set(&loop, &io, 0);
    close(io.fd);
    fy_loop_destroy(&loop);
}

FY_TEST_MAIN(test_literals(); test_names_cache_ttl(); test_record_ttl_bounds_cache())
