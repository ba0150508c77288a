/* Resolver threads, per-worker eventfd hand-back, and a direct-mapped answer cache. */
#include "net/resolve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"

#define HOST_MAX 256

typedef struct fy__resolve_job {
    struct fy__resolve_job *next;
    char host[HOST_MAX];
    int w;
    fy_resolve_req_t *waiter; /* NULL once cancelled or timed out; worker thread only */
    int rc;                   /* getaddrinfo's */
    struct sockaddr_storage addr;
    socklen_t addrlen;
} job_t;

typedef struct centry {
    char host[HOST_MAX];
    struct sockaddr_storage addr; /* port 0 */
    socklen_t addrlen;
    uint64_t until_ms; /* 0: empty */
} centry_t;

typedef struct rworker {
    int efd; /* -1: not set up (or closed) */
    fy_io_t io;
    fy_loop_t *loop;
    job_t *done, **done_tail; /* under lock */
    bool closed;
    fy_resolver_t *r;
} rworker_t;

struct fy_resolver {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs; /* the owner + each running thread */
    bool stop;
    int nthreads, started;
    job_t *queue, **queue_tail;
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
    fy_resolver_t *r = fy_xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->refs = 1;
    r->nthreads = nthreads > 0 ? nthreads : 1;
    r->queue_tail = &r->queue;
    r->cache_max = cache_max;
    r->cache = cache_max ? fy_xcalloc(cache_max, sizeof *r->cache) : NULL;
    r->ttl_ms = ttl_ms;
    r->timeout_ms = timeout_ms;
    r->nworkers = nworkers;
    r->w = fy_xcalloc((size_t)nworkers, sizeof *r->w);
    for (int i = 0; i < nworkers; i++) {
        r->w[i].efd = -1;
        r->w[i].done_tail = &r->w[i].done;
        r->w[i].r = r;
    }
    return r;
}

static void free_jobs(job_t *j)
{
    while (j) {
        job_t *n = j->next;
        free(j);
        j = n;
    }
}

/* Under no lock: the last reference is gone. */
static void destroy(fy_resolver_t *r)
{
    free_jobs(r->queue);
    for (int i = 0; i < r->nworkers; i++) free_jobs(r->w[i].done);
    free(r->w);
    free(r->cache);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static bool unref_locked(fy_resolver_t *r)
{
    return --r->refs == 0;
}

void fy_resolver_free(fy_resolver_t *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    r->stop = true;
    pthread_cond_broadcast(&r->cond);
    bool last = unref_locked(r);
    pthread_mutex_unlock(&r->lock);
    if (last) destroy(r);
}

static void cache_put_locked(fy_resolver_t *r, const job_t *j, uint64_t now)
{
    if (!r->cache_max || j->rc != 0) return; /* failures are asked again next time */
    centry_t *c = &r->cache[host_hash(j->host) % r->cache_max];
    snprintf(c->host, sizeof c->host, "%s", j->host);
    c->addr = j->addr;
    c->addrlen = j->addrlen;
    c->until_ms = now + r->ttl_ms;
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

static void *thread_main(void *arg)
{
    fy_resolver_t *r = arg;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (!r->queue && !r->stop) pthread_cond_wait(&r->cond, &r->lock);
        if (r->stop) break;
        job_t *j = r->queue;
        r->queue = j->next;
        if (!r->queue) r->queue_tail = &r->queue;
        j->next = NULL;
        pthread_mutex_unlock(&r->lock);

        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
        j->rc = getaddrinfo(j->host, NULL, &hints, &res);
        if (j->rc == 0) {
            if (res && res->ai_addrlen <= sizeof j->addr) {
                memcpy(&j->addr, res->ai_addr, res->ai_addrlen);
                j->addrlen = res->ai_addrlen;
            } else {
                j->rc = EAI_NONAME;
            }
            freeaddrinfo(res);
        }

        pthread_mutex_lock(&r->lock);
        if (r->stop) {
            free(j);
            break;
        }
        cache_put_locked(r, j, mono_ms());
        rworker_t *w = &r->w[j->w];
        if (w->efd < 0 || w->closed) {
            free(j);
            continue;
        }
        *w->done_tail = j;
        w->done_tail = &j->next;
        uint64_t one = 1;
        ssize_t n = write(w->efd, &one, sizeof one);
        (void)n; /* EAGAIN: the counter is already non-zero, the worker will look */
    }
    bool last = unref_locked(r);
    pthread_mutex_unlock(&r->lock);
    if (last) destroy(r);
    return NULL;
}

static void set_port(struct sockaddr_storage *a, int port)
{
    if (a->ss_family == AF_INET)
        ((struct sockaddr_in *)a)->sin_port = htons((uint16_t)port);
    else if (a->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)a)->sin6_port = htons((uint16_t)port);
}

static void deliver(fy_resolve_req_t *q, const job_t *j)
{
    fy_timer_stop(q->loop, &q->timer);
    q->job = NULL;
    if (j->rc == 0) {
        q->addr = j->addr;
        q->addrlen = j->addrlen;
        set_port(&q->addr, q->port);
        q->cb(q, (struct sockaddr *)&q->addr, q->addrlen, NULL);
        return;
    }
    snprintf(q->err, sizeof q->err, "cannot resolve %s: %s", j->host,
             j->rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(j->rc));
    q->cb(q, NULL, 0, q->err);
}

static void on_done(fy_io_t *io, uint32_t events)
{
    (void)events;
    rworker_t *w = io->data;
    fy_resolver_t *r = w->r;
    uint64_t v;
    ssize_t n = read(w->efd, &v, sizeof v);
    (void)n;
    pthread_mutex_lock(&r->lock);
    job_t *list = w->done;
    w->done = NULL;
    w->done_tail = &w->done;
    pthread_mutex_unlock(&r->lock);
    while (list) {
        job_t *j = list;
        list = j->next;
        /* a callback may cancel queries further down the list: waiter is read at its turn */
        if (j->waiter) deliver(j->waiter, j);
        free(j);
    }
}

static void on_timeout(fy_timer_t *t)
{
    fy_resolve_req_t *q = t->data;
    if (q->job) q->job->waiter = NULL; /* the thread's answer is dropped (still cached) */
    const char *host = q->job ? q->job->host : "the origin";
    snprintf(q->err, sizeof q->err, "cannot resolve %s: timed out after %llu ms", host,
             (unsigned long long)q->r->timeout_ms);
    q->job = NULL;
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
    /* literals: no thread, no cache */
    memset(&q->addr, 0, sizeof q->addr);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&q->addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&q->addr;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
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
    char lower[HOST_MAX];
    for (size_t i = 0; i <= hl; i++)
        lower[i] = (char)(host[i] >= 'A' && host[i] <= 'Z' ? host[i] + 32 : host[i]);
    if (cache_get(r, lower, &q->addr, &q->addrlen)) {
        set_port(&q->addr, port);
        return 1;
    }
    rworker_t *rw = &r->w[w];
    if (rw->efd < 0) {
        int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (fd < 0) {
            snprintf(q->err, sizeof q->err, "cannot resolve %s: eventfd: %s", lower,
                     strerror(errno));
            return -1;
        }
        rw->io.fd = fd;
        rw->io.cb = on_done;
        rw->io.data = rw;
        rw->loop = loop;
        if (fy_io_set(loop, &rw->io, EPOLLIN) < 0) {
            close(fd);
            snprintf(q->err, sizeof q->err, "cannot resolve %s: cannot watch the eventfd", lower);
            return -1;
        }
        pthread_mutex_lock(&r->lock);
        rw->efd = fd;
        pthread_mutex_unlock(&r->lock);
    }
    job_t *j = fy_xcalloc(1, sizeof *j);
    memcpy(j->host, lower, hl + 1);
    j->w = w;
    j->waiter = q;
    q->job = j;
    pthread_mutex_lock(&r->lock);
    *r->queue_tail = j;
    r->queue_tail = &j->next;
    bool start = r->started < r->nthreads;
    if (start) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 256 * 1024);
        if (pthread_create(&th, &at, thread_main, r) == 0) {
            r->started++;
            r->refs++;
        } else if (!r->started) {
            fy_warn("resolver: cannot start a thread: %s", strerror(errno));
        }
        pthread_attr_destroy(&at);
    }
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
    fy_timer_init(&q->timer, on_timeout, q);
    fy_timer_start(loop, &q->timer, r->timeout_ms);
    return 0;
}

void fy_resolve_cancel(fy_resolve_req_t *q)
{
    if (!q->job) return;
    q->job->waiter = NULL;
    q->job = NULL;
    fy_timer_stop(q->loop, &q->timer);
}

void fy_resolver_worker_close(fy_resolver_t *r, int w)
{
    rworker_t *rw = &r->w[w];
    if (rw->efd < 0) return;
    fy_io_set(rw->loop, &rw->io, 0);
    pthread_mutex_lock(&r->lock);
    close(rw->efd);
    rw->efd = -1;
    rw->closed = true;
    job_t *d = rw->done;
    rw->done = NULL;
    rw->done_tail = &rw->done;
    pthread_mutex_unlock(&r->lock);
    free_jobs(d);
}
