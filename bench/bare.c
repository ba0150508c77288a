/*
 * bare.c — the benchmark "floor": the least a single-threaded epoll HTTP/1.1
 * responder can do per request.  It does no parsing at all: every "\r\n\r\n"
 * seen on a connection produces one fixed response; connections stay open
 * (keep-alive) until the peer closes them.
 *
 *   bare PORT              respond "Hello, world!" (13 bytes, text/plain)
 *   bare PORT BODYFILE     respond with BODYFILE's bytes, read once at start
 *                          (application/octet-stream): the floor for a small
 *                          cached file
 *
 * Listens on 127.0.0.1 only.  SIGTERM/SIGINT exit cleanly (so callgrind and
 * strace -c can write their summaries).  Built by bench/run.py with
 * `cc -std=c17 -O2 -Wall -Wextra -Wpedantic`.
 *
 * Per request in the steady state: one epoll_wait, one read, one write.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

enum {
    MAX_FDS = 65536,
    READ_BUF = 16384,
    MAX_EVENTS = 256,
    MAX_IOV = 64,
    MAX_ACCEPTS_PER_EVENT = 256,
    MAX_BODY = 1 << 24
};

struct conn {
    unsigned char match; /* bytes of "\r\n\r\n" matched so far: 0..3 */
    unsigned char open;
    unsigned long pending; /* responses owed, including a partly written one */
    size_t off;            /* bytes of the first owed response already written */
};

static struct conn conns[MAX_FDS];
static char *resp;
static size_t resp_len;
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

static void build_response(const char *body_file)
{
    static const char hello[] = "Hello, world!";
    const char *ctype = "text/plain";
    char *body = NULL;
    size_t body_len = sizeof hello - 1;

    if (body_file) {
        int fd = open(body_file, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) die(body_file);
        if (st.st_size < 0 || st.st_size > MAX_BODY) {
            fprintf(stderr, "bare: %s: too large\n", body_file);
            exit(1);
        }
        body_len = (size_t)st.st_size;
        body = malloc(body_len ? body_len : 1);
        if (!body) die("malloc");
        size_t got = 0;
        while (got < body_len) {
            ssize_t n = read(fd, body + got, body_len - got);
            if (n <= 0) die("read body");
            got += (size_t)n;
        }
        close(fd);
        ctype = "application/octet-stream";
    }

    char head[160];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nContent-Type: %s\r\n\r\n",
                      body_len, ctype);
    if (hl < 0 || (size_t)hl >= sizeof head) die("snprintf");
    resp_len = (size_t)hl + body_len;
    resp = malloc(resp_len);
    if (!resp) die("malloc");
    memcpy(resp, head, (size_t)hl);
    memcpy(resp + hl, body ? body : hello, body_len);
    free(body);
}

static void close_conn(int fd)
{
    conns[fd] = (struct conn){0};
    close(fd); /* also removes it from the epoll set */
}

/* Count "\r\n\r\n" in buf, carrying the partial match across reads. */
static unsigned long count_requests(struct conn *c, const char *buf, size_t n)
{
    unsigned long found = 0;
    unsigned m = c->match;
    for (size_t i = 0; i < n; i++) {
        char want = (m & 1) ? '\n' : '\r';
        if (buf[i] == want) {
            if (++m == 4) {
                found++;
                m = 0;
            }
        } else {
            m = buf[i] == '\r' ? 1 : 0;
        }
    }
    c->match = (unsigned char)m;
    return found;
}

/* Write what is owed.  Returns 0 when drained, 1 when the socket is full, -1 on error. */
static int flush_conn(int fd, struct conn *c)
{
    for (int rounds = 0; c->pending > 0 && rounds < 1024; rounds++) {
        ssize_t n;
        if (c->pending == 1) {
            n = write(fd, resp + c->off, resp_len - c->off);
        } else {
            struct iovec iov[MAX_IOV];
            int cnt = 0;
            iov[cnt++] = (struct iovec){resp + c->off, resp_len - c->off};
            while ((unsigned long)cnt < c->pending && cnt < MAX_IOV)
                iov[cnt++] = (struct iovec){resp, resp_len};
            n = writev(fd, iov, cnt);
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
            if (errno == EINTR) continue;
            return -1;
        }
        size_t left = (size_t)n;
        while (left > 0 && c->pending > 0) {
            size_t rest = resp_len - c->off;
            if (left >= rest) {
                left -= rest;
                c->off = 0;
                c->pending--;
            } else {
                c->off += left;
                left = 0;
            }
        }
    }
    return c->pending > 0 ? 1 : 0;
}

static void set_events(int ep, int fd, unsigned events)
{
    struct epoll_event ev = {.events = events, .data.fd = fd};
    if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) != 0) close_conn(fd);
}

static void on_readable(int ep, int fd)
{
    static char buf[READ_BUF];
    struct conn *c = &conns[fd];
    ssize_t n = read(fd, buf, sizeof buf); /* level-triggered: one read per event */
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close_conn(fd);
        return;
    }
    if (n < 0) return;
    c->pending += count_requests(c, buf, (size_t)n);
    if (c->pending == 0) return;
    int r = flush_conn(fd, c);
    if (r < 0)
        close_conn(fd);
    else if (r > 0)
        set_events(ep, fd, EPOLLOUT); /* stop reading until the peer drains us */
}

static void on_writable(int ep, int fd)
{
    struct conn *c = &conns[fd];
    int r = flush_conn(fd, c);
    if (r < 0)
        close_conn(fd);
    else if (r == 0)
        set_events(ep, fd, EPOLLIN);
}

static void on_accept(int ep, int lfd)
{
    for (int i = 0; i < MAX_ACCEPTS_PER_EVENT; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
                perror("accept4");
            return;
        }
        if (fd >= MAX_FDS) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conns[fd] = (struct conn){.open = 1};
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) close_conn(fd);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: bare PORT [BODYFILE]\n");
        return 2;
    }
    char *end;
    long port = strtol(argv[1], &end, 10);
    if (*end || port < 1 || port > 65535) {
        fprintf(stderr, "bare: bad port: %s\n", argv[1]);
        return 2;
    }
    build_response(argc == 3 ? argv[2] : NULL);

    struct sigaction sa = {0};
    sa.sa_handler = on_signal; /* no SA_RESTART: epoll_wait returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0) die("bind");
    if (listen(lfd, 1024) != 0) die("listen");

    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    struct epoll_event lev = {.events = EPOLLIN, .data.fd = lfd};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) != 0) die("epoll_ctl");
    fprintf(stderr, "bare: listening on 127.0.0.1:%ld (%zu-byte response)\n", port, resp_len);

    struct epoll_event evs[MAX_EVENTS];
    while (!stop) {
        int n = epoll_wait(ep, evs, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                on_accept(ep, lfd);
                continue;
            }
            if (!conns[fd].open) continue; /* closed earlier in this batch */
            if (evs[i].events & EPOLLOUT)
                on_writable(ep, fd);
            else if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                on_readable(ep, fd);
        }
    }
    for (int fd = 0; fd < MAX_FDS; fd++)
        if (conns[fd].open) close(fd);
    close(ep);
    close(lfd);
    free(resp);
    return 0;
}
