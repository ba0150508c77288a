/* Unit tests of net/dns.c against a tiny DNS server on a loopback UDP socket, served by the
 * same loop: A and AAAA answers with their TTLs, SRV with the smallest TTL, NXDOMAIN, a server
 * that never answers (c-ares' timeout), cancel, and fy_dns_answer_ttl on canned and broken
 * messages. */
#include "net/dns.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/test.h"

typedef struct srv {
    fy_io_t io;
    int mode; /* 0 answer, 1 silent */
    int queries;
} srv_t;

static size_t put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
    return 2;
}

static size_t put32(unsigned char *p, uint32_t v)
{
    put16(p, v >> 16);
    put16(p + 2, v & 0xffff);
    return 4;
}

/* an answer RR pointing at the question's name (offset 12) */
static size_t rr(unsigned char *p, unsigned type, uint32_t ttl, const void *rd, size_t rdl)
{
    size_t o = 0;
    o += put16(p + o, 0xc00c);
    o += put16(p + o, type);
    o += put16(p + o, 1);
    o += put32(p + o, ttl);
    o += put16(p + o, (unsigned)rdl);
    memcpy(p + o, rd, rdl);
    return o + rdl;
}

static void on_query(fy_io_t *io, uint32_t ev)
{
    (void)ev;
    srv_t *s = io->data;
    unsigned char q[512], a[1024];
    struct sockaddr_storage from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(io->fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
    if (n < 12) return;
    s->queries++;
    if (s->mode == 1) return;
    /* the question: name labels, then type and class */
    size_t qe = 12;
    while (qe < (size_t)n && q[qe]) qe += q[qe] + 1u;
    qe += 5;
    unsigned type = (unsigned)q[qe - 4] << 8 | q[qe - 3];
    char name[256] = "";
    for (size_t i = 12, o = 0; i < (size_t)n && q[i] && o < 200; i += q[i] + 1u) {
        memcpy(name + o, q + i + 1, q[i]);
        o += q[i];
        name[o++] = '.';
        name[o] = 0;
    }
    memcpy(a, q, qe);
    a[2] = 0x81; /* response, RD */
    a[3] = 0x80; /* RA, NOERROR */
    size_t o = qe;
    unsigned an = 0;
    if (strcmp(name, "missing.test.") == 0) {
        a[3] = 0x83; /* NXDOMAIN */
    } else if (type == 1 && strcmp(name, "two.test.") == 0) {
        unsigned char ip1[4] = {10, 0, 0, 1}, ip2[4] = {10, 0, 0, 2};
        o += rr(a + o, 1, 42, ip1, 4);
        o += rr(a + o, 1, 7, ip2, 4);
        an = 2;
    } else if (type == 28 && strcmp(name, "two.test.") == 0) {
        unsigned char ip6[16] = {0xfd, 0, [15] = 1};
        o += rr(a + o, 28, 99, ip6, 16);
        an = 1;
    } else if (type == 33 && strcmp(name, "_http._tcp.svc.test.") == 0) {
        /* priority, weight, port, target "a.svc.test" */
        unsigned char rd[64];
        size_t r = 0;
        r += put16(rd + r, 10);
        r += put16(rd + r, 5);
        r += put16(rd + r, 8081);
        memcpy(rd + r, "\1a\3svc\4test", 12);
        r += 12;
        o += rr(a + o, 33, 300, rd, r);
        rd[5] = 0x92; /* port 8082 */
        rd[7] = 'b';
        o += rr(a + o, 33, 30, rd, r);
        an = 2;
    }
    put16(a + 6, an);
    put16(a + 8, 0);
    put16(a + 10, 0);
    sendto(io->fd, a, o, 0, (struct sockaddr *)&from, fl);
}

typedef struct got {
    int calls, status;
    size_t n;
    fy_dns_addr_t a[FY_DNS_ADDRS_MAX];
    fy_dns_srv_t s[FY_DNS_SRV_MAX];
    uint32_t ttl;
    char err[300];
    fy_loop_t *loop;
} got_t;

static void got_addr(void *ud, int status, const fy_dns_addr_t *v, size_t n, const char *err)
{
    got_t *g = ud;
    g->calls++;
    g->status = status;
    g->n = n;
    memcpy(g->a, v, n * sizeof *v);
    snprintf(g->err, sizeof g->err, "%s", err ? err : "");
    fy_loop_stop(g->loop);
}

static void got_srv(void *ud, int status, const fy_dns_srv_t *v, size_t n, uint32_t ttl,
                    const char *err)
{
    got_t *g = ud;
    g->calls++;
    g->status = status;
    g->n = n;
    g->ttl = ttl;
    memcpy(g->s, v, n * sizeof *v);
    snprintf(g->err, sizeof g->err, "%s", err ? err : "");
    fy_loop_stop(g->loop);
}

static void on_guard(fy_timer_t *t)
{
    fy_loop_stop(t->data); /* a bound on every wait */
}

static void run(fy_loop_t *loop)
{
    fy_timer_t guard;
    fy_timer_init(&guard, on_guard, loop);
    fy_timer_start(loop, &guard, 10000);
    loop->stop = false;
    fy_loop_run(loop);
    fy_timer_stop(loop, &guard);
}

static const char *ip(const fy_dns_addr_t *a, char *buf, size_t len)
{
    const void *p = a->addr.ss_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)&a->addr)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)&a->addr)->sin6_addr;
    return inet_ntop(a->addr.ss_family, p, buf, (socklen_t)len);
}

static void test_dns(void)
{
    fy_loop_t loop;
    CHECK(fy_loop_init(&loop) == 0);
    srv_t s = {0};
    s.io.fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(s.io.fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    socklen_t sl = sizeof sa;
    getsockname(s.io.fd, (struct sockaddr *)&sa, &sl);
    s.io.cb = on_query;
    s.io.data = &s;
    fy_io_set(&loop, &s.io, EPOLLIN);
    char servers[64], err[300];
    snprintf(servers, sizeof servers, "127.0.0.1:%d", ntohs(sa.sin_port));
    fy_dns_opts_t o = {.servers = servers, .timeout_ms = 200, .tries = 1};
    fy_dns_t *d = fy_dns_new(&loop, &o, err, sizeof err);
    CHECK(d != NULL);
    got_t g = {.loop = &loop};
    char b[64];

    /* A with per-record TTLs */
    CHECK(fy_dns_addrinfo(d, "two.test", AF_INET, got_addr, &g) != NULL);
    CHECK(g.calls == 0); /* never from inside the call */
    run(&loop);
    CHECK(g.calls == 1 && g.status == 0 && g.n == 2);
    CHECK(strcmp(ip(&g.a[0], b, sizeof b), "10.0.0.1") == 0 && g.a[0].ttl == 42);
    CHECK(strcmp(ip(&g.a[1], b, sizeof b), "10.0.0.2") == 0 && g.a[1].ttl == 7);
    /* AAAA */
    g.calls = 0;
    fy_dns_addrinfo(d, "two.test", AF_INET6, got_addr, &g);
    run(&loop);
    CHECK(g.calls == 1 && g.status == 0 && g.n == 1);
    CHECK(strcmp(ip(&g.a[0], b, sizeof b), "fd00::1") == 0 && g.a[0].ttl == 99);
    /* SRV: two records, the smaller TTL */
    g.calls = 0;
    fy_dns_srv(d, "_http._tcp.svc.test", got_srv, &g);
    run(&loop);
    CHECK(g.calls == 1 && g.status == 0 && g.n == 2 && g.ttl == 30);
    CHECK(strcmp(g.s[0].target, "a.svc.test") == 0 && g.s[0].port == 8081);
    CHECK(g.s[0].priority == 10 && g.s[0].weight == 5);
    CHECK(strcmp(g.s[1].target, "b.svc.test") == 0 && g.s[1].port == 8082);
    /* NXDOMAIN names the name */
    g.calls = 0;
    fy_dns_addrinfo(d, "missing.test", AF_INET, got_addr, &g);
    run(&loop);
    CHECK(g.calls == 1 && g.status < 0 && strstr(g.err, "missing.test") != NULL);
    /* cancel: no callback, nothing pending */
    g.calls = 0;
    fy_dns_query_t *q = fy_dns_addrinfo(d, "two.test", AF_INET, got_addr, &g);
    fy_dns_cancel(q);
    CHECK(fy_dns_pending(d) == 0);
    fy_dns_addrinfo(d, "two.test", AF_INET, got_addr, &g);
    run(&loop);
    CHECK(g.calls == 1); /* only the second one */
    /* a silent server: c-ares gives up after its timeout */
    s.mode = 1;
    g.calls = 0;
    int before = s.queries;
    fy_dns_addrinfo(d, "quiet.test", AF_INET, got_addr, &g);
    run(&loop);
    CHECK(g.calls == 1 && g.status < 0 && s.queries > before);
    CHECK(strstr(g.err, "quiet.test") != NULL);
    /* pending queries at free: dropped without callbacks */
    g.calls = 0;
    fy_dns_addrinfo(d, "quiet2.test", AF_INET, got_addr, &g);
    CHECK(fy_dns_pending(d) == 1);
    fy_dns_free(d);
    CHECK(g.calls == 0);
    /* a bad server list is an error naming it */
    fy_dns_opts_t bad = {.servers = "not an address"};
    CHECK(fy_dns_new(&loop, &bad, err, sizeof err) == NULL && strstr(err, "not an address"));
    fy_io_set(&loop, &s.io, 0);
    close(s.io.fd);
    fy_loop_destroy(&loop);
}

static void test_answer_ttl(void)
{
    unsigned char m[512] = {0, 1, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0};
    size_t o = 12;
    memcpy(m + o, "\1x\4test\0\0\1\0\1", 12);
    o += 12;
    unsigned char ip4[4] = {1, 2, 3, 4};
    o += rr(m + o, 1, 600, ip4, 4);
    o += rr(m + o, 1, 60, ip4, 4);
    CHECK(fy_dns_answer_ttl(m, o) == 60);
    /* truncated anywhere: -1, never a read past the end */
    for (size_t cut = 0; cut < o; cut++) CHECK(fy_dns_answer_ttl(m, cut) == -1);
    /* a TTL with the top bit set counts as 0 */
    m[o - 4 - 2 - 4] = 0x80;
    CHECK(fy_dns_answer_ttl(m, o) == 0);
    /* no answer */
    m[7] = 0;
    CHECK(fy_dns_answer_ttl(m, 24) == -1);
}

FY_TEST_MAIN(test_dns(); test_answer_ttl())
