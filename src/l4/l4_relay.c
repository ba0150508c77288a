/* Layer-4 TCP byte relay: pooled buffers, splice for bulk, TLS ends, half-closes. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/pool.h"
#include "l4/l4_tcp.h"
#include "net/sock.h"
#include "tls/tls.h"

/* ---- relay ---- */

static bool pending(const tcp_sess_t *s, const dir_t *d)
{
    return d->inpipe > 0 || d->len > d->off;
}

static uint32_t want_ev(const fy_transport_t *t, uint32_t plain)
{
    if (!t->is_tls) return plain;
    return t->want & FY_WANT_WRITE ? EPOLLOUT : EPOLLIN;
}

/* The calling worker's free PLAIN_BUF buffers (a few: a direction holds one only while
   bytes are in flight). */
fy_pool_t *fy__l4_plain_pool(void)
{
    static __thread fy_pool_t pool = {PLAIN_BUF, 16, NULL, 0};
    return &pool;
}

/* An empty buffer goes back to the pool: idle sessions hold no chunk. */
static void release_buf(dir_t *d)
{
    if (d->buf && d->len == d->off) {
        fy_pool_put(d->pool, d->buf);
        d->buf = NULL;
        d->len = d->off = 0;
    }
}

/* Plain sockets are read and written with recv/send rather than through the transport's
 * read/writev: the socket calls skip the VFS layer (iovec import, fsnotify), which is a
 * measurable share of a small relayed message. Same results as the transport ops. */
static ssize_t end_read(end_t *e, void *buf, size_t len)
{
    if (e->t->is_tls) return e->t->ops->read(e->t, buf, len);
    ssize_t n = recv(e->io.fd, buf, len, 0);
    if (n > 0) return n;
    if (n == 0) return FY_EEOF;
    return errno == EAGAIN || errno == EINTR ? 0 : -errno;
}

static ssize_t end_write(end_t *e, const void *buf, size_t len)
{
    if (e->t->is_tls) {
        struct iovec iov = {(void *)buf, len};
        return e->t->ops->writev(e->t, &iov, 1);
    }
    ssize_t n = send(e->io.fd, buf, len, MSG_NOSIGNAL);
    if (n >= 0) return n;
    return errno == EAGAIN || errno == EINTR ? 0 : -errno;
}

/* Move bytes src -> dst until something would block. Returns 1 on progress, 0 none, -1 on a
 * fatal error. */
int fy__l4_pump(tcp_sess_t *s, dir_t *d, end_t *src, end_t *dst)
{
    int progress = 0;
    bool drained = false; /* a plain socket gave less than asked: wait for epoll */
    d->wait_src = d->wait_dst = 0;
    if (d->shut) return 0;
    for (;;) {
        if (pending(s, d)) {
            ssize_t n;
            bool from_pipe = d->inpipe > 0;
            if (from_pipe) {
                n = splice(d->pipe[0], NULL, dst->io.fd, NULL, d->inpipe,
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n < 0) n = errno == EAGAIN || errno == EINTR ? 0 : -errno;
            } else {
                n = end_write(dst, d->buf + d->off, d->len - d->off);
            }
            if (n < 0) return -1;
            if (n == 0) {
                d->wait_dst = want_ev(dst->t, EPOLLOUT);
                return progress;
            }
            progress = 1;
            fy_counter_add(s->wl->l->cid_bytes[d == &s->down], (uint64_t)n);
            if (from_pipe)
                d->inpipe -= (size_t)n;
            else if ((d->off += (size_t)n) == d->len)
                d->off = d->len = 0;
            continue;
        }
        if (d->eof) break;
        if (drained) { /* saves the read that would only say EAGAIN (level-triggered) */
            d->wait_src = EPOLLIN;
            release_buf(d);
            return progress;
        }
        ssize_t n;
        if (!d->use_pipe && !d->buf) {
            d->pool = s->splice ? fy__l4_plain_pool() : fy_chunk_pool();
            d->buf = fy_pool_get(d->pool);
        }
        if (d->use_pipe) {
            n = splice(src->io.fd, NULL, d->pipe[1], NULL, PIPE_CHUNK,
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (n == 0)
                n = FY_EEOF;
            else if (n < 0)
                n = errno == EAGAIN || errno == EINTR ? 0 : -errno;
        } else {
            n = end_read(src, d->buf, d->pool->size);
        }
        if (n == FY_EEOF) {
            d->eof = true;
            progress = 1;
            break;
        }
        if (n < 0) return -1;
        if (n == 0) {
            d->wait_src = want_ev(src->t, EPOLLIN);
            release_buf(d);
            return progress;
        }
        progress = 1;
        /* a short recv means the receive queue is empty; a short splice does not (the pipe
           runs out of slots, one per skb fragment): that one reads on until EAGAIN */
        /* ... nor does one after the peer's FIN came in: edge-triggered epoll will not report
           it again, so read on until recv says EOF */
        /* TLS: drained when the library's last socket read was short and it holds no
           record (saves the read that would only say EAGAIN, and the SSL_read around it) */
        drained = !d->use_pipe && !src->fin &&
                  (src->t->is_tls ? fy_tls_read_drained(src->t) : (size_t)n < d->pool->size);
        if (d->use_pipe) {
            d->inpipe = (size_t)n;
        } else {
            d->len = (size_t)n;
            /* bulk: zero-copy from now on (small messages cost less through the buffer) */
            if (s->splice && (size_t)n == d->pool->size &&
                pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) == 0)
                d->use_pipe = true;
        }
    }
    /* src ended and everything was written: pass the half-close on */
    if (d->eof && !pending(s, d) && !d->shut) {
        dst->t->ops->shutdown(dst->t);
        d->shut = true;
    }
    return progress;
}

/* Pump the directions an event concerns. */
void fy__l4_relay(tcp_sess_t *s, bool up, bool down)
{
    if (s->state == S_HANDSHAKE) {
        fy__l4_handshake(s);
        return;
    }
    if (s->state != S_RELAY) return;
    int a = up ? fy__l4_pump(s, &s->up, &s->c, &s->o) : 0;
    if (a < 0) {
        fy__l4_sess_close(s, "client side error");
        return;
    }
    int b = down ? fy__l4_pump(s, &s->down, &s->o, &s->c) : 0;
    if (b < 0) {
        fy__l4_sess_close(s, "origin side error");
        return;
    }
    if (s->up.shut && s->down.shut) {
        fy__l4_sess_close(s, NULL);
        return;
    }
    if (a || b) fy_timer_start(s->wl->w->loop, &s->timer, s->wl->l->conf->idle_timeout_ms);
    fy__l4_mem_sync(s, false);
    /* Both ends are edge-triggered: a direction only stops reading on EAGAIN, on a short
       plain read (the receive queue was empty: later bytes raise a new edge) or when its
       destination blocks (then the mask changes, and EPOLL_CTL_MOD re-polls). That spares
       the kernel the re-poll a level-triggered item costs after every event. A TLS end is
       read until the library says WANT_READ (its socket said EAGAIN), so records the
       library holds are never left behind while the direction waits for its source; when
       it waits for its destination instead, that end's readiness resumes it and it reads
       the held records first. */
    uint32_t cm = s->up.wait_src | s->down.wait_dst, om = s->down.wait_src | s->up.wait_dst;
    /* a FIN that arrives with the last bytes must be seen: EPOLLRDHUP */
    if (cm & EPOLLIN) cm |= EPOLLRDHUP;
    if (om & EPOLLIN) om |= EPOLLRDHUP;
    if (cm) cm |= EPOLLET;
    if (om) om |= EPOLLET;
    fy__l4_set_events(s, &s->c, cm);
    fy__l4_set_events(s, &s->o, om);
}

/* With TLS on the client side a direction may wait for either readiness of either end (a
   TLS read can want writability, a TLS write readability): an event pumps the directions
   whose recorded wait (wait_src on their source end, wait_dst on their destination end) it
   answers, and only those. Pumping both on every event cost a read that only said EAGAIN on
   each side per relayed message. A hang-up or error pumps both. */
void fy__l4_relay_tls(tcp_sess_t *s, bool client, uint32_t ev)
{
    if (s->state != S_RELAY || (ev & (EPOLLHUP | EPOLLERR))) {
        fy__l4_relay(s, true, true);
        return;
    }
    if (ev & EPOLLRDHUP) ev |= EPOLLIN;
    uint32_t up = client ? s->up.wait_src : s->up.wait_dst;
    uint32_t down = client ? s->down.wait_dst : s->down.wait_src;
    fy__l4_relay(s, (up & ev) != 0, (down & ev) != 0);
}
