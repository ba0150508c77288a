/* Folder-internal: the multiplexed-connection pool shared by HTTP/2 and HTTP/3 origins
 * (upstream_mux.c), over a small table per protocol (upstream_h2.c, upstream_h3.c). The pool
 * owns what both have: per worker and server a list of connections, waiters (by priority,
 * then arrival), users counted per stream, idle keep-alive, GOAWAY draining, the suspect
 * state after a first-byte timeout, reaping after the callback stack unwinds, worker close.
 * The table owns the wire: connecting, the codec, stream capacity and credit, PING, GOAWAY.
 * Thread: one worker's loop, like everything in upstream/. */
#ifndef FY_UPSTREAM_UPSTREAM_MUX_H
#define FY_UPSTREAM_UPSTREAM_MUX_H

#include <stdbool.h>
#include <stddef.h>

#include "core/list.h"
#include "core/loop.h"
#include "upstream/upstream.h"

/* M_HANDSHAKE: connected, waiting for the protocol's go (h2: the origin's SETTINGS).
 * M_SUSPECT: a stream got no response head in time; no new streams until the origin answers
 * a PING (back to M_READY), closed once its last stream ends otherwise. */
enum { M_CONNECTING = 1, M_HANDSHAKE, M_READY, M_SUSPECT, M_DRAINING, M_CLOSED };

typedef struct fy__mux_proto {
    const char *name;     /* "h2", "h3": in log lines */
    size_t guess_streams; /* streams that may wait on a connection still connecting */
    /* connections made before the health checker's last down mark are not reused (h3: a
       QUIC connection to a process that is gone gets no reset) */
    bool retire_on_down;
    const char *handshake_timeout; /* why, when M_HANDSHAKE lasts past its timeout */
    /* A new connection (zeroed fy_origin_mux_t members filled by the caller after) or NULL
       with *err. It calls fy__mux_ready / _credit / _goaway / _closed as things happen. */
    fy_origin_mux_t *(*connect)(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                const char **err);
    size_t (*max_streams)(fy_origin_mux_t *m); /* while M_READY: streams at once */
    bool (*can_open)(fy_origin_mux_t *m);      /* stream credit for one more now */
    bool (*ping)(fy_origin_mux_t *m);          /* liveness probe sent (false: none exists) */
    void (*flush)(fy_origin_mux_t *m);         /* write out what is queued */
    void (*goaway)(fy_origin_mux_t *m);        /* say goodbye before we close (+ flush) */
    /* At close: let the transport go (h2) and fail the codec's streams with `why`; `ours`:
       we end the connection (else the origin did and the codec is going). */
    void (*shutdown)(fy_origin_mux_t *m, const char *why, bool ours);
    void (*cancel)(fy_origin_mux_t *m);    /* before reaping: deferred callbacks off */
    void (*close_now)(fy_origin_mux_t *m); /* worker exit: the transport closed at once */
    void (*destroy)(fy_origin_mux_t *m);   /* free the codec and the memory */
} fy__mux_proto_t;

/* The members every protocol's connection starts with. */
struct fy_origin_mux {
    const fy__mux_proto_t *proto;
    fy_upstream_t *u;
    int w, server;
    fy_loop_t *loop;
    fy_origin_mux_t *next, *prev;
    bool linked;
    int state;
    unsigned users; /* streams (and probes) holding the connection */
    unsigned downs; /* fy__upstream_downs when made */
    fy_list_t waiters;
    size_t nwaiters;
    fy_timer_t timer; /* handshake wait, then idle keep-alive */
    fy_defer_t reap;
};

extern const fy__mux_proto_t fy__mux_h2, fy__mux_h3;

/* Fill the common members of a new connection (state M_CONNECTING). */
void fy__mux_init(fy_origin_mux_t *m, const fy__mux_proto_t *p, fy_upstream_t *u, int w, int server,
                  fy_loop_t *loop);

/* Events from the protocol. */
void fy__mux_handshake(fy_origin_mux_t *m, uint64_t timeout_ms); /* connected: wait for go */
void fy__mux_ready(fy_origin_mux_t *m);  /* streams may go: waiters are served */
void fy__mux_credit(fy_origin_mux_t *m); /* more stream credit: waiters are served */
void fy__mux_goaway(fy_origin_mux_t *m); /* the origin goes away: no new streams */
void fy__mux_alive(fy_origin_mux_t *m);  /* the PING was answered */
void fy__mux_fail_waiters(fy_origin_mux_t *m, const char *why);
/* The connection is gone or given up (`ours`: we end it): waiters and streams fail. */
void fy__mux_close(fy_origin_mux_t *m, const char *why, bool ours);

#endif
