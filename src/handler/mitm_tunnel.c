/* Intercepting proxy tunnels: lifecycle, origin connect, the byte relay, and the forged-TLS
 * client side (peek decision, hello, hand-over to the nested h1/h2 codec).
 * Thread rules: a tunnel lives on one worker (t->loop) and is touched only from its callbacks. */
#include "handler/mitm_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"
#include "h1/h1_server.h"
#include "h2/h2_server.h"
#include "net/sock.h"
#include "tls/tls.h"

static const char *const state_names[] = {
    "peek",    "client hello", "origin handshake", "client handshake",
    "connect", "relay",        "socks5 handshake", "socks5 connect"};

/* ---- tunnel lifecycle ---- */

static void tunnel_free_cb(fy_defer_t *d)
{
    fy__mitm_tunnel_t *t = d->data;
    fy_http_ctx_t *ctx = t->ctx;
    free(t->c2o);
    free(t->info);
    free(t);
    if (ctx->on_conn_closed) ctx->on_conn_closed(ctx);
}

void fy__mitm_tunnel_close(fy__mitm_tunnel_t *t)
{
    if (t->closed) return;
    t->closed = true;
    fy_resolve_cancel(&t->rq);
    fy_timer_stop(t->loop, &t->timer);
    if (t->relaying) {
        fy_tio_relay_stop(&t->relay);
        fy_tio_close(&t->ort.t);
        t->relaying = false;
    }
    if (t->ct) {
        fy_tio_close(t->ct);
        t->ct = NULL;
    }
    if (t->cio.fd >= 0) {
        fy_io_set(t->loop, &t->cio, 0);
        close(t->cio.fd);
        t->cio.fd = -1;
    }
    if (t->oio.fd >= 0) {
        fy_io_set(t->loop, &t->oio, 0);
        close(t->oio.fd);
        t->oio.fd = -1;
    }
    fy_tls_mitm_ssl_free(t->cssl);
    fy_tls_mitm_ssl_free(t->ossl);
    t->cssl = t->ossl = NULL;
    fy_list_remove(&t->node.link);
    t->ctx->nconns--;
    t->defer.cb = tunnel_free_cb;
    t->defer.data = t;
    fy_defer(t->loop, &t->defer);
}

static void node_close(fy_conn_node_t *n)
{
    fy__mitm_tunnel_close(fy_container_of(n, fy__mitm_tunnel_t, node));
}

static void on_timer(fy_timer_t *tm)
{
    fy__mitm_tunnel_t *t = tm->data;
    if (t->state == FY__MITM_S_SOCKS_CONNECT) {
        fy__mitm_socks_reply(t, ETIMEDOUT, "connect timeout");
        return;
    }
    fy_info("mitm: tunnel to %s:%d: %s timeout", t->host, t->port, state_names[t->state]);
    if (t->state == FY__MITM_S_FINISH)
        fy__mitm_pin_fail(t->m, t->info ? t->info->name : t->host, t->loop->now_ms);
    fy__mitm_tunnel_close(t);
}

static int connect_addr(fy__mitm_tunnel_t *t, const struct sockaddr *sa, socklen_t len,
                        const char **err)
{
    if (fy__mitm_loops(t->m, sa)) {
        *err = "the tunnel is addressed to this proxy itself";
        t->oerrno = ELOOP;
        return -1;
    }
    if (fy__mitm_dest_check(t->m->dest, t->host, t->port, sa, t->why, sizeof t->why) ==
        FY_DEST_DENY) {
        char a[64];
        fy_warn("mitm: client %s: %s", fy_sock_host_str((struct sockaddr *)&t->remote, a, sizeof a),
                t->why);
        *err = t->why;
        t->oerrno = EACCES;
        return -1;
    }
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        t->oerrno = errno;
        *err = "cannot make a socket";
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, sa, len) < 0 && errno != EINPROGRESS) {
        t->oerrno = errno;
        *err = strerror(errno);
        close(fd);
        return -1;
    }
    t->oio.fd = fd;
    return 0;
}

static void origin_resolved(fy_resolve_req_t *q, const struct sockaddr *sa, socklen_t len,
                            const char *err)
{
    fy__mitm_tunnel_t *t = q->data;
    t->oerrno = 0;
    if (sa && connect_addr(t, sa, len, &err) == 0) err = NULL;
    t->connected(t, err);
}

/* Resolve the tunnel's host (off this thread unless literal or cached) and start a
 * non-blocking connect; `connected` gets the outcome (maybe before this returns). */
void fy__mitm_connect_origin(fy__mitm_tunnel_t *t,
                             void (*connected)(fy__mitm_tunnel_t *t, const char *err))
{
    t->connected = connected;
    t->rq.cb = origin_resolved;
    t->rq.data = t;
    int r = fy_resolve(t->m->resolver, t->ctx->worker_id, t->loop, t->host, t->port, &t->rq);
    if (r == 0) return; /* origin_resolved comes later */
    if (r < 0) {
        connected(t, t->rq.err);
        return;
    }
    origin_resolved(&t->rq, (struct sockaddr *)&t->rq.addr, t->rq.addrlen, NULL);
}

/* ---- relay (plain bytes inside CONNECT, passthrough, pinned hosts) ---- */

static void relay_event(fy_tio_relay_t *r, bool done, int err)
{
    fy__mitm_tunnel_t *t = r->data;
    (void)err;
    if (done)
        fy__mitm_tunnel_close(t);
    else
        fy_timer_start(t->loop, &t->timer, t->m->conf->tunnel_idle_ms);
}

static void relay_connected(fy__mitm_tunnel_t *t, const char *err)
{
    if (err) {
        fy_info("mitm: relay to %s:%d: %s", t->host, t->port, err);
        fy__mitm_tunnel_close(t);
        return;
    }
    t->state = FY__MITM_S_RELAY_CONNECT;
    fy_io_set(t->loop, &t->cio, 0);
    fy_io_set(t->loop, &t->oio, EPOLLOUT);
    fy_timer_start(t->loop, &t->timer, t->m->conf->connect_timeout_ms);
}

static void relay_start_connected(fy__mitm_tunnel_t *t)
{
    t->state = FY__MITM_S_RELAY;
    fy_io_set(t->loop, &t->cio, 0);
    fy_io_set(t->loop, &t->oio, 0);
    if (!t->ct) { /* else a CONNECT stream's, set by the caller */
        fy_tio_fd_init(&t->crt, t->loop, t->cio.fd);
        t->ct = &t->crt.t;
    }
    fy_tio_fd_init(&t->ort, t->loop, t->oio.fd);
    t->cio.fd = t->oio.fd = -1;
    t->relaying = true;
    t->relay.event = relay_event;
    t->relay.data = t;
    fy_timer_start(t->loop, &t->timer, t->m->conf->tunnel_idle_ms);
    fy_tio_relay_start(&t->relay, t->ct, &t->ort.t, FY__MITM_RELAY_BUF, t->c2o, t->c2o_len);
}

void fy__mitm_start_relay(fy__mitm_tunnel_t *t)
{
    fy_counter_inc(fy_cid_intercept_flows[FY_CINT_PASSTHROUGH]);
    if (t->oio.fd >= 0) { /* connected before the 200 */
        relay_start_connected(t);
        return;
    }
    fy_io_set(t->loop, &t->cio, 0); /* quiet while the name resolves */
    fy_timer_start(t->loop, &t->timer, t->m->conf->connect_timeout_ms);
    fy__mitm_connect_origin(t, relay_connected);
}

/* ---- interception ---- */

static void hand_over(fy__mitm_tunnel_t *t)
{
    int fd = t->cio.fd;
    fy_io_set(t->loop, &t->cio, 0);
    t->cio.fd = -1;
    if (t->info) fy__mitm_tls_describe(t->cssl, false, &t->info->tls.client);
    fy_mint_handed_over(t->cssl);
    fy_transport_t *tr = fy_tls_transport_from_ssl(t->cssl, fd);
    t->cssl = NULL;
    fy__mitm_tunnel_info_t *info = t->info;
    t->info = NULL;
    fy_http_ctx_t *ctx = t->ctx;
    struct sockaddr_storage remote = t->remote;
    fy__mitm_tunnel_close(t);
    if (!tr) {
        close(fd);
        free(info);
        return;
    }
    if (tr->alpn && strcmp(tr->alpn, "h2") == 0)
        fy_h2_conn_start_tunnel(ctx, fd, tr, (struct sockaddr *)&remote, sizeof remote, info, free);
    else
        fy_h1_conn_start(ctx, fd, tr, (struct sockaddr *)&remote, sizeof remote, info, free);
}

void fy__mitm_drive_client(fy__mitm_tunnel_t *t)
{
    unsigned want = 0;
    int alert = 0;
    int r = fy_mint_handshake(t->cssl, &want, &alert);
    if (r == FY_MINT_HELLO && t->state == FY__MITM_S_HELLO) {
        fy__mitm_probe_start(t);
        return;
    }
    if (r == 0) {
        fy_io_set(t->loop, &t->cio, want & FY_WANT_WRITE ? EPOLLOUT : EPOLLIN);
        return;
    }
    if (r == 1 && t->state == FY__MITM_S_FINISH) {
        hand_over(t);
        return;
    }
    if (t->state == FY__MITM_S_FINISH) {
        /* unknown_ca, bad_certificate, certificate_unknown: the client does not trust our CA,
           which a new user has to be told (at info, the line drowned among the others) */
        const char *why = fy_tls_mitm_refusal_alert(alert);
        char a[64];
        fy_sock_host_str((const struct sockaddr *)&t->remote, a, sizeof a);
        if (why)
            fy_warn("mitm: client %s refused the certificate forged for %s (TLS alert %s): it "
                    "does not trust Ferry's CA %s; `ferry ca export` writes it and prints how "
                    "to trust it",
                    a, t->info->name, why, fy_ca_pem_path(t->m->ca));
        else
            fy_info("mitm: client %s refused the certificate forged for %s (TLS alert %d)", a,
                    t->info->name, alert);
        fy__mitm_pin_fail(t->m, t->info->name, t->loop->now_ms);
        if (strcmp(t->info->name, t->host) != 0) fy__mitm_pin_fail(t->m, t->host, t->loop->now_ms);
    } else {
        fy_info("mitm: TLS from the client to %s:%d failed before the hello", t->host, t->port);
    }
    fy__mitm_tunnel_close(t);
}

bool fy__mitm_relays(fy__mitm_tunnel_t *t, unsigned char first)
{
    fy__mitm_t *m = t->m;
    bool pass = fy_host_list_match(&m->conf->passthrough, t->host);
    if (!pass && first == 0x16 && m->hooks.on_tunnel)
        pass = m->hooks.on_tunnel(t->host, t->port, m->hooks.ud) == FERRY_TUNNEL_PASS;
    bool pin = !pass && fy__mitm_pinned(m, t->host, t->loop->now_ms);
    if (t->transparent && !t->host[0] && (pass || pin)) pass = pin = false; /* no name yet */
    if (first != 0x16 || t->c2o_len || pass || pin) {
        if (pin) fy_info("mitm: %s:%d passed through (pinning bypass)", t->host, t->port);
        return true;
    }
    return false;
}

void fy__mitm_intercept(fy__mitm_tunnel_t *t)
{
    t->cssl = fy_mint_ssl_new(t->m->mint, t->cio.fd);
    if (!t->cssl) {
        fy__mitm_tunnel_close(t);
        return;
    }
    fy_counter_inc(fy_cid_intercept_flows[FY_CINT_DECRYPTED]);
    t->state = FY__MITM_S_HELLO;
    fy__mitm_drive_client(t);
}

void fy__mitm_decide(fy__mitm_tunnel_t *t, unsigned char first)
{
    if (t->transparent && first != 0x16) {
        fy__mitm_transparent_http(t);
        return;
    }
    if (fy__mitm_relays(t, first))
        fy__mitm_start_relay(t);
    else
        fy__mitm_intercept(t);
}

static void on_client(fy_io_t *io, uint32_t ev)
{
    fy__mitm_tunnel_t *t = io->data;
    if (t->closed) return;
    switch (t->state) {
    case FY__MITM_S_PEEK: {
        unsigned char b;
        ssize_t n = recv(t->cio.fd, &b, 1, MSG_PEEK);
        if (n == 1) {
            fy__mitm_decide(t, b);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR) || (ev & (EPOLLERR | EPOLLHUP))) {
            fy__mitm_tunnel_close(t);
        }
        return;
    }
    case FY__MITM_S_HELLO:
    case FY__MITM_S_FINISH:
        fy__mitm_drive_client(t);
        return;
    case FY__MITM_S_SOCKS:
        fy__mitm_socks_read(t);
        return;
    default:
        return;
    }
}

static void on_origin(fy_io_t *io, uint32_t ev)
{
    fy__mitm_tunnel_t *t = io->data;
    if (t->closed) return;
    if (t->state == FY__MITM_S_PROBE) {
        fy__mitm_probe_drive(t);
    } else if (t->state == FY__MITM_S_RELAY_CONNECT) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(t->oio.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr || (ev & EPOLLERR)) {
            fy_info("mitm: relay to %s:%d: %s", t->host, t->port,
                    strerror(soerr ? soerr : ECONNREFUSED));
            fy__mitm_tunnel_close(t);
            return;
        }
        relay_start_connected(t);
    } else if (t->state == FY__MITM_S_SOCKS_CONNECT) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(t->oio.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (!soerr && (ev & (EPOLLERR | EPOLLHUP))) soerr = ECONNREFUSED;
        fy__mitm_socks_reply(t, soerr, soerr ? strerror(soerr) : NULL);
    }
}

fy__mitm_tunnel_t *fy__mitm_tunnel_new(fy__mitm_t *m, fy_http_ctx_t *ctx, int fd,
                                       const struct sockaddr *sa, socklen_t salen)
{
    fy__mitm_tunnel_t *t = fy_xcalloc(1, sizeof *t);
    t->m = m;
    t->ctx = ctx;
    t->loop = ctx->loop;
    memcpy(&t->remote, sa, salen < sizeof t->remote ? salen : sizeof t->remote);
    t->c2o = fy_xmalloc(FY__MITM_RELAY_BUF);
    t->cio.fd = fd;
    t->cio.cb = on_client;
    t->cio.data = t;
    t->oio.fd = -1;
    t->oio.cb = on_origin;
    t->oio.data = t;
    t->node.drain = node_close;
    t->node.close = node_close;
    fy_list_insert_tail(&ctx->conns, &t->node.link);
    ctx->nconns++;
    fy_timer_init(&t->timer, on_timer, t);
    return t;
}
