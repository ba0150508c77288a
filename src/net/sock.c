#include "net/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/log.h"

/* "a.b.c.d" without inet_ntop (which costs ~1,900 instructions: X-Forwarded-For and the
 * access log format it on every request). Needs 16 bytes. */
static void ipv4_str(const struct in_addr *a, char *buf)
{
    const unsigned char *b = (const unsigned char *)&a->s_addr;
    char *p = buf;
    for (int i = 0; i < 4; i++) {
        unsigned v = b[i];
        if (v >= 100) *p++ = (char)('0' + v / 100);
        if (v >= 10) *p++ = (char)('0' + v / 10 % 10);
        *p++ = (char)('0' + v % 10);
        *p++ = i < 3 ? '.' : '\0';
    }
}

const char *fy_sock_host_str(const struct sockaddr *sa, char *buf, size_t len)
{
    if (sa->sa_family == AF_INET && len >= 16) {
        ipv4_str(&((const struct sockaddr_in *)sa)->sin_addr, buf);
        return buf;
    }
    if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
    else if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
    else
        snprintf(buf, len, "unix");
    return buf;
}

const char *fy_sock_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];
    fy_sock_host_str(sa, host, sizeof host);
    if (sa->sa_family == AF_INET6)
        snprintf(buf, len, "[%s]:%u", host, ntohs(((const struct sockaddr_in6 *)sa)->sin6_port));
    else if (sa->sa_family == AF_INET)
        snprintf(buf, len, "%s:%u", host, ntohs(((const struct sockaddr_in *)sa)->sin_port));
    else
        snprintf(buf, len, "%s", host);
    return buf;
}

int fy_sock_listen(const struct sockaddr *addr, socklen_t len, int backlog, const char *name)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) goto fail;
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) goto fail;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) goto fail;
    if (addr->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* inherited by accepted */
    if (bind(fd, addr, len) < 0) goto fail;
    if (listen(fd, backlog) < 0) goto fail;
    return fd;
fail:;
    int e = errno;
    fy_log(FY_LOG_EMERG, "listen on %s: %s", name, strerror(e));
    if (fd >= 0) close(fd);
    return -e;
}

int fy_sock_probe(const struct sockaddr *addr, socklen_t len, int type, const char *name)
{
    int fd = socket(addr->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0; /* the real bind will say what is wrong */
    int one = 1;
    /* TCP: SO_REUSEADDR so that connections in TIME_WAIT do not count, yet a listening socket
       does (Linux); UDP: none, since SO_REUSEADDR would let two UDP sockets share the port */
    if (type == SOCK_STREAM) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (addr->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    int r = bind(fd, addr, len) < 0 ? -errno : 0;
    close(fd);
    if (r == -EADDRINUSE) {
        fy_log(FY_LOG_EMERG,
               "listen on %s (%s): %s: another process, or another listener of this "
               "configuration, holds it; set `share: true` on the listener to share the port "
               "with it (SO_REUSEPORT: the kernel then splits the connections)",
               name, type == SOCK_STREAM ? "tcp" : "udp", strerror(EADDRINUSE));
        return r;
    }
    return 0;
}

static int sock_handshake(fy_transport_t *t)
{
    return 1;
}

static ssize_t sock_read(fy_transport_t *t, void *buf, size_t len)
{
    ssize_t n = read(t->fd, buf, len);
    if (n > 0) return n;
    if (n == 0) return FY_EEOF;
    if (errno == EAGAIN || errno == EINTR) {
        t->want = FY_WANT_READ;
        return 0;
    }
    return -errno;
}

static ssize_t sock_writev(fy_transport_t *t, const struct iovec *iov, int iovcnt)
{
    ssize_t n = writev(t->fd, iov, iovcnt);
    if (n >= 0) return n;
    if (errno == EAGAIN || errno == EINTR) {
        t->want = FY_WANT_WRITE;
        return 0;
    }
    return -errno;
}

static ssize_t sock_sendfile(fy_transport_t *t, int fd, off_t *off, size_t len)
{
    ssize_t n = sendfile(t->fd, fd, off, len);
    if (n > 0) return n;
    if (n == 0) return -EIO; /* file shrank under us */
    if (errno == EAGAIN || errno == EINTR) {
        t->want = FY_WANT_WRITE;
        return 0;
    }
    return -errno;
}

static size_t sock_pending(fy_transport_t *t)
{
    return 0;
}

static int sock_shutdown(fy_transport_t *t)
{
    return shutdown(t->fd, SHUT_WR) < 0 ? -errno : 0;
}

static void sock_destroy(fy_transport_t *t) {}

const struct fy_transport_ops fy_sock_transport_ops = {
    .name = "tcp",
    .handshake = sock_handshake,
    .read = sock_read,
    .writev = sock_writev,
    .sendfile = sock_sendfile,
    .pending = sock_pending,
    .shutdown = sock_shutdown,
    .destroy = sock_destroy,
};

void fy_sock_transport_init(fy_transport_t *t, int fd)
{
    memset(t, 0, sizeof *t);
    t->ops = &fy_sock_transport_ops;
    t->fd = fd;
}
