/* The accept loop every TCP listener uses (HTTP listeners in server_listen.c, layer-4 ones in
 * l4/l4.c): accept4 until EAGAIN (at most FY_ACCEPT_BATCH per readiness), the listener's
 * connection limit through a callback, and the descriptor pause below.
 *
 * What a listening socket does when accept(2) fails for lack of file descriptors (EMFILE,
 * ENFILE, ENOBUFS, ENOMEM): the pending connection stays in the backlog, so the socket stays
 * readable and a level-triggered loop would retry (and log) at full speed. The listener stops
 * watching its socket for FY_ACCEPT_PAUSE_MS, or until one of its connections closes, and one
 * line per second at most says how many accepts failed. One per listener and worker; used on
 * the worker's thread only. */
#ifndef FY_NET_ACCEPT_H
#define FY_NET_ACCEPT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/loop.h"

#define FY_ACCEPT_PAUSE_MS 100
#define FY_ACCEPT_LOG_MS 1000
/* accepts per readiness event, so that one busy listener does not starve the loop */
#define FY_ACCEPT_BATCH 64

typedef struct fy_accept_pause {
    fy_timer_t timer;
    fy_loop_t *loop;          /* borrowed */
    const char *name;         /* borrowed: the listener's name, for the log */
    void (*resume)(void *ud); /* the pause ended: watch the socket again (if still wanted) */
    void *ud;
    bool paused;
    uint64_t failures;  /* failed accepts not yet reported */
    uint64_t logged_ms; /* loop time of the last report; 0: none yet */
    int last_err;
} fy_accept_pause_t;

/* Whether accept(2)'s errno means "out of descriptors or memory" (pause, don't spin). */
bool fy_accept_is_resource_error(int err);
/* Set up `p` (caller-owned). `name` and `ud` are borrowed. */
void fy_accept_pause_init(fy_accept_pause_t *p, fy_loop_t *loop, const char *name,
                          void (*resume)(void *ud), void *ud);
/* accept(2) failed with `err`: the caller has stopped watching the socket; count it, log at
 * most once per FY_ACCEPT_LOG_MS, and call `resume` after FY_ACCEPT_PAUSE_MS. */
void fy_accept_pause(fy_accept_pause_t *p, int err);
/* A descriptor was freed (a connection closed): end a pause now (calls `resume`). */
void fy_accept_pause_end(fy_accept_pause_t *p);
/* The listener is closing: cancel the timer without calling `resume`. */
void fy_accept_pause_stop(fy_accept_pause_t *p);

/* What a listener does with the accept loop's events. Both run on the loop's thread. */
typedef struct fy_accept_ops {
    const char *name; /* "listener", "l4": the first word of the loop's error lines */
    /* Whether the listener is at its connection limit now (the callee logs and counts it):
     * the loop then stops watching the socket and sets *limited (see fy_accept_closed). */
    bool (*at_limit)(void *ud);
    /* A new connection: `fd` (non-blocking, close-on-exec) and its peer's address (valid for
     * the call) are the callee's. */
    void (*on_conn)(void *ud, int fd, const struct sockaddr *sa, socklen_t salen);
} fy_accept_ops_t;

/* `io` (a listening socket registered on `loop`) is readable: accept until EAGAIN, EINTR or
 * ECONNABORTED, at most FY_ACCEPT_BATCH times. Out of descriptors: the socket is no longer
 * watched and `pause` (named after the listener) starts. Another error is logged once and the
 * loop returns (the socket stays watched). `ops` and `ud` are borrowed. */
void fy_accept_run(fy_loop_t *loop, fy_io_t *io, fy_accept_pause_t *pause, bool *limited,
                   const fy_accept_ops_t *ops, void *ud);
/* One of the listener's connections closed: if it was at its limit (*limited) and is under it
 * now (`under_limit`), watch the socket again unless a descriptor pause holds it; and end a
 * descriptor pause (a descriptor came free; its `resume` decides). */
void fy_accept_closed(fy_loop_t *loop, fy_io_t *io, fy_accept_pause_t *pause, bool *limited,
                      bool under_limit);

#endif
