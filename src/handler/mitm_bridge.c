/* Intercepting proxy CONNECT over h2/h3: the stream is the tunnel's client transport
 * (http/exchange_tio.h). The first byte is peeked from the stream itself; a relayed tunnel
 * (plain bytes, passthrough, pinned) moves the stream's bytes to the origin directly. Only an
 * intercepted one still needs a socket, because the forged TLS and the nested codec run on an
 * fd: a socketpair whose far end is relayed to the stream (core/tunnel_relay.h).
 * Thread rules: everything lives on its exchange's worker. */
#include "handler/mitm_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "http/exchange_tio.h"

/* The stream joined to a socketpair end for an intercepted tunnel; outlives the tunnel (the
   nested codec takes the other end at the hand-over), freed when its relay ends. */
typedef struct sp_bridge {
    fy_tio_relay_t relay;
    fy_tio_t *stream; /* owned */
    fy_tio_fd_t sock; /* owned */
} sp_bridge_t;

static void bridge_event(fy_tio_relay_t *r, bool done, int err)
{
    (void)err;
    if (!done) return;
    sp_bridge_t *b = r->data;
    fy_tio_relay_stop(&b->relay);
    fy_tio_close(b->stream);
    fy_tio_close(&b->sock.t);
    free(b);
}

static void intercept_over_pair(fy__mitm_tunnel_t *t)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        fy_info("mitm: CONNECT %s:%d: cannot make a socketpair: %s", t->host, t->port,
                strerror(errno));
        fy__mitm_tunnel_close(t);
        return;
    }
    sp_bridge_t *b = fy_xcalloc(1, sizeof *b);
    b->stream = t->ct;
    t->ct = NULL;
    b->stream->on_ready = NULL;
    fy_tio_fd_init(&b->sock, t->loop, sv[1]);
    b->relay.event = bridge_event;
    b->relay.data = b;
    t->cio.fd = sv[0];
    fy__mitm_intercept(t); /* waits for the hello on sv[0] */
    fy_tio_relay_start(&b->relay, b->stream, &b->sock.t, FY__MITM_RELAY_BUF, NULL, 0);
}

static void on_stream(fy_tio_t *s, unsigned what)
{
    (void)what;
    fy__mitm_tunnel_t *t = s->data;
    if (t->closed || t->state != FY__MITM_S_PEEK) return;
    unsigned char c;
    ssize_t n = fy_tio_peek(s, &c, 1);
    if (n == 0) {
        fy_tio_want(s, FY_TIO_READ);
        return;
    }
    if (n < 0) {
        fy__mitm_tunnel_close(t);
        return;
    }
    fy_tio_want(s, 0);
    if (fy__mitm_relays(t, c))
        fy__mitm_start_relay(t);
    else
        intercept_over_pair(t);
}

void fy__mitm_h2_connect_start(fy__mitm_t *m, fy_exchange_t *ex, const char *host, int port,
                               int ofd)
{
    fy__mitm_tunnel_t *t =
        fy__mitm_tunnel_new(m, ex->ctx, -1, ex->remote, fy__mitm_addr_len(ex->remote));
    t->oio.fd = ofd;
    snprintf(t->host, sizeof t->host, "%s", host);
    t->port = port;
    t->state = FY__MITM_S_PEEK;
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
    t->ct = fy_exchange_tio_start(ex);
    t->ct->on_ready = on_stream;
    t->ct->data = t;
    if (fy_host_list_match(&m->conf->passthrough, host)) {
        fy__mitm_start_relay(t); /* passed through by name: no need to wait for a byte */
        return;
    }
    on_stream(t->ct, FY_TIO_READ);
}
