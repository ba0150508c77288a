/* The in-memory transport (core/transport_mem.h). */
#include "core/transport_mem.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/errors.h"
#include "core/loop.h"

static void readable(fy_mem_transport_t *m, bool on)
{
    uint64_t v = 1;
    if (on) {
        if (write(m->t.fd, &v, sizeof v) < 0) { /* never full: one count per feed */
        }
    } else {
        if (read(m->t.fd, &v, sizeof v) < 0) { /* EAGAIN: already clear */
        }
    }
}

static int mem_handshake(fy_transport_t *t)
{
    (void)t;
    return 1;
}

static ssize_t mem_read(fy_transport_t *t, void *buf, size_t len)
{
    fy_mem_transport_t *m = (fy_mem_transport_t *)t;
    size_t have = m->in_len - m->in_off;
    if (have == 0) {
        if (m->in_eof) return FY_EEOF;
        readable(m, false);
        t->want = FY_WANT_READ;
        m->reads_starved++;
        if (m->loop) fy_loop_stop(m->loop);
        return 0;
    }
    size_t n = have < len ? have : len;
    memcpy(buf, m->in + m->in_off, n);
    m->in_off += n;
    if (m->exact_ready && m->in_off == m->in_len && !m->in_eof) readable(m, false);
    return (ssize_t)n;
}

static void out_put(fy_mem_transport_t *m, const void *p, size_t n)
{
    if (m->out_len + n > m->out_cap) {
        size_t cap = m->out_cap ? m->out_cap : 4096;
        while (cap < m->out_len + n) cap *= 2;
        m->out = fy_xrealloc(m->out, cap);
        m->out_cap = cap;
    }
    memcpy(m->out + m->out_len, p, n);
    m->out_len += n;
}

static ssize_t mem_writev(fy_transport_t *t, const struct iovec *iov, int iovcnt)
{
    fy_mem_transport_t *m = (fy_mem_transport_t *)t;
    if (m->shut) return -EPIPE;
    size_t room = m->max_write ? m->max_write : SIZE_MAX, done = 0;
    for (int i = 0; i < iovcnt && done < room; i++) {
        size_t n = iov[i].iov_len < room - done ? iov[i].iov_len : room - done;
        out_put(m, iov[i].iov_base, n);
        done += n;
    }
    return (ssize_t)done;
}

static size_t mem_pending(fy_transport_t *t)
{
    (void)t;
    return 0; /* readiness comes through the fd */
}

static int mem_shutdown(fy_transport_t *t)
{
    ((fy_mem_transport_t *)t)->shut = true;
    return 0;
}

static void mem_destroy(fy_transport_t *t)
{
    fy_mem_transport_t *m = (fy_mem_transport_t *)t;
    m->destroyed = true;
    if (m->loop) fy_loop_stop(m->loop); /* nothing more will come from this transport */
}

static const struct fy_transport_ops mem_ops = {
    .name = "mem",
    .handshake = mem_handshake,
    .read = mem_read,
    .writev = mem_writev,
    .sendfile = NULL,
    .pending = mem_pending,
    .shutdown = mem_shutdown,
    .destroy = mem_destroy,
};

int fy_mem_transport_init(fy_mem_transport_t *m, struct fy_loop *loop)
{
    memset(m, 0, sizeof *m);
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) return -errno;
    m->t.ops = &mem_ops;
    m->t.fd = fd;
    m->loop = loop;
    return 0;
}

void fy_mem_transport_feed(fy_mem_transport_t *m, const void *p, size_t n)
{
    if (m->in_len + n > m->in_cap) {
        size_t cap = m->in_cap ? m->in_cap : 4096;
        while (cap < m->in_len + n) cap *= 2;
        m->in = fy_xrealloc(m->in, cap);
        m->in_cap = cap;
    }
    memcpy(m->in + m->in_len, p, n);
    m->in_len += n;
    readable(m, true);
}

void fy_mem_transport_eof(fy_mem_transport_t *m)
{
    m->in_eof = true;
    readable(m, true);
}

void fy_mem_transport_out_reset(fy_mem_transport_t *m)
{
    m->out_len = 0;
}

void fy_mem_transport_free(fy_mem_transport_t *m)
{
    free(m->in);
    free(m->out);
    m->in = m->out = NULL;
}
