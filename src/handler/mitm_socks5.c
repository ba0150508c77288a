/* Intercepting proxy SOCKS5 listeners: the RFC 1928 handshake, then on as a CONNECT tunnel.
 * Thread rules: runs on the tunnel's worker (fy_mitm_socks5_accept: on the accepting worker). */
#include "handler/mitm_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "handler/socks5.h"

static bool say(fy__mitm_tunnel_t *t, const void *p, size_t n)
{
    return send(t->cio.fd, p, n, MSG_NOSIGNAL) == (ssize_t)n;
}

/* RFC 1928 §6 REP for a failed connect to the origin. */
static unsigned char socks_rep(int err)
{
    switch (err) {
    case 0: /* the name did not resolve */
    case EHOSTUNREACH:
    case ETIMEDOUT:
        return 4;
    case ENETUNREACH:
        return 3;
    case ECONNREFUSED:
        return 5;
    case ELOOP: /* to ourselves */
    case EACCES:
        return 2;
    default:
        return 1;
    }
}

/* The SOCKS5 CONNECT's origin connected (or not): reply, then on as an HTTP CONNECT. */
void fy__mitm_socks_reply(fy__mitm_tunnel_t *t, int err, const char *why)
{
    unsigned char reply[10] = {5, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    if (why) {
        reply[1] = socks_rep(err);
        fy_info("mitm: socks5 CONNECT %s:%d: %s", t->host, t->port, why);
        say(t, reply, sizeof reply);
        fy__mitm_tunnel_close(t);
        return;
    }
    if (!say(t, reply, sizeof reply)) {
        fy__mitm_tunnel_close(t);
        return;
    }
    /* from here on, exactly a CONNECT tunnel */
    fy_io_set(t->loop, &t->oio, 0);
    t->state = FY__MITM_S_PEEK;
    fy_timer_start(t->loop, &t->timer, t->m->conf->connect_timeout_ms);
    if (t->c2o_len) {
        fy__mitm_decide(t, (unsigned char)t->c2o[0]);
        return;
    }
    fy_io_set(t->loop, &t->cio, EPOLLIN);
}

static void socks_connected(fy__mitm_tunnel_t *t, const char *err)
{
    if (err) {
        fy__mitm_socks_reply(t, t->oerrno, err);
        return;
    }
    fy_io_set(t->loop, &t->oio, EPOLLOUT);
    fy_timer_start(t->loop, &t->timer, t->m->conf->connect_timeout_ms);
}

void fy__mitm_socks_read(fy__mitm_tunnel_t *t)
{
    fy__mitm_t *m = t->m;
    for (;;) {
        if (t->c2o_len == FY__MITM_RELAY_BUF) {
            fy__mitm_tunnel_close(t);
            return;
        }
        ssize_t n = read(t->cio.fd, t->c2o + t->c2o_len, FY__MITM_RELAY_BUF - t->c2o_len);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            fy__mitm_tunnel_close(t);
            return;
        }
        if (n < 0) break;
        t->c2o_len += (size_t)n;
    }
    for (;;) {
        fy_socks5_msg_t msg;
        int r = fy_socks5_parse(t->socks_stage, (const unsigned char *)t->c2o, t->c2o_len, &msg);
        if (r == 0) return;
        if (r == FY_SOCKS5_EATYP) {
            static const unsigned char no_atyp[] = {5, 8, 0, 1, 0, 0, 0, 0, 0, 0};
            say(t, no_atyp, sizeof no_atyp);
        }
        if (r < 0) {
            fy_info("mitm: socks5: malformed %s from the client",
                    t->socks_stage == FY_SOCKS5_GREETING ? "greeting"
                    : t->socks_stage == FY_SOCKS5_AUTH   ? "authentication"
                                                         : "request");
            fy__mitm_tunnel_close(t);
            return;
        }
        memmove(t->c2o, t->c2o + r, t->c2o_len - (size_t)r);
        t->c2o_len -= (size_t)r;
        if (t->socks_stage == FY_SOCKS5_GREETING) {
            unsigned want = m->auth_b64 ? FY_SOCKS5_M_USERPASS : FY_SOCKS5_M_NOAUTH;
            unsigned char reply[2] = {5, 0xff};
            if (msg.methods & want) reply[1] = m->auth_b64 ? 2 : 0;
            if (!say(t, reply, 2) || reply[1] == 0xff) {
                if (reply[1] == 0xff)
                    fy_info("mitm: socks5: client offers no acceptable authentication method");
                fy__mitm_tunnel_close(t);
                return;
            }
            t->socks_stage = m->auth_b64 ? FY_SOCKS5_AUTH : FY_SOCKS5_REQUEST;
        } else if (t->socks_stage == FY_SOCKS5_AUTH) {
            const char *a = m->conf->auth, *colon = strchr(a, ':');
            size_t ul = (size_t)(colon - a);
            bool ok = msg.user_len == ul && memcmp(msg.user, a, ul) == 0 &&
                      msg.pass_len == strlen(colon + 1) &&
                      memcmp(msg.pass, colon + 1, msg.pass_len) == 0;
            unsigned char reply[2] = {1, ok ? 0 : 1};
            if (!say(t, reply, 2) || !ok) {
                if (!ok) fy_info("mitm: socks5: bad username or password");
                fy__mitm_tunnel_close(t);
                return;
            }
            t->socks_stage = FY_SOCKS5_REQUEST;
        } else {
            unsigned char reply[10] = {5, 0, 0, 1, 0, 0, 0, 0, 0, 0};
            if (msg.cmd != FY_SOCKS5_CMD_CONNECT) {
                reply[1] = 7; /* command not supported: CONNECT only */
                say(t, reply, sizeof reply);
                fy__mitm_tunnel_close(t);
                return;
            }
            snprintf(t->host, sizeof t->host, "%s", msg.host);
            t->port = msg.port;
            /* the origin first: the reply says whether it could be reached */
            t->state = FY__MITM_S_SOCKS_CONNECT;
            fy_io_set(t->loop, &t->cio, 0);
            fy__mitm_connect_origin(t, socks_connected);
            return;
        }
    }
}

int fy_mitm_socks5_accept(fy_handler_t *h, fy_http_ctx_t *ctx, int fd, const struct sockaddr *sa,
                          socklen_t salen)
{
    fy__mitm_t *m = (fy__mitm_t *)h;
    if (!fy__mitm_client_allowed(m, sa)) {
        close(fd);
        return -EACCES;
    }
    fy__mitm_tunnel_t *t = fy__mitm_tunnel_new(m, ctx, fd, sa, salen);
    snprintf(t->host, sizeof t->host, "-");
    t->state = FY__MITM_S_SOCKS;
    t->socks_stage = FY_SOCKS5_GREETING;
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
    if (fy_io_set(t->loop, &t->cio, EPOLLIN) < 0) {
        fy__mitm_tunnel_close(t);
        return -EIO;
    }
    return 0;
}
