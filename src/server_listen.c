/* Slots and accepting: the listening sockets of every address (bound on the main thread, one
 * per worker), a worker's listener start and stop, the accept loop with limits.connections and
 * the descriptor pause, and the conn-closed hook that resumes it. Sockets are bound on the
 * main thread; everything else runs on the listener's worker. */
#include "server_int.h"
#include "policies.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"
#include "h1/h1_server.h"
#include "h3/h3_server.h"
#include "handler/mitm.h"
#include "l4/l4_proxy.h"
#include "net/net_cidr.h"
#include "net/sock.h"

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
void slot_close_unstarted(fy_server_t *s, slot_t *sl)
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
        fy_list_init(&sl->wl[w].pp_pending);
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
int gen_bind(fy_server_t *s, fy_gen_t *g)
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

/* Conns of `wl` on this worker, every generation (limits.connections). */
static size_t wl_nconns(const worker_listener_t *wl)
{
    size_t n = (wl->cur ? wl->cur->ctx.nconns : 0) + wl->npending;
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

/* limits.connections, counted over every generation's conns of this listener */
static bool at_limit(void *ud)
{
    worker_listener_t *wl = ud;
    const fy_http_limits_t *lim = wl->cur->ctx.limits;
    if ((int64_t)wl_nconns(wl) < lim->max_connections) return false;
    fy_warn("listener %s: limits.connections (%lld) reached", wl->slot->address,
            (long long)lim->max_connections);
    fy_counter_inc(fy_cid_limit_connections);
    return true;
}

/* A connection (the PROXY header's client address in `sa` when there was one) goes to its
 * codec: connection-rate limits, then the `sni:` map, SOCKS5, transparent or HTTP. */
static void dispatch(worker_listener_t *wl, int fd, const struct sockaddr *sa, socklen_t sl)
{
    fy_http_ctx_t *ctx = &wl->cur->ctx;
    fy_handler_t *mitm = wl->cur->gen->mitm;
    if (ctx->filters && !fy_policies_admit_connection(ctx->filters, sa, wl->w->loop.now_ms)) {
        close(fd); /* client-limits.connection-rate (counted there) */
        return;
    }
    if (wl->l4_front >= 0)
        fy_l4_adopt(wl->w->srv->l4, wl->w->id, wl->l4_front, fd, sa, sl, l4_fallback, wl);
    else if (wl->slot->kind == FY_LISTENER_SOCKS5)
        fy_mitm_socks5_accept(mitm, ctx, fd, sa, sl);
    else if (wl->slot->kind == FY_LISTENER_TRANSPARENT)
        fy_mitm_transparent_accept(mitm, ctx, fd, sa, sl);
    else
        fy_h1_conn_accept(ctx, fd, sa, sl);
}

/* ---- `accept-proxy`: the PROXY protocol header from a trusted front ----
 * Read before anything else (TLS, HTTP, SOCKS5): peeked, edge-triggered, so that only the
 * header's own bytes are consumed and the codec finds the socket as the client left it. */

typedef struct pp_conn {
    fy_io_t io;
    fy_timer_t timer;
    worker_listener_t *wl;
    fy_list_t link; /* wl->pp_pending */
    struct sockaddr_storage peer;
    socklen_t peerlen;
} pp_conn_t;

/* Forget `p` and its timer; `fd` stays open when keep_fd (it went to a codec). */
static void pp_free(pp_conn_t *p, bool keep_fd)
{
    worker_listener_t *wl = p->wl;
    fy_timer_stop(&wl->w->loop, &p->timer);
    fy_io_set(&wl->w->loop, &p->io, 0);
    if (!keep_fd) close(p->io.fd);
    fy_list_remove(&p->link);
    wl->npending--;
    free(p);
}

/* Close a front's connection that did not send a valid header, with the named line. */
static void pp_fail(pp_conn_t *p, const char *why)
{
    char a[64];
    fy_sock_host_str((const struct sockaddr *)&p->peer, a, sizeof a);
    fy_warn("listener %s: accept-proxy: %s from %s: closed", p->wl->slot->name, why, a);
    worker_listener_t *wl = p->wl;
    pp_free(p, false);
    if (wl->cur) on_conn_closed(&wl->cur->ctx);
}

static void pp_read(pp_conn_t *p, uint32_t ev)
{
    uint8_t b[FY_L4_PROXY_MAX];
    ssize_t n = recv(p->io.fd, b, sizeof b, MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        pp_fail(p, "connection closed before the PROXY header");
        return;
    }
    if (n < 0) return;
    struct sockaddr_storage src, dst;
    bool has = false;
    int r = fy_l4_proxy_parse(b, (size_t)n, &src, &dst, &has);
    if (r == 0 && (size_t)n == sizeof b) r = -1;
    if (r < 0) {
        pp_fail(p, "bad PROXY protocol header");
        return;
    }
    if (r == 0 && (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        pp_fail(p, "connection closed before the PROXY header");
        return;
    }
    if (r == 0) return; /* more to come (edge-triggered: the next bytes wake us) */
    if (recv(p->io.fd, b, (size_t)r, 0) != r) {
        pp_fail(p, "PROXY header read failed");
        return;
    }
    worker_listener_t *wl = p->wl;
    int fd = p->io.fd;
    struct sockaddr_storage peer = p->peer;
    socklen_t plen = p->peerlen;
    if (has) { /* v1 UNKNOWN / v2 LOCAL (health checks): the front's own address stays */
        peer = src;
        plen = src.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    }
    pp_free(p, true);
    if (!wl->cur || wl->w->draining) {
        close(fd);
        return;
    }
    dispatch(wl, fd, (const struct sockaddr *)&peer, plen);
    /* the pending slot is free again: a listener paused at limits.connections (which counts
     * pending conns) rechecks, as if a conn had closed (dispatch may have refused this one) */
    if (wl->paused && wl->cur) on_conn_closed(&wl->cur->ctx);
}

static void pp_on_io(fy_io_t *io, uint32_t ev)
{
    pp_read(io->data, ev);
}

static void pp_on_timer(fy_timer_t *t)
{
    pp_fail(t->data, "no PROXY protocol header within limits.header-timeout");
}

static void pp_start(worker_listener_t *wl, int fd, const struct sockaddr *sa, socklen_t sl)
{
    pp_conn_t *p = fy_xcalloc(1, sizeof *p);
    p->wl = wl;
    memcpy(&p->peer, sa, sl < sizeof p->peer ? sl : sizeof p->peer);
    p->peerlen = sl;
    p->io.fd = fd;
    p->io.cb = pp_on_io;
    p->io.data = p;
    fy_timer_init(&p->timer, pp_on_timer, p);
    fy_list_insert_tail(&wl->pp_pending, &p->link);
    wl->npending++;
    fy_timer_start(&wl->w->loop, &p->timer, wl->cur->ctx.limits->header_timeout_ms);
    if (fy_io_set(&wl->w->loop, &p->io, EPOLLIN | EPOLLRDHUP | EPOLLET) < 0) {
        pp_fail(p, "cannot watch the connection");
        return;
    }
    pp_read(p, 0);
}

/* The listener stops (drain, reload): connections still sending their header are closed. */
static void pp_close_all(worker_listener_t *wl)
{
    while (!fy_list_empty(&wl->pp_pending))
        pp_free(fy_container_of(wl->pp_pending.next, pp_conn_t, link), false);
}

static void on_conn(void *ud, int fd, const struct sockaddr *sa, socklen_t sl)
{
    worker_listener_t *wl = ud;
    const fy_listener_conf_t *lc = wl->cur->lc;
    if (lc->n_accept_proxy && fy_net_cidr_match(lc->accept_proxy_cidrs, lc->n_accept_proxy, sa))
        pp_start(wl, fd, sa, sl);
    else
        dispatch(wl, fd, sa, sl);
}

static const fy_accept_ops_t accept_ops = {"listener", at_limit, on_conn};

static void on_accept(fy_io_t *io, uint32_t ev)
{
    (void)ev;
    worker_listener_t *wl = io->data;
    if (!wl->cur) return;
    fy_accept_run(&wl->w->loop, io, &wl->fdpause, &wl->paused, &accept_ops, wl);
}

void on_conn_closed(fy_http_ctx_t *ctx)
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
    fy_accept_closed(&w->loop, &wl->io, &wl->fdpause, &wl->paused,
                     wl->paused && (int64_t)wl_nconns(wl) < wl->cur->ctx.limits->max_connections);
}

/* The descriptor pause ended: poll the listening socket again unless something else holds
 * it (limits.connections, the drain). */
static void accept_resume(void *ud)
{
    worker_listener_t *wl = ud;
    if (!wl->paused && !wl->w->draining && !wl->removed && wl->io.fd >= 0)
        fy_io_set(&wl->w->loop, &wl->io, EPOLLIN);
}

void listener_start(struct fy_worker *w, worker_listener_t *wl)
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
void listener_stop(struct fy_worker *w, worker_listener_t *wl)
{
    fy_accept_pause_stop(&wl->fdpause);
    pp_close_all(wl);
    if (wl->io.fd >= 0) {
        fy_io_set(&w->loop, &wl->io, 0);
        close(wl->io.fd);
        wl->io.fd = -1;
    }
    if (wl->quic) fy_h3_endpoint_drain(wl->quic);
}
