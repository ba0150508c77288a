/* Ad-hoc origins: per-worker LRU tables of single-server upstreams. */
#include "upstream/upstream_dyn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"

typedef struct dyn {
    fy_upstream_dyn_entry_t e;
    /* the key, compared field by field (a lookup runs for every intercepted request) */
    int port;
    bool tls, h2, insecure;
    fy_upstream_conf_t conf;          /* owned strings below */
    fy_upstream_server_conf_t server; /* conf.servers points here */
    struct dyn *prev, *next;          /* LRU, head = most recent */
} dyn_t;

typedef struct dyn_worker {
    dyn_t *head, *tail;
    size_t n;
} dyn_worker_t;

struct fy_upstream_dyn {
    int nworkers;
    size_t max;
    char *ca;
    uint64_t connect_timeout_ms;
    void (*user_free)(void *);
    dyn_worker_t *w;
    /* owned: TLS client contexts shared by every entry, [insecure] (NULL: each entry makes
       its own). One per entry loaded the CA bundle again for each new origin: ~5.8M
       instructions (SSL_CTX_new and the PEM bundle) on the first request to every host. */
    fy_tls_client_ctx_t *tls[2], *tls_h2[2];
};

fy_upstream_dyn_t *fy_upstream_dyn_new(int nworkers, size_t max, const char *ca,
                                       uint64_t connect_timeout_ms, void (*user_free)(void *))
{
    fy_upstream_dyn_t *d = fy_xcalloc(1, sizeof *d);
    d->nworkers = nworkers;
    d->max = max ? max : 1;
    d->ca = ca ? fy_xstrdup(ca) : NULL;
    d->connect_timeout_ms = connect_timeout_ms;
    d->user_free = user_free;
    d->w = fy_xcalloc((size_t)nworkers, sizeof *d->w);
    for (int i = 0; i < 2; i++) {
        d->tls[i] = fy_tls_client_ctx_new(d->ca, i, NULL, NULL);
        d->tls_h2[i] = fy_tls_client_ctx_new(d->ca, i, NULL, NULL);
        if (d->tls_h2[i]) fy_tls_client_ctx_alpn_h2(d->tls_h2[i]);
    }
    return d;
}

static void unlink_dyn(dyn_worker_t *w, dyn_t *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        w->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    else
        w->tail = x->prev;
    x->prev = x->next = NULL;
}

static void push_dyn(dyn_worker_t *w, dyn_t *x)
{
    x->next = w->head;
    if (w->head) w->head->prev = x;
    w->head = x;
    if (!w->tail) w->tail = x;
}

static void free_dyn(fy_upstream_dyn_t *d, dyn_t *x)
{
    if (d->user_free && x->e.user) d->user_free(x->e.user);
    fy_upstream_free(x->e.up);
    free(x->server.url);
    free(x->server.host);
    free(x->server.authority);
    free(x->conf.name);
    free(x->conf.sni);
    free(x);
}

static bool same(const dyn_t *x, const char *host, int port, bool tls, bool h2, const char *sni,
                 bool insecure)
{
    const char *xs = x->conf.sni ? x->conf.sni : "";
    return x->port == port && x->tls == tls && x->h2 == h2 && x->insecure == insecure &&
           strcmp(x->server.host, host) == 0 && strcmp(xs, sni ? sni : "") == 0;
}

fy_upstream_dyn_entry_t *fy_upstream_dyn_find(fy_upstream_dyn_t *d, int w, const char *host,
                                              int port, bool tls, bool h2, const char *sni,
                                              bool insecure)
{
    dyn_worker_t *dw = &d->w[w];
    h2 = h2 && tls;
    for (dyn_t *x = dw->head; x; x = x->next)
        if (same(x, host, port, tls, h2, sni, insecure)) {
            if (x != dw->head) {
                unlink_dyn(dw, x);
                push_dyn(dw, x);
            }
            return &x->e;
        }
    return NULL;
}

fy_upstream_dyn_entry_t *fy_upstream_dyn_add(fy_upstream_dyn_t *d, int w, const char *host,
                                             int port, bool tls, bool h2, const char *sni,
                                             bool insecure, const struct sockaddr *addr,
                                             socklen_t addrlen, const char **err)
{
    h2 = h2 && tls; /* h2c origins are never learned: plain http stays HTTP/1.1 */
    /* another exchange may have made it while this one's name was being resolved */
    fy_upstream_dyn_entry_t *have = fy_upstream_dyn_find(d, w, host, port, tls, h2, sni, insecure);
    if (have) return have;
    dyn_worker_t *dw = &d->w[w];
    if (addrlen > sizeof(struct sockaddr_storage)) {
        *err = "bad origin address";
        return NULL;
    }
    if (dw->n >= d->max) {
        dyn_t *v = dw->tail;
        while (v && v->e.inflight) v = v->prev;
        if (!v) {
            *err = "too many origins in use (intercept.max-origins)";
            return NULL;
        }
        unlink_dyn(dw, v);
        dw->n--;
        fy_upstream_worker_close(v->e.up, w);
        free_dyn(d, v);
    }
    dyn_t *x = fy_xcalloc(1, sizeof *x);
    memcpy(&x->server.addr, addr, addrlen);
    x->server.addrlen = addrlen;
    char buf[600];
    bool v6 = strchr(host, ':') != NULL;
    snprintf(buf, sizeof buf, "%s://%s%s%s:%d",
             h2    ? "h2"
             : tls ? "https"
                   : "http",
             v6 ? "[" : "", host, v6 ? "]" : "", port);
    x->server.url = fy_xstrdup(buf);
    x->server.weight = 1;
    x->server.tls = tls;
    x->server.h2 = h2;
    x->server.host = fy_xstrdup(host);
    snprintf(buf, sizeof buf, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
    x->server.authority = fy_xstrdup(buf);
    x->conf.name = fy_xstrdup(x->server.url);
    x->conf.servers.v = &x->server;
    x->conf.servers.n = 1;
    x->conf.connect_timeout_ms = d->connect_timeout_ms;
    x->conf.first_byte_timeout_ms = 60000;
    x->conf.idle_timeout_ms = 60000;
    x->conf.keepalive = 512; /* as upstreams default: no TLS reconnects under load */
    x->conf.keepalive_timeout_ms = 60000;
    x->conf.retries = 1;
    x->conf.max_fails = 1000000; /* one server: never ejected, errors go to the client */
    x->conf.fail_timeout_ms = 1000;
    x->conf.ca = d->ca;
    x->conf.insecure = insecure;
    x->conf.sni = sni ? fy_xstrdup(sni) : NULL;
    x->port = port;
    x->tls = tls;
    x->h2 = h2;
    x->insecure = insecure;
    x->e.up =
        fy_upstream_new_with_tls(&x->conf, d->nworkers, d->tls[insecure], d->tls_h2[insecure]);
    if (!x->e.up) {
        free_dyn(d, x);
        *err = "origin TLS setup failed";
        return NULL;
    }
    push_dyn(dw, x);
    dw->n++;
    return &x->e;
}

void fy_upstream_dyn_worker_close(fy_upstream_dyn_t *d, int w)
{
    dyn_worker_t *dw = &d->w[w];
    while (dw->head) {
        dyn_t *x = dw->head;
        unlink_dyn(dw, x);
        fy_upstream_worker_close(x->e.up, w);
        free_dyn(d, x);
    }
    dw->n = 0;
}

size_t fy_upstream_dyn_count(const fy_upstream_dyn_t *d, int w)
{
    return d->w[w].n;
}

void fy_upstream_dyn_free(fy_upstream_dyn_t *d)
{
    if (!d) return;
    for (int w = 0; w < d->nworkers; w++) fy_upstream_dyn_worker_close(d, w);
    free(d->w);
    for (int i = 0; i < 2; i++) {
        fy_tls_client_ctx_free(d->tls[i]);
        fy_tls_client_ctx_free(d->tls_h2[i]);
    }
    free(d->ca);
    free(d);
}
