/* Host names resolved on the asking worker's loop (net/dns.c, c-ares), a direct-mapped answer
 * cache shared by the workers, and a per-query timeout. */
#include "net/resolve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"
#include "net/dns.h"

#define HOST_MAX 256

typedef struct centry {
    char host[HOST_MAX];
    struct sockaddr_storage addr; /* port 0 */
    socklen_t addrlen;
    uint64_t until_ms; /* 0: empty */
} centry_t;

typedef struct rworker {
    fy_dns_t *dns; /* NULL: not set up yet (or closed) */
    bool failed;   /* the channel could not be made: said once */
} rworker_t;

/* DNS servers instead of resolv.conf's (resolve_test.c sets it). */
static const char *dns_servers;

struct fy_resolver {
    pthread_mutex_t lock; /* the cache: any worker */
    centry_t *cache;
    size_t cache_max;
    uint64_t ttl_ms, timeout_ms;
    int nworkers;
    rworker_t *w;
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t host_hash(const char *h)
{
    uint64_t x = 1469598103934665603ull;
    for (; *h; h++) x = (x ^ (unsigned char)*h) * 1099511628211ull;
    return x;
}

fy_resolver_t *fy_resolver_new(int nworkers, int nthreads, size_t cache_max, uint64_t ttl_ms,
                               uint64_t timeout_ms)
{
    (void)nthreads; /* no threads any more: kept for the config key's sake */
    fy_resolver_t *r = fy_xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    r->cache_max = cache_max;
    r->cache = cache_max ? fy_xcalloc(cache_max, sizeof *r->cache) : NULL;
    r->ttl_ms = ttl_ms;
    r->timeout_ms = timeout_ms;
    r->nworkers = nworkers;
    r->w = fy_xcalloc((size_t)nworkers, sizeof *r->w);
    return r;
}

void fy_resolver_free(fy_resolver_t *r)
{
    if (!r) return;
    for (int i = 0; i < r->nworkers; i++) fy_dns_free(r->w[i].dns); /* normally closed already */
    free(r->w);
    free(r->cache);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void fy_resolver_worker_close(fy_resolver_t *r, int w)
{
    fy_dns_free(r->w[w].dns); /* pending queries are dropped without callbacks */
    r->w[w].dns = NULL;
}

/* The record's TTL, bounded by resolve-ttl (a TTL of 0, as hosts-file answers have: the
   bound itself). */
static void cache_put(fy_resolver_t *r, const char *host, const fy_dns_addr_t *a)
{
    if (!r->cache_max) return;
    uint64_t keep = a->ttl ? (uint64_t)a->ttl * 1000 : r->ttl_ms;
    if (keep > r->ttl_ms) keep = r->ttl_ms;
    pthread_mutex_lock(&r->lock);
    centry_t *c = &r->cache[host_hash(host) % r->cache_max];
    snprintf(c->host, sizeof c->host, "%s", host);
    c->addr = a->addr;
    c->addrlen = a->len;
    c->until_ms = mono_ms() + keep;
    pthread_mutex_unlock(&r->lock);
}

static bool cache_get(fy_resolver_t *r, const char *host, struct sockaddr_storage *addr,
                      socklen_t *len)
{
    if (!r->cache_max) return false;
    uint64_t now = mono_ms();
    bool hit = false;
    pthread_mutex_lock(&r->lock);
    centry_t *c = &r->cache[host_hash(host) % r->cache_max];
    if (c->until_ms > now && strcmp(c->host, host) == 0) {
        *addr = c->addr;
        *len = c->addrlen;
        hit = true;
    } else if (c->until_ms && c->until_ms <= now) {
        c->until_ms = 0; /* expired */
    }
    pthread_mutex_unlock(&r->lock);
    return hit;
}

size_t fy_resolver_cached(fy_resolver_t *r)
{
    size_t n = 0;
    uint64_t now = mono_ms();
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->cache_max; i++) n += r->cache[i].until_ms > now;
    pthread_mutex_unlock(&r->lock);
    return n;
}

static void set_port(struct sockaddr_storage *a, int port)
{
    if (a->ss_family == AF_INET)
        ((struct sockaddr_in *)a)->sin_port = htons((uint16_t)port);
    else if (a->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)a)->sin6_port = htons((uint16_t)port);
}

static void dns_answered(void *ud, int status, const fy_dns_addr_t *v, size_t n, const char *err)
{
    fy_resolve_req_t *q = ud;
    fy_timer_stop(q->loop, &q->timer);
    q->job = NULL;
    if (status == 0 && n > 0) {
        cache_put(q->r, q->host, &v[0]);
        q->addr = v[0].addr;
        q->addrlen = v[0].len;
        set_port(&q->addr, q->port);
        q->cb(q, (struct sockaddr *)&q->addr, q->addrlen, NULL);
        return;
    }
    /* err is "NAME: reason" */
    snprintf(q->err, sizeof q->err, "cannot resolve %s", err ? err : q->host);
    q->cb(q, NULL, 0, q->err);
}

static void on_timeout(fy_timer_t *t)
{
    fy_resolve_req_t *q = t->data;
    fy_dns_cancel(q->job); /* a late answer is dropped */
    q->job = NULL;
    snprintf(q->err, sizeof q->err, "cannot resolve %s: timed out after %llu ms", q->host,
             (unsigned long long)q->r->timeout_ms);
    q->cb(q, NULL, 0, q->err);
}

int fy_resolve(fy_resolver_t *r, int w, fy_loop_t *loop, const char *host, int port,
               fy_resolve_req_t *q)
{
    q->r = r;
    q->loop = loop;
    q->job = NULL;
    q->port = port;
    q->err[0] = 0;
    size_t hl = strlen(host);
    if (!hl || hl >= HOST_MAX) {
        snprintf(q->err, sizeof q->err, "cannot resolve %.*s: bad host name",
                 (int)(hl < 200 ? hl : 200), host);
        return -1;
    }
    /* literals: no query, no cache */
    memset(&q->addr, 0, sizeof q->addr);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&q->addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&q->addr;
    /* inet_aton: every IPv4 spelling getaddrinfo takes (127.1, 2130706433, 0x7f000001...),
       which c-ares would send to the DNS as names */
    if (inet_aton(host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        q->addrlen = sizeof *a4;
        set_port(&q->addr, port);
        return 1;
    }
    char h6[HOST_MAX];
    snprintf(h6, sizeof h6, "%s", host);
    if (h6[0] == '[' && hl > 2 && h6[hl - 1] == ']') {
        memmove(h6, h6 + 1, hl - 2);
        h6[hl - 2] = 0;
    }
    if (inet_pton(AF_INET6, h6, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        q->addrlen = sizeof *a6;
        set_port(&q->addr, port);
        return 1;
    }
    for (size_t i = 0; i <= hl; i++)
        q->host[i] = (char)(host[i] >= 'A' && host[i] <= 'Z' ? host[i] + 32 : host[i]);
    if (cache_get(r, q->host, &q->addr, &q->addrlen)) {
        set_port(&q->addr, port);
        return 1;
    }
    rworker_t *rw = &r->w[w];
    if (!rw->dns) {
        char err[300];
        fy_dns_opts_t o = {.servers = dns_servers};
        rw->dns = fy_dns_new(loop, &o, err, sizeof err);
        if (!rw->dns) {
            if (!rw->failed) fy_warn("resolver: %s", err);
            rw->failed = true;
            snprintf(q->err, sizeof q->err, "cannot resolve %.100s: %.250s", q->host, err);
            return -1;
        }
    }
    q->job = fy_dns_addrinfo(rw->dns, q->host, AF_UNSPEC, dns_answered, q);
    if (!q->job) {
        snprintf(q->err, sizeof q->err, "cannot resolve %s: out of memory", q->host);
        return -1;
    }
    fy_timer_init(&q->timer, on_timeout, q);
    fy_timer_start(loop, &q->timer, r->timeout_ms);
    return 0;
}

void fy_resolve_cancel(fy_resolve_req_t *q)
{
    if (!q->job) return;
    fy_dns_cancel(q->job);
    q->job = NULL;
    fy_timer_stop(q->loop, &q->timer);
}
