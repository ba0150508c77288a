#include "server.h"
#include "policies.h"

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
#include "ops/inspector.h"
#include "ops/http_metrics.h"
#include "quic/quic.h"
#include "tls/tls.h"

typedef struct slot slot_t;
typedef struct gen_ctx gen_ctx_t;

/* One listening address on one worker. Made when a generation first lists the address and
 * kept (never freed before the server) so that the connections of older generations can
 * still find it; `removed` once a generation no longer lists it. Worker's thread only. */
typedef struct worker_listener {
    fy_io_t io;
    struct fy_worker *w;
    slot_t *slot;
    gen_ctx_t *cur; /* the worker's current generation's ctx: new conns get it */
    size_t nold;    /* retired ctxs of this listener still alive */
    bool started, removed;
    bool paused;               /* at limits.connections */
    fy_accept_pause_t fdpause; /* accept ran out of descriptors */
    int udp_fd; /* h3: this worker's UDP socket until the endpoint takes it, else -1 */
    fy_quic_endpoint_t *quic; /* h3 endpoint (owns udp_fd once started) */
    int l4_front;             /* the listener's `sni:` map in l4/l4.c, or -1 */
} worker_listener_t;

/* One listening address for every worker (main thread makes it; never freed before the
 * server). An unchanged listener keeps its slot, and so its sockets, across reloads. */
struct slot {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int kind;
    unsigned protocols;
    bool tls, share;
    int64_t backlog;
    char *address, *name;     /* owned copies (the generation that made it may go first) */
    fy_quic_server_t *quic;   /* owned: h3 (GnuTLS certificates replaced on reload) */
    fy_quic_conf_t quic_conf; /* the `quic:` settings it was made with (borrowed by quic) */
    uint64_t cert_hash;       /* of the certificate and key files quic has loaded */
    bool active;              /* main thread: listed by the current generation */
    worker_listener_t *wl;    /* per worker */
    struct slot *next;        /* the server's list of every slot */
};

/* Everything built from one config: immutable once made, refcounted by the server (its
 * current one) and by each worker that uses it; a worker uses it while it is that worker's
 * current generation or while one of its ctxs has a conn. */
typedef struct fy_gen {
    atomic_int refs;
    unsigned id;
    const fy_config_t *cfg;
    fy_config_t *owned_cfg; /* owned (reloaded ones); the first is the caller's */
    fy_router_t router;
    fy_upstream_t **upstreams;   /* per cfg->upstreams entry */
    fy_tls_ctx_t **tls;          /* per listener, NULL for plain */
    const char **alt_svc;        /* per listener: Alt-Svc value for TCP responses, or NULL */
    fy_filter_chain_t *lfilters; /* per listener: its policies' filters (before the route's) */
    slot_t **slots;              /* per listener, borrowed from the server */
    fy_router_t mitm_router;     /* one catch-all route to the mitm handler (intercept listeners) */
    fy_handler_t *mitm;          /* owned by mitm_router */
    fy_har_t *har;               /* intercept.capture.har, or NULL */
    int nworkers;
    int *wrefs;         /* per worker, that worker's thread only */
    fy_defer_t *wdefer; /* per worker: the deferred unref after its release */
    bool health;        /* worker 0 started the active health checks */
} fy_gen_t;

/* The ctx of one listener on one worker for one generation; freed when it is no longer its
 * listener's current one and its last conn has closed. */
struct gen_ctx {
    fy_http_ctx_t ctx;
    fy_gen_t *gen;
    worker_listener_t *wl;
    fy_list_t link;             /* worker's ctxs */
    fy_defer_t reap;            /* retired and empty: free once the conns' deferred frees ran */
    fy_http_metrics_t *metrics; /* owned: the metrics observer of ctx */
};

struct fy_worker {
    fy_server_t *srv;
    int id;
    pthread_t thread;
    fy_loop_t loop;
    fy_gen_t *gen;             /* current */
    _Atomic(fy_gen_t *) inbox; /* fy_server_reload: the next generation */
    worker_listener_t **wls;   /* every listener started on this worker */
    size_t nwls, capwls;
    fy_list_t ctxs;  /* every live gen_ctx */
    fy_timer_t tick; /* access-log flush */
    fy_timer_t drain_timer;
    atomic_bool stop_requested;
    atomic_bool flush_requested; /* fy_server_stop: write the access log out now */
    bool draining;
    uint64_t drain_ms;
    fy_access_log_t *alog;
};

struct fy_server {
    const fy_config_t *cfg; /* the first generation's (borrowed): workers, log, l4 */
    int nworkers;
    struct fy_worker *workers;
    fy_gen_t *gen;   /* current (the server's reference) */
    fy_gen_t *l4gen; /* the first generation, pinned while `l4:` relays use its upstreams */
    slot_t *slots;   /* every slot ever made */
    unsigned next_id;
    fy_l4_t *l4; /* layer-4 relays (`l4:`) */
    int access_fd;
    pthread_mutex_t flush_mu; /* fy_server_stop waits for every worker's access-log flush */
    pthread_cond_t flush_cv;
    int nflushed;
    int nadopted; /* workers that took the posted generation (under flush_mu) */
};

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

/* ---- HTTP/3 (QUIC over UDP on the TCP listener's address) ---- */

static uint64_t fnv_file(uint64_t h, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return h ^ 1;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
    fclose(f);
    return h;
}

/* The listener's certificates, loaded into GnuTLS for QUIC (the same PEM files as OpenSSL):
 * a new server for the slot, or (a reload) the slot's server given the files when their
 * contents changed. Returns 0, or -1 after logging. */
static int h3_certs(const fy_config_t *cfg, const fy_listener_conf_t *lc, slot_t *sl)
{
    const fy_tls_conf_t *t = lc->tls;
    size_t n = t->certificates.n + 2, k = 0;
    const char **certs = fy_xcalloc(n, sizeof *certs), **keys = fy_xcalloc(n, sizeof *keys);
    char sscert[4096], sskey[4096];
    int r = -1;
    if (t->cert && t->key) {
        certs[k] = t->cert;
        keys[k++] = t->key;
    }
    const fy_tls_cert_conf_t *cc = t->certificates.v;
    for (size_t i = 0; i < t->certificates.n; i++) {
        certs[k] = cc[i].cert;
        keys[k++] = cc[i].key;
    }
    if (t->self_signed) {
        if (fy_tls_selfsigned_ensure(cfg->data_dir, sscert, sskey, sizeof sscert) < 0) goto out;
        certs[k] = sscert;
        keys[k++] = sskey;
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < k; i++) h = fnv_file(fnv_file(h, certs[i]), keys[i]);
    if (!sl->quic) {
        sl->quic_conf = cfg->quic;
        sl->quic = fy_quic_server_new(&sl->quic_conf, certs, keys, k, lc->address);
        r = sl->quic ? 0 : -1;
    } else {
        r = h == sl->cert_hash ? 0 : fy_quic_server_set_certs(sl->quic, certs, keys, k);
    }
    if (r == 0) sl->cert_hash = h;
out:
    free(certs);
    free(keys);
    return r;
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

static void gen_unref(fy_gen_t *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) gen_free(g);
}

/* The parts of a generation that do not depend on sockets: upstreams, router, handlers,
 * interception, TLS contexts (certificates are read now: a rotated file is seen at once). */
static fy_gen_t *gen_new(const fy_config_t *cfg, int nworkers)
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
        g->upstreams[i] = fy_upstream_new(&ups[i], nworkers);
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

/* ---- slots (listening sockets) ---- */

static bool slot_matches(const slot_t *sl, const fy_listener_conf_t *lc)
{
    return sl->addrlen == lc->addrlen && memcmp(&sl->addr, &lc->addr, lc->addrlen) == 0 &&
           sl->kind == lc->kind && sl->protocols == lc->protocols && sl->tls == (lc->tls != NULL) &&
           sl->share == lc->share && sl->backlog == lc->backlog;
}

static bool addr_held(const fy_server_t *s, const fy_listener_conf_t *lc)
{
    for (const slot_t *sl = s->slots; sl; sl = sl->next)
        if (sl->active && sl->addrlen == lc->addrlen &&
            memcmp(&sl->addr, &lc->addr, lc->addrlen) == 0)
            return true;
    return false;
}

/* Close the sockets of a slot no worker has started (a failed reload, or server_free). */
static void slot_close_unstarted(fy_server_t *s, slot_t *sl)
{
    for (int w = 0; w < s->nworkers; w++) {
        worker_listener_t *wl = &sl->wl[w];
        if (wl->started) continue;
        if (wl->io.fd >= 0) close(wl->io.fd);
        if (wl->udp_fd >= 0) close(wl->udp_fd);
        wl->io.fd = wl->udp_fd = -1;
    }
}

/* A new slot for `lc` with every worker's sockets bound (h3's UDP first: once a TCP port
 * accepts, its UDP twin is bound too). A port that another process (or an earlier listener
 * of this config) holds is refused unless the listener says `share: true`; on reload, a
 * listener that replaces one of ours at the same address binds beside it (SO_REUSEPORT). */
static slot_t *slot_new(fy_server_t *s, const fy_config_t *cfg, const fy_listener_conf_t *lc)
{
    slot_t *sl = fy_xcalloc(1, sizeof *sl);
    memcpy(&sl->addr, &lc->addr, lc->addrlen);
    sl->addrlen = lc->addrlen;
    sl->kind = lc->kind;
    sl->protocols = lc->protocols;
    sl->tls = lc->tls != NULL;
    sl->share = lc->share;
    sl->backlog = lc->backlog;
    sl->address = fy_xstrdup(lc->address);
    sl->name = fy_xstrdup(lc->name ? lc->name : lc->address);
    sl->wl = fy_xcalloc((size_t)s->nworkers, sizeof *sl->wl);
    for (int w = 0; w < s->nworkers; w++) {
        sl->wl[w].io.fd = -1;
        sl->wl[w].udp_fd = -1;
        sl->wl[w].l4_front = -1;
        sl->wl[w].slot = sl;
    }
    sl->next = s->slots;
    s->slots = sl;
    bool probe = !lc->share && !addr_held(s, lc);
    const struct sockaddr *sa = (const struct sockaddr *)&lc->addr;
    if (lc->protocols & FY_PROTO_H3) {
        if (probe && fy_sock_probe(sa, lc->addrlen, SOCK_DGRAM, lc->address) < 0) return NULL;
        if (h3_certs(cfg, lc, sl) < 0) return NULL;
        for (int w = 0; w < s->nworkers; w++) {
            int fd = fy_quic_socket(sa, lc->addrlen, lc->address);
            if (fd < 0) return NULL;
            sl->wl[w].udp_fd = fd;
        }
    }
    if (probe && fy_sock_probe(sa, lc->addrlen, SOCK_STREAM, lc->address) < 0) return NULL;
    for (int w = 0; w < s->nworkers; w++) {
        int fd = fy_sock_listen(sa, lc->addrlen, (int)lc->backlog, lc->address);
        if (fd < 0) return NULL;
        sl->wl[w].io.fd = fd;
    }
    return sl;
}

/* Give every listener of `g` a slot: an active one that matches, else a new one. Returns 0,
 * or -1 after logging (the new slots' sockets are closed again). */
static int gen_bind(fy_server_t *s, fy_gen_t *g)
{
    const fy_listener_conf_t *lc = g->cfg->listeners.v;
    size_t nl = g->cfg->listeners.n;
    slot_t *before = s->slots;
    for (size_t i = 0; i < nl; i++) {
        for (slot_t *sl = s->slots; sl && !g->slots[i]; sl = sl->next) {
            bool claimed = false;
            for (size_t j = 0; j < i; j++) claimed |= g->slots[j] == sl;
            if (sl->active && !claimed && slot_matches(sl, &lc[i])) g->slots[i] = sl;
        }
        if (g->slots[i] && g->slots[i]->quic && h3_certs(g->cfg, &lc[i], g->slots[i]) < 0) {
            for (slot_t *n = s->slots; n != before; n = n->next) slot_close_unstarted(s, n);
            return -1;
        }
        if (g->slots[i]) continue;
        slot_t *sl = slot_new(s, g->cfg, &lc[i]);
        if (!sl) {
            for (slot_t *n = s->slots; n != before; n = n->next) slot_close_unstarted(s, n);
            return -1;
        }
        g->slots[i] = sl;
    }
    for (slot_t *sl = s->slots; sl; sl = sl->next) sl->active = false;
    for (size_t i = 0; i < nl; i++) g->slots[i]->active = true;
    return 0;
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
    s->gen = gen_new(cfg, s->nworkers);
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

/* ---- worker ---- */

static void worker_release_cb(fy_defer_t *d)
{
    gen_unref(d->data);
}

static void worker_gen_get(struct fy_worker *w, fy_gen_t *g)
{
    if (g->wrefs[w->id]++ == 0) atomic_fetch_add(&g->refs, 1);
}

/* The worker's last use of `g` ended: close its per-worker parts here, on its thread, and
 * drop its reference once the closes' deferred frees have run. */
static void worker_gen_put(struct fy_worker *w, fy_gen_t *g)
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

static void on_conn_closed(fy_http_ctx_t *ctx);

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

static void gen_ctx_free(struct fy_worker *w, gen_ctx_t *gc)
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
static void gen_ctx_reap_later(struct fy_worker *w, gen_ctx_t *gc)
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

/* Conns of `wl` on this worker, every generation (limits.connections). */
static size_t wl_nconns(const worker_listener_t *wl)
{
    size_t n = wl->cur ? wl->cur->ctx.nconns : 0;
    if (wl->nold == 0) return n;
    const fy_list_t *h = &wl->w->ctxs;
    for (const fy_list_t *l = h->next; l != h; l = l->next) {
        const gen_ctx_t *gc = (const gen_ctx_t *)((const char *)l - offsetof(gen_ctx_t, link));
        if (gc->wl == wl && gc != wl->cur) n += gc->ctx.nconns;
    }
    return n;
}

/* A connection of a listener with an `sni:` map whose server name is not in the map. */
static void l4_fallback(void *ud, int fd, const struct sockaddr *sa, socklen_t salen)
{
    worker_listener_t *wl = ud;
    if (!wl->cur) {
        close(fd);
        return;
    }
    fy_h1_conn_accept(&wl->cur->ctx, fd, sa, salen);
}

static void on_accept(fy_io_t *io, uint32_t ev)
{
    (void)ev;
    worker_listener_t *wl = io->data;
    if (!wl->cur) return;
    const fy_http_limits_t *lim = wl->cur->ctx.limits;
    fy_handler_t *mitm = wl->cur->gen->mitm;
    for (int i = 0; i < 64; i++) {
        if ((int64_t)wl_nconns(wl) >= lim->max_connections) {
            /* at the limit: stop accepting until a connection closes */
            fy_warn("listener %s: limits.connections (%lld) reached", wl->slot->address,
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
            fy_error("accept on %s: %s", wl->slot->address, strerror(errno));
            return;
        }
        fy_http_ctx_t *ctx = &wl->cur->ctx;
        if (wl->l4_front >= 0)
            fy_l4_adopt(wl->w->srv->l4, wl->w->id, wl->l4_front, fd, (struct sockaddr *)&ss, sl,
                        l4_fallback, wl);
        else if (wl->slot->kind == FY_LISTENER_SOCKS5)
            fy_mitm_socks5_accept(mitm, ctx, fd, (struct sockaddr *)&ss, sl);
        else if (wl->slot->kind == FY_LISTENER_TRANSPARENT)
            fy_mitm_transparent_accept(mitm, ctx, fd, (struct sockaddr *)&ss, sl);
        else
            fy_h1_conn_accept(ctx, fd, (struct sockaddr *)&ss, sl);
    }
}

static bool all_closed(struct fy_worker *w)
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

static void on_conn_closed(fy_http_ctx_t *ctx)
{
    gen_ctx_t *gc = ctx->data;
    worker_listener_t *wl = gc->wl;
    struct fy_worker *w = wl->w;
    if (gc != wl->cur && ctx->nconns == 0 && !w->draining) gen_ctx_reap_later(w, gc);
    if (w->draining) {
        if (all_closed(w)) fy_loop_stop(&w->loop);
        return;
    }
    if (wl->removed) return;
    if (wl->paused && (int64_t)wl_nconns(wl) < wl->cur->ctx.limits->max_connections) {
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
    if (!wl->paused && !wl->w->draining && !wl->removed && wl->io.fd >= 0)
        fy_io_set(&wl->w->loop, &wl->io, EPOLLIN);
}

static void listener_start(struct fy_worker *w, worker_listener_t *wl)
{
    wl->w = w;
    wl->started = true;
    if (w->nwls == w->capwls) {
        w->capwls = w->capwls ? 2 * w->capwls : 8;
        w->wls = fy_xrealloc(w->wls, w->capwls * sizeof *w->wls);
    }
    w->wls[w->nwls++] = wl;
    fy_accept_pause_init(&wl->fdpause, &w->loop, wl->slot->name, accept_resume, wl);
    wl->io.cb = on_accept;
    wl->io.data = wl;
    fy_io_set(&w->loop, &wl->io, EPOLLIN);
    if (wl->udp_fd >= 0) {
        wl->quic = fy_h3_endpoint_start(&wl->cur->ctx, wl->slot->quic, wl->udp_fd);
        wl->udp_fd = -1; /* the endpoint owns (or closed) it */
    }
}

/* Stop accepting on `wl` (drain or a reload that dropped it): its conns go on. */
static void listener_stop(struct fy_worker *w, worker_listener_t *wl)
{
    fy_accept_pause_stop(&wl->fdpause);
    if (wl->io.fd >= 0) {
        fy_io_set(&w->loop, &wl->io, 0);
        close(wl->io.fd);
        wl->io.fd = -1;
    }
    if (wl->quic) fy_h3_endpoint_drain(wl->quic);
}

/* Make `g` this worker's current generation: new conns of every listener it lists get its
 * ctx; conns already open keep theirs; listeners it no longer lists stop accepting. */
static void worker_adopt(struct fy_worker *w, fy_gen_t *g)
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
    fy_gen_t *g = gen_new(cfg, s->nworkers);
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

fy_handler_t *fy_server_mitm(fy_server_t *s)
{
    return s->gen ? s->gen->mitm : NULL;
}
