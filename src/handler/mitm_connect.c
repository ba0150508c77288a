/* Intercepting proxy CONNECT: the origin connected before the client hears 200 (a failure is a
 * page naming it), then the client connection taken over as a tunnel.
 * Thread rules: runs on the exchange's worker; the pending connect lives in the exchange arena. */
#include "handler/mitm_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "net/sock.h"

/* The origin connected (fd): take the client connection over, answer 200, peek. */
static void connect_established(fy__mitm_t *m, fy_exchange_t *ex, const char *host, int port,
                                int ofd)
{
    if (!ex->sink->detach) { /* the codec cannot hand its connection over (h2): a bridge */
        fy__mitm_h2_connect_start(m, ex, host, port, ofd);
        return;
    }
    char *pre = fy_xmalloc(FY__MITM_RELAY_BUF);
    size_t prelen = 0;
    int fd = -1;
    fy_http_ctx_t *ctx = ex->ctx;
    struct sockaddr_storage remote;
    memset(&remote, 0, sizeof remote);
    memcpy(&remote, ex->remote,
           fy__mitm_addr_len(ex->remote)); /* codecs keep only its family's size */
    if (fy_exchange_detach(ex, &fd, pre, FY__MITM_RELAY_BUF, &prelen) < 0) {
        free(pre);
        close(ofd);
        fy_exchange_fail(ex, 501, "CONNECT cannot be taken over on this connection");
        return;
    }
    /* ex is gone: the codec freed itself */
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    fy__mitm_tunnel_t *t =
        fy__mitm_tunnel_new(m, ctx, fd, (struct sockaddr *)&remote, sizeof remote);
    t->oio.fd = ofd;
    free(t->c2o);
    t->c2o = pre;
    t->c2o_len = prelen;
    snprintf(t->host, sizeof t->host, "%s", host);
    t->port = port;
    if (send(fd, ok, sizeof ok - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof ok - 1)) {
        fy__mitm_tunnel_close(t);
        return;
    }
    t->state = FY__MITM_S_PEEK;
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
    if (t->c2o_len) {
        fy__mitm_decide(t, (unsigned char)t->c2o[0]);
        return;
    }
    fy_io_set(t->loop, &t->cio, EPOLLIN);
}

/* A CONNECT whose origin is being connected before the client hears 200 (in its arena):
   a closed port, a timeout or a name that does not resolve is a 502 naming it, not a 200
   followed by a reset. */
typedef struct preconn {
    fy__mitm_t *m;
    fy_exchange_t *ex;
    fy_loop_t *loop;
    fy_resolve_req_t q;
    fy_io_t io;
    fy_timer_t timer;
    bool done; /* answered or handed over: nothing left to cancel */
    int port;
    char host[256];
} preconn_t;

static void preconn_cleanup(preconn_t *p)
{
    if (p->done) return;
    p->done = true;
    fy_resolve_cancel(&p->q);
    fy_timer_stop(p->loop, &p->timer);
    if (p->io.fd >= 0) {
        fy_io_set(p->loop, &p->io, 0);
        close(p->io.fd);
        p->io.fd = -1;
    }
}

static void preconn_cancel(void *arg)
{
    preconn_cleanup(arg);
}

static void preconn_fail(preconn_t *p, int status, const char *error, const char *why)
{
    preconn_cleanup(p);
    fy_info("mitm: CONNECT %s:%d: %s", p->host, p->port, why);
    fy__mitm_refuse(p->ex, status, error, "%s", why);
}

static void preconn_ok(preconn_t *p)
{
    int fd = p->io.fd;
    fy_io_set(p->loop, &p->io, 0);
    p->io.fd = -1;
    preconn_cleanup(p);
    char host[256];
    snprintf(host, sizeof host, "%s", p->host);
    connect_established(p->m, p->ex, host, p->port, fd);
}

static void preconn_timeout(fy_timer_t *tm)
{
    preconn_t *p = tm->data;
    char why[400];
    snprintf(why, sizeof why, "cannot connect to %s:%d: timed out after %llu ms (connect-timeout)",
             p->host, p->port, (unsigned long long)p->m->conf->connect_timeout_ms);
    preconn_fail(p, 502, "origin connect timed out", why);
}

static void preconn_io(fy_io_t *io, uint32_t ev)
{
    preconn_t *p = io->data;
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    getsockopt(p->io.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (!soerr && (ev & (EPOLLERR | EPOLLHUP))) soerr = ECONNREFUSED;
    if (soerr) {
        char why[400];
        snprintf(why, sizeof why, "cannot connect to %s:%d: %s", p->host, p->port, strerror(soerr));
        preconn_fail(p, 502, "origin connect failed", why);
        return;
    }
    preconn_ok(p);
}

static void preconn_resolved(fy_resolve_req_t *q, const struct sockaddr *sa, socklen_t len,
                             const char *err)
{
    preconn_t *p = q->data;
    char why[400];
    if (!sa) {
        preconn_fail(p, 502, "origin host name did not resolve", err);
        return;
    }
    if (fy__mitm_loops(p->m, sa)) {
        char a[80];
        snprintf(why, sizeof why, "the tunnel is addressed to this proxy itself (%s)",
                 fy_sock_addr_str(sa, a, sizeof a));
        preconn_fail(p, 508, "tunnel addressed to the proxy itself", why);
        return;
    }
    if (fy__mitm_dest_check(p->m->dest, p->host, p->port, sa, why, sizeof why) == FY_DEST_DENY) {
        preconn_cleanup(p);
        char a[64];
        fy_warn("mitm: client %s: %s", fy_sock_host_str(p->ex->remote, a, sizeof a), why);
        fy__mitm_refuse(p->ex, 403, "destination denied by intercept.destinations", "%s", why);
        return;
    }
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot make a socket: %s", strerror(errno));
        preconn_fail(p, 503, "no socket for the origin", why);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, sa, len) < 0 && errno != EINPROGRESS) {
        snprintf(why, sizeof why, "cannot connect to %s:%d: %s", p->host, p->port, strerror(errno));
        close(fd);
        preconn_fail(p, 502, "origin connect failed", why);
        return;
    }
    p->io.fd = fd;
    if (fy_io_set(p->loop, &p->io, EPOLLOUT) < 0) {
        preconn_fail(p, 503, "cannot watch the origin connection", "cannot watch the socket");
        return;
    }
    fy_timer_start(p->loop, &p->timer, p->m->conf->connect_timeout_ms);
}

void fy__mitm_connect_start(fy__mitm_t *m, fy_exchange_t *ex)
{
    char host[256];
    int port;
    if (fy__mitm_split_authority(ex->req.authority, 443, host, sizeof host, &port) < 0) {
        fy_exchange_fail(ex, 400, "CONNECT target is not host:port");
        return;
    }
    if (ex->req.protocol.len) {
        fy_exchange_fail(ex, 501, "extended CONNECT (:protocol) to the proxy is not a tunnel");
        return;
    }
    if (!fy__mitm_dest_allowed(m, ex, host, port, NULL)) return;
    preconn_t *p = fy_arena_calloc(ex->arena, sizeof *p);
    p->m = m;
    p->ex = ex;
    p->loop = ex->ctx->loop;
    p->port = port;
    snprintf(p->host, sizeof p->host, "%s", host);
    p->io.fd = -1;
    p->io.cb = preconn_io;
    p->io.data = p;
    fy_timer_init(&p->timer, preconn_timeout, p);
    p->q.cb = preconn_resolved;
    p->q.data = p;
    fy_arena_on_reset(ex->arena, preconn_cancel, p);
    int r = fy_resolve(m->resolver, ex->ctx->worker_id, p->loop, p->host, port, &p->q);
    if (r < 0) {
        preconn_fail(p, 502, "origin host name did not resolve", p->q.err);
        return;
    }
    if (r == 1) preconn_resolved(&p->q, (struct sockaddr *)&p->q.addr, p->q.addrlen, NULL);
}
