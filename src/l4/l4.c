/* Layer-4 listeners and TCP sessions (the byte relay is l4_relay.c). UDP and QUIC sessions are in
 * l4_udp.c. */
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
#include "l4/l4_tcp.h"
#include "net/listener_conf.h"
#include "net/sock.h"
#include "tls/tls.h"

static fy_transport_t *tls_end_new(fy__l4_wl_t *wl, int fd);
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

void fy__l4_set_events(tcp_sess_t *s, end_t *e, uint32_t ev)
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
    fy__l4_set_events(s, e, 0);
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
void fy__l4_mem_sync(tcp_sess_t *s, bool closing)
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

void fy__l4_sess_close(tcp_sess_t *s, const char *why)
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
    fy__l4_mem_sync(s, true);
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
    fy__l4_sess_close(s, what[s->state]);
}

/* PROXY header from a trusted front: peeked, then consumed exactly. */
static void do_proxy_hdr(tcp_sess_t *s)
{
    uint8_t b[FY_L4_PROXY_MAX];
    ssize_t n = recv(s->c.io.fd, b, sizeof b, MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        fy__l4_sess_close(s, "client closed before the PROXY header");
        return;
    }
    if (n < 0) return;
    struct sockaddr_storage src, dst;
    bool has;
    int r = fy_l4_proxy_parse(b, (size_t)n, &src, &dst, &has);
    if (r < 0) {
        fy_info("l4 %s: bad PROXY protocol header from a trusted front", s->wl->l->conf->name);
        fy__l4_sess_close(s, "bad PROXY header");
        return;
    }
    if (r == 0) return; /* wait for more (edge-triggered) */
    if (recv(s->c.io.fd, b, (size_t)r, 0) != r) {
        fy__l4_sess_close(s, "PROXY header read failed");
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
            fy__l4_sess_close(s, "out of memory");
            return;
        }
        fy_timer_start(s->wl->w->loop, &s->timer, fy_tls_ctx_handshake_timeout(s->wl->l->tls));
        fy__l4_relay(s, true, true);
    } else {
        start_connect(s);
    }
}

static void do_peek(tcp_sess_t *s)
{
    const fy_l4_conf_t *c = s->wl->l->conf;
    if (!s->peek) s->peek = malloc(c->peek_max * 2);
    if (!s->peek) {
        fy__l4_sess_close(s, "out of memory");
        return;
    }
    ssize_t n = recv(s->c.io.fd, s->peek, c->peek_max, MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        fy__l4_sess_close(s, "client closed during the ClientHello");
        return;
    }
    if (n < 0) return;
    fy_l4_hello_t h;
    int r = fy_l4_hello_parse_records(s->peek, (size_t)n, c->peek_max, s->peek + c->peek_max, &h);
    if (r == FY_L4_HELLO_NEED_MORE) return;
    if (r == FY_L4_HELLO_ELIMIT) {
        fy_info("l4 %s: ClientHello larger than peek-max (%llu bytes): closed", c->name,
                (unsigned long long)c->peek_max);
        fy__l4_sess_close(s, "peek-max");
        return;
    }
    if (r < 0) {
        fy_info("l4 %s: not a TLS ClientHello: closed", c->name);
        fy__l4_sess_close(s, "not TLS");
        return;
    }
    free(s->peek);
    s->peek = NULL;
    bool term = false;
    s->to = fy__l4_route(s->wl->l, h.sni, &s->up_grp, &term);
    if (!s->to && s->fallback) { /* not in the map: HTTP serves it */
        int fd = s->c.io.fd;
        fy__l4_set_events(s, &s->c, 0);
        s->c.io.fd = -1;
        fy_l4_fallback_cb cb = s->fallback;
        void *ud = s->fallback_ud;
        struct sockaddr_storage peer = s->peer;
        fy__l4_sess_close(s, NULL);
        cb(ud, fd, (struct sockaddr *)&peer,
           peer.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
        return;
    }
    if (!s->to) {
        fy_info("l4 %s: no route for server name '%s': closed", c->name,
                h.sni_len ? h.sni : "(none)");
        fy__l4_sess_close(s, "no SNI route");
        return;
    }
    if (term) {
        s->terminate = true;
        s->state = S_HANDSHAKE;
        s->c.t = tls_end_new(s->wl, s->c.io.fd);
        if (!s->c.t) {
            fy__l4_sess_close(s, "out of memory");
            return;
        }
        fy__l4_set_events(s, &s->c, EPOLLIN);
        fy_timer_start(s->wl->w->loop, &s->timer, fy_tls_ctx_handshake_timeout(s->wl->l->tls));
        fy__l4_relay(s, true, true);
        return;
    }
    start_connect(s);
}

void fy__l4_handshake(tcp_sess_t *s)
{
    int r = s->c.t->ops->handshake(s->c.t);
    if (r < 0) {
        fy__l4_sess_close(s, "TLS handshake failed");
        return;
    }
    if (r == 0) {
        fy__l4_set_events(s, &s->c, s->c.t->want & FY_WANT_WRITE ? EPOLLOUT : EPOLLIN);
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
            fy__l4_sess_close(s, "PROXY header write failed");
            return;
        }
    }
    s->state = S_RELAY;
    if (s->up_grp) fy_upstream_inflight(s->up_grp, w->id, s->server, 1); /* -1 in sess_close */
    s->splice = !s->terminate;
    fy_timer_start(w->loop, &s->timer, c->idle_timeout_ms);
    fy__l4_relay(s, true, true);
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
        fy__l4_sess_close(s, "no origin reachable");
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
    fy__l4_set_events(s, &s->c, 0);
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fy_error("l4 %s: socket: %s", c->name, strerror(errno));
        fy__l4_sess_close(s, "socket failed");
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
    fy__l4_set_events(s, &s->o, EPOLLOUT);
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
            fy__l4_relay_tls(s, true, ev);
        else
            fy__l4_relay(s, ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR),
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
        fy__l4_relay_tls(s, false, ev);
    else
        fy__l4_relay(s, ev & (EPOLLOUT | EPOLLHUP | EPOLLERR),
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
        fy__l4_set_events(s, &s->c, EPOLLIN | EPOLLET);
        do_proxy_hdr(s);
        return;
    }
    if (c->mode == FY_L4_TLS_PASSTHROUGH) {
        s->state = S_PEEK;
        fy_timer_start(loop, &s->timer, c->peek_timeout_ms);
        fy__l4_set_events(s, &s->c, EPOLLIN | EPOLLET);
        do_peek(s);
        return;
    }
    if (c->mode == FY_L4_TLS_TERMINATE) {
        s->state = S_HANDSHAKE;
        s->terminate = true;
        s->c.t = tls_end_new(wl, fd);
        if (!s->c.t) {
            s->c.t = &s->c.sock;
            fy__l4_sess_close(s, "out of memory");
            return;
        }
        fy_timer_start(loop, &s->timer, fy_tls_ctx_handshake_timeout(wl->l->tls));
        fy__l4_set_events(s, &s->c, EPOLLIN);
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
        fy__l4_sess_close(fy_container_of(wk->tcp.next, tcp_sess_t, node), "closing");
    fy__l4_udp_close_all(wk);
    fy_pool_drain(fy__l4_plain_pool()); /* on the worker's thread: its free relay buffers */
    wk->on_idle = cb;
}
