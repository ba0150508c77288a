/* Replay: one flow sent again by the inspector's thread, blocking with a deadline, through the
 * intercepting listener (so the new flow is captured like any other), else straight to the
 * flow's authority. TLS to the intercepting listener's forged certificate, or to an origin
 * directly, is not verified: a replay goes where the captured flow went. */
#include "ops/inspector_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"

typedef struct rconn {
    int fd;
    SSL *ssl;
    SSL_CTX *ctx;
    int64_t deadline_ms;
} rconn_t;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int left(const rconn_t *c)
{
    int64_t l = c->deadline_ms - mono_ms();
    return l > 0 ? (int)l : 0;
}

static bool wait_fd(rconn_t *c, short ev)
{
    struct pollfd pf = {c->fd, ev, 0};
    int t = left(c);
    return t > 0 && poll(&pf, 1, t) > 0;
}

static int dial(rconn_t *c, const struct sockaddr *sa, socklen_t len)
{
    c->fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (c->fd < 0) return -1;
    if (connect(c->fd, sa, len) < 0 && errno != EINPROGRESS) return -1;
    if (!wait_fd(c, POLLOUT)) return -1;
    int e = 0;
    socklen_t el = sizeof e;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &el);
    return e ? -1 : 0;
}

static ssize_t rc_write(rconn_t *c, const char *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w;
        if (c->ssl) {
            int r = SSL_write(c->ssl, p + done, (int)(n - done));
            if (r > 0) {
                done += (size_t)r;
                continue;
            }
            int e = SSL_get_error(c->ssl, r);
            if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) ||
                !wait_fd(c, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT))
                return -1;
            continue;
        }
        w = send(c->fd, p + done, n - done, MSG_NOSIGNAL);
        if (w > 0) {
            done += (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR) && wait_fd(c, POLLOUT)) continue;
        return -1;
    }
    return (ssize_t)done;
}

/* >0 bytes, 0 end, -1 error or deadline */
static ssize_t rc_read(rconn_t *c, char *p, size_t n)
{
    for (;;) {
        if (c->ssl) {
            int r = SSL_read(c->ssl, p, (int)n);
            if (r > 0) return r;
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_ZERO_RETURN) return 0;
            if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) return 0; /* closed */
            if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) ||
                !wait_fd(c, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT))
                return -1;
            continue;
        }
        ssize_t r = recv(c->fd, p, n, 0);
        if (r >= 0) return r;
        if ((errno == EAGAIN || errno == EINTR) && wait_fd(c, POLLIN)) continue;
        return -1;
    }
}

static int tls_start(rconn_t *c, const char *sni)
{
    c->ctx = SSL_CTX_new(TLS_client_method());
    if (!c->ctx) return -1;
    SSL_CTX_set_verify(c->ctx, SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_alpn_protos(c->ctx, (const unsigned char *)"\x08http/1.1", 9);
    c->ssl = SSL_new(c->ctx);
    if (!c->ssl) return -1;
    SSL_set_fd(c->ssl, c->fd);
    if (sni[0] && sni[0] != '[') SSL_set_tlsext_host_name(c->ssl, sni);
    for (;;) {
        int r = SSL_connect(c->ssl);
        if (r == 1) return 0;
        int e = SSL_get_error(c->ssl, r);
        if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) ||
            !wait_fd(c, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT))
            return -1;
    }
}

static void rc_close(rconn_t *c)
{
    if (c->ssl) SSL_free(c->ssl);
    if (c->ctx) SSL_CTX_free(c->ctx);
    if (c->fd >= 0) close(c->fd);
}

/* host and port of an authority ("h", "h:p", "[v6]:p") */
static void split(fy_str_t a, bool tls, char *host, size_t hcap, char *port, size_t pcap)
{
    char t[512];
    snprintf(t, sizeof t, "%.*s", (int)(a.len < 511 ? a.len : 511), a.p);
    char *colon = strrchr(t, ':');
    if (colon && (t[0] != '[' || colon > strchr(t, ']'))) {
        *colon = 0;
        snprintf(port, pcap, "%s", colon + 1);
    } else {
        snprintf(port, pcap, "%s", tls ? "443" : "80");
    }
    char *h = t;
    size_t hl = strlen(h);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h[hl - 1] = 0;
        h++;
    }
    snprintf(host, hcap, "%s", h);
}

/* Status of a response head read until its end; -1 when none came. */
static int read_status(rconn_t *c, char *buf, size_t cap, size_t *have)
{
    *have = 0;
    while (*have < cap - 1) {
        ssize_t r = rc_read(c, buf + *have, cap - 1 - *have);
        if (r <= 0) return -1;
        *have += (size_t)r;
        buf[*have] = 0;
        if (strstr(buf, "\r\n\r\n")) break;
    }
    int st = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &st) != 1) return -1;
    return st;
}

static bool skip_header(fy_str_t n)
{
    static const char *const drop[] = {"host",       "content-length",   "connection",
                                       "keep-alive", "proxy-connection", "transfer-encoding",
                                       "te",         "upgrade"};
    if (n.len && n.p[0] == ':') return true; /* h2/h3 pseudo-headers */
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        if (strlen(drop[i]) == n.len && strncasecmp(n.p, drop[i], n.len) == 0) return true;
    return false;
}

int fy__insp_replay(fy_inspector_t *ins, const fy_cs_flow_t *f, const char **err)
{
    bool tls = f->scheme.len == 5 && strncasecmp(f->scheme.p, "https", 5) == 0;
    char host[512], port[16];
    split(f->authority, tls, host, sizeof host, port, sizeof port);
    rconn_t c = {.fd = -1, .deadline_ms = mono_ms() + (int64_t)ins->replay_timeout_ms};
    bool via = ins->proxylen > 0;
    int status = -1;
    char resp[16384];
    size_t have;
    fy__sb_t rq = {0};
    *err = "cannot connect";
    if (via) {
        if (dial(&c, (const struct sockaddr *)&ins->proxy, ins->proxylen) < 0) goto out;
        if (tls) {
            fy__sb_printf(&rq, "CONNECT %s:%s HTTP/1.1\r\nHost: %s:%s\r\n\r\n", host, port, host,
                          port);
            if (strchr(host, ':')) { /* IPv6 literal */
                rq.len = 0;
                fy__sb_printf(&rq, "CONNECT [%s]:%s HTTP/1.1\r\nHost: [%s]:%s\r\n\r\n", host, port,
                              host, port);
            }
            *err = "the intercepting proxy refused CONNECT";
            if (rc_write(&c, rq.p, rq.len) < 0) goto out;
            int st = read_status(&c, resp, sizeof resp, &have);
            if (st != 200) goto out;
            rq.len = 0;
        }
    } else {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
        if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai) {
            *err = "cannot resolve the flow's host";
            goto out;
        }
        int r = dial(&c, ai->ai_addr, ai->ai_addrlen);
        freeaddrinfo(ai);
        if (r < 0) goto out;
    }
    if (tls) {
        *err = "TLS handshake failed";
        if (tls_start(&c, host) < 0) goto out;
    }
    /* request head: absolute-form to the proxy for plain http, else origin-form */
    fy__sb_put(&rq, f->method.p, f->method.len);
    fy__sb_puts(&rq, " ");
    if (via && !tls) {
        fy__sb_puts(&rq, "http://");
        fy__sb_put(&rq, f->authority.p, f->authority.len);
    }
    if (f->target.len && f->target.p[0] == '/')
        fy__sb_put(&rq, f->target.p, f->target.len);
    else
        fy__sb_puts(&rq, "/");
    fy__sb_puts(&rq, " HTTP/1.1\r\nHost: ");
    fy__sb_put(&rq, f->authority.p, f->authority.len);
    fy__sb_puts(&rq, "\r\n");
    for (size_t i = 0; i < f->n_req_headers; i++) {
        fy_str_t n = f->req_headers[i].name, v = f->req_headers[i].value;
        if (skip_header(n) || memchr(v.p, '\n', v.len) || memchr(v.p, '\r', v.len)) continue;
        fy__sb_put(&rq, n.p, n.len);
        fy__sb_puts(&rq, ": ");
        fy__sb_put(&rq, v.p, v.len);
        fy__sb_puts(&rq, "\r\n");
    }
    if (f->req_body.len || (f->method.len == 4 && !strncasecmp(f->method.p, "POST", 4)) ||
        (f->method.len == 3 && !strncasecmp(f->method.p, "PUT", 3)))
        fy__sb_printf(&rq, "Content-Length: %zu\r\n", f->req_body.len);
    fy__sb_puts(&rq, "Connection: close\r\n\r\n");
    fy__sb_put(&rq, f->req_body.p, f->req_body.len);
    *err = "sending the request failed";
    if (rc_write(&c, rq.p, rq.len) < 0) goto out;
    *err = "no response (or replay-timeout)";
    status = read_status(&c, resp, sizeof resp, &have);
    if (status < 0) goto out;
    /* read the rest so the flow completes before the connection goes (bounded: deadline) */
    while (rc_read(&c, resp, sizeof resp) > 0) {
    }
out:
    free(rq.p);
    rc_close(&c);
    return status;
}

/* ---- for inspector_compare.c: one request to a given address, the whole response kept ---- */

int fy__insp_fetch(fy_inspector_t *ins, const fy_cs_flow_t *f, const char *host, const char *port,
                   bool tls, size_t cap, fy__sb_t *resp, const char **err)
{
    rconn_t c = {.fd = -1, .deadline_ms = mono_ms() + (int64_t)ins->replay_timeout_ms};
    int rc = -1;
    fy__sb_t rq = {0};
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    *err = "cannot resolve the upstream";
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai) goto out;
    *err = "cannot connect to the upstream";
    int r = dial(&c, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    if (r < 0) goto out;
    if (tls) {
        /* the flow's own name (the new upstream serves the same site), unless it has none */
        char sni[512], sport[16];
        split(f->authority, true, sni, sizeof sni, sport, sizeof sport);
        *err = "TLS handshake with the upstream failed";
        if (tls_start(&c, strspn(sni, "0123456789.:[]") == strlen(sni) ? host : sni) < 0) goto out;
    }
    fy__sb_put(&rq, f->method.p, f->method.len);
    fy__sb_puts(&rq, " ");
    if (f->target.len && f->target.p[0] == '/')
        fy__sb_put(&rq, f->target.p, f->target.len);
    else
        fy__sb_puts(&rq, "/");
    fy__sb_puts(&rq, " HTTP/1.1\r\nHost: ");
    fy__sb_put(&rq, f->authority.p, f->authority.len);
    fy__sb_puts(&rq, "\r\n");
    for (size_t i = 0; i < f->n_req_headers; i++) {
        fy_str_t n = f->req_headers[i].name, v = f->req_headers[i].value;
        if (skip_header(n) || memchr(v.p, '\n', v.len) || memchr(v.p, '\r', v.len)) continue;
        fy__sb_put(&rq, n.p, n.len);
        fy__sb_puts(&rq, ": ");
        fy__sb_put(&rq, v.p, v.len);
        fy__sb_puts(&rq, "\r\n");
    }
    if (f->req_body.len || (f->method.len == 4 && !strncasecmp(f->method.p, "POST", 4)) ||
        (f->method.len == 3 && !strncasecmp(f->method.p, "PUT", 3)))
        fy__sb_printf(&rq, "Content-Length: %zu\r\n", f->req_body.len);
    fy__sb_puts(&rq, "Connection: close\r\n\r\n");
    fy__sb_put(&rq, f->req_body.p, f->req_body.len);
    *err = "sending the request failed";
    if (rc_write(&c, rq.p, rq.len) < 0) goto out;
    *err = "no response (or replay-timeout)";
    char buf[16384];
    for (;;) {
        ssize_t got = rc_read(&c, buf, sizeof buf);
        if (got < 0) goto out;
        if (got == 0) break;
        if (resp->len + (size_t)got > cap) {
            *err = "the response is larger than the comparison's limit";
            goto out;
        }
        fy__sb_put(resp, buf, (size_t)got);
    }
    rc = resp->len ? 0 : -1;
out:
    free(rq.p);
    rc_close(&c);
    return rc;
}
