/* Intercepting proxy h2-CONNECT bridge: a CONNECT stream joined to a tunnel by a socketpair.
 * Thread rules: the bridge lives on its exchange's worker; freed with the exchange's arena. */
#include "handler/mitm_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "http/exchange_tio.h"

/* ---- CONNECT over HTTP/2 to the proxy ----
 * The stream's DATA are the tunnel's bytes. A socketpair joins the stream to the ordinary
 * fd-based tunnel code (peek, probe, forged TLS, nested codec, relay): this side pumps the
 * request DATA into the pair and what comes out of it into response DATA, with one buffer in
 * flight each way (flow control is the h2 windows' and the socket buffers'). */
typedef struct h2tun {
    fy_exchange_t *ex;
    fy_loop_t *loop;
    fy_io_t io;     /* our end of the pair */
    const char *in; /* request DATA not yet written into the pair (codec's buffer) */
    size_t in_len, in_off;
    bool in_end, in_shut;   /* the client ended its side / we shut the pair's write side */
    bool sending, sock_eof; /* a response slice is with the codec / the tunnel side closed */
    bool stopped;
    int busy;  /* inside h2tun_on_io: the exchange may end (arena reset) under us */
    bool gone; /* it did: free when the callback unwinds */
    char out[FY__MITM_RELAY_BUF];
} h2tun_t;

static void h2tun_on_body(fy_exchange_t *ex, const char *p, size_t n, bool end);

static void h2tun_events(h2tun_t *h)
{
    uint32_t ev = 0;
    if (!h->sending && !h->sock_eof) ev |= EPOLLIN;
    if (h->in_off < h->in_len) ev |= EPOLLOUT;
    fy_io_set(h->loop, &h->io, ev);
}

static void h2tun_fail(h2tun_t *h)
{
    if (h->stopped) return;
    h->stopped = true;
    fy_io_set(h->loop, &h->io, 0);
    fy_exchange_send(h->ex, NULL, 0, FY_SEND_ERROR);
}

/* Write pending request DATA into the pair; when all is in, ask for more (or shut). */
static void h2tun_push(h2tun_t *h)
{
    if (h->stopped) return;
    while (h->in_off < h->in_len) {
        ssize_t w = send(h->io.fd, h->in + h->in_off, h->in_len - h->in_off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            h2tun_events(h);
            return;
        }
        if (w < 0) {
            h2tun_fail(h);
            return;
        }
        h->in_off += (size_t)w;
    }
    h->in_len = h->in_off = 0;
    if (h->in_end) {
        if (!h->in_shut) shutdown(h->io.fd, SHUT_WR);
        h->in_shut = true;
        h2tun_events(h);
        return;
    }
    h2tun_events(h);
    fy_exchange_read_body(h->ex, h2tun_on_body);
}

static void h2tun_on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    h2tun_t *h = ex->handler_data;
    if (h->stopped) return;
    h->in = p;
    h->in_len = n;
    h->in_off = 0;
    h->in_end = end;
    h2tun_push(h);
}

static void h2tun_pull(h2tun_t *h)
{
    if (h->sending || h->sock_eof || h->stopped) return;
    ssize_t r = recv(h->io.fd, h->out, sizeof h->out, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
        h2tun_events(h);
        return;
    }
    if (r < 0) {
        h2tun_fail(h);
        return;
    }
    if (r == 0) {
        h->sock_eof = true;
        fy_io_set(h->loop, &h->io, h->in_off < h->in_len ? EPOLLOUT : 0);
        fy_exchange_send(h->ex, NULL, 0, FY_SEND_FINAL);
        return;
    }
    h->sending = true;
    h2tun_events(h);
    struct iovec iov = {h->out, (size_t)r};
    fy_exchange_send(h->ex, &iov, 1, FY_SEND_MORE);
}

static void h2tun_on_io(fy_io_t *io, uint32_t events)
{
    h2tun_t *h = io->data;
    h->busy++;
    if (events & EPOLLOUT) h2tun_push(h);
    if (!h->stopped && !h->gone && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) h2tun_pull(h);
    if (--h->busy == 0 && h->gone) free(h);
}

static void h2tun_proceed(fy_exchange_t *ex)
{
    h2tun_t *h = ex->handler_data;
    if (!h->sending) return;
    h->sending = false;
    h2tun_pull(h);
}

static void h2tun_stop(fy_exchange_t *ex)
{
    h2tun_t *h = ex->handler_data;
    h->stopped = true;
    fy_io_set(h->loop, &h->io, 0);
}

static const fy_producer_ops_t h2tun_producer = {h2tun_proceed, h2tun_stop};

static void h2tun_free(void *arg)
{
    h2tun_t *h = arg;
    fy_io_set(h->loop, &h->io, 0);
    close(h->io.fd); /* the tunnel side sees the end */
    h->io.fd = -1;
    h->stopped = true;
    if (h->busy)
        h->gone = true;
    else
        free(h);
}

void fy__mitm_h2_connect_start(fy__mitm_t *m, fy_exchange_t *ex, const char *host, int port,
                               int ofd)
{
    if (fy_host_list_match(&m->conf->passthrough, host)) {
        /* passed through by name: the stream itself is the tunnel's client transport, relayed
           to the origin without a socketpair */
        fy__mitm_tunnel_t *t =
            fy__mitm_tunnel_new(m, ex->ctx, -1, ex->remote, sizeof(struct sockaddr_storage));
        t->oio.fd = ofd;
        snprintf(t->host, sizeof t->host, "%s", host);
        t->port = port;
        t->ct = fy_exchange_tio_start(ex);
        fy__mitm_start_relay(t);
        return;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        close(ofd);
        fy_exchange_fail(ex, 503, "cannot make a socketpair for the tunnel");
        return;
    }
    h2tun_t *h = fy_xcalloc(1, sizeof *h);
    h->ex = ex;
    h->loop = ex->ctx->loop;
    h->io.fd = sv[1];
    h->io.cb = h2tun_on_io;
    h->io.data = h;
    fy_arena_on_reset(ex->arena, h2tun_free, h);
    fy__mitm_tunnel_t *t =
        fy__mitm_tunnel_new(m, ex->ctx, sv[0], ex->remote, sizeof(struct sockaddr_storage));
    t->oio.fd = ofd;
    snprintf(t->host, sizeof t->host, "%s", host);
    t->port = port;
    t->state = FY__MITM_S_PEEK;
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
    if (fy_io_set(t->loop, &t->cio, EPOLLIN) < 0) {
        fy__mitm_tunnel_close(t);
        fy_exchange_fail(ex, 503, "cannot watch the tunnel");
        return;
    }
    ex->handler_data = h;
    ex->res.status = 200;
    ex->res.content_length = -1;
    fy_exchange_start_response(ex, &h2tun_producer);
    h->sending = true;                           /* until proceed: then the pair is read */
    fy_exchange_send(ex, NULL, 0, FY_SEND_MORE); /* the 200 opens the tunnel */
    if (!h->stopped) fy_exchange_read_body(ex, h2tun_on_body);
}
