/* Tunnel transport implementations: a socket on a loop, and bytes in memory (tests).
 * Threads: each transport is used from one thread (its loop's). */
#include "core/tunnel_io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/errors.h"

/* ---- fd ---- */

static ssize_t fd_recv(fy_tio_t *t, void *buf, size_t len, int flags)
{
    for (;;) {
        ssize_t n = recv(t->fd, buf, len, flags);
        if (n > 0) return n;
        if (n == 0) return FY_EEOF;
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return 0;
        return -errno;
    }
}

static ssize_t fd_read(fy_tio_t *t, void *buf, size_t len)
{
    return fd_recv(t, buf, len, 0);
}
static ssize_t fd_peek(fy_tio_t *t, void *buf, size_t len)
{
    return fd_recv(t, buf, len, MSG_PEEK);
}

static ssize_t fd_write(fy_tio_t *t, const void *buf, size_t len)
{
    for (;;) {
        ssize_t n = send(t->fd, buf, len, MSG_NOSIGNAL);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return 0;
        return -errno;
    }
}

static int fd_want(fy_tio_t *t, unsigned what)
{
    fy_tio_fd_t *f = (fy_tio_fd_t *)t;
    uint32_t ev = (what & FY_TIO_READ ? EPOLLIN : 0) | (what & FY_TIO_WRITE ? EPOLLOUT : 0);
    return fy_io_set(f->loop, &f->io, ev);
}

static int fd_shutdown(fy_tio_t *t)
{
    return shutdown(t->fd, SHUT_WR) < 0 ? -errno : 0;
}

static void fd_close(fy_tio_t *t)
{
    int fd = fy_tio_fd_release((fy_tio_fd_t *)t);
    if (fd >= 0) close(fd);
}

static void fd_on_io(fy_io_t *io, uint32_t ev)
{
    fy_tio_fd_t *f = io->data;
    unsigned what = 0;
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) what |= FY_TIO_READ;
    if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR)) what |= FY_TIO_WRITE;
    if (f->t.on_ready) f->t.on_ready(&f->t, what);
}

static const fy_tio_ops_t fd_ops = {"fd",    fd_read,     fd_peek, fd_write,
                                    fd_want, fd_shutdown, fd_close};

void fy_tio_fd_init(fy_tio_fd_t *f, fy_loop_t *loop, int fd)
{
    memset(f, 0, sizeof *f);
    f->t.ops = &fd_ops;
    f->t.fd = fd;
    f->loop = loop;
    f->io.fd = fd;
    f->io.cb = fd_on_io;
    f->io.data = f;
}

int fy_tio_fd_release(fy_tio_fd_t *f)
{
    int fd = f->t.fd;
    if (fd >= 0 && f->io.events) fy_io_set(f->loop, &f->io, 0);
    f->t.fd = f->io.fd = -1;
    return fd;
}

/* ---- memory ---- */

static ssize_t mem_take(fy_tio_t *t, void *buf, size_t len, bool consume)
{
    fy_tio_mem_t *m = (fy_tio_mem_t *)t;
    size_t have = m->in_len - m->in_off;
    if (!have) return m->in_eof ? FY_EEOF : 0;
    size_t n = len < have ? len : have;
    memcpy(buf, m->in + m->in_off, n);
    if (consume) m->in_off += n;
    return (ssize_t)n;
}

static ssize_t mem_read(fy_tio_t *t, void *buf, size_t len)
{
    return mem_take(t, buf, len, true);
}
static ssize_t mem_peek(fy_tio_t *t, void *buf, size_t len)
{
    return mem_take(t, buf, len, false);
}

static ssize_t mem_write(fy_tio_t *t, const void *buf, size_t len)
{
    fy_tio_mem_t *m = (fy_tio_mem_t *)t;
    if (m->shut) return -EPIPE;
    size_t n = len;
    if (m->room) {
        size_t left = m->room > m->out_len ? m->room - m->out_len : 0;
        if (n > left) n = left;
    }
    if (!n) return 0;
    m->out = fy_xrealloc(m->out, m->out_len + n);
    memcpy(m->out + m->out_len, buf, n);
    m->out_len += n;
    return (ssize_t)n;
}

static int mem_want(fy_tio_t *t, unsigned what)
{
    ((fy_tio_mem_t *)t)->wanted = what;
    return 0;
}

static int mem_shutdown(fy_tio_t *t)
{
    ((fy_tio_mem_t *)t)->shut = true;
    return 0;
}

static void mem_close(fy_tio_t *t)
{
    fy_tio_mem_t *m = (fy_tio_mem_t *)t;
    m->closed = true;
    m->wanted = 0;
}

static const fy_tio_ops_t mem_ops = {"mem",    mem_read,     mem_peek, mem_write,
                                     mem_want, mem_shutdown, mem_close};

void fy_tio_mem_init(fy_tio_mem_t *m)
{
    memset(m, 0, sizeof *m);
    m->t.ops = &mem_ops;
    m->t.fd = -1;
}

static void mem_ready(fy_tio_mem_t *m, unsigned what)
{
    if (!m->closed && (m->wanted & what) && m->t.on_ready) m->t.on_ready(&m->t, m->wanted & what);
}

void fy_tio_mem_feed(fy_tio_mem_t *m, const void *p, size_t n)
{
    if (m->in_off == m->in_len) m->in_off = m->in_len = 0;
    m->in = fy_xrealloc(m->in, m->in_len + n + 1);
    memcpy(m->in + m->in_len, p, n);
    m->in_len += n;
    mem_ready(m, FY_TIO_READ);
}

void fy_tio_mem_eof(fy_tio_mem_t *m)
{
    m->in_eof = true;
    mem_ready(m, FY_TIO_READ);
}

void fy_tio_mem_drain(fy_tio_mem_t *m, size_t room)
{
    m->out_len = 0;
    m->room = room;
    mem_ready(m, FY_TIO_WRITE);
}

void fy_tio_mem_free(fy_tio_mem_t *m)
{
    free(m->in);
    free(m->out);
    m->in = m->out = NULL;
}
