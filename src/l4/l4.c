/* Layer-4 listeners and TCP sessions. UDP and QUIC sessions are in l4_udp.c. */
#include "l4/l4.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/pool.h"
#include "l4/l4_conf.h"
#include "l4/l4_hello.h"
#include "l4/l4_int.h"
#include "l4/l4_proxy.h"
#include "net/listener_conf.h"
#include "net/sock.h"
#include "tls/tls.h"

#define PIPE_CHUNK 65536
/* Plain sessions read into 64 KiB buffers: a message up to that size is read whole by a
   short recv (the queue is then known empty: no read that only says EAGAIN) and sent on;
   only a read that fills it switches the direction to splice. TLS sessions use the 16 KiB
   chunks (one record at most per read or write). */
#define PLAIN_BUF 65536

enum { S_PROXY_HDR, S_PEEK, S_HANDSHAKE, S_CONNECT, S_RELAY };

typedef struct end {
    fy_io_t io;
    fy_transport_t sock; /* plain */
    fy_transport_t *t;   /* &sock or TLS over it (owned) */
    uint32_t events;
    bool fin; /* epoll reported the peer's FIN (edge-triggered: no later edge will) */
} end_t;

/* one direction: bytes from `src` to `dst` */
typedef struct dir {
    int pipe[2]; /* made when a read fills the buffer and both ends are plain sockets */
    size_t inpipe;
    bool use_pipe;
    uint8_t *buf;    /* a pooled buffer while bytes are in flight: small messages (and everything
                        with TLS) go through it; an idle direction holds none */
    fy_pool_t *pool; /* buf's pool (its size is pool->size) */
    size_t off, len;
    bool eof;  /* src ended */
    bool shut; /* dst half-closed after eof */
    uint32_t wait_src, wait_dst;
} dir_t;

typedef struct tcp_sess {
    fy_list_t node;
    fy__l4_wl_t *wl;
    end_t c, o;
    dir_t up, down; /* up: client -> origin */
    int state;
    bool splice; /* both ends plain: a direction moving bulk switches to splice(2) */
    bool closed;
    fy_timer_t timer;
    fy_defer_t defer;
    struct sockaddr_storage peer, local; /* client and listener addresses (maybe from PROXY) */
    uint8_t *peek;                       /* owned: peek_max bytes while peeking */
    const fy_l4_target_t *to;
    fy_upstream_t *up_grp;
    int server;
    uint64_t tried;
    int attempts;
    bool terminate;
    uint8_t pphdr[FY_L4_PROXY_MAX];
    size_t pplen;
    fy_l4_fallback_cb fallback; /* fronts: names not in the map go back to HTTP */
    void *fallback_ud;
    size_t mem_held; /* bytes counted in ferry_l4_session_memory_bytes */
} tcp_sess_t;

static void sess_close(tcp_sess_t *s, const char *why);
static fy_transport_t *tls_end_new(fy__l4_wl_t *wl, int fd);
static void relay(tcp_sess_t *s, bool up, bool down);
static void start_connect(tcp_sess_t *s);
static void do_peek(tcp_sess_t *s);

/* ---- listeners ---- */

static const char *const mode_names[] = {"tcp", "udp", "tls-passthrough", "tls-terminate",
                                         "quic-passthrough"};

static int udp_bind(const struct sockaddr *addr, socklen_t len, const char *name)
{
    int fd = socket(addr->sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0) goto fail;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) goto fail;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) goto fail;
    if (addr->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, addr, len) < 0) goto fail;
    return fd;
fail:;
    int e = errno;
    fy_log(FY_LOG_EMERG, "l4 listen (udp) on %s: %s", name, strerror(e));
    if (fd >= 0) close(fd);
    return -e;
}

/* A tls-passthrough conf for the `sni:` map of an HTTP listener; no default target. */
static fy_l4_conf_t *front_conf(const fy_listener_conf_t *hl)
{
    fy_l4_conf_t *c = fy_xcalloc(1, sizeof *c);
    c->listen = hl->address;
    c->addr = hl->addr;
    c->addrlen = hl->addrlen;
    c->name = hl->name;
    c->mode = FY_L4_TLS_PASSTHROUGH;
    c->to.upstream_index = -1;
    c->tls = hl->tls;
    c->connect_timeout_ms = 5000;
    c->idle_timeout_ms = 600000;
    c->peek_timeout_ms = hl->tls->handshake_timeout_ms ? hl->tls->handshake_timeout_ms : 10000;
    c->peek_max = 16384;
    c->max_sessions = INT64_MAX;
    const fy_listener_sni_conf_t *ls = hl->sni.v;
    fy_l4_sni_conf_t *sc = fy_xcalloc(hl->sni.n, sizeof *sc);
    for (size_t j = 0; j < hl->sni.n; j++) {
        sc[j].names = ls[j].names;
        sc[j].to.target = ls[j].passthrough ? ls[j].passthrough : ls[j].relay;
        sc[j].to.addr = ls[j].addr;
        sc[j].to.addrlen = ls[j].addrlen;
        sc[j].to.upstream_index = -1;
        sc[j].terminate = ls[j].relay != NULL;
    }
    c->sni.v = sc;
    c->sni.n = hl->sni.n;
    return c;
}

fy_l4_t *fy_l4_new(const fy_conf_list_t *confs, const fy_conf_list_t *http_listeners,
                   fy_upstream_t *const *upstreams, int nworkers, const char *data_dir)
{
    fy_l4_t *l4 = fy_xcalloc(1, sizeof *l4);
    const fy_listener_conf_t *hl = http_listeners->v;
    size_t nfronts = 0;
    for (size_t i = 0; i < http_listeners->n; i++) nfronts += hl[i].sni.n > 0;
    l4->nls = confs->n + nfronts;
    l4->nworkers = nworkers;
    l4->ls = fy_xcalloc(l4->nls ? l4->nls : 1, sizeof *l4->ls);
    l4->workers = fy_xcalloc((size_t)nworkers, sizeof *l4->workers);
    l4->nhttp = http_listeners->n;
    l4->front_of = fy_xcalloc(l4->nhttp ? l4->nhttp : 1, sizeof *l4->front_of);
    for (size_t i = 0, k = confs->n; i < http_listeners->n; i++) {
        l4->front_of[i] = -1;
        if (!hl[i].sni.n) continue;
        l4->ls[k].front = true;
        l4->ls[k].own_conf = front_conf(&hl[i]);
        l4->front_of[i] = (int)k++;
    }
    const fy_l4_conf_t *lc = confs->v;
    for (size_t i = 0; i < l4->nls; i++) {
        fy__l4_listener_t *l = &l4->ls[i];
        l->conf = l->front ? l->own_conf : &lc[i];
        const fy_l4_conf_t *ci = l->conf;
        l->udp = ci->mode == FY_L4_UDP || ci->mode == FY_L4_QUIC_PASSTHROUGH;
        char lab[160];
        snprintf(lab, sizeof lab, "route=\"%s\"", ci->name);
        l->cid_sessions = fy_counter_register("ferry_l4_route_sessions_total", lab, FY_COUNTER);
        snprintf(lab, sizeof lab, "route=\"%s\",direction=\"up\"", ci->name);
        l->cid_bytes[0] = fy_counter_register("ferry_l4_bytes_total", lab, FY_COUNTER);
        snprintf(lab, sizeof lab, "route=\"%s\",direction=\"down\"", ci->name);
        l->cid_bytes[1] = fy_counter_register("ferry_l4_bytes_total", lab, FY_COUNTER);
        if (ci->to.upstream_index >= 0) l->up = upstreams[ci->to.upstream_index];
        l->sni_up = fy_xcalloc(ci->sni.n ? ci->sni.n : 1, sizeof *l->sni_up);
        const fy_l4_sni_conf_t *sc = ci->sni.v;
        for (size_t j = 0; j < ci->sni.n; j++)
            if (sc[j].to.upstream_index >= 0) l->sni_up[j] = upstreams[sc[j].to.upstream_index];
        if (ci->tls) {
            l->tls = fy_tls_ctx_new(ci->tls, data_dir, NULL);
            if (!l->tls) {
                fy_log(FY_LOG_EMERG, "l4 %s: TLS setup failed", ci->name);
                goto fail;
            }
        }
    }
    for (int w = 0; w < nworkers; w++) {
        fy__l4_worker_t *wk = &l4->workers[w];
        wk->l4 = l4;
        wk->id = w;
        fy_list_init(&wk->tcp);
        fy_list_init(&wk->udp);
        wk->wls = fy_xcalloc(l4->nls ? l4->nls : 1, sizeof *wk->wls);
        for (size_t i = 0; i < l4->nls; i++) wk->wls[i].io.fd = -1;
    }
    for (size_t i = 0; i < l4->nls; i++) {
        const fy_l4_conf_t *c = l4->ls[i].conf;
        if (l4->ls[i].front) continue; /* the HTTP listener's socket accepts for it */
        /* a port another process (or listener) holds is refused unless shared on purpose;
           each listener's own sockets are bound before the next one's probe */
        if (!c->share && fy_sock_probe((const struct sockaddr *)&c->addr, c->addrlen,
                                       l4->ls[i].udp ? SOCK_DGRAM : SOCK_STREAM, c->name) < 0)
            goto fail;
        for (int w = 0; w < nworkers; w++) {
            int fd = l4->ls[i].udp
                         ? udp_bind((const struct sockaddr *)&c->addr, c->addrlen, c->name)
                         : fy_sock_listen((const struct sockaddr *)&c->addr, c->addrlen,
                                          (int)c->backlog, c->name);
            if (fd < 0) goto fail;
            l4->workers[w].wls[i].io.fd = fd;
        }
    }
    return l4;
fail:
    fy_l4_free(l4);
    return NULL;
}

void fy_l4_free(fy_l4_t *l4)
{
    if (!l4) return;
    for (int w = 0; w < l4->nworkers; w++) {
        fy__l4_worker_t *wk = &l4->workers[w];
        for (size_t i = 0; wk->wls && i < l4->nls; i++) {
            if (wk->wls[i].io.fd >= 0) close(wk->wls[i].io.fd);
            free(wk->wls[i].hash);
            free(wk->wls[i].cids);
        }
        free(wk->wls);
        free(wk->rx);
    }
    for (size_t i = 0; i < l4->nls; i++) {
        fy_tls_ctx_free(l4->ls[i].tls);
        free(l4->ls[i].sni_up);
        if (l4->ls[i].own_conf) free(l4->ls[i].own_conf->sni.v);
        free(l4->ls[i].own_conf);
    }
    free(l4->front_of);
    free(l4->ls);
    free(l4->workers);
    free(l4);
}

void fy_l4_print(const fy_l4_t *l4, FILE *out)
{
    for (size_t i = 0; i < l4->nls; i++) {
        const fy_l4_conf_t *c = l4->ls[i].conf;
        char a[80];
        if (l4->ls[i].front) continue;
        fy_sock_addr_str((const struct sockaddr *)&c->addr, a, sizeof a);
        fprintf(out, "ferry: relaying %s %s -> %s\n", mode_names[c->mode], a,
                c->to.target     ? c->to.target
                : c->to.upstream ? c->to.upstream
                                 : "(by SNI)");
    }
    fflush(out);
}

/* ---- routing ---- */

/* The target for a server name: exact names, then the longest wildcard, then "*", then the
 * listener's own target. NULL: none (close). */
const fy_l4_target_t *fy__l4_route(const fy__l4_listener_t *l, const char *sni, fy_upstream_t **up,
                                   bool *terminate)
{
    const fy_l4_sni_conf_t *sc = l->conf->sni.v;
    int best = -1, best_rank = 0;
    for (size_t j = 0; j < l->conf->sni.n; j++)
        for (size_t k = 0; k < sc[j].names.n; k++) {
            const char *p = sc[j].names.v[k];
            int rank;
            if (!strcmp(p, "*"))
                rank = 1;
            else if (p[0] == '*')
                rank = 2;
            else
                rank = 3;
            if (rank == 1 ? true : sni[0] && fy_l4_sni_match(p, sni)) {
                if (rank > best_rank) best = (int)j, best_rank = rank;
            }
        }
    if (best >= 0) {
        *up = l->sni_up[best];
        *terminate = sc[best].terminate;
        return &sc[best].to;
    }
    *terminate = false;
    if (l->conf->to.target || l->conf->to.upstream) {
        *up = l->up;
        return &l->conf->to;
    }
    return NULL;
}

/* ---- TCP sessions ---- */

/* The client end of a terminated session; its reads are tracked so that the relay can
   tell a drained socket from a short record (see pump). */
static fy_transport_t *tls_end_new(fy__l4_wl_t *wl, int fd)
{
    fy_transport_t *t = fy_tls_transport_new(wl->l->tls, fd);
    if (t) fy_tls_track_reads(t);
    return t;
}

static void set_events(tcp_sess_t *s, end_t *e, uint32_t ev)
{
    if (e->io.fd < 0 || e->events == ev) return;
    if (fy_io_set(s->wl->w->loop, &e->io, ev) == 0) e->events = ev;
}

static void sess_free(fy_defer_t *d)
{
    tcp_sess_t *s = d->data;
    free(s);
}

static void end_close(tcp_sess_t *s, end_t *e)
{
    if (e->io.fd < 0) return;
    set_events(s, e, 0);
    if (e->t && e->t != &e->sock) e->t->ops->destroy(e->t);
    e->t = NULL;
    close(e->io.fd);
    e->io.fd = -1;
}

static void dir_free(dir_t *d)
{
    if (d->pipe[0] >= 0) close(d->pipe[0]);
    if (d->pipe[1] >= 0) close(d->pipe[1]);
    d->pipe[0] = d->pipe[1] = -1;
    if (d->buf) fy_pool_put(d->pool, d->buf);
    d->buf = NULL;
}

/* The session's memory into ferry_l4_session_memory_bytes (now = 0 at the close). */
static void mem_sync(tcp_sess_t *s, bool closing)
{
    size_t now = 0;
    if (!closing) {
        now = sizeof *s + (s->up.buf ? s->up.pool->size : 0) +
              (s->down.buf ? s->down.pool->size : 0) + (s->peek ? s->wl->l->conf->peek_max * 2 : 0);
        if (s->c.t && s->c.t != &s->c.sock) now += fy_tls_transport_mem(s->c.t);
        if (s->o.t && s->o.t != &s->o.sock) now += fy_tls_transport_mem(s->o.t);
    }
    if (now == s->mem_held) return;
    fy_gauge_add(fy_cid_l4_sess_mem, (int64_t)now - (int64_t)s->mem_held);
    fy_gauge_raise(fy_cid_l4_sess_mem_max, now);
    s->mem_held = now;
}

static void sess_close(tcp_sess_t *s, const char *why)
{
    if (s->closed) return;
    s->closed = true;
    fy__l4_worker_t *w = s->wl->w;
    if (why) fy_debug("l4 %s: session closed: %s", s->wl->l->conf->name, why);
    fy_timer_stop(w->loop, &s->timer);
    if (s->up_grp && s->state == S_RELAY) fy_upstream_inflight(s->up_grp, w->id, s->server, -1);
    if ((s->state == S_PEEK || s->state == S_PROXY_HDR) && s->c.io.fd >= 0) {
        /* the peeked bytes are still unread: read them so that close sends a FIN, not RST */
        uint8_t junk[4096];
        for (int i = 0; i < 16 && recv(s->c.io.fd, junk, sizeof junk, MSG_DONTWAIT) > 0; i++) {
        }
    }
    mem_sync(s, true);
    end_close(s, &s->c);
    end_close(s, &s->o);
    dir_free(&s->up);
    dir_free(&s->down);
    free(s->peek);
    s->peek = NULL;
    fy_list_remove(&s->node);
    s->wl->nsessions--;
    w->nsessions--;
    fy_gauge_add(fy_cid_l4_sessions_active, -1);
    s->defer.cb = sess_free;
    s->defer.data = s;
    fy_defer(w->loop, &s->defer);
    fy__l4_session_gone(s->wl);
}

static void on_timer(fy_timer_t *t)
{
    tcp_sess_t *s = t->data;
    static const char *const what[] = {"PROXY header timeout", "peek timeout", "handshake timeout",
                                       "connect timeout", "idle timeout"};
    if (s->state == S_CONNECT) {
        if (s->up_grp)
            fy_upstream_report(s->up_grp, s->wl->w->id, s->server, false, s->wl->w->loop->now_ms);
        fy_warn("l4 %s: connect to origin timed out", s->wl->l->conf->name);
        end_close(s, &s->o);
        start_connect(s);
        return;
    }
    if (s->state != S_RELAY) fy_info("l4 %s: %s", s->wl->l->conf->name, what[s->state]);
    sess_close(s, what[s->state]);
}

/* PROXY header from a trusted front: peeked, then consumed exactly. */
static void do_proxy_hdr(tcp_sess_t *s)
{
    uint8_t b[FY_L4_PROXY_MAX];
    ssize_t n = recv(s->c.io.fd, b, sizeof b, MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        sess_close(s, "client closed before the PROXY header");
        return;
    }
    if (n < 0) return;
    struct sockaddr_storage src, dst;
    bool has;
    int r = fy_l4_proxy_parse(b, (size_t)n, &src, &dst, &has);
    if (r < 0) {
        fy_info("l4 %s: bad PROXY protocol header from a trusted front", s->wl->l->conf->name);
        sess_close(s, "bad PROXY header");
        return;
    }
    if (r == 0) return; /* wait for more (edge-triggered) */
    if (recv(s->c.io.fd, b, (size_t)r, 0) != r) {
        sess_close(s, "PROXY header read failed");
        return;
    }
    if (has) {
        s->peer = src;
        s->local = dst;
    }
    int mode = s->wl->l->conf->mode;
    if (mode == FY_L4_TLS_PASSTHROUGH) {
        s->state = S_PEEK;
        do_peek(s);
    } else if (mode == FY_L4_TLS_TERMINATE) {
        s->state = S_HANDSHAKE;
        s->terminate = true;
        s->c.t = tls_end_new(s->wl, s->c.io.fd);
        if (!s->c.t) {
            sess_close(s, "out of memory");
            return;
        }
        fy_timer_start(s->wl->w->loop, &s->timer, fy_tls_ctx_handshake_timeout(s->wl->l->tls));
        relay(s, true, true);
    } else {
        start_connect(s);
    }
}

static void do_peek(tcp_sess_t *s)
{
    const fy_l4_conf_t *c = s->wl->l->conf;
    if (!s->peek) s->peek = malloc(c->peek_max * 2);
    if (!s->peek) {
        sess_close(s, "out of memory");
        return;
    }
    ssize_t n = recv(s->c.io.fd, s->peek, c->peek_max, MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        sess_close(s, "client closed during the ClientHello");
        return;
    }
    if (n < 0) return;
    fy_l4_hello_t h;
    int r = fy_l4_hello_parse_records(s->peek, (size_t)n, c->peek_max, s->peek + c->peek_max, &h);
    if (r == FY_L4_HELLO_NEED_MORE) return;
    if (r == FY_L4_HELLO_ELIMIT) {
        fy_info("l4 %s: ClientHello larger than peek-max (%llu bytes): closed", c->name,
                (unsigned long long)c->peek_max);
        sess_close(s, "peek-max");
        return;
    }
    if (r < 0) {
        fy_info("l4 %s: not a TLS ClientHello: closed", c->name);
        sess_close(s, "not TLS");
        return;
    }
    free(s->peek);
    s->peek = NULL;
    bool term = false;
    s->to = fy__l4_route(s->wl->l, h.sni, &s->up_grp, &term);
    if (!s->to && s->fallback) { /* not in the map: HTTP serves it */
        int fd = s->c.io.fd;
        set_events(s, &s->c, 0);
        s->c.io.fd = -1;
        fy_l4_fallback_cb cb = s->fallback;
        void *ud = s->fallback_ud;
        struct sockaddr_storage peer = s->peer;
        sess_close(s, NULL);
        cb(ud, fd, (struct sockaddr *)&peer,
           peer.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
        return;
    }
    if (!s->to) {
        fy_info("l4 %s: no route for server name '%s': closed", c->name,
                h.sni_len ? h.sni : "(none)");
        sess_close(s, "no SNI route");
        return;
    }
    if (term) {
        s->terminate = true;
        s->state = S_HANDSHAKE;
        s->c.t = tls_end_new(s->wl, s->c.io.fd);
        if (!s->c.t) {
            sess_close(s, "out of memory");
            return;
        }
        set_events(s, &s->c, EPOLLIN);
        fy_timer_start(s->wl->w->loop, &s->timer, fy_tls_ctx_handshake_timeout(s->wl->l->tls));
        relay(s, true, true);
        return;
    }
    start_connect(s);
}

static void do_handshake(tcp_sess_t *s)
{
    int r = s->c.t->ops->handshake(s->c.t);
    if (r < 0) {
        sess_close(s, "TLS handshake failed");
        return;
    }
    if (r == 0) {
        set_events(s, &s->c, s->c.t->want & FY_WANT_WRITE ? EPOLLOUT : EPOLLIN);
        return;
    }
    start_connect(s);
}

static void on_origin_ready(tcp_sess_t *s)
{
    fy__l4_worker_t *w = s->wl->w;
    const fy_l4_conf_t *c = s->wl->l->conf;
    if (s->up_grp) fy_upstream_report(s->up_grp, w->id, s->server, true, w->loop->now_ms);
    if (c->proxy_protocol != FY_L4_PP_OFF) {
        s->pplen =
            fy_l4_proxy_build(c->proxy_protocol == FY_L4_PP_V1 ? 1 : 2, (struct sockaddr *)&s->peer,
                              (struct sockaddr *)&s->local, s->pphdr);
        /* a fresh socket's send buffer takes it whole */
        if (send(s->o.io.fd, s->pphdr, s->pplen, MSG_NOSIGNAL) != (ssize_t)s->pplen) {
            sess_close(s, "PROXY header write failed");
            return;
        }
    }
    s->state = S_RELAY;
    if (s->up_grp) fy_upstream_inflight(s->up_grp, w->id, s->server, 1); /* -1 in sess_close */
    s->splice = !s->terminate;
    fy_timer_start(w->loop, &s->timer, c->idle_timeout_ms);
    relay(s, true, true);
}

static void on_connected(tcp_sess_t *s)
{
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(s->o.io.fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0) err = errno;
    if (err == 0) {
        on_origin_ready(s);
        return;
    }
    if (s->up_grp)
        fy_upstream_report(s->up_grp, s->wl->w->id, s->server, false, s->wl->w->loop->now_ms);
    fy_warn("l4 %s: connect to origin failed: %s", s->wl->l->conf->name, strerror(err));
    end_close(s, &s->o);
    start_connect(s);
}

static void start_connect(tcp_sess_t *s)
{
    fy__l4_worker_t *w = s->wl->w;
    const fy_l4_conf_t *c = s->wl->l->conf;
    const struct sockaddr *addr;
    socklen_t alen;
    size_t nservers = s->up_grp ? fy_upstream_nservers(s->up_grp) : 1;
    if ((size_t)s->attempts >= nservers) {
        sess_close(s, "no origin reachable");
        return;
    }
    s->attempts++;
    if (s->up_grp) {
        s->server = fy_upstream_pick(s->up_grp, w->id, s->tried, w->loop->now_ms);
        if (s->server < 64) s->tried |= 1ull << s->server;
        const fy_upstream_server_conf_t *sv = fy_upstream_conf(s->up_grp)->servers.v;
        addr = (const struct sockaddr *)&sv[s->server].addr;
        alen = sv[s->server].addrlen;
    } else {
        addr = (const struct sockaddr *)&s->to->addr;
        alen = s->to->addrlen;
    }
    s->state = S_CONNECT;
    set_events(s, &s->c, 0);
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fy_error("l4 %s: socket: %s", c->name, strerror(errno));
        sess_close(s, "socket failed");
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    s->o.io.fd = fd;
    s->o.events = 0;
    fy_sock_transport_init(&s->o.sock, fd);
    s->o.t = &s->o.sock;
    fy_timer_start(w->loop, &s->timer, c->connect_timeout_ms);
    if (connect(fd, addr, alen) == 0) {
        on_origin_ready(s);
        return;
    }
    if (errno != EINPROGRESS) {
        if (s->up_grp) fy_upstream_report(s->up_grp, w->id, s->server, false, w->loop->now_ms);
        fy_warn("l4 %s: connect to origin failed: %s", c->name, strerror(errno));
        end_close(s, &s->o);
        start_connect(s);
        return;
    }
    set_events(s, &s->o, EPOLLOUT);
}

/* ---- relay ---- */

static bool pending(const tcp_sess_t *s, const dir_t *d)
{
    return d->inpipe > 0 || d->len > d->off;
}

static uint32_t want_ev(const fy_transport_t *t, uint32_t plain)
{
    if (!t->is_tls) return plain;
    return t->want & FY_WANT_WRITE ? EPOLLOUT : EPOLLIN;
}

/* The calling worker's free PLAIN_BUF buffers (a few: a direction holds one only while
   bytes are in flight). */
static fy_pool_t *plain_pool(void)
{
    static __thread fy_pool_t pool = {PLAIN_BUF, 16, NULL, 0};
    return &pool;
}

/* An empty buffer goes back to the pool: idle sessions hold no chunk. */
static void release_buf(dir_t *d)
{
    if (d->buf && d->len == d->off) {
        fy_pool_put(d->pool, d->buf);
        d->buf = NULL;
        d->len = d->off = 0;
    }
}

/* Plain sockets are read and written with recv/send rather than through the transport's
 * read/writev: the socket calls skip the VFS layer (iovec import, fsnotify), which is a
 * measurable share of a small relayed message. Same results as the transport ops. */
static ssize_t end_read(end_t *e, void *buf, size_t len)
{
    if (e->t->is_tls) return e->t->ops->read(e->t, buf, len);
    ssize_t n = recv(e->io.fd, buf, len, 0);
    if (n > 0) return n;
    if (n == 0) return FY_EEOF;
    return errno == EAGAIN || errno == EINTR ? 0 : -errno;
}

static ssize_t end_write(end_t *e, const void *buf, size_t len)
{
    if (e->t->is_tls) {
        struct iovec iov = {(void *)buf, len};
        return e->t->ops->writev(e->t, &iov, 1);
    }
    ssize_t n = send(e->io.fd, buf, len, MSG_NOSIGNAL);
    if (n >= 0) return n;
    return errno == EAGAIN || errno == EINTR ? 0 : -errno;
}

/* Move bytes src -> dst until something would block. Returns 1 on progress, 0 none, -1 on a
 * fatal error. */
static int pump(tcp_sess_t *s, dir_t *d, end_t *src, end_t *dst)
{
    int progress = 0;
    bool drained = false; /* a plain socket gave less than asked: wait for epoll */
    d->wait_src = d->wait_dst = 0;
    if (d->shut) return 0;
    for (;;) {
        if (pending(s, d)) {
            ssize_t n;
            bool from_pipe = d->inpipe > 0;
            if (from_pipe) {
                n = splice(d->pipe[0], NULL, dst->io.fd, NULL, d->inpipe,
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n < 0) n = errno == EAGAIN || errno == EINTR ? 0 : -errno;
            } else {
                n = end_write(dst, d->buf + d->off, d->len - d->off);
            }
            if (n < 0) return -1;
            if (n == 0) {
                d->wait_dst = want_ev(dst->t, EPOLLOUT);
                return progress;
            }
            progress = 1;
            fy_counter_add(s->wl->l->cid_bytes[d == &s->down], (uint64_t)n);
            if (from_pipe)
                d->inpipe -= (size_t)n;
            else if ((d->off += (size_t)n) == d->len)
                d->off = d->len = 0;
            continue;
        }
        if (d->eof) break;
        if (drained) { /* saves the read that would only say EAGAIN (level-triggered) */
            d->wait_src = EPOLLIN;
            release_buf(d);
            return progress;
        }
        ssize_t n;
        if (!d->use_pipe && !d->buf) {
            d->pool = s->splice ? plain_pool() : fy_chunk_pool();
            d->buf = fy_pool_get(d->pool);
        }
        if (d->use_pipe) {
            n = splice(src->io.fd, NULL, d->pipe[1], NULL, PIPE_CHUNK,
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (n == 0)
                n = FY_EEOF;
            else if (n < 0)
                n = errno == EAGAIN || errno == EINTR ? 0 : -errno;
        } else {
            n = end_read(src, d->buf, d->pool->size);
        }
        if (n == FY_EEOF) {
            d->eof = true;
            progress = 1;
            break;
        }
        if (n < 0) return -1;
        if (n == 0) {
            d->wait_src = want_ev(src->t, EPOLLIN);
            release_buf(d);
            return progress;
        }
        progress = 1;
        /* a short recv means the receive queue is empty; a short splice does not (the pipe
           runs out of slots, one per skb fragment): that one reads on until EAGAIN */
        /* ... nor does one after the peer's FIN came in: edge-triggered epoll will not report
           it again, so read on until recv says EOF */
        /* TLS: drained when the library's last socket read was short and it holds no
           record (saves the read that would only say EAGAIN, and the SSL_read around it) */
        drained = !d->use_pipe && !src->fin &&
                  (src->t->is_tls ? fy_tls_read_drained(src->t) : (size_t)n < d->pool->size);
        if (d->use_pipe) {
            d->inpipe = (size_t)n;
        } else {
            d->len = (size_t)n;
            /* bulk: zero-copy from now on (small messages cost less through the buffer) */
            if (s->splice && (size_t)n == d->pool->size &&
                pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) == 0)
                d->use_pipe = true;
        }
    }
    /* src ended and everything was written: pass the half-close on */
    if (d->eof && !pending(s, d) && !d->shut) {
        dst->t->ops->shutdown(dst->t);
        d->shut = true;
    }
    return progress;
}

/* Pump the directions an event concerns. */
static void relay(tcp_sess_t *s, bool up, bool down)
{
    if (s->state == S_HANDSHAKE) {
        do_handshake(s);
        return;
    }
    if (s->state != S_RELAY) return;
    int a = up ? pump(s, &s->up, &s->c, &s->o) : 0;
    if (a < 0) {
        sess_close(s, "client side error");
        return;
    }
    int b = down ? pump(s, &s->down, &s->o, &s->c) : 0;
    if (b < 0) {
        sess_close(s, "origin side error");
        return;
    }
    if (s->up.shut && s->down.shut) {
        sess_close(s, NULL);
        return;
    }
    if (a || b) fy_timer_start(s->wl->w->loop, &s->timer, s->wl->l->conf->idle_timeout_ms);
    mem_sync(s, false);
    /* Both ends are edge-triggered: a direction only stops reading on EAGAIN, on a short
       plain read (the receive queue was empty: later bytes raise a new edge) or when its
       destination blocks (then the mask changes, and EPOLL_CTL_MOD re-polls). That spares
       the kernel the re-poll a level-triggered item costs after every event. A TLS end is
       read until the library says WANT_READ (its socket said EAGAIN), so records the
       library holds are never left behind while the direction waits for its source; when
       it waits for its destination instead, that end's readiness resumes it and it reads
       the held records first. */
    uint32_t cm = s->up.wait_src | s->down.wait_dst, om = s->down.wait_src | s->up.wait_dst;
    /* a FIN that arrives with the last bytes must be seen: EPOLLRDHUP */
    if (cm & EPOLLIN) cm |= EPOLLRDHUP;
    if (om & EPOLLIN) om |= EPOLLRDHUP;
    if (cm) cm |= EPOLLET;
    if (om) om |= EPOLLET;
    set_events(s, &s->c, cm);
    set_events(s, &s->o, om);
}

/* With TLS on the client side a direction may wait for either readiness of either end (a
   TLS read can want writability, a TLS write readability): an event pumps the directions
   whose recorded wait (wait_src on their source end, wait_dst on their destination end) it
   answers, and only those. Pumping both on every event cost a read that only said EAGAIN on
   each side per relayed message. A hang-up or error pumps both. */
static void relay_tls(tcp_sess_t *s, bool client, uint32_t ev)
{
    if (s->state != S_RELAY || (ev & (EPOLLHUP | EPOLLERR))) {
        relay(s, true, true);
        return;
    }
    if (ev & EPOLLRDHUP) ev |= EPOLLIN;
    uint32_t up = client ? s->up.wait_src : s->up.wait_dst;
    uint32_t down = client ? s->down.wait_dst : s->down.wait_src;
    relay(s, (up & ev) != 0, (down & ev) != 0);
}

static void on_client_io(fy_io_t *io, uint32_t ev)
{
    tcp_sess_t *s = io->data;
    if (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s->c.fin = true;
    switch (s->state) {
    case S_PROXY_HDR:
        do_proxy_hdr(s);
        break;
    case S_PEEK:
        do_peek(s);
        break;
    default:
        if (!s->splice)
            relay_tls(s, true, ev);
        else
            relay(s, ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR),
                  ev & (EPOLLOUT | EPOLLHUP | EPOLLERR));
    }
}

static void on_origin_io(fy_io_t *io, uint32_t ev)
{
    tcp_sess_t *s = io->data;
    if (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s->o.fin = true;
    if (s->state == S_CONNECT)
        on_connected(s);
    else if (!s->splice)
        relay_tls(s, false, ev);
    else
        relay(s, ev & (EPOLLOUT | EPOLLHUP | EPOLLERR),
              ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR));
}

static void tcp_accept(fy__l4_wl_t *wl, int fd, const struct sockaddr *sa, socklen_t sl,
                       fy_l4_fallback_cb cb, void *ud)
{
    const fy_l4_conf_t *c = wl->l->conf;
    tcp_sess_t *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return;
    }
    s->wl = wl;
    s->fallback = cb;
    s->fallback_ud = ud;
    s->up.pipe[0] = s->up.pipe[1] = s->down.pipe[0] = s->down.pipe[1] = -1;
    s->c.io.fd = fd;
    s->c.io.cb = on_client_io;
    s->c.io.data = s;
    s->o.io.fd = -1;
    s->o.io.cb = on_origin_io;
    s->o.io.data = s;
    fy_sock_transport_init(&s->c.sock, fd);
    s->c.t = &s->c.sock;
    memcpy(&s->peer, sa, sl);
    socklen_t ll = sizeof s->local;
    getsockname(fd, (struct sockaddr *)&s->local, &ll);
    s->to = &c->to;
    s->up_grp = wl->l->up;
    fy_timer_init(&s->timer, on_timer, s);
    fy_list_insert_tail(&wl->w->tcp, &s->node);
    wl->nsessions++;
    wl->w->nsessions++;
    fy_counters_l4_open();
    fy_counter_inc(wl->l->cid_sessions);
    fy_loop_t *loop = wl->w->loop;
    if (c->n_accept_proxy && fy_l4_cidr_match(c->accept_proxy_cidrs, c->n_accept_proxy, sa)) {
        s->state = S_PROXY_HDR;
        fy_timer_start(loop, &s->timer, c->peek_timeout_ms);
        /* edge-triggered while peeking: data left in the socket must not spin the loop */
        set_events(s, &s->c, EPOLLIN | EPOLLET);
        do_proxy_hdr(s);
        return;
    }
    if (c->mode == FY_L4_TLS_PASSTHROUGH) {
        s->state = S_PEEK;
        fy_timer_start(loop, &s->timer, c->peek_timeout_ms);
        set_events(s, &s->c, EPOLLIN | EPOLLET);
        do_peek(s);
        return;
    }
    if (c->mode == FY_L4_TLS_TERMINATE) {
        s->state = S_HANDSHAKE;
        s->terminate = true;
        s->c.t = tls_end_new(wl, fd);
        if (!s->c.t) {
            s->c.t = &s->c.sock;
            sess_close(s, "out of memory");
            return;
        }
        fy_timer_start(loop, &s->timer, fy_tls_ctx_handshake_timeout(wl->l->tls));
        set_events(s, &s->c, EPOLLIN);
        return;
    }
    start_connect(s);
}

/* max-sessions of this listener on this worker */
static bool at_limit(void *ud)
{
    fy__l4_wl_t *wl = ud;
    const fy_l4_conf_t *c = wl->l->conf;
    if ((int64_t)wl->nsessions < c->max_sessions) return false;
    fy_warn("l4 %s: max-sessions (%lld) reached: not accepting", c->name,
            (long long)c->max_sessions);
    return true;
}

static void on_conn(void *ud, int fd, const struct sockaddr *sa, socklen_t sl)
{
    tcp_accept(ud, fd, sa, sl, NULL, NULL);
}

static const fy_accept_ops_t accept_ops = {"l4", at_limit, on_conn};

static void on_accept(fy_io_t *io, uint32_t ev)
{
    (void)ev;
    fy__l4_wl_t *wl = io->data;
    fy_accept_run(wl->w->loop, io, &wl->fdpause, &wl->paused, &accept_ops, wl);
}

/* The descriptor pause ended: poll the socket again unless another reason holds it. */
static void accept_resume(void *ud)
{
    fy__l4_wl_t *wl = ud;
    if (!wl->paused && !wl->w->draining && wl->io.fd >= 0) fy_io_set(wl->w->loop, &wl->io, EPOLLIN);
}

void fy__l4_session_gone(fy__l4_wl_t *wl)
{
    fy__l4_worker_t *w = wl->w;
    fy_accept_closed(w->loop, &wl->io, &wl->fdpause, &wl->paused,
                     !w->draining && (int64_t)wl->nsessions < wl->l->conf->max_sessions);
    if (w->draining && w->nsessions == 0 && w->on_idle) w->on_idle(w->ud);
}

int fy_l4_front(const fy_l4_t *l4, size_t listener)
{
    return listener < l4->nhttp ? l4->front_of[listener] : -1;
}

void fy_l4_adopt(fy_l4_t *l4, int w, int front, int fd, const struct sockaddr *sa, socklen_t salen,
                 fy_l4_fallback_cb cb, void *ud)
{
    tcp_accept(&l4->workers[w].wls[front], fd, sa, salen, cb, ud);
}

/* ---- worker ---- */

void fy_l4_worker_start(fy_l4_t *l4, int w, fy_loop_t *loop, void (*on_idle)(void *ud), void *ud)
{
    fy__l4_worker_t *wk = &l4->workers[w];
    wk->loop = loop;
    wk->on_idle = on_idle;
    wk->ud = ud;
    for (size_t i = 0; i < l4->nls; i++) {
        fy__l4_wl_t *wl = &wk->wls[i];
        wl->w = wk;
        wl->l = &l4->ls[i];
        wl->io.data = wl;
        fy_accept_pause_init(&wl->fdpause, loop, wl->l->conf->name, accept_resume, wl);
        if (wl->l->front) continue;
        wl->io.cb = wl->l->udp ? fy__l4_udp_on_read : on_accept;
        if (wl->l->udp) fy__l4_udp_init(wl);
        fy_io_set(loop, &wl->io, EPOLLIN);
    }
}

void fy_l4_worker_drain(fy_l4_t *l4, int w)
{
    fy__l4_worker_t *wk = &l4->workers[w];
    wk->draining = true;
    for (size_t i = 0; i < l4->nls; i++) {
        fy__l4_wl_t *wl = &wk->wls[i];
        fy_accept_pause_stop(&wl->fdpause);
        if (wl->io.fd >= 0) {
            fy_io_set(wk->loop, &wl->io, 0);
            close(wl->io.fd);
            wl->io.fd = -1;
        }
    }
    fy__l4_udp_close_all(wk); /* datagram flows have no end to wait for */
}

size_t fy_l4_worker_nsessions(const fy_l4_t *l4, int w)
{
    return l4->workers[w].nsessions;
}

void fy_l4_worker_close_all(fy_l4_t *l4, int w)
{
    fy__l4_worker_t *wk = &l4->workers[w];
    void (*cb)(void *) = wk->on_idle;
    wk->on_idle = NULL; /* the caller is stopping anyway */
    while (!fy_list_empty(&wk->tcp))
        sess_close(fy_container_of(wk->tcp.next, tcp_sess_t, node), "closing");
    fy__l4_udp_close_all(wk);
    fy_pool_drain(plain_pool()); /* on the worker's thread: its free relay buffers */
    wk->on_idle = cb;
}
