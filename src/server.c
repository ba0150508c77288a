#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"
#include "core/loop.h"
#include "core/pool.h"
#include "h1/h1_server.h"
#include "h2/h2_server.h"
#include "h3/h3_server.h"
#include "handler/echo.h"
#include "handler/mitm.h"
#include "handler/proxy.h"
#include "handler/respond.h"
#include "handler/static.h"
#include "http/router.h"
#include "l4/l4.h"
#include "net/accept.h"
#include "net/sock.h"
#include "ops/access_log.h"
#include "ops/har.h"
#include "ops/http_metrics.h"
#include "quic/quic.h"
#include "tls/tls.h"

typedef struct worker_listener {
    fy_io_t io;
    fy_http_ctx_t ctx;
    struct fy_worker *w;
    const fy_listener_conf_t *conf;
    bool paused;               /* at limits.connections */
    fy_accept_pause_t fdpause; /* accept ran out of descriptors */
    int udp_fd; /* h3: this worker's UDP socket until the endpoint takes it, else -1 */
    fy_quic_endpoint_t *quic; /* h3 endpoint (owns udp_fd once started) */
    int l4_front;             /* the listener's `sni:` map in l4/l4.c, or -1 */
    fy_http_metrics_t *metrics; /* owned: this listener's metrics observer on this worker */
} worker_listener_t;

struct fy_worker {
    fy_server_t *srv;
    int id;
    pthread_t thread;
    fy_loop_t loop;
    worker_listener_t *ls; /* one per configured listener */
    fy_timer_t tick;       /* access-log flush */
    fy_timer_t drain_timer;
    atomic_bool stop_requested;
    atomic_bool flush_requested; /* fy_server_stop: write the access log out now */
    bool draining;
    uint64_t drain_ms;
    fy_access_log_t *alog;
};

struct fy_server {
    const fy_config_t *cfg;
    int nworkers;
    struct fy_worker *workers;
    fy_router_t router;
    fy_upstream_t **upstreams; /* per cfg->upstreams entry */
    fy_tls_ctx_t **tls;        /* per listener, NULL for plain */
    fy_l4_t *l4;               /* layer-4 relays (`l4:`) */
    fy_quic_server_t **quic;   /* per listener, NULL without h3 */
    const char **alt_svc;      /* per listener: Alt-Svc value for TCP responses, or NULL */
    int access_fd;
    fy_router_t mitm_router;  /* one catch-all route to the mitm handler (intercept listeners) */
    fy_handler_t *mitm;       /* owned by mitm_router */
    fy_har_t *har;            /* intercept.capture.har, or NULL */
    pthread_mutex_t flush_mu; /* fy_server_stop waits for every worker's access-log flush */
    pthread_cond_t flush_cv;
    int nflushed;
};

static const char *const alpn_h1[] = {"http/1.1", NULL};
static const char *const alpn_h2_h1[] = {"h2", "http/1.1", NULL};
static const char *const alpn_h2[] = {"h2", NULL};

static int build_router(fy_server_t *s)
{
    const fy_config_t *cfg = s->cfg;
    const fy_route_conf_t *rc = cfg->routes.v;
    s->router.routes = fy_xcalloc(cfg->routes.n ? cfg->routes.n : 1, sizeof(fy_route_t));
    for (size_t i = 0; i < cfg->routes.n; i++) {
        fy_route_t *r = &s->router.routes[i];
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
        else if (rc[i].proxy) {
            const fy_upstream_conf_t *ups = cfg->upstreams.v;
            for (size_t j = 0; j < cfg->upstreams.n; j++)
                if (&ups[j] == rc[i].proxy_upstream)
                    r->handler = fy_proxy_handler_new(rc[i].proxy, s->upstreams[j]);
        }
        s->router.n = i + 1;
        if (!r->handler) return -1;
    }
    return 0;
}

/* Listeners of kind intercept share one mitm handler behind a catch-all router. */
static int build_mitm(fy_server_t *s)
{
    const fy_listener_conf_t *lc = s->cfg->listeners.v;
    bool any = false;
    for (size_t i = 0; i < s->cfg->listeners.n; i++) any |= lc[i].kind != FY_LISTENER_HTTP;
    if (!any) return 0;
    s->mitm = fy_mitm_handler_new(&s->cfg->intercept, s->nworkers);
    if (!s->mitm) return -1;
    for (size_t i = 0; i < s->cfg->listeners.n; i++)
        if (lc[i].kind != FY_LISTENER_HTTP)
            fy_mitm_add_own_address(s->mitm, (const struct sockaddr *)&lc[i].addr, lc[i].addrlen);
    s->mitm_router.routes = fy_xcalloc(1, sizeof(fy_route_t));
    s->mitm_router.routes[0].path = "";
    s->mitm_router.routes[0].handler = s->mitm;
    s->mitm_router.n = 1;
    if (s->cfg->intercept.capture.har) {
        const char *err = "";
        s->har = fy_har_open(s->cfg->intercept.capture.har, &err);
        if (!s->har) {
            fy_log(FY_LOG_EMERG, "intercept.capture.har: %s: %s", s->cfg->intercept.capture.har,
                   err);
            return -1;
        }
    }
    return 0;
}

/* ---- HTTP/3 (QUIC over UDP on the TCP listener's address) ---- */

/* The listener's certificates, loaded into GnuTLS for QUIC (the same PEM files as OpenSSL). */
static fy_quic_server_t *h3_server_new(const fy_config_t *cfg, const fy_listener_conf_t *lc)
{
    const fy_tls_conf_t *t = lc->tls;
    size_t n = t->certificates.n + 2, k = 0;
    const char **certs = fy_xcalloc(n, sizeof *certs), **keys = fy_xcalloc(n, sizeof *keys);
    char sscert[4096], sskey[4096];
    if (t->cert && t->key) {
        certs[k] = t->cert;
        keys[k++] = t->key;
    }
    const fy_tls_cert_conf_t *cc = t->certificates.v;
    for (size_t i = 0; i < t->certificates.n; i++) {
        certs[k] = cc[i].cert;
        keys[k++] = cc[i].key;
    }
    fy_quic_server_t *qs = NULL;
    if (t->self_signed) {
        if (fy_tls_selfsigned_ensure(cfg->data_dir, sscert, sskey, sizeof sscert) < 0) goto out;
        certs[k] = sscert;
        keys[k++] = sskey;
    }
    qs = fy_quic_server_new(&cfg->quic, certs, keys, k, lc->address);
out:
    free(certs);
    free(keys);
    return qs;
}

static int h3_setup(fy_server_t *s)
{
    const fy_config_t *cfg = s->cfg;
    const fy_listener_conf_t *lc = cfg->listeners.v;
    s->quic = fy_xcalloc(cfg->listeners.n, sizeof *s->quic);
    for (size_t i = 0; i < cfg->listeners.n; i++) {
        if (!(lc[i].protocols & FY_PROTO_H3)) continue;
        if (!lc[i].share && fy_sock_probe((const struct sockaddr *)&lc[i].addr, lc[i].addrlen,
                                          SOCK_DGRAM, lc[i].address) < 0)
            return -1;
        s->quic[i] = h3_server_new(cfg, &lc[i]);
        if (!s->quic[i]) return -1;
        for (int w = 0; w < s->nworkers; w++) {
            int fd =
                fy_quic_socket((const struct sockaddr *)&lc[i].addr, lc[i].addrlen, lc[i].address);
            if (fd < 0) return -1;
            s->workers[w].ls[i].udp_fd = fd;
        }
    }
    return 0;
}

static void h3_worker_start(struct fy_worker *w, size_t i)
{
    worker_listener_t *wl = &w->ls[i];
    if (wl->udp_fd < 0) return;
    wl->quic = fy_h3_endpoint_start(&wl->ctx, w->srv->quic[i], wl->udp_fd);
    wl->udp_fd = -1; /* the endpoint owns (or closed) it */
}

/* `Alt-Svc: h3=":PORT"` for the TCP side of listeners that also serve h3 */
static const char *h3_alt_svc(const fy_listener_conf_t *lc)
{
    if (!(lc->protocols & FY_PROTO_H3)) return NULL;
    const struct sockaddr *sa = (const struct sockaddr *)&lc->addr;
    unsigned port = ntohs(sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
                                                    : ((const struct sockaddr_in *)sa)->sin_port);
    char *v = fy_xmalloc(32);
    snprintf(v, 32, "h3=\":%u\"; ma=86400", port);
    return v;
}

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
    s->upstreams = fy_xcalloc(cfg->upstreams.n ? cfg->upstreams.n : 1, sizeof *s->upstreams);
    const fy_upstream_conf_t *ups = cfg->upstreams.v;
    for (size_t i = 0; i < cfg->upstreams.n; i++) {
        s->upstreams[i] = fy_upstream_new(&ups[i], s->nworkers);
        if (!s->upstreams[i]) goto fail;
    }
    if (build_router(s) < 0) goto fail;
    s->tls = fy_xcalloc(cfg->listeners.n, sizeof *s->tls);
    const fy_listener_conf_t *lc = cfg->listeners.v;
    if (build_mitm(s) < 0) goto fail;
    for (size_t i = 0; i < cfg->listeners.n; i++) {
        if (!lc[i].tls) continue;
        const char *const *alpn = alpn_h1;
        if ((lc[i].protocols & FY_PROTO_H2) && (lc[i].protocols & FY_PROTO_H1))
            alpn = alpn_h2_h1;
        else if (lc[i].protocols & FY_PROTO_H2)
            alpn = alpn_h2;
        s->tls[i] = fy_tls_ctx_new(lc[i].tls, cfg->data_dir, alpn);
        if (!s->tls[i]) {
            fy_log(FY_LOG_EMERG, "listener %s: TLS setup failed", lc[i].address);
            goto fail;
        }
    }
    /* layer 4: its listeners are bound here too */
    s->l4 = fy_l4_new(&cfg->l4, &cfg->listeners, s->upstreams, s->nworkers, cfg->data_dir);
    if (!s->l4) goto fail;
    const char *err = NULL;
    if (fy_access_log_open(&cfg->log, &s->access_fd, &err) < 0) {
        fy_log(FY_LOG_EMERG, "access log %s: %s", cfg->log.access, err);
        goto fail;
    }
    s->workers = fy_xcalloc((size_t)s->nworkers, sizeof *s->workers);
    for (int w = 0; w < s->nworkers; w++) {
        struct fy_worker *wk = &s->workers[w];
        wk->srv = s;
        wk->id = w;
        wk->ls = fy_xcalloc(cfg->listeners.n, sizeof *wk->ls);
        for (size_t i = 0; i < cfg->listeners.n; i++) {
            wk->ls[i].io.fd = -1;
            wk->ls[i].udp_fd = -1;
        }
    }
    /* h3's UDP sockets first: once a TCP port accepts, its UDP twin is bound too */
    if (h3_setup(s) < 0) goto fail;
    /* bind here, before any thread starts, so that errors are reported at once; a port that
       another process (or an earlier listener of this config) holds is refused unless the
       listener says `share: true` */
    for (size_t i = 0; i < cfg->listeners.n; i++) {
        if (!lc[i].share && fy_sock_probe((const struct sockaddr *)&lc[i].addr, lc[i].addrlen,
                                          SOCK_STREAM, lc[i].address) < 0)
            goto fail;
        for (int w = 0; w < s->nworkers; w++) {
            int fd = fy_sock_listen((const struct sockaddr *)&lc[i].addr, lc[i].addrlen,
                                    (int)lc[i].backlog, lc[i].address);
            if (fd < 0) goto fail;
            s->workers[w].ls[i].io.fd = fd;
        }
    }
    s->alt_svc = fy_xcalloc(cfg->listeners.n, sizeof *s->alt_svc);
    for (size_t i = 0; i < cfg->listeners.n; i++) s->alt_svc[i] = h3_alt_svc(&lc[i]);
    return s;
fail:
    fy_server_free(s);
    return NULL;
}

/* ---- worker ---- */

/* A connection of a listener with an `sni:` map whose server name is not in the map. */
static void l4_fallback(void *ud, int fd, const struct sockaddr *sa, socklen_t salen)
{
    worker_listener_t *wl = ud;
    fy_h1_conn_accept(&wl->ctx, fd, sa, salen);
}

static void on_accept(fy_io_t *io, uint32_t ev)
{
    worker_listener_t *wl = io->data;
    const fy_http_limits_t *lim = wl->ctx.limits;
    for (int i = 0; i < 64; i++) {
        if ((int64_t)wl->ctx.nconns >= lim->max_connections) {
            /* at the limit: stop accepting until a connection closes */
            fy_warn("listener %s: limits.connections (%lld) reached", wl->conf->address,
                    (long long)lim->max_connections);
            fy_io_set(&wl->w->loop, &wl->io, 0);
            wl->paused = true;
            fy_counter_inc(fy_cid_limit_connections);
            return;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(io->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return;
            if (fy_accept_is_resource_error(errno)) {
                /* the connection stays queued and the socket readable: without a pause the
                   loop would retry (and log) at full speed */
                int e = errno;
                fy_io_set(&wl->w->loop, &wl->io, 0);
                fy_accept_pause(&wl->fdpause, e);
                return;
            }
            fy_error("accept on %s: %s", wl->conf->address, strerror(errno));
            return;
        }
        if (wl->l4_front >= 0)
            fy_l4_adopt(wl->w->srv->l4, wl->w->id, wl->l4_front, fd, (struct sockaddr *)&ss, sl,
                        l4_fallback, wl);
        else if (wl->conf->kind == FY_LISTENER_SOCKS5)
            fy_mitm_socks5_accept(wl->w->srv->mitm, &wl->ctx, fd, (struct sockaddr *)&ss, sl);
        else if (wl->conf->kind == FY_LISTENER_TRANSPARENT)
            fy_mitm_transparent_accept(wl->w->srv->mitm, &wl->ctx, fd, (struct sockaddr *)&ss, sl);
        else
            fy_h1_conn_accept(&wl->ctx, fd, (struct sockaddr *)&ss, sl);
    }
}

static bool all_closed(struct fy_worker *w)
{
    for (size_t i = 0; i < w->srv->cfg->listeners.n; i++)
        if (w->ls[i].ctx.nconns) return false;
    return fy_l4_worker_nsessions(w->srv->l4, w->id) == 0;
}

/* ---- layer 4 (l4/l4.c owns its listeners and sessions) ---- */

static void l4_on_idle(void *ud)
{
    struct fy_worker *w = ud;
    if (w->draining && all_closed(w)) fy_loop_stop(&w->loop);
}

static void on_conn_closed(fy_http_ctx_t *ctx)
{
    worker_listener_t *wl = ctx->data;
    struct fy_worker *w = wl->w;
    if (w->draining) {
        if (all_closed(w)) fy_loop_stop(&w->loop);
        return;
    }
    if (wl->paused && (int64_t)ctx->nconns < ctx->limits->max_connections) {
        wl->paused = false;
        if (!wl->fdpause.paused) fy_io_set(&w->loop, &wl->io, EPOLLIN);
    }
    if (wl->fdpause.paused) fy_accept_pause_end(&wl->fdpause); /* a descriptor came free */
}

/* The descriptor pause ended: poll the listening socket again unless something else holds
 * it (limits.connections, the drain). */
static void accept_resume(void *ud)
{
    worker_listener_t *wl = ud;
    if (!wl->paused && !wl->w->draining && wl->io.fd >= 0)
        fy_io_set(&wl->w->loop, &wl->io, EPOLLIN);
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
    for (size_t i = 0; i < w->srv->cfg->listeners.n; i++) n += w->ls[i].ctx.nconns;
    fy_warn("drain deadline passed: closing %zu connection%s", n, n == 1 ? "" : "s");
    for (size_t i = 0; i < w->srv->cfg->listeners.n; i++) fy_http_ctx_close_all(&w->ls[i].ctx);
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
        pthread_cond_signal(&w->srv->flush_cv);
        pthread_mutex_unlock(&w->srv->flush_mu);
    }
    if (!atomic_load(&w->stop_requested) || w->draining) return;
    w->draining = true;
    for (size_t i = 0; i < w->srv->cfg->listeners.n; i++) {
        worker_listener_t *wl = &w->ls[i];
        fy_accept_pause_stop(&wl->fdpause);
        if (wl->io.fd >= 0) {
            fy_io_set(loop, &wl->io, 0);
            close(wl->io.fd);
            wl->io.fd = -1;
        }
        if (wl->quic) fy_h3_endpoint_drain(wl->quic);
    }
    fy_proxy_drain(); /* WebSocket tunnels: Close 1001 both ways */
    for (size_t i = 0; i < w->srv->cfg->listeners.n; i++) fy_http_ctx_drain(&w->ls[i].ctx);
    fy_l4_worker_drain(w->srv->l4, w->id);
    if (all_closed(w)) {
        fy_loop_stop(loop);
        return;
    }
    fy_timer_start(loop, &w->drain_timer, w->drain_ms);
}

/* The completion observers of listener i on worker w, in their documented order
 * (docs/ARCHITECTURE.md): metrics, access log, HAR capture (intercept listeners). */
static void add_observers(struct fy_worker *w, worker_listener_t *wl, size_t i)
{
    const fy_listener_conf_t *lc = (const fy_listener_conf_t *)w->srv->cfg->listeners.v + i;
    wl->metrics = fy_http_metrics_new(lc->name ? lc->name : lc->address, wl->ctx.router);
    fy_http_ctx_observe(&wl->ctx, fy_http_metrics_exchange, wl->metrics);
    if (w->alog) fy_http_ctx_observe(&wl->ctx, fy_access_log_exchange, w->alog);
    if (lc->kind != FY_LISTENER_HTTP && w->srv->har)
        fy_http_ctx_observe(&wl->ctx, fy_har_exchange, w->srv->har);
}

static void *worker_main(void *arg)
{
    struct fy_worker *w = arg;
    fy_server_t *s = w->srv;
    const fy_config_t *cfg = s->cfg;
    fy_log_set_worker(w->id);
    fy_counters_bind(w->id);
    if (s->access_fd >= 0)
        w->alog = fy_access_log_new(s->access_fd, cfg->log.access_format, cfg->log.access_buffer);
    const fy_listener_conf_t *lc = cfg->listeners.v;
    for (size_t i = 0; i < cfg->listeners.n; i++) {
        worker_listener_t *wl = &w->ls[i];
        wl->w = w;
        wl->conf = &lc[i];
        wl->l4_front = fy_l4_front(s->l4, i);
        wl->ctx.router = &s->router;
        if (lc[i].kind != FY_LISTENER_HTTP) {
            wl->ctx.router = &s->mitm_router;
            wl->ctx.forward_proxy = true;
        }
        wl->ctx.limits = &cfg->limits;
        wl->ctx.loop = &w->loop;
        wl->ctx.worker_id = w->id;
        wl->ctx.is_tls = s->tls[i] != NULL;
        wl->ctx.tls = s->tls[i];
        wl->ctx.protocols = lc[i].protocols;
        wl->ctx.h2conf = &cfg->http2;
        if (lc[i].protocols & (FY_PROTO_H2 | FY_PROTO_H2C)) wl->ctx.start_h2 = fy_h2_conn_start;
        wl->ctx.alt_svc = s->alt_svc[i];
        wl->ctx.data = wl;
        wl->ctx.on_conn_closed = on_conn_closed;
        add_observers(w, wl, i);
        fy_list_init(&wl->ctx.conns);
        fy_accept_pause_init(&wl->fdpause, &w->loop, lc[i].name, accept_resume, wl);
        wl->io.cb = on_accept;
        wl->io.data = wl;
        fy_io_set(&w->loop, &wl->io, EPOLLIN);
        h3_worker_start(w, i);
    }
    fy_l4_worker_start(s->l4, w->id, &w->loop, l4_on_idle, w);
    if (w->id == 0) /* one worker probes; every worker reads the verdicts */
        for (size_t i = 0; i < cfg->upstreams.n; i++)
            fy_upstream_health_start(s->upstreams[i], &w->loop, w->id);
    fy_timer_init(&w->tick, on_tick, w);
    fy_timer_init(&w->drain_timer, on_drain_timeout, w);
    if (w->alog) fy_timer_start(&w->loop, &w->tick, ms_to_next_second());
    fy_loop_run(&w->loop);
    /* leftovers (drain deadline): every conn is closed; run their deferred frees */
    for (size_t i = 0; i < cfg->listeners.n; i++) fy_http_ctx_close_all(&w->ls[i].ctx);
    fy_l4_worker_close_all(s->l4, w->id);
    for (size_t i = 0; i < cfg->listeners.n; i++) {
        fy_quic_endpoint_free(w->ls[i].quic);
        w->ls[i].quic = NULL;
    }
    w->loop.stop = false;
    fy_timer_stop(&w->loop, &w->tick);
    fy_timer_stop(&w->loop, &w->drain_timer);
    /* one more turn for deferred frees */
    fy_defer_t *d;
    while ((d = w->loop.defer_head)) {
        w->loop.defer_head = d->next;
        if (!w->loop.defer_head) w->loop.defer_tail = &w->loop.defer_head;
        d->queued = false;
        d->cb(d);
    }
    fy_access_log_free(w->alog);
    w->alog = NULL;
    for (size_t i = 0; i < cfg->listeners.n; i++) {
        fy_http_metrics_free(w->ls[i].metrics);
        w->ls[i].metrics = NULL;
    }
    fy_static_thread_cleanup();
    fy_h2_thread_cleanup();
    fy_h3_thread_cleanup();
    fy_router_thread_cleanup();
    if (s->mitm) fy_mitm_worker_close(s->mitm, w->id);
    for (size_t i = 0; i < cfg->upstreams.n; i++) {
        if (w->id == 0) fy_upstream_health_stop(s->upstreams[i]);
        fy_upstream_worker_close(s->upstreams[i], w->id);
    }
    /* QUIC origin connections (h3://) free their memory in deferred callbacks */
    while ((d = w->loop.defer_head)) {
        w->loop.defer_head = d->next;
        if (!w->loop.defer_head) w->loop.defer_tail = &w->loop.defer_head;
        d->queued = false;
        d->cb(d);
    }
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
    for (int w = 0; s->workers && w < s->nworkers; w++) {
        for (size_t i = 0; i < s->cfg->listeners.n; i++) {
            if (s->workers[w].ls[i].io.fd >= 0) close(s->workers[w].ls[i].io.fd);
            if (s->workers[w].ls[i].udp_fd >= 0) close(s->workers[w].ls[i].udp_fd);
        }
        free(s->workers[w].ls);
    }
    free(s->workers);
    for (size_t i = 0; s->tls && i < s->cfg->listeners.n; i++) fy_tls_ctx_free(s->tls[i]);
    for (size_t i = 0; s->quic && i < s->cfg->listeners.n; i++) fy_quic_server_free(s->quic[i]);
    free(s->quic);
    for (size_t i = 0; s->alt_svc && i < s->cfg->listeners.n; i++) free((char *)s->alt_svc[i]);
    free(s->alt_svc);
    free(s->tls);
    fy_l4_free(s->l4);
    fy_router_free(&s->router);
    fy_router_free(&s->mitm_router);
    fy_har_close(s->har);
    for (size_t i = 0; s->upstreams && i < s->cfg->upstreams.n; i++)
        fy_upstream_free(s->upstreams[i]);
    free(s->upstreams);
    if (s->access_fd > 2) close(s->access_fd);
    pthread_mutex_destroy(&s->flush_mu);
    pthread_cond_destroy(&s->flush_cv);
    free(s);
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

fy_handler_t *fy_server_mitm(fy_server_t *s)
{
    return s->mitm;
}
