/* The running server's lifecycle: make it (workers, first generation, layer 4, access log,
 * bound sockets), run the worker threads and their loops (wake-ups, access-log ticks, drain),
 * stop and free. Main thread, except the worker_* and on_* functions (the worker's thread). */
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "handler/wt_app.h"
#include "core/counters.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/spool.h"
#include "h1/h1_server.h"
#include "h2/h2_server.h"
#include "h3/h3_server.h"
#include "handler/proxy.h"
#include "handler/static.h"
#include "net/sock.h"
#include "ops/inspector.h"
#include "policy/cache.h"
#include "tls/tls.h"

/* Descriptors a worker needs besides its client connections: listeners, epoll, pipes, pooled
 * origin connections, files being sent. */
#define FD_MARGIN 64

/* Raise the soft RLIMIT_NOFILE to the hard one, and say so when `limits.connections` per
 * worker (each proxied one may hold an origin connection too) cannot fit under it. */
static void raise_nofile(const fy_config_t *cfg, int nworkers)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit want = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl.rlim_cur = rl.rlim_max;
    }
    uint64_t need =
        (uint64_t)cfg->limits.max_connections * (uint64_t)nworkers + (uint64_t)FD_MARGIN * nworkers;
    if (rl.rlim_cur != RLIM_INFINITY && need > (uint64_t)rl.rlim_cur)
        fy_warn("limits.connections (%lld) x %d worker%s needs about %llu file descriptors, but "
                "RLIMIT_NOFILE is %llu (hard limit %llu): accepts will pause when descriptors "
                "run out; raise the limit (ulimit -n, LimitNOFILE=) or lower limits.connections",
                (long long)cfg->limits.max_connections, nworkers, nworkers == 1 ? "" : "s",
                (unsigned long long)need, (unsigned long long)rl.rlim_cur,
                (unsigned long long)rl.rlim_max);
}

fy_server_t *fy_server_new(const fy_config_t *cfg)
{
    fy_server_t *s = fy_xcalloc(1, sizeof *s);
    s->cfg = cfg;
    s->access_fd = -1;
    pthread_mutex_init(&s->flush_mu, NULL);
    pthread_cond_init(&s->flush_cv, NULL);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    s->nworkers = cfg->workers > 0 ? (int)cfg->workers : (int)(ncpu > 0 ? ncpu : 1);
    fy_log_min_level = cfg->log.level;
    raise_nofile(cfg, s->nworkers);
    if (fy_http_metrics_setup(s->nworkers) < 0) goto fail;
    s->workers = fy_xcalloc((size_t)s->nworkers, sizeof *s->workers);
    for (int w = 0; w < s->nworkers; w++) {
        s->workers[w].srv = s;
        s->workers[w].id = w;
        fy_list_init(&s->workers[w].ctxs);
    }
    s->gen = gen_new(cfg, s->nworkers, NULL);
    if (!s->gen) goto fail;
    s->gen->id = ++s->next_id;
    /* layer 4: its listeners are bound here too; it keeps this generation's upstreams */
    s->l4 = fy_l4_new(&cfg->l4, &cfg->listeners, s->gen->upstreams, s->nworkers, cfg->data_dir);
    if (!s->l4) goto fail;
    if (cfg->l4.n) {
        s->l4gen = s->gen;
        atomic_fetch_add(&s->gen->refs, 1);
    }
    const char *err = NULL;
    if (fy_access_log_open(&cfg->log, &s->access_fd, &err) < 0) {
        fy_log(FY_LOG_EMERG, "access log %s: %s", cfg->log.access, err);
        goto fail;
    }
    /* bind here, before any thread starts, so that errors are reported at once */
    if (gen_bind(s, s->gen) < 0) goto fail;
    for (size_t i = 0; i < cfg->listeners.n; i++) {
        int front = fy_l4_front(s->l4, i);
        for (int w = 0; w < s->nworkers; w++) s->gen->slots[i]->wl[w].l4_front = front;
    }
    return s;
fail:
    fy_server_free(s);
    return NULL;
}

bool all_closed(struct fy_worker *w)
{
    for (fy_list_t *n = w->ctxs.next; n != &w->ctxs; n = n->next)
        if (((gen_ctx_t *)((char *)n - offsetof(gen_ctx_t, link)))->ctx.nconns) return false;
    return fy_l4_worker_nsessions(w->srv->l4, w->id) == 0;
}

#define GC_OF(n) ((gen_ctx_t *)((char *)(n)-offsetof(gen_ctx_t, link)))

/* ---- layer 4 (l4/l4.c owns its listeners and sessions) ---- */

static void l4_on_idle(void *ud)
{
    struct fy_worker *w = ud;
    if (w->draining && all_closed(w)) fy_loop_stop(&w->loop);
}

/* Milliseconds to just past the next wall-clock second: every worker flushes its access log
 * then, so that lines of one second are all written before any of the next (the log's
 * timestamps have a resolution of one second; the buffer is also flushed when a line of a
 * new second comes, see ops/access_log.c). */
static uint64_t ms_to_next_second(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return 1000 - (uint64_t)ts.tv_nsec / 1000000 + 2;
}

static void on_tick(fy_timer_t *t)
{
    struct fy_worker *w = t->data;
    if (w->alog) fy_access_log_flush(w->alog);
    fy_timer_start(&w->loop, t, ms_to_next_second());
}

static void on_drain_timeout(fy_timer_t *t)
{
    struct fy_worker *w = t->data;
    size_t n = 0;
    for (fy_list_t *l = w->ctxs.next; l != &w->ctxs; l = l->next) n += GC_OF(l)->ctx.nconns;
    fy_warn("drain deadline passed: closing %zu connection%s", n, n == 1 ? "" : "s");
    for (fy_list_t *l = w->ctxs.next; l != &w->ctxs; l = l->next)
        fy_http_ctx_close_all(&GC_OF(l)->ctx);
    fy_l4_worker_close_all(w->srv->l4, w->id);
    fy_loop_stop(&w->loop);
}

static void on_wake(fy_loop_t *loop)
{
    struct fy_worker *w = loop->data;
    if (atomic_exchange(&w->flush_requested, false)) {
        if (w->alog) fy_access_log_flush(w->alog);
        pthread_mutex_lock(&w->srv->flush_mu);
        w->srv->nflushed++;
        pthread_cond_broadcast(&w->srv->flush_cv);
        pthread_mutex_unlock(&w->srv->flush_mu);
    }
    fy_gen_t *g = atomic_exchange(&w->inbox, NULL);
    if (g && !w->draining) {
        worker_adopt(w, g);
        pthread_mutex_lock(&w->srv->flush_mu);
        w->srv->nadopted++;
        pthread_cond_broadcast(&w->srv->flush_cv);
        pthread_mutex_unlock(&w->srv->flush_mu);
    }
    if (!atomic_load(&w->stop_requested) || w->draining) return;
    w->draining = true;
    for (size_t k = 0; k < w->nwls; k++) listener_stop(w, w->wls[k]);
    fy_proxy_drain(); /* WebSocket tunnels: Close 1001 both ways */
    for (fy_list_t *l = w->ctxs.next; l != &w->ctxs; l = l->next) fy_http_ctx_drain(&GC_OF(l)->ctx);
    fy_l4_worker_drain(w->srv->l4, w->id);
    if (all_closed(w)) {
        fy_loop_stop(loop);
        return;
    }
    fy_timer_start(loop, &w->drain_timer, w->drain_ms);
}

static void run_defers(fy_loop_t *loop)
{
    fy_defer_t *d;
    while ((d = loop->defer_head)) {
        loop->defer_head = d->next;
        if (!loop->defer_head) loop->defer_tail = &loop->defer_head;
        d->queued = false;
        d->cb(d);
    }
}

static void *worker_main(void *arg)
{
    struct fy_worker *w = arg;
    fy_server_t *s = w->srv;
    fy_log_set_worker(w->id);
    fy_counters_bind(w->id);
    if (s->access_fd >= 0)
        w->alog =
            fy_access_log_new(s->access_fd, s->cfg->log.access_format, s->cfg->log.access_buffer);
    if (w->alog)
        fy_access_log_set_fields(w->alog, s->cfg->log.access_field_ids,
                                 s->cfg->log.n_access_fields);
    fy_gen_t *first = atomic_exchange(&w->inbox, NULL);
    worker_adopt(w, first);
    if (s->l4gen) worker_gen_get(w, s->l4gen);
    fy_l4_worker_start(s->l4, w->id, &w->loop, l4_on_idle, w);
    fy_timer_init(&w->tick, on_tick, w);
    fy_timer_init(&w->drain_timer, on_drain_timeout, w);
    if (w->alog) fy_timer_start(&w->loop, &w->tick, ms_to_next_second());
    fy_loop_run(&w->loop);
    /* leftovers (drain deadline): every conn is closed; run their deferred frees */
    for (fy_list_t *l = w->ctxs.next; l != &w->ctxs; l = l->next)
        fy_http_ctx_close_all(&GC_OF(l)->ctx);
    fy_l4_worker_close_all(s->l4, w->id);
    for (size_t k = 0; k < w->nwls; k++) {
        fy_quic_endpoint_free(w->wls[k]->quic);
        w->wls[k]->quic = NULL;
    }
    w->loop.stop = false;
    fy_timer_stop(&w->loop, &w->tick);
    fy_timer_stop(&w->loop, &w->drain_timer);
    /* one more turn for deferred frees */
    run_defers(&w->loop);
    fy_access_log_free(w->alog);
    w->alog = NULL;
    fy_static_thread_cleanup();
    fy_h2_thread_cleanup();
    fy_h3_thread_cleanup();
    fy_router_thread_cleanup();
    /* every ctx, then the generations: their per-worker parts close here */
    while (w->ctxs.next != &w->ctxs) {
        gen_ctx_t *gc = GC_OF(w->ctxs.next);
        if (gc->wl->cur == gc) {
            gc->wl->cur = NULL;
            gc->wl->nold++; /* gen_ctx_free counts it out */
        }
        gen_ctx_free(w, gc);
    }
    free(w->wls);
    w->wls = NULL;
    w->nwls = w->capwls = 0;
    if (w->gen) worker_gen_put(w, w->gen);
    w->gen = NULL;
    if (s->l4gen) worker_gen_put(w, s->l4gen);
    /* QUIC origin connections (h3://) free their memory in deferred callbacks */
    run_defers(&w->loop);
    /* last: every conn (h1, upgraded, intercepted, h2's nghttp2 state, QUIC) is freed by now */
    fy_h1_thread_cleanup();
    fy_cache_thread_cleanup();
    fy_spool_thread_drain();
    fy_tls_thread_cleanup();
    fy_pool_drain(fy_chunk_pool());
    return NULL;
}

int fy_server_start(fy_server_t *s)
{
    for (int i = 0; i < s->nworkers; i++) {
        struct fy_worker *w = &s->workers[i];
        int r = fy_loop_init(&w->loop);
        if (r < 0) return r;
        w->loop.data = w;
        w->loop.on_wake = on_wake;
        atomic_store(&w->inbox, s->gen);
        r = pthread_create(&w->thread, NULL, worker_main, w);
        if (r) return -r;
    }
    return 0;
}

/* Every worker writes out its access log (bounded wait: a stuck worker must not stop the
 * stop), so that the lines of what was served before the stop precede the drain notice. */
static void flush_access_logs(fy_server_t *s)
{
    pthread_mutex_lock(&s->flush_mu);
    s->nflushed = 0;
    pthread_mutex_unlock(&s->flush_mu);
    for (int i = 0; i < s->nworkers; i++) {
        atomic_store(&s->workers[i].flush_requested, true);
        fy_loop_wake(&s->workers[i].loop);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    pthread_mutex_lock(&s->flush_mu);
    while (s->nflushed < s->nworkers)
        if (pthread_cond_timedwait(&s->flush_cv, &s->flush_mu, &until) != 0) break;
    pthread_mutex_unlock(&s->flush_mu);
}

void fy_server_stop(fy_server_t *s, uint64_t drain_ms)
{
    if (s->access_fd >= 0) flush_access_logs(s);
    fy_notice("draining connections (at most %llu ms) and exiting", (unsigned long long)drain_ms);
    for (int i = 0; i < s->nworkers; i++) {
        s->workers[i].drain_ms = drain_ms;
        atomic_store(&s->workers[i].stop_requested, true);
        fy_loop_wake(&s->workers[i].loop);
    }
    for (int i = 0; i < s->nworkers; i++) {
        pthread_join(s->workers[i].thread, NULL);
        fy_loop_destroy(&s->workers[i].loop);
        s->workers[i].thread = 0;
    }
    fy_http_metrics_dump_env();
}

void fy_server_free(fy_server_t *s)
{
    if (!s) return;
    while (s->slots) {
        slot_t *sl = s->slots;
        s->slots = sl->next;
        slot_close_unstarted(s, sl);
        fy_quic_server_free(sl->quic);
        free(sl->address);
        free(sl->name);
        free(sl->wl);
        free(sl);
    }
    free(s->workers);
    fy_l4_free(s->l4);
    gen_unref(s->l4gen);
    gen_unref(s->gen);
    if (s->access_fd > 2) close(s->access_fd);
    pthread_mutex_destroy(&s->flush_mu);
    pthread_cond_destroy(&s->flush_cv);
    free(s);
    fy_inspector_shutdown();
}

void fy_server_print_urls(const fy_server_t *s, FILE *out)
{
    const fy_listener_conf_t *lc = s->cfg->listeners.v;
    for (size_t i = 0; i < s->cfg->listeners.n; i++) {
        char a[80];
        fy_sock_addr_str((const struct sockaddr *)&lc[i].addr, a, sizeof a);
        if (lc[i].kind == FY_LISTENER_INTERCEPT)
            fprintf(out, "ferry: intercepting proxy on http://%s/\n", a);
        else if (lc[i].kind == FY_LISTENER_SOCKS5)
            fprintf(out, "ferry: intercepting SOCKS5 proxy on socks5h://%s\n", a);
        else if (lc[i].kind == FY_LISTENER_TRANSPARENT)
            fprintf(out, "ferry: transparent interception on %s\n", a);
        else
            fprintf(out, "ferry: serving %s://%s/\n", lc[i].tls ? "https" : "http", a);
    }
    /* reverse-proxied path prefixes (the demo's /proxy/), a few at most */
    const fy_route_conf_t *rc = s->cfg->routes.v;
    for (size_t i = 0, shown = 0; i < s->cfg->routes.n && shown < 4; i++)
        if (rc[i].proxy && rc[i].match.path && strcmp(rc[i].match.path, "/") != 0) {
            fprintf(out, "ferry: reverse proxy under %s to upstream %s\n", rc[i].match.path,
                    rc[i].proxy->upstream);
            shown++;
        }
    fflush(out);
    fy_l4_print(s->l4, out);
}

const fy_config_t *fy_server_config(const fy_server_t *s, unsigned *generation)
{
    if (generation) *generation = s->gen->id;
    return s->gen->cfg;
}

size_t fy_server_upstreams(const fy_server_t *s, fy_upstream_t *const **v)
{
    *v = s->gen->upstreams;
    return s->gen->cfg->upstreams.n;
}

fy_handler_t *fy_server_mitm(fy_server_t *s)
{
    return s->gen ? s->gen->mitm : NULL;
}

int fy_server_set_wt_app(fy_server_t *s, const ferry_wt_ops_t *ops)
{
    int n = 0;
    for (size_t i = 0; s->gen && i < s->gen->router.n; i++)
        if (fy_wt_app_is(s->gen->router.routes[i].handler)) {
            fy_wt_app_set(s->gen->router.routes[i].handler, ops);
            n++;
        }
    return n;
}
