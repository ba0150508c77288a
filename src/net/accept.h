/* What a listening socket does when accept(2) fails for lack of file descriptors (EMFILE,
 * ENFILE, ENOBUFS, ENOMEM): the pending connection stays in the backlog, so the socket stays
 * readable and a level-triggered loop would retry (and log) at full speed. The listener stops
 * watching its socket for FY_ACCEPT_PAUSE_MS, or until one of its connections closes, and one
 * line per second at most says how many accepts failed. One per listener and worker; used on
 * the worker's thread only. */
#ifndef FY_NET_ACCEPT_H
#define FY_NET_ACCEPT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/loop.h"

#define FY_ACCEPT_PAUSE_MS 100
#define FY_ACCEPT_LOG_MS 1000

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

#endif
