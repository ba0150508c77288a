/*
 * echo.c — the origin of the benchmark's layer-4 modes (tcp-echo, udp-echo):
 * a single-threaded epoll echo server, the least an echo origin can do.
 *
 *   echo tcp PORT     every byte read on a connection is written back
 *                     (a connection that cannot take more output stops being read
 *                     until it drains, so memory stays bounded)
 *   echo udp PORT     every datagram is sent back to its sender
 *
 * Listens on 127.0.0.1 only.  SIGTERM/SIGINT exit cleanly.  Built by bench/run
 * with `cc -std=c17 -O2 -Wall -Wextra -Wpedantic` (a warning fails the build).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { MAX_FDS = 65536, BUF = 65536, MAX_EVENTS = 256, UDP_BATCH = 64, UDP_MAX = 65536 };

struct conn {
    char *buf; /* unsent bytes [off, len) */
    size_t off, len;
};

static struct conn conns[MAX_FDS];
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static int listen_on(int type, long port)
{
    int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) die("bind");
    if (type == SOCK_STREAM && listen(fd, 4096) < 0) die("listen");
    return fd;
}

static void close_conn(int fd)
{
    free(conns[fd].buf);
    conns[fd] = (struct conn){0};
    close(fd);
}

/* Writes what is pending; 1 = all written, 0 = would block, -1 = error. */
static int flush_conn(int fd)
{
    struct conn *c = &conns[fd];
    while (c->off < c->len) {
        ssize_t n = write(fd, c->buf + c->off, c->len - c->off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno == EAGAIN ? 0 : -1;
        c->off += (size_t)n;
    }
    c->off = c->len = 0;
    return 1;
}

static void tcp_readable(int ep, int fd)
{
    struct conn *c = &conns[fd];
    if (!c->buf && !(c->buf = malloc(BUF))) die("malloc");
    for (int i = 0; i < 16; i++) {
        ssize_t n = read(fd, c->buf, BUF);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            close_conn(fd);
            return;
        }
        if (n < 0) return;
        c->off = 0;
        c->len = (size_t)n;
        int r = flush_conn(fd);
        if (r < 0) {
            close_conn(fd);
            return;
        }
        if (r == 0) { /* stop reading until the peer takes our output */
            struct epoll_event ev = {.events = EPOLLOUT, .data.fd = fd};
            epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
            return;
        }
    }
}

static void tcp_writable(int ep, int fd)
{
    int r = flush_conn(fd);
    if (r < 0) {
        close_conn(fd);
    } else if (r > 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
    }
}

static void run_tcp(long port)
{
    int lfd = listen_on(SOCK_STREAM, port);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0) die("epoll_ctl");
    struct epoll_event evs[MAX_EVENTS];
    while (!stop) {
        int n = epoll_wait(ep, evs, MAX_EVENTS, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                for (;;) {
                    int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (c < 0) break;
                    if (c >= MAX_FDS) {
                        close(c);
                        continue;
                    }
                    int one = 1;
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev) < 0) close(c);
                }
            } else if (evs[i].events & EPOLLOUT) {
                tcp_writable(ep, fd);
            } else {
                tcp_readable(ep, fd);
            }
        }
    }
}

static void run_udp(long port)
{
    int fd = listen_on(SOCK_DGRAM, port);
    static char bufs[UDP_BATCH][UDP_MAX];
    struct mmsghdr msgs[UDP_BATCH];
    struct iovec iov[UDP_BATCH];
    struct sockaddr_in from[UDP_BATCH];
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
    while (!stop) {
        struct epoll_event out;
        if (epoll_wait(ep, &out, 1, -1) <= 0) continue;
        for (;;) {
            for (int i = 0; i < UDP_BATCH; i++) {
                iov[i] = (struct iovec){.iov_base = bufs[i], .iov_len = UDP_MAX};
                msgs[i].msg_hdr = (struct msghdr){.msg_name = &from[i],
                                                  .msg_namelen = sizeof(from[i]),
                                                  .msg_iov = &iov[i],
                                                  .msg_iovlen = 1};
            }
            int n = recvmmsg(fd, msgs, UDP_BATCH, MSG_DONTWAIT, NULL);
            if (n <= 0) break;
            for (int i = 0; i < n; i++) iov[i].iov_len = msgs[i].msg_len;
            sendmmsg(fd, msgs, (unsigned)n, MSG_DONTWAIT); /* a dropped reply is the client's loss */
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "tcp") && strcmp(argv[1], "udp"))) {
        fprintf(stderr, "usage: echo tcp|udp PORT\n");
        return 2;
    }
    char *end;
    long port = strtol(argv[2], &end, 10);
    if (*end || port < 1 || port > 65535) {
        fprintf(stderr, "echo: bad port: %s\n", argv[2]);
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (argv[1][0] == 't')
        run_tcp(port);
    else
        run_udp(port);
    return 0;
}
