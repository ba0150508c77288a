/* c-ares driven by the loop: sockets through the socket-state callback, one timer from
 * ares_timeout, answers copied into the query and handed over by a deferred callback. */
#include "net/dns.h"

#include <ares.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

#define SOCKS_MAX 32

enum { Q_ADDR = 1, Q_SRV };

struct fy_dns_query {
    fy_dns_query_t *next, *prev; /* the channel's pending list */
    fy_dns_t *d;
    int kind;
    bool cancelled; /* no callback; freed when c-ares lets go of it */
    bool answered;  /* c-ares is done with it: freed after delivery */
    fy_defer_t defer;
    fy_dns_addr_cb acb;
    fy_dns_srv_cb scb;
    void *ud;
    int status;
    uint32_t ttl;
    size_t n;
    char name[FY_DNS_NAME_MAX];
    char err[FY_DNS_NAME_MAX + 80];
    union {
        fy_dns_addr_t addr[FY_DNS_ADDRS_MAX];
        fy_dns_srv_t srv[FY_DNS_SRV_MAX];
    } v;
};

typedef struct dsock {
    fy_io_t io;
    fy_dns_t *d;
    bool used;
} dsock_t;

struct fy_dns {
    ares_channel ch;
    fy_loop_t *loop;
    fy_timer_t timer;
    dsock_t socks[SOCKS_MAX];
    fy_dns_query_t *pending; /* started, not yet delivered or dropped */
    size_t npending;
    bool closing;
};

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_rc;

static void lib_init(void)
{
    lib_rc = ares_library_init(ARES_LIB_INIT_ALL);
}

static void rearm(fy_dns_t *d)
{
    if (d->closing) return;
    struct timeval tv, *t = ares_timeout(d->ch, NULL, &tv);
    if (!t) {
        fy_timer_stop(d->loop, &d->timer);
        return;
    }
    uint64_t ms = (uint64_t)t->tv_sec * 1000 + (uint64_t)(t->tv_usec + 999) / 1000;
    fy_timer_start(d->loop, &d->timer, ms);
}

static void on_timer(fy_timer_t *t)
{
    fy_dns_t *d = t->data;
    ares_process_fd(d->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    rearm(d);
}

static void on_io(fy_io_t *io, uint32_t ev)
{
    dsock_t *s = io->data;
    fy_dns_t *d = s->d;
    int fd = io->fd;
    ares_socket_t r = ev & (EPOLLIN | EPOLLERR | EPOLLHUP) ? fd : ARES_SOCKET_BAD;
    ares_socket_t w = ev & EPOLLOUT ? fd : ARES_SOCKET_BAD;
    ares_process_fd(d->ch, r, w);
    rearm(d);
}

static void sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
    fy_dns_t *d = data;
    dsock_t *s = NULL, *fr = NULL;
    for (int i = 0; i < SOCKS_MAX; i++) {
        if (d->socks[i].used && d->socks[i].io.fd == fd) s = &d->socks[i];
        if (!d->socks[i].used && !fr) fr = &d->socks[i];
    }
    uint32_t ev = (readable ? EPOLLIN : 0) | (writable ? EPOLLOUT : 0);
    if (!s) {
        if (!ev || !fr) return; /* full: that socket is served by the timer only */
        s = fr;
        s->used = true;
        s->d = d;
        s->io.fd = fd;
        s->io.events = 0;
        s->io.cb = on_io;
        s->io.data = s;
    }
    if (d->loop) fy_io_set(d->loop, &s->io, ev);
    if (!ev) s->used = false;
}

fy_dns_t *fy_dns_new(fy_loop_t *loop, const fy_dns_opts_t *o, char *err, size_t errlen)
{
    pthread_once(&lib_once, lib_init);
    if (lib_rc != ARES_SUCCESS) {
        snprintf(err, errlen, "c-ares: %s", ares_strerror(lib_rc));
        return NULL;
    }
    fy_dns_t *d = fy_xcalloc(1, sizeof *d);
    d->loop = loop;
    fy_timer_init(&d->timer, on_timer, d);
    struct ares_options opts = {0};
    int mask = ARES_OPT_SOCK_STATE_CB;
    opts.sock_state_cb = sock_state;
    opts.sock_state_cb_data = d;
    if (o && o->timeout_ms) {
        opts.timeout = (int)o->timeout_ms;
        mask |= ARES_OPT_TIMEOUTMS;
    }
    if (o && o->tries > 0) {
        opts.tries = o->tries;
        mask |= ARES_OPT_TRIES;
    }
    int rc = ares_init_options(&d->ch, &opts, mask);
    if (rc != ARES_SUCCESS) {
        snprintf(err, errlen, "c-ares: %s", ares_strerror(rc));
        free(d);
        return NULL;
    }
    if (o && o->servers && (rc = ares_set_servers_ports_csv(d->ch, o->servers)) != ARES_SUCCESS) {
        snprintf(err, errlen, "DNS servers '%.200s': %s", o->servers, ares_strerror(rc));
        ares_destroy(d->ch);
        free(d);
        return NULL;
    }
    return d;
}

static void unlink_q(fy_dns_query_t *q)
{
    fy_dns_t *d = q->d;
    if (q->prev)
        q->prev->next = q->next;
    else if (d->pending == q)
        d->pending = q->next;
    if (q->next) q->next->prev = q->prev;
    q->next = q->prev = NULL;
    d->npending--;
}

void fy_dns_free(fy_dns_t *d)
{
    if (!d) return;
    d->closing = true;
    /* answered ones wait for their defer: drop them; the rest are freed by ares_destroy's
       ARES_EDESTRUCTION callbacks (cancelled, so nobody hears of it) */
    for (fy_dns_query_t *q = d->pending, *n; q; q = n) {
        n = q->next;
        q->cancelled = true;
        if (q->answered) {
            fy_defer_cancel(d->loop, &q->defer);
            unlink_q(q);
            free(q);
        }
    }
    ares_destroy(d->ch);
    fy_timer_stop(d->loop, &d->timer);
    for (int i = 0; i < SOCKS_MAX; i++)
        if (d->socks[i].used) fy_io_set(d->loop, &d->socks[i].io, 0);
    free(d);
}

static void deliver(fy_defer_t *df)
{
    fy_dns_query_t *q = df->data;
    unlink_q(q);
    if (!q->cancelled) {
        if (q->kind == Q_ADDR)
            q->acb(q->ud, q->status, q->v.addr, q->n, q->status ? q->err : NULL);
        else
            q->scb(q->ud, q->status, q->v.srv, q->n, q->ttl, q->status ? q->err : NULL);
    }
    free(q);
}

/* c-ares is done with q (answer, failure, or the channel going away). */
static void finish(fy_dns_query_t *q, int status)
{
    fy_dns_t *d = q->d;
    q->answered = true;
    if (status != ARES_SUCCESS) {
        q->status = -1;
        q->n = 0;
        snprintf(q->err, sizeof q->err, "%s: %s", q->name, ares_strerror(status));
    }
    if (q->cancelled || d->closing) {
        if (!d->closing || !q->defer.queued) {
            unlink_q(q);
            free(q);
        }
        return;
    }
    q->defer.cb = deliver;
    q->defer.data = q;
    fy_defer(d->loop, &q->defer);
}

static void addr_cb(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
    (void)timeouts;
    fy_dns_query_t *q = arg;
    if (status == ARES_SUCCESS && res) {
        for (struct ares_addrinfo_node *nd = res->nodes; nd && q->n < FY_DNS_ADDRS_MAX;
             nd = nd->ai_next) {
            if ((size_t)nd->ai_addrlen > sizeof q->v.addr[0].addr) continue;
            fy_dns_addr_t *a = &q->v.addr[q->n];
            memset(a, 0, sizeof *a);
            memcpy(&a->addr, nd->ai_addr, (size_t)nd->ai_addrlen);
            a->len = (socklen_t)nd->ai_addrlen;
            a->ttl = nd->ai_ttl > 0 ? (uint32_t)nd->ai_ttl : 0;
            bool dup = false; /* one address per record, whatever socktype c-ares lists */
            for (size_t i = 0; i < q->n; i++)
                dup |= q->v.addr[i].len == a->len && !memcmp(&q->v.addr[i].addr, &a->addr, a->len);
            if (!dup) q->n++;
        }
        if (q->n == 0) status = ARES_ENODATA;
    }
    if (res) ares_freeaddrinfo(res);
    finish(q, status);
}

/* The header (12 bytes), the questions (name + type + class), then answers: name, type,
 * class, TTL (4 bytes), rdlength, rdata. Names may be compressed; ares_expand_name walks
 * them with its bounds checks. */
int64_t fy_dns_answer_ttl(const unsigned char *msg, size_t len)
{
    if (len < 12 || len > 65535) return -1;
    unsigned qd = (unsigned)msg[4] << 8 | msg[5], an = (unsigned)msg[6] << 8 | msg[7];
    const unsigned char *p = msg + 12, *end = msg + len;
    for (unsigned i = 0; i < qd; i++) {
        char *name;
        long el;
        if (ares_expand_name(p, msg, (int)len, &name, &el) != ARES_SUCCESS) return -1;
        ares_free_string(name);
        if (el < 0 || el > end - p || end - p - el < 4) return -1;
        p += el + 4;
    }
    int64_t best = -1;
    for (unsigned i = 0; i < an; i++) {
        char *name;
        long el;
        if (ares_expand_name(p, msg, (int)len, &name, &el) != ARES_SUCCESS) return -1;
        ares_free_string(name);
        if (el < 0 || el > end - p || end - p - el < 10) return -1;
        p += el;
        uint32_t ttl = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
        size_t rdl = (size_t)p[8] << 8 | p[9];
        p += 10;
        if (rdl > (size_t)(end - p)) return -1;
        p += rdl;
        if (ttl > 0x7fffffffu) ttl = 0; /* RFC 2181 §8: a TTL with the top bit set is 0 */
        if (best < 0 || ttl < best) best = ttl;
    }
    return best;
}

static void srv_cb(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
    (void)timeouts;
    fy_dns_query_t *q = arg;
    if (status == ARES_SUCCESS) {
        struct ares_srv_reply *r = NULL;
        status = ares_parse_srv_reply(abuf, alen, &r);
        if (status == ARES_SUCCESS) {
            for (struct ares_srv_reply *x = r; x && q->n < FY_DNS_SRV_MAX; x = x->next) {
                fy_dns_srv_t *s = &q->v.srv[q->n];
                if (strlen(x->host) >= sizeof s->target) continue;
                snprintf(s->target, sizeof s->target, "%s", x->host);
                s->priority = x->priority;
                s->weight = x->weight;
                s->port = x->port;
                q->n++;
            }
            int64_t ttl = fy_dns_answer_ttl(abuf, (size_t)alen);
            q->ttl = ttl > 0 ? (uint32_t)ttl : 0;
        }
        if (r) ares_free_data(r);
    }
    finish(q, status);
}

static fy_dns_query_t *new_query(fy_dns_t *d, const char *name, int kind, void *ud)
{
    if (strlen(name) >= FY_DNS_NAME_MAX) return NULL;
    fy_dns_query_t *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->d = d;
    q->kind = kind;
    q->ud = ud;
    snprintf(q->name, sizeof q->name, "%s", name);
    q->next = d->pending;
    if (d->pending) d->pending->prev = q;
    d->pending = q;
    d->npending++;
    return q;
}

fy_dns_query_t *fy_dns_addrinfo(fy_dns_t *d, const char *name, int family, fy_dns_addr_cb cb,
                                void *ud)
{
    fy_dns_query_t *q = new_query(d, name, Q_ADDR, ud);
    if (!q) return NULL;
    q->acb = cb;
    struct ares_addrinfo_hints h = {.ai_family = family, .ai_socktype = SOCK_STREAM};
    ares_getaddrinfo(d->ch, q->name, NULL, &h, addr_cb, q);
    rearm(d);
    return q;
}

fy_dns_query_t *fy_dns_srv(fy_dns_t *d, const char *name, fy_dns_srv_cb cb, void *ud)
{
    fy_dns_query_t *q = new_query(d, name, Q_SRV, ud);
    if (!q) return NULL;
    q->scb = cb;
    ares_query(d->ch, q->name, ns_c_in, ns_t_srv, srv_cb, q);
    rearm(d);
    return q;
}

void fy_dns_cancel(fy_dns_query_t *q)
{
    if (!q || q->cancelled) return;
    q->cancelled = true;
    if (q->answered) { /* its delivery is queued: drop it now */
        fy_defer_cancel(q->d->loop, &q->defer);
        unlink_q(q);
        free(q);
    }
}

size_t fy_dns_pending(const fy_dns_t *d)
{
    size_t n = 0;
    for (const fy_dns_query_t *q = d->pending; q; q = q->next) n += !q->cancelled;
    return n;
}
