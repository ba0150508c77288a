/* The accept loop and the pause of a listener whose accept(2) ran out of descriptors (see
 * accept.h). The loop's thread only. */
#include "net/accept.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>

#include "core/log.h"

bool fy_accept_is_resource_error(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

static void on_timer(fy_timer_t *t)
{
    fy_accept_pause_end(t->data);
}

void fy_accept_pause_init(fy_accept_pause_t *p, fy_loop_t *loop, const char *name,
                          void (*resume)(void *ud), void *ud)
{
    memset(p, 0, sizeof *p);
    p->loop = loop;
    p->name = name;
    p->resume = resume;
    p->ud = ud;
    fy_timer_init(&p->timer, on_timer, p);
}

void fy_accept_pause(fy_accept_pause_t *p, int err)
{
    uint64_t now = p->loop->now_ms;
    p->failures++;
    p->last_err = err;
    if (!p->logged_ms || now - p->logged_ms >= FY_ACCEPT_LOG_MS) {
        const char *what = err == EMFILE   ? "out of file descriptors (EMFILE)"
                           : err == ENFILE ? "system out of file descriptors (ENFILE)"
                                           : strerror(err);
        fy_error("listener %s: accept: %s; paused %d ms, %llu refused in the last second", p->name,
                 what, FY_ACCEPT_PAUSE_MS, (unsigned long long)p->failures);
        p->failures = 0;
        p->logged_ms = now ? now : 1;
    }
    p->paused = true;
    fy_timer_start(p->loop, &p->timer, FY_ACCEPT_PAUSE_MS);
}

void fy_accept_pause_end(fy_accept_pause_t *p)
{
    if (!p->paused) return;
    p->paused = false;
    fy_timer_stop(p->loop, &p->timer);
    p->resume(p->ud);
}

void fy_accept_pause_stop(fy_accept_pause_t *p)
{
    p->paused = false;
    if (p->loop) fy_timer_stop(p->loop, &p->timer);
}

void fy_accept_run(fy_loop_t *loop, fy_io_t *io, fy_accept_pause_t *pause, bool *limited,
                   const fy_accept_ops_t *ops, void *ud)
{
    for (int i = 0; i < FY_ACCEPT_BATCH; i++) {
        if (ops->at_limit && ops->at_limit(ud)) {
            /* at the limit: stop accepting until a connection closes */
            fy_io_set(loop, io, 0);
            *limited = true;
            return;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(io->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return;
            if (fy_accept_is_resource_error(errno)) {
                /* the connection stays queued and the socket readable: without a pause the
                   loop would retry (and log) at full speed */
                int e = errno;
                fy_io_set(loop, io, 0);
                fy_accept_pause(pause, e);
                return;
            }
            fy_error("%s %s: accept: %s", ops->name, pause->name, strerror(errno));
            return;
        }
        ops->on_conn(ud, fd, (struct sockaddr *)&ss, sl);
    }
}

void fy_accept_closed(fy_loop_t *loop, fy_io_t *io, fy_accept_pause_t *pause, bool *limited,
                      bool under_limit)
{
    if (*limited && under_limit) {
        *limited = false;
        if (!pause->paused) fy_io_set(loop, io, EPOLLIN);
    }
    if (pause->paused) fy_accept_pause_end(pause); /* a descriptor came free */
}
