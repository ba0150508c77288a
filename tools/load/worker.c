/* One epoll loop per thread: sockets, TLS, timers, closed/open-loop scheduling, accounting. */
#include "fl.h"

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>
#include <openssl/err.h>

#define TICK_NS 10000000ull   /* timers and reconnects are checked every 10 ms */
#define RETRY_NS 100000000ull /* reconnect delay after a failed connect/handshake */
#define MAX_EVENTS 256

const char *const fl_err_names[FL_ERR_MAX] = {"connect", "tls",   "status", "body",
                                              "parse",   "reset", "timeout"};

uint64_t fl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool measuring(const fl_worker_t *w)
{
    return w->now >= w->measure_start && w->now < w->end && !w->stopping;
}

static bool budget_left(const fl_worker_t *w)
{
    return w->budget == 0 || w->issued < w->budget;
}

void fl_finish(fl_conn_t *c, uint64_t t_start, int status, uint64_t body, int err)
{
    fl_worker_t *w = c->w;
    w->now = fl_now_ns();
    c->inflight--;
    w->finished++;
    if (!measuring(w)) return;
    fl_stats_t *st = &w->st;
    st->requests++;
    st->body_bytes += body;
    if (fl_cfg.proto == FL_H1 || fl_cfg.proto == FL_H2 || fl_cfg.proto == FL_H3) {
        st->status[status >= 100 && status < 600 ? status / 100 : 0]++;
        if (err < 0 && (fl_cfg.expect_status ? status != fl_cfg.expect_status
                                             : (status < 200 || status > 299)))
            err = FL_ERR_STATUS;
    }
    if (err < 0 && fl_cfg.expect_bytes >= 0 && body != (uint64_t)fl_cfg.expect_bytes)
        err = FL_ERR_BODY;
    if (err < 0)
        st->ok++;
    else
        st->errors[err]++;
    fl_hist_record(&st->hist, w->now > t_start ? w->now - t_start : 0);
    __atomic_store_n(&w->progress, st->requests, __ATOMIC_RELAXED);
    if (err >= 0) __atomic_add_fetch(&w->progress_err, 1, __ATOMIC_RELAXED);
}

void fl_count_error(fl_conn_t *c, int err, uint64_t n)
{
    fl_worker_t *w = c->w;
    if (n == 0) return;
    if (measuring(w)) {
        w->st.errors[err] += n;
        __atomic_add_fetch(&w->progress_err, n, __ATOMIC_RELAXED);
    }
}

void fl_unissue(fl_conn_t *c)
{
    c->inflight--;
    c->w->issued--;
}

void fl_conn_want_flush(fl_conn_t *c)
{
    if (c->dirty) return;
    c->dirty = true;
    c->w->flush[c->w->nflush++] = c;
}

static void conn_start(fl_conn_t *c);

/* Closes the transport. Requests still in flight are lost: counted as `lost_err` unless the
 * run is stopping. The connection is reopened at once, or after RETRY_NS when `backoff`. */
static void conn_close(fl_conn_t *c, int lost_err, bool backoff)
{
    fl_worker_t *w = c->w;
    /* the codec first gives back requests the peer provably never processed */
    if (c->state == FL_CONN_READY && c->ops->reset) c->ops->reset(c);
    if (c->inflight && !w->stopping) {
        fl_count_error(c, lost_err, c->inflight);
        w->finished += c->inflight; /* they count toward -n as failed */
    }
    c->inflight = 0;
    if (c->ssl) {
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->state = FL_CONN_IDLE;
    c->ilen = c->ipos = c->ostart = c->oend = 0;
    c->draining = false;
    c->writable = true;
    if (w->stopping) return;
    c->retry_at = backoff ? w->now + RETRY_NS : 0;
    if (!backoff) conn_start(c);
}

/* A connect or TLS failure consumes one request of a -n budget, so a dead server ends a run. */
static void conn_fail_setup(fl_conn_t *c, int err)
{
    fl_worker_t *w = c->w;
    if (w->budget) {
        if (w->issued >= w->budget) { /* the budget is spent: nothing left to fail */
            conn_close(c, FL_ERR_RESET, true);
            return;
        }
        w->issued++;
        w->finished++;
    }
    fl_count_error(c, err, 1);
    conn_close(c, FL_ERR_RESET, true);
}

static void conn_fill(fl_conn_t *c)
{
    fl_worker_t *w = c->w;
    if (fl_cfg.rate > 0 || c->state != FL_CONN_READY) return;
    bool any = false;
    while (!w->stopping && !c->draining && budget_left(w) && c->ops->can_issue(c)) {
        c->inflight++;
        w->issued++;
        if (c->ops->issue(c, fl_now_ns()) < 0) {
            fl_unissue(c);
            break;
        }
        any = true;
    }
    if (any) fl_conn_want_flush(c);
}

static void conn_ready(fl_conn_t *c)
{
    c->state = FL_CONN_READY;
    c->ever_ready = true;
    c->writable = true;
    c->w->st.connects++;
    if (c->ops->on_ready(c) < 0) {
        conn_close(c, FL_ERR_RESET, true);
        return;
    }
    conn_fill(c);
    fl_conn_want_flush(c);
}

static void tls_step(fl_conn_t *c)
{
    int r = SSL_do_handshake(c->ssl);
    c->last_progress = c->w->now;
    if (r == 1) {
        const unsigned char *alpn = NULL;
        unsigned alen = 0;
        SSL_get0_alpn_selected(c->ssl, &alpn, &alen);
        bool h2 = alen == 2 && memcmp(alpn, "h2", 2) == 0;
        if ((fl_cfg.proto == FL_H2) != h2) {
            conn_fail_setup(c, FL_ERR_TLS);
            return;
        }
        conn_ready(c);
        return;
    }
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
    ERR_clear_error();
    conn_fail_setup(c, FL_ERR_TLS);
}

static void conn_tunneled(fl_conn_t *c);

/* --proxy: the CONNECT request; the reply is read by tunnel_step */
static void tunnel_start(fl_conn_t *c)
{
    char req[700], vary[64];
    const char *auth = fl_cfg.authority;
    if (fl_cfg.connect_hosts) { /* a new host per connection (one thread counts for all) */
        static _Atomic uint32_t next;
        uint32_t a = fl_cfg.connect_base + next++ % fl_cfg.connect_hosts;
        snprintf(vary, sizeof(vary), "%u.%u.%u.%u:%s", a >> 24, (a >> 16) & 255u, (a >> 8) & 255u,
                 a & 255u, fl_cfg.port);
        auth = vary;
    }
    int n = snprintf(req, sizeof(req), "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", auth, auth);
    /* a fresh socket's send buffer takes these few bytes whole */
    if (n <= 0 || write(c->fd, req, (size_t)n) != n) {
        conn_fail_setup(c, FL_ERR_CONNECT);
        return;
    }
    c->state = FL_CONN_TUNNEL;
    c->ilen = c->ipos = 0;
}

static void tunnel_step(fl_conn_t *c)
{
    for (;;) {
        if (c->ilen == FL_IBUF_SIZE) break;
        ssize_t n = read(c->fd, c->ibuf + c->ilen, FL_IBUF_SIZE - c->ilen);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (n <= 0) break;
        c->ilen += (size_t)n;
        c->last_progress = c->w->now;
        uint8_t *e = memmem(c->ibuf, c->ilen, "\r\n\r\n", 4);
        if (!e) continue;
        size_t hn = (size_t)(e - c->ibuf) + 4;
        if (c->ilen < 12 || memcmp(c->ibuf, "HTTP/1.", 7) || c->ibuf[9] != '2') break;
        /* bytes the origin sent right behind the proxy's reply stay for the protocol */
        memmove(c->ibuf, c->ibuf + hn, c->ilen - hn);
        c->ilen -= hn;
        if (c->ilen && fl_cfg.tls) break; /* TLS reads the socket itself: nothing may precede */
        conn_tunneled(c);
        return;
    }
    c->ilen = c->ipos = 0;
    conn_fail_setup(c, FL_ERR_CONNECT);
}

static void conn_connected(fl_conn_t *c)
{
    if (fl_cfg.proxy_connect) {
        tunnel_start(c);
        return;
    }
    conn_tunneled(c);
}

static void conn_tunneled(fl_conn_t *c)
{
    if (!fl_cfg.tls) {
        conn_ready(c);
        return;
    }
    c->ssl = SSL_new(fl_cfg.ssl_ctx);
    if (!c->ssl) {
        conn_fail_setup(c, FL_ERR_TLS);
        return;
    }
    SSL_set_fd(c->ssl, c->fd);
    SSL_set_connect_state(c->ssl);
    struct in6_addr a6;
    struct in_addr a4;
    if (inet_pton(AF_INET, fl_cfg.host, &a4) != 1 && inet_pton(AF_INET6, fl_cfg.host, &a6) != 1)
        SSL_set_tlsext_host_name(c->ssl, fl_cfg.host);
    if (!fl_cfg.insecure) SSL_set1_host(c->ssl, fl_cfg.host);
    c->state = FL_CONN_HANDSHAKE;
    tls_step(c);
}

static void conn_start(fl_conn_t *c)
{
    fl_worker_t *w = c->w;
    bool udp = fl_cfg.proto == FL_UDP_ECHO;
    c->fd = socket(fl_cfg.addr.ss_family,
                   (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    c->last_progress = w->now;
    if (c->fd < 0) {
        conn_fail_setup(c, FL_ERR_CONNECT);
        return;
    }
    if (!udp) {
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    c->state = FL_CONN_CONNECTING;
    int r = connect(c->fd, (struct sockaddr *)&fl_cfg.addr, fl_cfg.addrlen);
    if (r < 0 && errno != EINPROGRESS) {
        conn_fail_setup(c, FL_ERR_CONNECT);
        return;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        conn_fail_setup(c, FL_ERR_CONNECT);
        return;
    }
    if (r == 0) conn_connected(c);
}

static void conn_flush(fl_conn_t *c)
{
    while (c->state == FL_CONN_READY && c->writable) {
        if (c->ostart == c->oend) {
            c->ostart = c->oend = 0;
            if (c->ops->fill_obuf(c) < 0) {
                fl_count_error(c, FL_ERR_PARSE, 1);
                conn_close(c, FL_ERR_RESET, false);
                return;
            }
            if (c->oend == 0) return;
        }
        size_t len = c->oend - c->ostart;
        ssize_t n;
        if (c->ssl) {
            int r = SSL_write(c->ssl, c->obuf + c->ostart, (int)len);
            if (r <= 0) {
                int e = SSL_get_error(c->ssl, r);
                if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
                    c->writable = false;
                    return;
                }
                ERR_clear_error();
                conn_close(c, FL_ERR_RESET, false);
                return;
            }
            n = r;
        } else {
            n = send(c->fd, c->obuf + c->ostart, len, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN) {
                    c->writable = false;
                    return;
                }
                if (fl_cfg.proto == FL_UDP_ECHO && errno == ECONNREFUSED) {
                    conn_fail_setup(c, FL_ERR_CONNECT);
                    return;
                }
                conn_close(c, FL_ERR_RESET, false);
                return;
            }
        }
        c->ostart += (size_t)n;
    }
}

static void conn_eof(fl_conn_t *c)
{
    if (c->ops->on_eof && c->ops->on_eof(c) < 0) {
        conn_close(c, FL_ERR_RESET, false);
        return;
    }
    /* A peer that closes an idle keep-alive connection is not an error; with requests in
     * flight it is a reset. */
    conn_close(c, FL_ERR_RESET, false);
}

static void conn_read(fl_conn_t *c, uint32_t ev)
{
    fl_worker_t *w = c->w;
    for (;;) {
        if (c->ipos == c->ilen) {
            c->ipos = c->ilen = 0;
        } else if (c->ilen == FL_IBUF_SIZE) {
            if (c->ipos == 0) { /* a response head larger than the buffer */
                fl_count_error(c, FL_ERR_PARSE, 1);
                conn_close(c, FL_ERR_RESET, false);
                return;
            }
            memmove(c->ibuf, c->ibuf + c->ipos, c->ilen - c->ipos);
            c->ilen -= c->ipos;
            c->ipos = 0;
        }
        size_t space = FL_IBUF_SIZE - c->ilen;
        ssize_t n;
        if (c->ssl) {
            int r = SSL_read(c->ssl, c->ibuf + c->ilen, (int)space);
            if (r <= 0) {
                int e = SSL_get_error(c->ssl, r);
                if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
                ERR_clear_error();
                conn_eof(c); /* close_notify, or a TCP close/reset under TLS */
                return;
            }
            n = r;
        } else {
            n = recv(c->fd, c->ibuf + c->ilen, space, 0);
            if (n < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN) return;
                if (fl_cfg.proto == FL_UDP_ECHO && errno == ECONNREFUSED) {
                    conn_fail_setup(c, FL_ERR_CONNECT);
                    return;
                }
                conn_close(c, FL_ERR_RESET, false);
                return;
            }
            if (n == 0 && fl_cfg.proto != FL_UDP_ECHO) {
                conn_eof(c);
                return;
            }
        }
        w->now = fl_now_ns();
        c->last_progress = w->now;
        if (measuring(w)) w->st.bytes += (uint64_t)n;
        c->ilen += (size_t)n;
        if (c->ops->on_data(c) < 0) {
            conn_close(c, FL_ERR_RESET, false);
            return;
        }
        if (c->draining && c->inflight == 0) {
            conn_close(c, FL_ERR_RESET, false);
            return;
        }
        conn_fill(c);
        /* edge-triggered: a short read drained the socket (not so for datagrams or TLS, nor
         * when the peer's FIN is already queued: its edge has been consumed) */
        if (!c->ssl && fl_cfg.proto != FL_UDP_ECHO && (size_t)n < space &&
            !(ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
            return;
    }
}

static void on_event(fl_conn_t *c, uint32_t ev)
{
    switch (c->state) {
    case FL_CONN_CONNECTING: {
        int err = 0;
        socklen_t l = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0) err = errno;
        if (err) {
            conn_fail_setup(c, FL_ERR_CONNECT);
        } else if (ev & EPOLLOUT) {
            conn_connected(c);
        }
        break;
    }
    case FL_CONN_TUNNEL:
        if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) tunnel_step(c);
        break;
    case FL_CONN_HANDSHAKE:
        tls_step(c);
        break;
    case FL_CONN_READY:
        c->writable = true;
        if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) conn_read(c, ev);
        if (c->state == FL_CONN_READY) fl_conn_want_flush(c);
        break;
    case FL_CONN_IDLE:
        break;
    }
}

/* Open loop: hand every request whose scheduled time has come to a connection with room. */
static void pump_schedule(fl_worker_t *w)
{
    while (!w->stopping && w->next_sched <= w->now && budget_left(w)) {
        fl_conn_t *c = NULL;
        for (int k = 0; k < w->nconns; k++) {
            fl_conn_t *x = &w->conns[(w->rr + k) % w->nconns];
            if (x->state == FL_CONN_READY && !x->draining && x->ops->can_issue(x)) {
                c = x;
                w->rr = (w->rr + k + 1) % w->nconns;
                break;
            }
        }
        if (!c) return; /* backlog: stays due; its latency keeps growing from next_sched */
        c->inflight++;
        w->issued++;
        if (c->ops->issue(c, w->next_sched) < 0) {
            fl_unissue(c);
            return;
        }
        w->next_sched += w->interval_ns;
        fl_conn_want_flush(c);
    }
}

static void tick(fl_worker_t *w)
{
    uint64_t tmo = (uint64_t)(fl_cfg.timeout * 1e9);
    for (int i = 0; i < w->nconns && !w->stopping; i++) {
        fl_conn_t *c = &w->conns[i];
        switch (c->state) {
        case FL_CONN_IDLE:
            if (w->now >= c->retry_at) conn_start(c);
            break;
        case FL_CONN_CONNECTING:
        case FL_CONN_TUNNEL:
        case FL_CONN_HANDSHAKE:
            if (w->now - c->last_progress > tmo)
                conn_fail_setup(c, c->state == FL_CONN_HANDSHAKE ? FL_ERR_TLS : FL_ERR_CONNECT);
            break;
        case FL_CONN_READY:
            if (c->inflight && w->now - c->last_progress > tmo)
                conn_close(c, FL_ERR_TIMEOUT, false);
            else if (c->draining && c->inflight == 0)
                conn_close(c, FL_ERR_RESET, false);
            else
                conn_fill(c);
            break;
        }
    }
}

static bool done(fl_worker_t *w)
{
    if (w->now >= w->end) return true;
    return w->budget && w->finished >= w->budget;
}

void *fl_worker_run(void *arg)
{
    fl_worker_t *w = arg;
    struct epoll_event evs[MAX_EVENTS];
    const struct fl_proto_ops *ops = fl_cfg.proto == FL_H1         ? &fl_h1_ops
                                     : fl_cfg.proto == FL_H2       ? &fl_h2_ops
                                     : fl_cfg.proto == FL_TCP_ECHO ? &fl_tcp_echo_ops
                                     : fl_cfg.proto == FL_WS_ECHO  ? &fl_ws_echo_ops
                                                                   : &fl_udp_echo_ops;
    for (int i = 0; i < w->nconns; i++) {
        fl_conn_t *c = &w->conns[i];
        c->w = w;
        c->ops = ops;
        c->fd = -1;
        c->idx = i;
    }
    while ((w->now = fl_now_ns()) < w->t0) {
        struct timespec ts = {0, (long)(w->t0 - w->now)};
        nanosleep(&ts, NULL);
    }
    w->next_sched = w->t0 + (w->interval_ns * (uint64_t)w->id) / (uint64_t)fl_cfg.threads;
    for (int i = 0; i < w->nconns; i++) conn_start(&w->conns[i]);
    uint64_t next_tick = w->now + TICK_NS;
    int use_pwait2 = 1;
    while (!done(w)) {
        uint64_t deadline = next_tick < w->end ? next_tick : w->end;
        if (fl_cfg.rate > 0 && w->next_sched > w->now && w->next_sched < deadline)
            deadline = w->next_sched;
        uint64_t wait = deadline > w->now ? deadline - w->now : 0;
        for (int i = 0; i < w->nflush; i++) { /* flush before sleeping */
            fl_conn_t *c = w->flush[i];
            c->dirty = false;
            conn_flush(c);
        }
        w->nflush = 0;
        int n;
        if (use_pwait2) {
            struct timespec ts = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
            n = epoll_pwait2(w->epfd, evs, MAX_EVENTS, &ts, NULL);
            if (n < 0 && errno == ENOSYS) {
                use_pwait2 = 0;
                continue;
            }
        } else {
            n = epoll_wait(w->epfd, evs, MAX_EVENTS, (int)((wait + 999999) / 1000000));
        }
        w->now = fl_now_ns();
        for (int i = 0; i < n; i++) on_event(evs[i].data.ptr, evs[i].events);
        w->now = fl_now_ns();
        if (fl_cfg.rate > 0) pump_schedule(w);
        if (w->now >= next_tick) {
            tick(w);
            next_tick = w->now + TICK_NS;
        }
        if (w->nflush == 0 && n == 0) continue;
    }
    w->finish_ns = w->now < w->end ? w->now : w->end;
    w->stopping = true;
    for (int i = 0; i < w->nconns; i++)
        if (w->conns[i].state != FL_CONN_IDLE) conn_close(&w->conns[i], FL_ERR_RESET, false);
    return NULL;
}
