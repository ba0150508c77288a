/* An in-memory transport (core/transport.h ops over byte buffers), so that codecs can be
 * tested without sockets: the test feeds the peer's bytes (fy_mem_transport_feed, any split,
 * byte by byte included), the codec's writes collect in `out`. Readiness still comes through
 * an fd, as the loop and the codecs expect: t.fd is an eventfd that is readable while fed
 * bytes are unread (and always writable).
 *
 * For tests that drive the loop themselves: with `loop` set, a read that finds nothing to read
 * stops that loop (fy_loop_stop), so fy_loop_run returns once the codec has consumed all it
 * was given and is waiting for more, or has released the transport (destroy).
 *
 * Threads: one thread (the loop's). Ownership: the struct and its buffers are the caller's
 * (fy_mem_transport_free); `destroy` (called by the codec that owns the transport) only marks
 * it; the codec closes t.fd as it closes any socket. */
#ifndef FY_CORE_TRANSPORT_MEM_H
#define FY_CORE_TRANSPORT_MEM_H

#include <stdbool.h>
#include <stddef.h>

#include "core/transport.h"

typedef struct fy_mem_transport {
    fy_transport_t t;     /* first */
    struct fy_loop *loop; /* borrowed, or NULL: stopped when a read finds nothing */
    char *in;             /* owned: fed bytes */
    size_t in_len, in_off, in_cap;
    bool in_eof; /* after the fed bytes: end of stream (FY_EEOF) */
    char *out;   /* owned: what the codec wrote */
    size_t out_len, out_cap;
    size_t max_write;       /* 0: a writev takes everything; else at most this many bytes */
    bool exact_ready;       /* the fd stops being readable as soon as the last fed byte is read
                               (as a socket's would), not at the next read that finds nothing:
                               for a transport that sits in a pool, where a readable fd means
                               the peer spoke or closed */
    bool shut;              /* the codec half-closed (shutdown) */
    bool destroyed;         /* the codec released the transport */
    unsigned reads_starved; /* reads that found nothing */
} fy_mem_transport_t;

/* Set up m (zeroed first) with a fresh eventfd as m->t.fd. 0, or -errno. */
int fy_mem_transport_init(fy_mem_transport_t *m, struct fy_loop *loop);
/* Append the peer's bytes and make the fd readable. */
void fy_mem_transport_feed(fy_mem_transport_t *m, const void *p, size_t n);
/* The peer ends its side after what was fed. */
void fy_mem_transport_eof(fy_mem_transport_t *m);
/* Forget what the codec wrote so far. */
void fy_mem_transport_out_reset(fy_mem_transport_t *m);
/* Free the buffers (not the fd: its owner closes it). */
void fy_mem_transport_free(fy_mem_transport_t *m);

#endif
