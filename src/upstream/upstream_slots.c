/* Discovery's slot table: servers that come and go at run time (see upstream_state.h). */
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

/* ---- discovery: the slot table (see the top of the file) ---- */

bool fy_upstream_server_listed(const fy_upstream_t *u, int server)
{
    return !fy__upstream_gone(u, server);
}

bool fy__upstream_gone(const fy_upstream_t *u, int server)
{
    return u->dyn && !((atomic_load_explicit(&u->dyn->live, memory_order_acquire) >> server) & 1);
}

static void dyn_sweep(fy_timer_t *t)
{
    dyn_worker_t *dw = t->data;
    fy_upstream_t *u = dw->u;
    dyn_t *d = u->dyn;
    unsigned v = atomic_load_explicit(&d->version, memory_order_acquire);
    uint64_t live = atomic_load_explicit(&d->live, memory_order_acquire), clear = 0;
    for (size_t i = 0; i < d->cap; i++) {
        srv_state_t *s = &u->workers[dw->w].srv[i];
        if ((live >> i) & 1) {
            unsigned inc = atomic_load_explicit(&d->incarnation[i], memory_order_relaxed);
            if (s->incarnation != inc) { /* another server in this slot now: start afresh */
                s->incarnation = inc;
                s->fails = 0;
                s->ejected_until = 0;
                s->ewma_us = 0;
                s->samples = 0;
                atomic_store_explicit(&s->ewma_pub, 0, memory_order_relaxed);
                s->cur_weight = 0;
                s->brk = (fy_breaker_t){0}; /* (dyn upstreams count no per-server gauges) */
            }
            continue;
        }
        while (s->idle) fy_origin_release(s->idle, false); /* idle: closed now */
        fy__upstream_mux_drain(u, dw->w, (int)i);
        if (s->nconns == 0 && !s->h2 && !s->h3) clear |= 1ull << i;
    }
    atomic_store_explicit(&dw->clear, clear, memory_order_relaxed);
    atomic_store_explicit(&dw->seen, v, memory_order_release);
    fy_timer_start(dw->loop, &dw->sweep, FY_DISC_SWEEP_MS);
}

void fy__upstream_dyn_touch(fy_upstream_t *u, int w, fy_loop_t *loop)
{
    dyn_worker_t *dw = &u->dyn->w[w];
    if (dw->loop) return;
    dw->loop = loop;
    fy_timer_init(&dw->sweep, dyn_sweep, dw);
    fy_timer_start(loop, &dw->sweep, FY_DISC_SWEEP_MS);
}

/* May slot i (removed at removed_at[i]) get another server? Every worker that ever picked
 * from this upstream has swept since, and holds nothing of it. A worker that has not picked
 * yet stores `used` before it loads the mask (both seq_cst), and we load `used` after we
 * stored the mask without i: if we see it false, its first pick sees the mask without i. */
static bool reclaimable(fy_upstream_t *u, size_t i)
{
    dyn_t *d = u->dyn;
    for (int w = 0; w < u->nworkers; w++) {
        dyn_worker_t *dw = &d->w[w];
        if (!atomic_load(&dw->used)) continue;
        unsigned seen = atomic_load_explicit(&dw->seen, memory_order_acquire);
        if ((int)(seen - d->removed_at[i]) < 0) return false;
        if (!((atomic_load_explicit(&dw->clear, memory_order_relaxed) >> i) & 1)) return false;
    }
    return true;
}

static void fill_slot(fy_upstream_t *u, size_t i, const fy_disc_entry_t *e)
{
    dyn_t *d = u->dyn;
    fy_upstream_server_conf_t *sv = &d->slots[i];
    free(sv->url);
    free(sv->host);
    free(sv->authority);
    memset(sv, 0, sizeof *sv);
    char host[256], auth[256], err[700];
    if (fy_upstream_url_parse(e->url, sv, true, host, auth, err, sizeof err) < 0) {
        fy_warn("upstream %s: discovery: %s", u->conf->name, err); /* checked by the parser */
        sv->url = fy_xstrdup("");
        sv->host = fy_xstrdup("");
        sv->authority = fy_xstrdup("");
        return;
    }
    sv->url = fy_xstrdup(e->url);
    sv->weight = e->weight;
    if (e->name[0]) { /* DNS: TLS and Host are for the name, not the address */
        const char *colon = strrchr(auth, ':');
        snprintf(host, sizeof host, "%s", e->name);
        char a[300];
        snprintf(a, sizeof a, "%s%s", e->name, auth[0] != '[' && colon ? colon : "");
        if (auth[0] == '[') {
            const char *rb = strchr(auth, ']');
            snprintf(a, sizeof a, "%s%s", e->name, rb ? rb + 1 : "");
        }
        sv->authority = fy_xstrdup(a);
    } else {
        sv->authority = fy_xstrdup(auth);
    }
    sv->host = fy_xstrdup(host);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = sv->url; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    snprintf(u->ids[i], sizeof u->ids[i], "%016llx", (unsigned long long)h);
    atomic_store(&u->down[i], false);
    atomic_store(&u->downs[i], 0);
    atomic_store(&u->ejected_until[i], 0);
    atomic_fetch_add(&d->incarnation[i], 1);
    if (u->probes) u->probes[i].fails = u->probes[i].oks = 0;
}

void fy__upstream_set_servers(fy_upstream_t *u, const fy_disc_entry_t *e, size_t n)
{
    dyn_t *d = u->dyn;
    unsigned v = atomic_load_explicit(&d->version, memory_order_relaxed) + 1;
    uint64_t live = atomic_load_explicit(&d->live, memory_order_relaxed);
    int match[64];
    bool keep[64] = {0};
    size_t nadd = 0, ndrain = 0;
    for (size_t k = 0; k < n && k < 64; k++) {
        match[k] = -1;
        for (size_t i = 0; i < d->cap; i++)
            if (d->state[i] != SLOT_FREE && strcmp(d->slots[i].url, e[k].url) == 0 &&
                d->slots[i].weight == e[k].weight && !keep[i]) {
                match[k] = (int)i;
                keep[i] = true;
                break;
            }
    }
    for (size_t i = 0; i < d->cap; i++) {
        if (d->state[i] == SLOT_LIVE && !keep[i]) {
            d->state[i] = SLOT_DRAINING;
            d->removed_at[i] = v;
            live &= ~(1ull << i);
            if (u->probes) fy__upstream_hc_stop_probe(u, &u->probes[i]);
            fy_notice("upstream %s: server %s left (draining)", u->conf->name, d->slots[i].url);
            ndrain++;
        } else if (d->state[i] == SLOT_DRAINING && keep[i]) {
            d->state[i] = SLOT_LIVE;
            live |= 1ull << i;
            fy_notice("upstream %s: server %s is back", u->conf->name, d->slots[i].url);
        }
    }
    for (size_t k = 0; k < n && k < 64; k++) {
        if (match[k] >= 0) continue;
        size_t i = d->cap;
        for (size_t j = 0; j < d->cap && i == d->cap; j++)
            if (d->state[j] == SLOT_FREE) i = j;
        for (size_t j = 0; j < d->cap && i == d->cap; j++)
            if (d->state[j] == SLOT_DRAINING && reclaimable(u, j)) i = j;
        if (i == d->cap) {
            fy_warn("upstream %s: discovery: no room for %s (max-servers %zu, draining ones "
                    "included); skipped",
                    u->conf->name, e[k].url, d->cap);
            continue;
        }
        fill_slot(u, i, &e[k]);
        if (!d->slots[i].url[0]) continue;
        d->state[i] = SLOT_LIVE;
        live |= 1ull << i;
        fy_notice("upstream %s: server %s joined", u->conf->name, e[k].url);
        nadd++;
    }
    atomic_store(&d->live, live); /* seq_cst: see reclaimable() */
    atomic_store_explicit(&d->version, v, memory_order_release);
    pthread_mutex_lock(&d->lock);
    d->last = fy_xrealloc(d->last, (n + 1) * sizeof *d->last);
    memcpy(d->last, e, n * sizeof *e);
    d->nlast = n;
    pthread_mutex_unlock(&d->lock);
    (void)nadd;
    (void)ndrain;
}

size_t fy__upstream_live_servers(const fy_upstream_t *u)
{
    if (!u->dyn) return u->nservers;
    return (size_t)__builtin_popcountll(atomic_load(&u->dyn->live));
}
