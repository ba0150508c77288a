/* Internals shared by l4.c (listeners, TCP sessions) and l4_udp.c (UDP and QUIC sessions).
 * Threads: sessions live on the worker thread that accepted them; the route tables are
 * read-only per generation. */
#ifndef FY_L4_L4_INT_H
#define FY_L4_L4_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/counters.h"
#include "core/list.h"
#include "core/loop.h"
#include "l4/l4.h"
#include "l4/l4_conf.h"
#include "net/accept.h"
#include "tls/tls.h"

typedef struct fy__l4_worker fy__l4_worker_t;
typedef struct fy__l4_udp_sess fy__l4_udp_sess_t;

typedef struct fy__l4_listener {
    const fy_l4_conf_t *conf; /* borrowed */
    bool udp;
    bool front;             /* the SNI map of an HTTP listener: no socket of its own */
    fy_l4_conf_t *own_conf; /* owned: a front's synthesized conf */
    fy_tls_ctx_t *tls;      /* owned: tls-terminate / terminate routes */
    fy_upstream_t *up;      /* borrowed: the listener's own upstream group, or NULL */
    fy_upstream_t **sni_up; /* owned array: per sni route, NULL for a plain target */
    /* route="NAME": ferry_l4_route_sessions_total, ferry_l4_bytes_total{direction="up"} (client
       to origin) and {direction="down"} */
    fy_counter_id_t cid_sessions, cid_bytes[2];
} fy__l4_listener_t;

/* one listener on one worker */
typedef struct fy__l4_wl {
    fy_io_t io;
    fy__l4_worker_t *w;
    fy__l4_listener_t *l;
    bool paused;               /* at max-sessions */
    fy_accept_pause_t fdpause; /* out of descriptors (TCP) */
    size_t nsessions;
    fy__l4_udp_sess_t **hash; /* owned: client address -> session (UDP) */
    size_t hmask;
    fy__l4_udp_sess_t **cids; /* owned: server connection ID -> QUIC session (same size) */
    uint32_t cid_lens;        /* bit L set: some server CID of length L is in `cids` */
    uint64_t dropped;         /* datagrams dropped: table full, unknown flow, bad Initial */
} fy__l4_wl_t;

struct fy__l4_worker {
    fy_l4_t *l4;
    int id;
    fy_loop_t *loop;
    fy__l4_wl_t *wls; /* owned: one per listener */
    fy_list_t tcp;    /* tcp sessions */
    fy_list_t udp;    /* udp sessions */
    size_t nsessions;
    bool draining;
    void (*on_idle)(void *ud);
    void *ud;
    uint8_t *rx; /* owned: recvmmsg buffers */
};

struct fy_l4 {
    fy__l4_listener_t *ls;
    size_t nls;
    int *front_of; /* owned: per HTTP listener, index in ls or -1 */
    size_t nhttp;
    fy__l4_worker_t *workers;
    int nworkers;
};

const fy_l4_target_t *fy__l4_route(const fy__l4_listener_t *l, const char *sni, fy_upstream_t **up,
                                   bool *terminate);
void fy__l4_session_gone(fy__l4_wl_t *wl);

void fy__l4_udp_init(fy__l4_wl_t *wl);
void fy__l4_udp_on_read(fy_io_t *io, uint32_t ev);
void fy__l4_udp_close_all(fy__l4_worker_t *w);

#endif
