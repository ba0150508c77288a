#include "upstream/upstream.h"

#include <errno.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/counters.h"
#include "core/alloc.h"
#include "core/log.h"
#include "h1/h1_resp.h"
#include "net/sock.h"
#include "tls/tls.h"
#include "upstream/discovery.h"
#include "upstream/upstream_int.h"

#include "upstream/upstream_state.h"

static fy_upstream_t *upstream_make(const fy_upstream_conf_t *conf, int nworkers,
                                    fy_tls_client_ctx_t *tls, fy_tls_client_ctx_t *tls_h2,
                                    const fy_upstream_t *prev);

fy_upstream_t *fy_upstream_new(const fy_upstream_conf_t *conf, int nworkers)
{
    return fy_upstream_new_next(conf, nworkers, NULL);
}

fy_upstream_t *fy_upstream_new_next(const fy_upstream_conf_t *conf, int nworkers,
                                    const fy_upstream_t *prev)
{
    fy_upstream_t *u = upstream_make(conf, nworkers, NULL, NULL, prev);
    if (u && fy_counters_detail) {
        size_t st = sizeof *u->servers, off = offsetof(fy_upstream_server_conf_t, url);
        u->pool_ids = fy_counters_register_servers("ferry_upstream_pool_idle", FY_GAUGE, conf->name,
                                                   u->servers, u->nservers, st, off);
        u->retry_ids =
            fy_counters_register_servers("ferry_upstream_server_retries_total", FY_COUNTER,
                                         conf->name, u->servers, u->nservers, st, off);
        u->eject_ids =
            fy_counters_register_servers("ferry_upstream_server_ejections_total", FY_COUNTER,
                                         conf->name, u->servers, u->nservers, st, off);
        u->conn_ids = fy_counters_register_servers("ferry_upstream_pool_connections", FY_GAUGE,
                                                   conf->name, u->servers, u->nservers, st, off);
        u->wait_ids = fy_counters_register_servers("ferry_upstream_pool_waiters", FY_GAUGE,
                                                   conf->name, u->servers, u->nservers, st, off);
    }
    return u;
}

fy_upstream_t *fy_upstream_new_with_tls(const fy_upstream_conf_t *conf, int nworkers,
                                        fy_tls_client_ctx_t *tls, fy_tls_client_ctx_t *tls_h2)
{
    return upstream_make(conf, nworkers, tls, tls_h2, NULL);
}

static bool str_eq(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* The same DNS question to the same resolver: the running generation's answer stands. */
static bool same_dns(const fy_discovery_conf_t *a, const fy_discovery_conf_t *b)
{
    return a && b && a->dns && b->dns && strcmp(a->dns, b->dns) == 0 && a->type == b->type &&
           a->port == b->port && a->scheme == b->scheme && a->weight == b->weight &&
           str_eq(a->resolver, b->resolver);
}

/* The first server set of a discovery upstream. A reload whose upstream asks DNS what the
 * running one asks takes the running one's last set (no lookup here: this thread may be the
 * admin API's loop) and looks up again as soon as its discovery starts on the worker loop;
 * a file is read now; another DNS question (and the start) begins with no servers and looks
 * up at once on the worker loop, so nothing waits for a resolver. */
static void first_set(fy_upstream_t *u, const fy_upstream_conf_t *conf, const fy_upstream_t *prev)
{
    fy_disc_entry_t *e = fy_xcalloc(u->dyn->cap, sizeof *e);
    size_t n;
    if (prev && prev->dyn && same_dns(conf->discovery, fy_upstream_conf(prev)->discovery)) {
        dyn_t *pd = prev->dyn;
        pthread_mutex_lock(&pd->lock);
        n = pd->nlast < u->dyn->cap ? pd->nlast : u->dyn->cap;
        memcpy(e, pd->last, n * sizeof *e);
        pthread_mutex_unlock(&pd->lock);
        u->dyn->lookup_now = true;
    } else if (conf->discovery->file) {
        n = fy__discovery_initial(conf, e, u->dyn->cap);
    } else {
        /* DNS: no wait here (the start or a reload would block for up to resolve-timeout);
           the generation goes live with no servers (502 "no servers discovered") and the
           first lookup runs as soon as its discovery starts on the worker loop */
        n = 0;
        u->dyn->lookup_now = true;
        fy_info("upstream %s: discovery: looking up %s; no servers until it answers", conf->name,
                conf->discovery->dns);
    }
    fy__upstream_set_servers(u, e, n);
    free(e);
}

bool fy__upstream_lookup_now(const fy_upstream_t *u)
{
    return u->dyn && u->dyn->lookup_now;
}

static fy_upstream_t *upstream_make(const fy_upstream_conf_t *conf, int nworkers,
                                    fy_tls_client_ctx_t *tls, fy_tls_client_ctx_t *tls_h2,
                                    const fy_upstream_t *prev)
{
    fy_upstream_t *u = fy_xcalloc(1, sizeof *u);
    u->conf = conf;
    u->servers = conf->servers.v;
    u->nservers = conf->servers.n;
    bool any_tls = false, any_h2 = false;
    if (conf->discovery) {
        dyn_t *d = u->dyn = fy_xcalloc(1, sizeof *d);
        d->cap = (size_t)conf->discovery->max_servers;
        d->slots = fy_xcalloc(d->cap + 1, sizeof *d->slots);
        d->incarnation = fy_xcalloc(d->cap + 1, sizeof *d->incarnation);
        for (size_t i = 0; i < d->cap; i++) { /* free slots: empty strings, never NULL */
            d->slots[i].url = fy_xstrdup("");
            d->slots[i].host = fy_xstrdup("");
            d->slots[i].authority = fy_xstrdup("");
        }
        fy_upstream_server_conf_t *none = &d->slots[d->cap];
        none->url = fy_xstrdup("none:"); /* AF_UNSPEC, addrlen 0: "no servers discovered" */
        none->host = fy_xstrdup("");
        none->authority = fy_xstrdup("");
        none->weight = 1;
        pthread_mutex_init(&d->lock, NULL);
        d->w = fy_xcalloc((size_t)nworkers, sizeof *d->w);
        for (int w = 0; w < nworkers; w++) {
            d->w[w].u = u;
            d->w[w].w = w;
        }
        u->own_conf = *conf;
        u->own_conf.servers.v = d->slots;
        u->own_conf.servers.n = d->cap + 1;
        u->conf = &u->own_conf;
        u->servers = d->slots;
        u->nservers = d->cap + 1;
        /* the schemes are known only as servers come: both TLS contexts when they may */
        int sch = conf->discovery->file ? -1 : conf->discovery->scheme;
        any_tls = sch == -1 || sch == 1;
        any_h2 = sch == -1 || sch == 3;
    }
    for (size_t i = 0; i < u->nservers; i++) {
        u->total_weight += u->servers[i].weight;
        any_tls |= u->servers[i].tls && !u->servers[i].h2 && !u->servers[i].h3;
        any_h2 |= u->servers[i].tls && u->servers[i].h2;
    }
    if (any_h2 && tls_h2) {
        u->tls_h2 = tls_h2;
        u->tls_h2_shared = true;
    } else if (any_h2) {
        u->tls_h2 = fy_tls_client_ctx_new(conf->ca, conf->insecure, conf->cert, conf->key);
        if (!u->tls_h2) {
            fy_log(FY_LOG_EMERG, "upstream %s: TLS setup failed", conf->name);
            free(u);
            return NULL;
        }
        fy_tls_client_ctx_alpn_h2(u->tls_h2);
    }
    if (any_tls && tls) {
        u->tls = tls;
        u->tls_shared = true;
    } else if (any_tls) {
        u->tls = fy_tls_client_ctx_new(conf->ca, conf->insecure, conf->cert, conf->key);
        if (!u->tls) {
            fy_log(FY_LOG_EMERG, "upstream %s: TLS setup failed", conf->name);
            if (!u->tls_h2_shared) fy_tls_client_ctx_free(u->tls_h2);
            free(u);
            return NULL;
        }
    }
    u->down = fy_xcalloc(u->nservers, sizeof *u->down);
    u->downs = fy_xcalloc(u->nservers, sizeof *u->downs);
    u->ejected_until = fy_xcalloc(u->nservers, sizeof *u->ejected_until);
    u->drained = fy_xcalloc(u->nservers, sizeof *u->drained);
    u->ids = fy_xcalloc(u->nservers, sizeof *u->ids);
    for (size_t i = 0; i < u->nservers && !u->dyn; i++) {
        uint64_t h = 1469598103934665603ull;
        for (const char *p = u->servers[i].url; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ull;
        snprintf(u->ids[i], sizeof u->ids[i], "%016llx", (unsigned long long)h);
    }
    u->nworkers = nworkers;
    u->workers = fy_xcalloc((size_t)nworkers, sizeof *u->workers);
    for (int w = 0; w < nworkers; w++) {
        u->workers[w].srv = fy_xcalloc(u->nservers, sizeof(srv_state_t));
        u->workers[w].rnd = 0x9e3779b97f4a7c15ull * (uint64_t)(w + 1);
    }
    fy__upstream_resil_init(u);
    if (u->dyn) first_set(u, conf, prev);
    return u;
}

static void oc_close(fy_origin_conn_t *oc);

void fy_upstream_free(fy_upstream_t *u)
{
    if (!u) return;
    fy__upstream_resil_free(u); /* (reads the workers' breakers) */
    for (int w = 0; w < u->nworkers; w++) {
        for (size_t i = 0; i < u->nservers; i++)
            while (u->workers[w].srv[i].idle) {
                fy_origin_conn_t *oc = u->workers[w].srv[i].idle;
                oc_close(oc);
                free(oc); /* no loop turn left to run its deferred free */
            }
        free(u->workers[w].srv);
    }
    free(u->workers);
    free(u->down);
    free(u->downs);
    free((void *)u->ejected_until);
    free(u->drained);
    free(u->pool_ids);
    free(u->retry_ids);
    free(u->eject_ids);
    free(u->conn_ids);
    free(u->wait_ids);
    free(u->ids);
    free(u->probes);
    if (u->dyn) {
        dyn_t *d = u->dyn;
        for (size_t i = 0; i <= d->cap; i++) {
            free(d->slots[i].url);
            free(d->slots[i].host);
            free(d->slots[i].authority);
        }
        free(d->slots);
        free((void *)d->incarnation);
        free(d->w);
        free(d->last);
        pthread_mutex_destroy(&d->lock);
        free(d);
    }
    if (!u->tls_shared) fy_tls_client_ctx_free(u->tls);
    if (!u->tls_h2_shared) fy_tls_client_ctx_free(u->tls_h2);
    free(u);
}

void fy_upstream_worker_close(fy_upstream_t *u, int w)
{
    if (u->dyn && u->dyn->w[w].loop) fy_timer_stop(u->dyn->w[w].loop, &u->dyn->w[w].sweep);
    fy__upstream_mux_worker_close(u, w);
    for (size_t i = 0; i < u->nservers; i++)
        while (u->workers[w].srv[i].idle) {
            fy_origin_conn_t *oc = u->workers[w].srv[i].idle;
            oc_close(oc);
            free(oc);
        }
}

void fy__origin_close_now(fy_origin_conn_t *oc)
{
    oc_close(oc);
    if (oc->defer.queued) fy_defer_cancel(oc->loop, &oc->defer);
    free(oc);
}

void **fy__upstream_h2_slot(fy_upstream_t *u, int w, int server)
{
    return &u->workers[w].srv[server].h2;
}

unsigned fy__upstream_downs(fy_upstream_t *u, int server)
{
    return atomic_load_explicit(&u->downs[server], memory_order_relaxed);
}

void **fy__upstream_h3_slot(fy_upstream_t *u, int w, int server)
{
    return &u->workers[w].srv[server].h3;
}

const fy_upstream_conf_t *fy_upstream_conf(const fy_upstream_t *u)
{
    return u->conf;
}

size_t fy_upstream_nservers(const fy_upstream_t *u)
{
    return u->nservers;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

int fy_upstream_pick(fy_upstream_t *u, int w, uint64_t exclude, uint64_t now_ms)
{
    up_worker_t *uw = &u->workers[w];
    size_t n = u->nservers;
    if (n == 1) return 0;
    uint64_t live = ~0ull;
    if (u->dyn) {
        dyn_worker_t *dw = &u->dyn->w[w];
        /* seq_cst store, then load: see reclaimable() */
        if (!atomic_load_explicit(&dw->used, memory_order_relaxed)) atomic_store(&dw->used, true);
        live = atomic_load(&u->dyn->live);
        if (!live) return (int)u->dyn->cap;     /* none known: the placeholder, a 502 */
        n = 64 - (size_t)__builtin_clzll(live); /* slots fill from the bottom: few to scan */
        if (n == 1) return 0;
    }
    /* candidates: not excluded and not ejected; relax in that order when none is left. An
       open circuit breaker is relaxed last (then the caller's fy_upstream_admit says no). */
    bool ok[64];
    size_t nok = 0;
    const fy_breaker_conf_t *bc = u->conf->breaker;
    for (int pass = 0; pass < 4 && nok == 0; pass++)
        for (size_t i = 0; i < n && i < 64; i++) {
            bool excluded = (exclude >> i) & 1, out = !fy_upstream_usable(u, w, (int)i, now_ms);
            bool open = bc && !fy_breaker_usable(&uw->srv[i].brk, bc, now_ms);
            ok[i] = ((live >> i) & 1) && (pass == 0   ? !excluded && !out
                                          : pass == 1 ? !excluded && !open
                                          : pass == 2 ? !open
                                                      : true);
            nok += ok[i];
        }
    int best = -1;
    switch (u->conf->balance) {
    case FY_BALANCE_RANDOM: {
        int64_t total = 0;
        for (size_t i = 0; i < n && i < 64; i++)
            if (ok[i]) total += u->servers[i].weight;
        int64_t r = (int64_t)(xorshift(&uw->rnd) % (uint64_t)total);
        for (size_t i = 0; i < n && i < 64; i++) {
            if (!ok[i]) continue;
            r -= u->servers[i].weight;
            if (r < 0) return (int)i;
        }
        break;
    }
    case FY_BALANCE_LEAST_TIME: {
        /* a server never measured, or not chosen for a second, is probed: a slow node gets
           another chance and a new one gets measured, so nobody starves */
        size_t start = (size_t)(xorshift(&uw->rnd) % n);
        for (size_t k = 0; k < n && k < 64; k++) {
            size_t i = (start + k) % n;
            if (ok[i] && (uw->srv[i].samples == 0 || now_ms - uw->srv[i].last_pick_ms > 1000)) {
                uw->srv[i].last_pick_ms = now_ms;
                return (int)i;
            }
        }
        /* power of two choices on ewma x (inflight + 1) / weight */
        int cand[2] = {-1, -1};
        for (int c = 0; c < 2; c++)
            for (int tries = 0; tries < 8 && cand[c] < 0; tries++) {
                int i = (int)(xorshift(&uw->rnd) % n);
                if (i < 64 && ok[i] && i != cand[0]) cand[c] = i;
            }
        if (cand[0] < 0) cand[0] = (int)start;
        best = cand[0];
        if (cand[1] >= 0) {
            double a = uw->srv[cand[0]].ewma_us * (uw->srv[cand[0]].inflight + 1) /
                       (double)u->servers[cand[0]].weight;
            double b = uw->srv[cand[1]].ewma_us * (uw->srv[cand[1]].inflight + 1) /
                       (double)u->servers[cand[1]].weight;
            if (b < a) best = cand[1];
        }
        if (!ok[best]) {
            for (size_t i = 0; i < n && i < 64; i++)
                if (ok[i]) best = (int)i;
        }
        uw->srv[best].last_pick_ms = now_ms;
        return best;
    }
    case FY_BALANCE_LEAST_REQUESTS: {
        /* fewest in flight per unit of weight; ties broken by a rotating start */
        size_t start = (size_t)(xorshift(&uw->rnd) % n);
        for (size_t k = 0; k < n && k < 64; k++) {
            size_t i = (start + k) % n;
            if (!ok[i]) continue;
            if (best < 0 || (int64_t)uw->srv[i].inflight * u->servers[best].weight <
                                (int64_t)uw->srv[best].inflight * u->servers[i].weight)
                best = (int)i;
        }
        return best;
    }
    default: { /* smooth weighted round robin (as nginx): even spread, weights respected */
        int64_t total = 0;
        for (size_t i = 0; i < n && i < 64; i++) {
            if (!ok[i]) continue;
            uw->srv[i].cur_weight += u->servers[i].weight;
            total += u->servers[i].weight;
            if (best < 0 || uw->srv[i].cur_weight > uw->srv[best].cur_weight) best = (int)i;
        }
        uw->srv[best].cur_weight -= total;
        return best;
    }
    }
    return 0;
}

/* ok: for passive health; brk_ok: for the circuit breaker */
static inline __attribute__((always_inline)) void report(fy_upstream_t *u, int w, int server,
                                                         bool ok, bool brk_ok, uint64_t now_ms)
{
    srv_state_t *s = &u->workers[w].srv[server];
    const fy_breaker_conf_t *bc = u->conf->breaker;
    if (bc && !(brk_ok && fy_breaker_ok_fast(&s->brk, bc, now_ms)))
        fy__upstream_breaker_record(u, w, server, brk_ok, now_ms);
    if (ok) {
        s->fails = 0;
        return;
    }
    if (++s->fails >= (unsigned)u->conf->max_fails) {
        if (atomic_load_explicit(&u->ejected_until[server], memory_order_relaxed) <= now_ms) {
            fy_counter_inc(fy_cid_upstream_ejections);
            if (u->eject_ids) fy_counter_inc(u->eject_ids[server]);
            char a[64];
            fy_warn(
                "upstream %s: server %s ejected for %llu ms after %u failures", u->conf->name,
                fy_sock_addr_str((const struct sockaddr *)&u->servers[server].addr, a, sizeof a),
                (unsigned long long)u->conf->fail_timeout_ms, s->fails);
        }
        s->ejected_until = now_ms + u->conf->fail_timeout_ms;
        atomic_store_explicit(&u->ejected_until[server], s->ejected_until, memory_order_relaxed);
        s->fails = 0;
    }
}

void fy_upstream_report(fy_upstream_t *u, int w, int server, bool ok, uint64_t now_ms)
{
    report(u, w, server, ok, ok, now_ms);
}

void fy_upstream_report_status(fy_upstream_t *u, int w, int server, int status, uint64_t now_ms)
{
    const fy_breaker_conf_t *bc = u->conf->breaker;
    report(u, w, server, status < 500, status < 500 || (bc && !bc->on_5xx), now_ms);
}

const char *fy_upstream_server_id(const fy_upstream_t *u, int server)
{
    return u->ids[server];
}

int fy_upstream_find_id(const fy_upstream_t *u, const char *id, size_t len)
{
    uint64_t live = u->dyn ? atomic_load_explicit(&u->dyn->live, memory_order_acquire) : ~0ull;
    for (size_t i = 0; i < u->nservers; i++)
        if (((live >> (i & 63)) & 1) && len == 16 && memcmp(u->ids[i], id, 16) == 0) return (int)i;
    return -1;
}

bool fy_upstream_usable(const fy_upstream_t *u, int w, int server, uint64_t now_ms)
{
    if (u->dyn && !((atomic_load_explicit(&u->dyn->live, memory_order_acquire) >> server) & 1))
        return false; /* removed (draining), or never filled */
    const fy_breaker_conf_t *bc = u->conf->breaker;
    if (bc && !fy_breaker_usable(&u->workers[w].srv[server].brk, bc, now_ms)) return false;
    return u->workers[w].srv[server].ejected_until <= now_ms &&
           atomic_load_explicit(&u->ejected_until[server], memory_order_relaxed) <= now_ms &&
           !atomic_load_explicit(&u->down[server], memory_order_relaxed) &&
           !atomic_load_explicit(&u->drained[server], memory_order_relaxed);
}

void fy_upstream_server_state(const fy_upstream_t *u, int server, fy_upstream_server_state_t *st)
{
    st->down = atomic_load_explicit(&u->down[server], memory_order_relaxed);
    st->drained = atomic_load_explicit(&u->drained[server], memory_order_relaxed);
    st->ejected_until_ms = atomic_load_explicit(&u->ejected_until[server], memory_order_relaxed);
    double sum = 0;
    int n = 0;
    for (int w = 0; w < u->nworkers; w++) {
        uint64_t bits =
            atomic_load_explicit(&u->workers[w].srv[server].ewma_pub, memory_order_relaxed);
        if (!bits) continue;
        double v;
        memcpy(&v, &bits, sizeof v);
        sum += bits == 1 ? 0 : v; /* 1: a published 0.0 */
        n++;
    }
    st->ewma_ttfb_us = n ? sum / n : -1;
    st->ewma_workers = n;
}

void fy_upstream_set_drained(fy_upstream_t *u, int server, bool drained)
{
    atomic_store(&u->drained[server], drained);
}

void fy_upstream_report_ttfb(fy_upstream_t *u, int w, int server, uint64_t us)
{
    srv_state_t *s = &u->workers[w].srv[server];
    /* the newest sample weighs 20%: about the last ten responses count */
    s->ewma_us = s->samples ? s->ewma_us * 0.8 + (double)us * 0.2 : (double)us;
    s->samples++;
    uint64_t bits;
    memcpy(&bits, &s->ewma_us, sizeof bits);
    atomic_store_explicit(&s->ewma_pub, bits ? bits : 1, memory_order_relaxed);
}

void fy_upstream_count_retry(fy_upstream_t *u, int server)
{
    fy_counter_inc(fy_cid_upstream_retries);
    if (u->retry_ids) fy_counter_inc(u->retry_ids[server]);
}

void fy_upstream_inflight(fy_upstream_t *u, int w, int server, int delta)
{
    u->workers[w].srv[server].inflight += delta;
}

/* ---- connections ---- */

static void free_cb(fy_defer_t *d)
{
    free(d->data);
}

static void pool_unlink(fy_origin_conn_t *oc)
{
    srv_state_t *s = &oc->up->workers[oc->worker].srv[oc->server];
    if (oc->pool_prev)
        oc->pool_prev->pool_next = oc->pool_next;
    else if (s->idle == oc)
        s->idle = oc->pool_next;
    if (oc->pool_next) oc->pool_next->pool_prev = oc->pool_prev;
    oc->pool_next = oc->pool_prev = NULL;
    s->nidle--;
    if (oc->up->pool_ids) fy_gauge_add(oc->up->pool_ids[oc->server], -1);
}

static void oc_close(fy_origin_conn_t *oc)
{
    if (oc->closed) return;
    oc->closed = true;
    oc->up->workers[oc->worker].srv[oc->server].nconns--;
    fy__upstream_gauge(oc->up->conn_ids, oc->server, -1);
    if (oc->state == OC_IDLE) pool_unlink(oc);
    fy_timer_stop(oc->loop, &oc->timer);
    fy_io_set(oc->loop, &oc->io, 0);
    if (oc->t != &oc->sock) oc->t->ops->destroy(oc->t);
    close(oc->sock.fd);
}

static void oc_fail(fy_origin_conn_t *oc, const char *why)
{
    oc->error = why;
    fy_origin_cb cb = oc->cb;
    void *ud = oc->ud;
    oc_close(oc);
    oc->defer.cb = free_cb;
    oc->defer.data = oc;
    fy_defer(oc->loop, &oc->defer);
    cb(oc, FY_ORIGIN_ERROR, ud);
}

static void on_timer(fy_timer_t *t)
{
    fy_origin_conn_t *oc = t->data;
    if (oc->state == OC_IDLE) {
        fy_origin_release(oc, false); /* keep-alive timeout in the pool */
        return;
    }
    oc_fail(oc,
            oc->state == OC_HANDSHAKE ? "origin TLS handshake timeout" : "origin connect timeout");
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void handshake(fy_origin_conn_t *oc)
{
    int r = oc->t->ops->handshake(oc->t);
    if (r == 0) {
        fy_io_set(oc->loop, &oc->io, oc->t->want & FY_WANT_WRITE ? EPOLLOUT : EPOLLIN);
        return;
    }
    if (r < 0) {
        oc_fail(oc, "origin TLS handshake failed (certificate or protocol)");
        return;
    }
    oc->t->want = 0;
    oc->tls_us = (uint32_t)(mono_us() - oc->t0_us - oc->connect_us);
    oc->state = OC_BUSY;
    fy_timer_stop(oc->loop, &oc->timer);
    fy_io_set(oc->loop, &oc->io, 0);
    oc->cb(oc, FY_ORIGIN_READY, oc->ud);
}

static void on_io(fy_io_t *io, uint32_t ev)
{
    fy_origin_conn_t *oc = io->data;
    if (oc->closed) return;
    switch (oc->state) {
    case OC_CONNECTING: {
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(oc->sock.fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
            oc_fail(oc, err == ECONNREFUSED ? "origin refused the connection"
                                            : "origin connect failed");
            return;
        }
        oc->connect_us = (uint32_t)(mono_us() - oc->t0_us);
        if (oc->tls) {
            oc->state = OC_HANDSHAKE;
            handshake(oc);
            return;
        }
        oc->state = OC_BUSY;
        fy_timer_stop(oc->loop, &oc->timer);
        fy_io_set(oc->loop, &oc->io, 0);
        oc->cb(oc, FY_ORIGIN_READY, oc->ud);
        return;
    }
    case OC_HANDSHAKE:
        handshake(oc);
        return;
    case OC_IDLE:
        /* the origin closed (or sent garbage) while idle: drop it */
        fy_origin_release(oc, false);
        return;
    default:
        oc->cb(oc, ev, oc->ud);
    }
}

fy_origin_conn_t *fy_origin_acquire(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                    fy_origin_cb cb, void *ud, bool *ready, const char **err)
{
    srv_state_t *s = &u->workers[w].srv[server];
    if (s->idle) {
        fy_origin_conn_t *oc = s->idle;
        pool_unlink(oc);
        fy_timer_stop(loop, &oc->timer);
        /* EPOLLIN stays registered (the owner sets what it needs): no epoll_ctl per reuse */
        oc->state = OC_BUSY;
        oc->cb = cb;
        oc->ud = ud;
        *ready = true;
        return oc;
    }
    *ready = false;
    return fy_origin_connect(u, w, server, loop, cb, ud, err);
}

fy_transport_t *(*fy__origin_test_connect)(const fy_upstream_server_conf_t *sv, int *fd);

fy_origin_conn_t *fy_origin_connect(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                    fy_origin_cb cb, void *ud, const char **err)
{
    const fy_upstream_server_conf_t *sv = &u->servers[server];
    if (u->dyn) {
        fy__upstream_dyn_touch(u, w, loop);
        if (!sv->addrlen) {
            *err = "no servers discovered";
            return NULL;
        }
    }
    int fd;
    fy_transport_t *test_t = fy__origin_test_connect ? fy__origin_test_connect(sv, &fd) : NULL;
    if (!test_t) {
        fd = socket(sv->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            *err = "cannot create a socket to the origin";
            return NULL;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, (const struct sockaddr *)&sv->addr, sv->addrlen) < 0 &&
            errno != EINPROGRESS) {
            *err =
                errno == ECONNREFUSED ? "origin refused the connection" : "origin connect failed";
            close(fd);
            return NULL;
        }
    }
    fy_origin_conn_t *oc = fy_xcalloc(1, sizeof *oc);
    u->workers[w].srv[server].nconns++;
    fy__upstream_gauge(u->conn_ids, server, 1);
    oc->up = u;
    oc->server = server;
    oc->worker = w;
    oc->loop = loop;
    oc->cb = cb;
    oc->ud = ud;
    fy_sock_transport_init(&oc->sock, fd);
    oc->t = test_t ? test_t : &oc->sock;
    if (sv->tls && !test_t) {
        oc->tls = true;
        oc->t = fy_tls_client_transport_new(sv->h2 ? u->tls_h2 : u->tls, fd,
                                            u->conf->sni ? u->conf->sni : sv->host);
        if (!oc->t) {
            close(fd);
            u->workers[w].srv[server].nconns--;
            fy__upstream_gauge(u->conn_ids, server, -1);
            free(oc);
            *err = "out of memory";
            return NULL;
        }
    }
    oc->io.fd = fd;
    oc->io.cb = on_io;
    oc->io.data = oc;
    oc->state = OC_CONNECTING;
    oc->t0_us = mono_us();
    fy_timer_init(&oc->timer, on_timer, oc);
    fy_timer_start(loop, &oc->timer, u->conf->connect_timeout_ms);
    fy_io_set(loop, &oc->io, EPOLLOUT);
    return oc;
}

int fy_origin_want(fy_origin_conn_t *oc, uint32_t events)
{
    if (oc->t->want & FY_WANT_WRITE) events |= EPOLLOUT;
    return fy_io_set(oc->loop, &oc->io, events);
}

void fy_origin_release(fy_origin_conn_t *oc, bool reusable)
{
    if (oc->closed) return;
    srv_state_t *s = &oc->up->workers[oc->worker].srv[oc->server];
    if (oc->state == OC_IDLE) {
        /* closing a pooled connection (keep-alive timeout, or the origin closed it) */
        pool_unlink(oc);
        oc->state = OC_BUSY;
        reusable = false;
    }
    if (reusable && oc->state == OC_BUSY && s->nidle < (size_t)oc->up->conf->keepalive &&
        !oc->t->ops->pending(oc->t) && !fy__upstream_gone(oc->up, oc->server)) {
        oc->state = OC_IDLE;
        oc->cb = NULL;
        oc->ud = NULL;
        oc->pool_prev = NULL;
        oc->pool_next = s->idle;
        if (s->idle) s->idle->pool_prev = oc;
        s->idle = oc;
        s->nidle++;
        if (oc->up->pool_ids) fy_gauge_add(oc->up->pool_ids[oc->server], 1);
        /* watch for the origin closing it while idle */
        fy_io_set(oc->loop, &oc->io, EPOLLIN);
        fy_timer_start(oc->loop, &oc->timer, oc->up->conf->keepalive_timeout_ms);
        return;
    }
    oc_close(oc);
    oc->defer.cb = free_cb;
    oc->defer.data = oc;
    fy_defer(oc->loop, &oc->defer);
}
