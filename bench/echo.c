/*
 * echo.c — the origin of the benchmark's layer-4 modes (tcp-echo, udp-echo):
 * a single-threaded epoll echo server, the least an echo origin can do.
 *
 *   echo tcp PORT     every byte read on a connection is written back
 *                     (a connection that cannot take more output stops being read
 *                     until it drains, so memory stays bounded)
 *   echo udp PORT     every datagram is sent back to its sender
 *   echo ws PORT      WebSocket (RFC 6455): answers any Upgrade with 101, then sends every
 *                     data frame back unmasked with its opcode; ping -> pong, close -> close
 *
 * Listens on 127.0.0.1 only.  SIGTERM/SIGINT exit cleanly.  Built by bench/run
 * with `cc -std=c17 -O2 -Wall -Wextra -Wpedantic ... -lcrypto` (a warning fails the build).
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
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/evp.h>

enum { MAX_FDS = 65536, BUF = 65536, MAX_EVENTS = 256, UDP_BATCH = 64, UDP_MAX = 65536 };

struct conn {
    char *buf; /* unsent bytes [off, len) */
    size_t off, len;
    /* ws only */
    char *in; /* received, not yet processed: [0, ilen) */
    size_t ilen;
    size_t cap; /* of buf (ws grows it) */
    int open;   /* 101 sent */
};

enum { WS_IN_MAX = (1 << 20) + 64 };

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
    free(conns[fd].in);
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

/* ---- WebSocket ---- */

static int out_append(struct conn *c, const void *p, size_t n)
{
    if (c->len + n > c->cap) {
        size_t cap = c->cap ? c->cap : 65536;
        while (cap < c->len + n) cap *= 2;
        char *b = realloc(c->buf, cap);
        if (!b) return -1;
        c->buf = b;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, p, n);
    c->len += n;
    return 0;
}

/* The 101 response for the head in c->in[0, n); -1 if it is not a WebSocket upgrade. */
static int ws_accept(struct conn *c, size_t n)
{
    static const char name[] = "sec-websocket-key:";
    const char *key = NULL;
    size_t klen = 0;
    for (size_t i = 0; i + sizeof(name) - 1 < n; i++) {
        if ((i == 0 || c->in[i - 1] == '\n') && !strncasecmp(c->in + i, name, sizeof(name) - 1)) {
            key = c->in + i + sizeof(name) - 1;
            while (*key == ' ') key++;
            while (key + klen < c->in + n && key[klen] != '\r') klen++;
            break;
        }
    }
    if (!key || !klen || klen > 64) return -1;
    char buf[128];
    memcpy(buf, key, klen);
    memcpy(buf + klen, "258EAFA5-E914-47DA-95CA-C5AB0DC85B11", 36);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    if (!EVP_Digest(buf, klen + 36, md, &mdlen, EVP_sha1(), NULL)) return -1;
    unsigned char b64[64];
    EVP_EncodeBlock(b64, md, (int)mdlen);
    char resp[256];
    int rn = snprintf(resp, sizeof(resp),
                      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                      (char *)b64);
    return out_append(c, resp, (size_t)rn);
}

/* Processes complete frames in c->in; 0, 1 = close the connection after flushing, -1 error. */
static int ws_frames(struct conn *c)
{
    size_t pos = 0;
    int closing = 0;
    while (c->ilen - pos >= 2) {
        unsigned char *f = (unsigned char *)c->in + pos;
        size_t avail = c->ilen - pos, hl = 2;
        uint64_t len = f[1] & 0x7f;
        if (len == 126) {
            if (avail < 4) break;
            len = (uint64_t)f[2] << 8 | f[3];
            hl = 4;
        } else if (len == 127) {
            if (avail < 10) break;
            len = 0;
            for (int i = 0; i < 8; i++) len = len << 8 | f[2 + i];
            hl = 10;
        }
        int masked = f[1] & 0x80;
        if (!masked || len > WS_IN_MAX - 14) return -1; /* clients must mask */
        if (avail < hl + 4 + len) break;
        unsigned char *mask = f + hl, *p = f + hl + 4;
        for (uint64_t i = 0; i < len; i++) p[i] ^= mask[i & 3];
        unsigned op = f[0] & 0x0f;
        unsigned char h[10];
        size_t on = 2;
        h[0] = (unsigned char)(0x80 | (op == 0x9 ? 0xA : op));
        if (len < 126) {
            h[1] = (unsigned char)len;
        } else if (len < 65536) {
            h[1] = 126, h[2] = (unsigned char)(len >> 8), h[3] = (unsigned char)len, on = 4;
        } else {
            h[1] = 127, on = 10;
            for (int i = 0; i < 8; i++) h[2 + i] = (unsigned char)(len >> (56 - 8 * i));
        }
        if (op != 0xA) { /* a pong from the client needs no answer */
            if (out_append(c, h, on) < 0 || out_append(c, p, (size_t)len) < 0) return -1;
        }
        pos += hl + 4 + (size_t)len;
        if (op == 0x8) {
            closing = 1;
            break;
        }
    }
    memmove(c->in, c->in + pos, c->ilen - pos);
    c->ilen -= pos;
    return closing;
}

static void ws_readable(int ep, int fd)
{
    struct conn *c = &conns[fd];
    if (!c->in && !(c->in = malloc(WS_IN_MAX))) die("malloc");
    for (;;) {
        if (c->ilen == WS_IN_MAX) {
            close_conn(fd); /* a frame larger than we take */
            return;
        }
        ssize_t n = read(fd, c->in + c->ilen, WS_IN_MAX - c->ilen);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            close_conn(fd);
            return;
        }
        if (n < 0) break;
        c->ilen += (size_t)n;
        if (!c->open) {
            char *e = memmem(c->in, c->ilen, "\r\n\r\n", 4);
            if (!e) continue;
            size_t hn = (size_t)(e - c->in) + 4;
            if (ws_accept(c, hn) < 0) {
                close_conn(fd);
                return;
            }
            memmove(c->in, c->in + hn, c->ilen - hn);
            c->ilen -= hn;
            c->open = 1;
        }
        int r = ws_frames(c);
        if (r < 0) {
            close_conn(fd);
            return;
        }
        int w = flush_conn(fd);
        if (w < 0 || (r == 1 && w == 1)) {
            close_conn(fd);
            return;
        }
        if (w == 0) {
            struct epoll_event ev = {.events = EPOLLOUT, .data.fd = fd};
            epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
            return;
        }
    }
}

static void run_tcp(long port, int ws)
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
            } else if (ws) {
                ws_readable(ep, fd);
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
            sendmmsg(fd, msgs, (unsigned)n,
                     MSG_DONTWAIT); /* a dropped reply is the client's loss */
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "tcp") && strcmp(argv[1], "udp") && strcmp(argv[1], "ws"))) {
        fprintf(stderr, "usage: echo tcp|udp|ws PORT\n");
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
    if (argv[1][0] != 'u')
        run_tcp(port, argv[1][0] == 'w');
    else
        run_udp(port);
    return 0;
}
