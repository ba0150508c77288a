/* Generations: everything built from one config (upstreams, router and handlers, interception,
 * TLS contexts, listener policies), the per-worker listener ctxs that pin them, and reload.
 * gen_new and fy_server_reload run on the main thread; a worker adopts, retires and frees its
 * ctxs on its own thread (see server_int.h). */
#include "server_int.h"
#include "policies.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"
#include "h2/h2_server.h"
#include "h3/h3_server.h"
#include "handler/echo.h"
#include "handler/wt_app.h"
#include "handler/wt_echo.h"
#include "handler/wt_proxy.h"
#include "handler/mitm.h"
#include "handler/proxy.h"
#include "handler/respond.h"
#include "handler/static.h"

static const char *const alpn_h1[] = {"http/1.1", NULL};
static const char *const alpn_h2_h1[] = {"h2", "http/1.1", NULL};
static const char *const alpn_h2[] = {"h2", NULL};

static int build_router(fy_gen_t *g)
{
    const fy_config_t *cfg = g->cfg;
    const fy_route_conf_t *rc = cfg->routes.v;
    g->router.routes = fy_xcalloc(cfg->routes.n ? cfg->routes.n : 1, sizeof(fy_route_t));
    for (size_t i = 0; i < cfg->routes.n; i++) {
        fy_route_t *r = &g->router.routes[i];
        r->index = i;
        r->hosts = rc[i].match.host.v;
        r->nhosts = rc[i].match.host.n;
        r->path = rc[i].match.path ? rc[i].match.path : "/";
        r->path_len = strlen(r->path);
        r->path_exact = rc[i].match.path_exact;
        r->header_names = rc[i].match.headers.keys;
        r->header_values = rc[i].match.headers.values;
        r->n_headers = rc[i].match.headers.n;
        r->query_names = rc[i].match.query.keys;
        r->query_values = rc[i].match.query.values;
        r->n_query = rc[i].match.query.n;
        if (rc[i].match.path_regex) {
            char err[256];
            if (fy_route_set_regex(r, rc[i].match.path_regex, err, sizeof err) < 0) {
                fy_log(FY_LOG_EMERG, "route %zu: path-regex: %s", i, err);
                return -1;
            }
        }
        for (size_t k = 0; k < rc[i].match.methods.n; k++) {
            const char *m = rc[i].match.methods.v[k];
            int id = fy_http_method_id(fy_str(m, strlen(m)));
            if (id != FY_M_OTHER) r->methods |= 1u << id;
        }
        if (rc[i].static_)
            r->handler = fy_static_handler_new(rc[i].static_);
        else if (rc[i].respond)
            r->handler = fy_respond_handler_new(rc[i].respond);
        else if (rc[i].echo)
            r->handler = fy_echo_handler_new();
        else if (rc[i].webtransport && rc[i].webtransport->handler == FY_WT_PROXY) {
            const fy_upstream_conf_t *ups = cfg->upstreams.v;
            for (size_t j = 0; j < cfg->upstreams.n; j++)
                if (&ups[j] == rc[i].proxy_upstream)
                    r->handler = fy_wt_proxy_handler_new(rc[i].webtransport, g->upstreams[j]);
        } else if (rc[i].webtransport && rc[i].webtransport->handler == FY_WT_APP)
            r->handler = fy_wt_app_handler_new(rc[i].webtransport);
        else if (rc[i].webtransport)
            r->handler = fy_wt_handler_new(rc[i].webtransport);
        else if (rc[i].proxy) {
            const fy_upstream_conf_t *ups = cfg->upstreams.v;
            for (size_t j = 0; j < cfg->upstreams.n; j++)
                if (&ups[j] == rc[i].proxy_upstream)
                    r->handler = fy_proxy_handler_new(rc[i].proxy, g->upstreams[j]);
        }
        g->router.n = i + 1;
        if (!r->handler) return -1;
        if (fy_policies_build_route(cfg, i, &r->filters) < 0) return -1;
    }
    return 0;
}

/* Listeners of kind intercept share one mitm handler behind a catch-all router. */
static int build_mitm(fy_gen_t *g)
{
    const fy_listener_conf_t *lc = g->cfg->listeners.v;
    bool any = false;
    for (size_t i = 0; i < g->cfg->listeners.n; i++) any |= lc[i].kind != FY_LISTENER_HTTP;
    if (!any) return 0;
    g->mitm = fy_mitm_handler_new(&g->cfg->intercept, g->nworkers);
    if (!g->mitm) return -1;
    for (size_t i = 0; i < g->cfg->listeners.n; i++)
        if (lc[i].kind != FY_LISTENER_HTTP)
            fy_mitm_add_own_address(g->mitm, (const struct sockaddr *)&lc[i].addr, lc[i].addrlen);
    g->mitm_router.routes = fy_xcalloc(1, sizeof(fy_route_t));
    g->mitm_router.routes[0].path = "";
    g->mitm_router.routes[0].handler = g->mitm;
    g->mitm_router.n = 1;
    if (g->cfg->intercept.capture.har) {
        const char *err = "";
        g->har = fy_har_open(g->cfg->intercept.capture.har, &err);
        if (!g->har) {
            fy_log(FY_LOG_EMERG, "intercept.capture.har: %s: %s", g->cfg->intercept.capture.har,
                   err);
            return -1;
        }
    }
    return 0;
}

/* ---- generations ---- */

static void gen_free(fy_gen_t *g)
{
    size_t nl = g->cfg->listeners.n;
    for (size_t i = 0; g->tls && i < nl; i++) fy_tls_ctx_free(g->tls[i]);
    free(g->tls);
    for (size_t i = 0; g->alt_svc && i < nl; i++) free((char *)g->alt_svc[i]);
    free(g->alt_svc);
    for (size_t i = 0; g->lfilters && i < nl; i++) fy_filter_chain_free(&g->lfilters[i]);
    free(g->lfilters);
    fy_router_free(&g->router);
    fy_router_free(&g->mitm_router);
    fy_har_close(g->har);
    for (size_t i = 0; g->upstreams && i < g->cfg->upstreams.n; i++)
        fy_upstream_free(g->upstreams[i]);
    free(g->upstreams);
    free(g->slots);
    free(g->wrefs);
    free(g->wdefer);
    fy_config_free(g->owned_cfg);
    free(g);
}

void gen_unref(fy_gen_t *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) gen_free(g);
}

/* The parts of a generation that do not depend on sockets: upstreams, router, handlers,
 * interception, TLS contexts (certificates are read now: a rotated file is seen at once). */
fy_gen_t *gen_new(const fy_config_t *cfg, int nworkers, const fy_gen_t *prev)
{
    fy_gen_t *g = fy_xcalloc(1, sizeof *g);
    atomic_init(&g->refs, 1);
    g->cfg = cfg;
    g->nworkers = nworkers;
    g->wrefs = fy_xcalloc((size_t)nworkers, sizeof *g->wrefs);
    g->wdefer = fy_xcalloc((size_t)nworkers, sizeof *g->wdefer);
    size_t nl = cfg->listeners.n;
    g->slots = fy_xcalloc(nl ? nl : 1, sizeof *g->slots);
    g->tls = fy_xcalloc(nl ? nl : 1, sizeof *g->tls);
    g->alt_svc = fy_xcalloc(nl ? nl : 1, sizeof *g->alt_svc);
    g->lfilters = fy_xcalloc(nl ? nl : 1, sizeof *g->lfilters);
    g->upstreams = fy_xcalloc(cfg->upstreams.n ? cfg->upstreams.n : 1, sizeof *g->upstreams);
    const fy_upstream_conf_t *ups = cfg->upstreams.v;
    for (size_t i = 0; i < cfg->upstreams.n; i++) {
        const fy_upstream_t *before = NULL; /* the running generation's, by name */
        const fy_upstream_conf_t *pu = prev ? prev->cfg->upstreams.v : NULL;
        for (size_t j = 0; prev && j < prev->cfg->upstreams.n; j++)
            if (strcmp(pu[j].name, ups[i].name) == 0) before = prev->upstreams[j];
        g->upstreams[i] = fy_upstream_new_next(&ups[i], nworkers, before);
        if (!g->upstreams[i]) goto fail;
    }
    if (build_router(g) < 0) goto fail;
    if (build_mitm(g) < 0) goto fail;
    const fy_listener_conf_t *lc = cfg->listeners.v;
    for (size_t i = 0; i < nl; i++) {
        g->alt_svc[i] = h3_alt_svc(&lc[i]);
        if (fy_policies_build_listener(cfg, i, &g->lfilters[i]) < 0) goto fail;
        if (!lc[i].tls) continue;
        const char *const *alpn = alpn_h1;
        if ((lc[i].protocols & FY_PROTO_H2) && (lc[i].protocols & FY_PROTO_H1))
            alpn = alpn_h2_h1;
        else if (lc[i].protocols & FY_PROTO_H2)
            alpn = alpn_h2;
        g->tls[i] = fy_tls_ctx_new(lc[i].tls, cfg->data_dir, alpn);
        if (!g->tls[i]) {
            fy_log(FY_LOG_EMERG, "listener %s: TLS setup failed", lc[i].address);
            goto fail;
        }
    }
    return g;
fail:
    gen_free(g);
    return NULL;
}

/* ---- worker ---- */

static void worker_release_cb(fy_defer_t *d)
{
    gen_unref(d->data);
}

void worker_gen_get(struct fy_worker *w, fy_gen_t *g)
{
    if (g->wrefs[w->id]++ == 0) atomic_fetch_add(&g->refs, 1);
}

/* The worker's last use of `g` ended: close its per-worker parts here, on its thread, and
 * drop its reference once the closes' deferred frees have run. */
void worker_gen_put(struct fy_worker *w, fy_gen_t *g)
{
    if (--g->wrefs[w->id] > 0) return;
    for (size_t i = 0; i < g->cfg->upstreams.n; i++) {
        if (w->id == 0 && g->health) fy_upstream_health_stop(g->upstreams[i]);
        fy_upstream_worker_close(g->upstreams[i], w->id);
    }
    if (g->mitm) fy_mitm_worker_close(g->mitm, w->id);
    fy_defer_t *d = &g->wdefer[w->id];
    d->cb = worker_release_cb;
    d->data = g;
    fy_defer(&w->loop, d);
}

/* The completion observers of a listener context, in their documented order
 * (docs/ARCHITECTURE.md): metrics, access log, HAR capture (intercept listeners). */
static void add_observers(struct fy_worker *w, gen_ctx_t *gc, const fy_listener_conf_t *lc)
{
    if (fy_http_metrics_wanted()) {
        gc->metrics = fy_http_metrics_new(lc->name ? lc->name : lc->address, gc->ctx.router);
        fy_http_ctx_observe(&gc->ctx, fy_http_metrics_exchange, gc->metrics);
    }
    if (w->alog) fy_http_ctx_observe(&gc->ctx, fy_access_log_exchange, w->alog);
    if (lc->kind != FY_LISTENER_HTTP && gc->gen->har)
        fy_http_ctx_observe(&gc->ctx, fy_har_exchange, gc->gen->har);
    if (gc->gen->cfg->inspector) /* flows the inspector's capture filter marked */
        fy_http_ctx_observe(&gc->ctx, fy_inspector_exchange, fy_inspector_get());
}

static gen_ctx_t *gen_ctx_new(struct fy_worker *w, worker_listener_t *wl, fy_gen_t *g, size_t i)
{
    const fy_config_t *cfg = g->cfg;
    const fy_listener_conf_t *lc = &((const fy_listener_conf_t *)cfg->listeners.v)[i];
    gen_ctx_t *gc = fy_xcalloc(1, sizeof *gc);
    gc->gen = g;
    gc->wl = wl;
    gc->lc = lc;
    worker_gen_get(w, g);
    fy_http_ctx_t *c = &gc->ctx;
    c->router = &g->router;
    if (lc->kind != FY_LISTENER_HTTP) {
        c->router = &g->mitm_router;
        c->forward_proxy = true;
    }
    c->limits = &cfg->limits;
    c->loop = &w->loop;
    c->worker_id = w->id;
    c->is_tls = g->tls[i] != NULL;
    c->tls = g->tls[i];
    c->protocols = lc->protocols;
    c->h2conf = &cfg->http2;
    if (lc->protocols & (FY_PROTO_H2 | FY_PROTO_H2C)) c->start_h2 = fy_h2_conn_start;
    c->alt_svc = g->alt_svc[i];
    c->filters = g->lfilters[i].n ? &g->lfilters[i] : NULL;
    c->data = gc;
    c->on_conn_closed = on_conn_closed;
    add_observers(w, gc, lc);
    fy_list_init(&c->conns);
    fy_list_insert_tail(&w->ctxs, &gc->link);
    return gc;
}

void gen_ctx_free(struct fy_worker *w, gen_ctx_t *gc)
{
    fy_gen_t *g = gc->gen;
    fy_defer_cancel(&w->loop, &gc->reap);
    if (gc != gc->wl->cur) gc->wl->nold--;
    fy_list_remove(&gc->link);
    fy_http_metrics_free(gc->metrics);
    free(gc);
    worker_gen_put(w, g);
}

static void gen_ctx_reap(fy_defer_t *d)
{
    gen_ctx_t *gc = d->data;
    if (gc->ctx.nconns == 0 && gc != gc->wl->cur && !gc->wl->w->draining)
        gen_ctx_free(gc->wl->w, gc);
}

/* A retired ctx with no conn left. The codecs count a conn out (nconns--) when it closes
 * and call on_conn_closed from its deferred free: those frees are all queued already, so a
 * deferred reap queued now runs after the last of them. */
void gen_ctx_reap_later(struct fy_worker *w, gen_ctx_t *gc)
{
    gc->reap.cb = gen_ctx_reap;
    gc->reap.data = gc;
    fy_defer(&w->loop, &gc->reap);
}

/* `gc` is no longer its listener's current ctx: it goes when its last conn does. */
static void gen_ctx_retire(struct fy_worker *w, gen_ctx_t *gc)
{
    gc->wl->nold++;
    if (gc->ctx.nconns == 0) gen_ctx_reap_later(w, gc);
}

/* Make `g` this worker's current generation: new conns of every listener it lists get its
 * ctx; conns already open keep theirs; listeners it no longer lists stop accepting. */
void worker_adopt(struct fy_worker *w, fy_gen_t *g)
{
    fy_gen_t *old = w->gen;
    worker_gen_get(w, g);
    w->gen = g;
    if (w->id == 0 && !g->health) { /* one worker probes; every worker reads the verdicts */
        g->health = true;
        for (size_t i = 0; i < g->cfg->upstreams.n; i++)
            fy_upstream_health_start(g->upstreams[i], &w->loop, w->id);
    }
    for (size_t i = 0; i < g->cfg->listeners.n; i++) {
        worker_listener_t *wl = &g->slots[i]->wl[w->id];
        gen_ctx_t *prev = wl->cur;
        wl->cur = gen_ctx_new(w, wl, g, i);
        if (!wl->started)
            listener_start(w, wl);
        else if (wl->quic)
            fy_h3_endpoint_set_ctx(wl->quic, &wl->cur->ctx);
        if (prev) gen_ctx_retire(w, prev);
    }
    for (size_t k = 0; k < w->nwls; k++) {
        worker_listener_t *wl = w->wls[k];
        if (wl->removed || wl->cur->gen == g) continue;
        listener_stop(w, wl);
        wl->removed = true;
        gen_ctx_t *prev = wl->cur;
        wl->cur = NULL;
        gen_ctx_retire(w, prev);
    }
    if (old) worker_gen_put(w, old);
}

/* Carry each upstream's health verdicts over from the generation before, by name. */
static void carry_health(fy_gen_t *to, const fy_gen_t *from)
{
    const fy_upstream_conf_t *nu = to->cfg->upstreams.v, *ou = from->cfg->upstreams.v;
    for (size_t i = 0; i < to->cfg->upstreams.n; i++)
        for (size_t j = 0; j < from->cfg->upstreams.n; j++)
            if (strcmp(nu[i].name, ou[j].name) == 0)
                fy_upstream_carry_health(to->upstreams[i], from->upstreams[j]);
}

int fy_server_reload(fy_server_t *s, fy_config_t *cfg)
{
    if (cfg->workers > 0 && cfg->workers != s->nworkers)
        fy_warn("reload: workers (%lld) takes effect at the next start; keeping %d",
                (long long)cfg->workers, s->nworkers);
    if (cfg->l4.n || s->cfg->l4.n)
        fy_notice("reload: l4 relays and listeners' sni maps keep the configuration the "
                  "server started with");
    fy_gen_t *g = gen_new(cfg, s->nworkers, s->gen);
    if (!g) {
        fy_error("reload: %s: not applied; generation %u goes on serving", cfg->source, s->gen->id);
        fy_config_free(cfg);
        return -1;
    }
    g->owned_cfg = cfg;
    if (gen_bind(s, g) < 0) {
        /* gen_bind leaves the active marks alone on failure */
        fy_error("reload: %s: not applied; generation %u goes on serving", cfg->source, s->gen->id);
        gen_free(g);
        return -1;
    }
    g->id = ++s->next_id;
    carry_health(g, s->gen);
    pthread_mutex_lock(&s->flush_mu);
    s->nadopted = 0;
    pthread_mutex_unlock(&s->flush_mu);
    for (int i = 0; i < s->nworkers; i++) {
        atomic_store(&s->workers[i].inbox, g);
        fy_loop_wake(&s->workers[i].loop);
    }
    fy_gen_t *old = s->gen;
    s->gen = g;
    /* wait until every worker took it (bounded: a stuck worker must not stop the main
       thread), so that reloads never overtake each other in a worker's inbox */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&s->flush_mu);
    while (s->nadopted < s->nworkers)
        if (pthread_cond_timedwait(&s->flush_cv, &s->flush_mu, &until) != 0) break;
    int n = s->nadopted;
    pthread_mutex_unlock(&s->flush_mu);
    gen_unref(old);
    if (n < s->nworkers) {
        fy_warn("reload: generation %u active on %d of %d workers", g->id, n, s->nworkers);
        return 0;
    }
    fy_notice("reload: generation %u active on all workers", g->id);
    return 0;
}
