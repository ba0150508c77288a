/* Tunnel transport: a byte stream the tunnel code reads and writes without knowing what
 * carries it (a TCP socket today; a CONNECT stream of h2 or h3 is the next implementation).
 * Readiness comes by callback (on_ready), not by an fd the caller watches, so an
 * implementation without an fd can deliver it when its own peer moves (a DATA frame arrives,
 * a flow-control window opens): backpressure is a write that returns 0 until on_ready says
 * FY_TIO_WRITE.
 * I/O convention: >0 bytes moved, 0 would block (arm with want), <0 error (FY_EEOF on a clean
 * end of stream, -errno otherwise).
 * Threads: a transport belongs to one loop and is used only from that loop's thread. */
#ifndef FY_CORE_TUNNEL_IO_H
#define FY_CORE_TUNNEL_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/loop.h"

#define FY_TIO_READ 0x1u  /* readable (or end of stream / error: read tells which) */
#define FY_TIO_WRITE 0x2u /* writable */

typedef struct fy_tio fy_tio_t;

typedef struct fy_tio_ops {
    const char *name;
    ssize_t (*read)(fy_tio_t *t, void *buf, size_t len);
    /* As read, but the bytes stay to be read again. */
    ssize_t (*peek)(fy_tio_t *t, void *buf, size_t len);
    ssize_t (*write)(fy_tio_t *t, const void *buf, size_t len);
    /* Call on_ready when any of `what` (FY_TIO_*) holds; 0 stops the callbacks. */
    int (*want)(fy_tio_t *t, unsigned what);
    /* Half-close the sending side: the peer reads the end of stream. */
    int (*shutdown)(fy_tio_t *t);
    /* Release everything (an fd implementation closes its socket); no callback after. */
    void (*close)(fy_tio_t *t);
} fy_tio_ops_t;

struct fy_tio {
    const fy_tio_ops_t *ops;
    void (*on_ready)(fy_tio_t *t, unsigned what); /* set by the user */
    void *data;                                   /* the user's */
    int fd; /* the socket under it (fd implementation), or -1 */
};

static inline ssize_t fy_tio_read(fy_tio_t *t, void *b, size_t n)
{
    return t->ops->read(t, b, n);
}
static inline ssize_t fy_tio_peek(fy_tio_t *t, void *b, size_t n)
{
    return t->ops->peek(t, b, n);
}
static inline ssize_t fy_tio_write(fy_tio_t *t, const void *b, size_t n)
{
    return t->ops->write(t, b, n);
}
static inline int fy_tio_want(fy_tio_t *t, unsigned what)
{
    return t->ops->want(t, what);
}
static inline int fy_tio_shutdown(fy_tio_t *t)
{
    return t->ops->shutdown(t);
}
static inline void fy_tio_close(fy_tio_t *t)
{
    t->ops->close(t);
}

/* ---- the fd implementation: a connected non-blocking socket watched on a loop ---- */
typedef struct fy_tio_fd {
    fy_tio_t t; /* first */
    fy_loop_t *loop;
    fy_io_t io;
} fy_tio_fd_t;

/* f over socket fd (owned from here: close() closes it). */
void fy_tio_fd_init(fy_tio_fd_t *f, fy_loop_t *loop, int fd);
/* Stop watching and give the socket back (the transport no longer owns it). */
int fy_tio_fd_release(fy_tio_fd_t *f);

/* ---- the in-memory implementation, for tests: no sockets, no loop ----
 * The test feeds the peer's bytes (fy_tio_mem_feed: on_ready(READ) at once when wanted) and
 * finds what was written in `out`; with `room` set, writes take at most that many bytes in
 * all and then would block until fy_tio_mem_drain makes room again (on_ready(WRITE)). */
typedef struct fy_tio_mem {
    fy_tio_t t; /* first */
    char *in;   /* owned */
    size_t in_len, in_off;
    bool in_eof;
    char *out; /* owned */
    size_t out_len;
    size_t room; /* 0: unbounded; else bytes writable before a drain */
    unsigned wanted;
    bool shut, closed;
} fy_tio_mem_t;

void fy_tio_mem_init(fy_tio_mem_t *m);
void fy_tio_mem_feed(fy_tio_mem_t *m, const void *p, size_t n);
void fy_tio_mem_eof(fy_tio_mem_t *m);
/* The peer consumed what was written: out emptied, `room` bytes writable again. */
void fy_tio_mem_drain(fy_tio_mem_t *m, size_t room);
void fy_tio_mem_free(fy_tio_mem_t *m);

#endif
