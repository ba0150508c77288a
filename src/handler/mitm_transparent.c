/* Intercepting proxy transparent listeners: the original destination, and plain HTTP to the codec.
 * Thread rules: runs on the accepting worker; the tunnel stays on it. */
#include "handler/mitm_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/alloc.h"
#include "h1/h1_server.h"
#include "net/sock.h"

/* Transparent plain HTTP: the h1 codec serves the socket; exchanges go to the original
   destination (or `forward`), else to their Host. */
void fy__mitm_transparent_http(fy__mitm_tunnel_t *t)
{
    fy__mitm_tunnel_info_t *ti = fy_xcalloc(1, sizeof *ti);
    snprintf(ti->host, sizeof ti->host, "%s", t->host);
    ti->port = t->port;
    ti->plain = true;
    int fd = t->cio.fd;
    fy_io_set(t->loop, &t->cio, 0);
    t->cio.fd = -1;
    fy_http_ctx_t *ctx = t->ctx;
    struct sockaddr_storage remote = t->remote;
    fy__mitm_tunnel_close(t);
    fy_h1_conn_start(ctx, fd, NULL, (struct sockaddr *)&remote, sizeof remote, ti, free);
}

int fy_mitm_transparent_accept(fy_handler_t *h, fy_http_ctx_t *ctx, int fd,
                               const struct sockaddr *sa, socklen_t salen)
{
    fy__mitm_t *m = (fy__mitm_t *)h;
    if (!fy__mitm_client_allowed(m, sa)) {
        close(fd);
        return -EACCES;
    }
    fy__mitm_tunnel_t *t = fy__mitm_tunnel_new(m, ctx, fd, sa, salen);
    t->transparent = true;
    struct sockaddr_storage dst;
    socklen_t dl = sizeof dst;
    int r = sa->sa_family == AF_INET6 ? getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &dst, &dl)
                                      : getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl);
    /* not redirected: the original destination is this listener itself */
    bool redirected = r == 0 && !fy__mitm_loops(m, (struct sockaddr *)&dst);
    if (m->fwd_port) {
        snprintf(t->host, sizeof t->host, "%s", m->fwd_host);
        t->port = m->fwd_port;
    } else if (redirected) {
        fy_sock_host_str((struct sockaddr *)&dst, t->host, sizeof t->host);
        t->port = ntohs(dst.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&dst)->sin6_port
                                                  : ((struct sockaddr_in *)&dst)->sin_port);
    } /* else: pointed at directly: SNI or Host decide */
    t->state = FY__MITM_S_PEEK;
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
    if (fy_io_set(t->loop, &t->cio, EPOLLIN) < 0) {
        fy__mitm_tunnel_close(t);
        return -EIO;
    }
    return 0;
}
