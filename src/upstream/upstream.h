/* Upstreams at run time: server choice (weighted round robin, random, least requests),
 * passive health (consecutive failures eject a server for a while), and per-worker pools of
 * idle keep-alive connections to each server, with non-blocking connect and TLS to origins;
 * HTTP/2 servers get multiplexed sessions instead (below).
 * All state is per worker: no locks on the request path. */
#ifndef FY_UPSTREAM_UPSTREAM_H
#define FY_UPSTREAM_UPSTREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/list.h"
#include "core/loop.h"
#include "core/transport.h"
#include "tls/tls.h"
#include "upstream/upstream_conf.h"

typedef struct fy_upstream fy_upstream_t;
typedef struct fy_origin_conn fy_origin_conn_t;

/* Events delivered to the connection's owner. */
#define FY_ORIGIN_READY 0x100u /* connected (and TLS done): the request may be written */
#define FY_ORIGIN_ERROR 0x200u /* connect/handshake failed or timed out; see oc->error */
/* plus EPOLLIN / EPOLLOUT / EPOLLHUP / EPOLLERR readiness while the owner holds it */

typedef void (*fy_origin_cb)(fy_origin_conn_t *oc, unsigned events, void *ud);

struct fy_origin_conn {
    fy_io_t io;
    fy_transport_t sock;
    fy_transport_t *t; /* &sock, TLS over it (owned), or a test's (fy__origin_test_connect) */
    bool tls;          /* t is TLS over sock: a handshake first */
    fy_upstream_t *up;
    int server;
    int worker;
    fy_loop_t *loop;
    int state;
    fy_timer_t timer; /* connect timeout; keep-alive timeout while pooled */
    fy_origin_conn_t *pool_next, *pool_prev;
    fy_origin_cb cb;
    void *ud;
    unsigned requests; /* served on this connection */
    const char *error; /* static reason after FY_ORIGIN_ERROR */
    bool closed;
    fy_defer_t defer;
    /* how it was made, µs (the inspector's timings): connect() to connected, then the TLS
       handshake (0 for plain) */
    uint64_t t0_us;
    uint32_t connect_us, tls_us;
};

/* Unit tests only (NULL otherwise): connections to origins are made by this instead of a
 * socket: it returns the transport to use (plain, owned by the test) and sets *fd to the
 * descriptor its readiness comes through (an in-memory transport's eventfd; closed by the
 * connection like a socket). Main thread, before any connection is made. */
extern fy_transport_t *(*fy__origin_test_connect)(const fy_upstream_server_conf_t *sv, int *fd);

/* Build from config (borrowed) for `nworkers` workers. NULL after logging on failure. */
fy_upstream_t *fy_upstream_new(const fy_upstream_conf_t *conf, int nworkers);
/* The same for a new generation: `prev` (borrowed, may be NULL) is the running generation's
 * upstream of the same name. A DNS discovery upstream asking what prev asks starts with
 * prev's last set instead of a lookup (so a reload never waits for DNS) and looks up again as
 * soon as its discovery runs. Main or admin thread, like fy_upstream_new. */
fy_upstream_t *fy_upstream_new_next(const fy_upstream_conf_t *conf, int nworkers,
                                    const fy_upstream_t *prev);
/* As fy_upstream_new, but https:// and h2:// servers use these TLS client contexts (borrowed,
 * they outlive the upstream; tls_h2 with ALPN h2) instead of ones made from conf's ca,
 * insecure, cert and key: for many upstreams with the same TLS settings (the intercepting
 * proxy's ad-hoc origins), which would each load the same CA bundle. A NULL one is made. */
fy_upstream_t *fy_upstream_new_with_tls(const fy_upstream_conf_t *conf, int nworkers,
                                        fy_tls_client_ctx_t *tls, fy_tls_client_ctx_t *tls_h2);
/* After every worker is joined. */
void fy_upstream_free(fy_upstream_t *u);
/* Close worker w's pooled connections (on the worker's thread, before its loop goes). */
void fy_upstream_worker_close(fy_upstream_t *u, int w);
const fy_upstream_conf_t *fy_upstream_conf(const fy_upstream_t *u);
/* Servers by index: conf->servers.v[0 .. nservers-1]. With `discovery:` these are slots
 * (upstream.c): only those fy_upstream_server_listed says are servers now; the others have
 * empty url/host strings (free) or are servers that left (draining, or drained). */
size_t fy_upstream_nservers(const fy_upstream_t *u);
/* The server takes new requests: always for configured servers; for discovered ones, while
 * the last set found lists it. Any thread. */
bool fy_upstream_server_listed(const fy_upstream_t *u, int server);

/* Choose a server for worker `w`, avoiding the servers whose bit is set in `exclude` when
 * another one is available, and ejected servers unless all are. Returns its index. */
int fy_upstream_pick(fy_upstream_t *u, int w, uint64_t exclude, uint64_t now_ms);
/* Passive health: a success resets the server's failure count; max-fails consecutive failures
 * eject it for fail-timeout. */
void fy_upstream_report(fy_upstream_t *u, int w, int server, bool ok, uint64_t now_ms);
/* The same for a response head with `status`: a 5xx fails passive health, and the circuit
 * breaker unless its `5xx-is-failure` is off. */
void fy_upstream_report_status(fy_upstream_t *u, int w, int server, int status, uint64_t now_ms);
/* A request goes to `server` now (after fy_upstream_pick): false when the server's circuit
 * breaker is open (fy_upstream_pick returns an open one only when every server is): the caller
 * answers 503. An open breaker that is due becomes half-open here, and counts a trial. */
bool fy_upstream_admit(fy_upstream_t *u, int w, int server, uint64_t now_ms);
/* `retry-budget`: a request's first attempt, and whether a retry may start now (counted;
 * refusals count ferry_upstream_retry_budget_exhausted_total). Always true without one. */
void fy_upstream_count_request(fy_upstream_t *u, int w, uint64_t now_ms);
bool fy_upstream_retry_take(fy_upstream_t *u, int w, uint64_t now_ms);
/* `hedge`: a hedged attempt started (won false), or its response head came first (won true). */
void fy_upstream_count_hedge(fy_upstream_t *u, bool won);
/* Sticky sessions: a server's opaque id (16 hex digits, stable across restarts), the server
 * with a given id (-1: none), and whether a server may take requests now. */
const char *fy_upstream_server_id(const fy_upstream_t *u, int server);
int fy_upstream_find_id(const fy_upstream_t *u, const char *id, size_t len);
bool fy_upstream_usable(const fy_upstream_t *u, int w, int server, uint64_t now_ms);

/* The admin API: a server's shared state (any thread; relaxed reads), and draining it (no new
 * requests while another server is usable; requests in flight finish). */
typedef struct fy_upstream_server_state {
    bool down;                 /* the active health check says so */
    bool drained;              /* fy_upstream_set_drained */
    uint64_t ejected_until_ms; /* passive health, loop clock (CLOCK_MONOTONIC_COARSE ms) */
    /* the least-time EWMA of its time to first byte (µs; the newest response weighs 20%),
       averaged over the workers that have seen one; -1: none has */
    double ewma_ttfb_us;
    int ewma_workers; /* how many workers' averages went into it */
} fy_upstream_server_state_t;
void fy_upstream_server_state(const fy_upstream_t *u, int server, fy_upstream_server_state_t *st);
void fy_upstream_set_drained(fy_upstream_t *u, int server, bool drained);

/* Time to first byte of a response from `server` (least-time). */
void fy_upstream_report_ttfb(fy_upstream_t *u, int w, int server, uint64_t us);
/* A request is sent again after `server` failed it (ferry_upstream_retries_total, and per
 * server with detailed metrics). */
void fy_upstream_count_retry(fy_upstream_t *u, int server);
/* Requests in flight on a server from worker w (least-requests bookkeeping). */
void fy_upstream_inflight(fy_upstream_t *u, int w, int server, int delta);

/* A connection to `server` for worker `w`: an idle pooled one (then *ready = true and the
 * caller writes at once) or a new one being connected (FY_ORIGIN_READY or FY_ORIGIN_ERROR
 * arrive through cb). Returns NULL (with *err set to a static reason) when even the socket
 * could not be made. */
fy_origin_conn_t *fy_origin_acquire(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                    fy_origin_cb cb, void *ud, bool *ready, const char **err);
/* A new connection to `server`, never from the pool (health checks). Same events as above. */
fy_origin_conn_t *fy_origin_connect(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                    fy_origin_cb cb, void *ud, const char **err);

/* Active health checks (`health-check:`), run on worker `w`'s loop for every worker: servers
 * that fail `fall` probes in a row are skipped by fy_upstream_pick until `rise` probes pass.
 * No-ops without health-check config. Stop before the loop goes away. */
void fy_upstream_health_start(fy_upstream_t *u, fy_loop_t *loop, int w);
void fy_upstream_health_stop(fy_upstream_t *u);
/* A config reload: copy the health verdicts (active down marks and their count, passive
 * ejections) of `from`'s servers to the servers of `to` with the same URL. Call before `to`
 * is used. */
void fy_upstream_carry_health(fy_upstream_t *to, const fy_upstream_t *from);

/* ---- HTTP/2 and HTTP/3 origins (h2c:// h2:// h3://): multiplexed connections ----
 * upstream/upstream_mux.c, over upstream_h2.c (one fy_origin_conn_t and an h2 client codec)
 * and upstream_h3.c (an h3 client codec on its own QUIC connection). Per worker and server, a
 * list of connections. A caller acquires one with a free stream slot (below the origin's
 * stream limit and ours), or waits for one being connected; it then opens its stream on the
 * codec (fy_origin_mux_h2 / fy_origin_mux_h3) and gives the connection back with
 * fy_origin_mux_release once it released its stream. Connections without users stay open up
 * to `keepalive` per server for `keepalive-timeout`; a GOAWAY from the origin drains one (no
 * new streams, closed when its last user leaves). upstream/origin.h is the interface handlers
 * use; this is the pool under it. */
typedef struct fy_origin_mux fy_origin_mux_t;
typedef struct fy_h2_client fy_h2_client_t;
typedef struct fy_h3_client fy_h3_client_t;

typedef struct fy_origin_mux_waiter {
    fy_list_t link;
    /* The connection is ready and counted for the waiter (m), or it failed (m NULL, err). */
    void (*cb)(struct fy_origin_mux_waiter *wt, fy_origin_mux_t *m, const char *err);
    fy_origin_mux_t *m; /* the connection waited on while queued */
    int priority;       /* higher is served first (ties in arrival order); e.g. past refusals */
} fy_origin_mux_waiter_t;

/* A connection of `server` for worker w. Returns it counted for the caller (*ready = true),
 * or NULL with *ready = false after queueing `wt` (wt->cb comes later, never from inside this
 * call), or NULL with *ready = false and *err set when even a socket could not be made. */
fy_origin_mux_t *fy_origin_mux_acquire(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                       fy_origin_mux_waiter_t *wt, bool *ready, const char **err);
/* Stop waiting (the exchange went away). */
void fy_origin_mux_cancel_wait(fy_origin_mux_waiter_t *wt);
/* The codec of an acquired connection (NULL for the other protocol, or once closed). */
fy_h2_client_t *fy_origin_mux_h2(fy_origin_mux_t *m);
fy_h3_client_t *fy_origin_mux_h3(fy_origin_mux_t *m);
/* Done with the connection (after the caller's stream was released). */
void fy_origin_mux_release(fy_origin_mux_t *m);
/* From inside a codec's on_data (h2): the bytes it was given stay valid until the pin is
 * unpinned (the read chunk they are in is the pin's, and the connection reads into another;
 * the pin may outlive the connection). NULL when they cannot be kept: copy them. */
typedef struct fy_origin_pin fy_origin_pin_t;
fy_origin_pin_t *fy_origin_mux_pin(fy_origin_mux_t *m);
void fy_origin_mux_unpin(fy_origin_pin_t *p);
/* A stream of the (held) connection got no response head within first-byte-timeout: it
 * takes no new streams; h2 sends a PING, whose ACK makes it usable again, else it is closed
 * once its last user releases it (h3: closed after its last stream). */
void fy_origin_mux_suspect(fy_origin_mux_t *m);
/* Close the (held) connection now: its waiters and streams fail with `why` (static). */
void fy_origin_mux_abandon(fy_origin_mux_t *m, const char *why);
/* How many connections worker w holds to server (tests, metrics). */
size_t fy_origin_mux_count(fy_upstream_t *u, int w, int server);

/* Interest in readiness while held: EPOLLIN and/or EPOLLOUT. Returns 0 or -errno. */
int fy_origin_want(fy_origin_conn_t *oc, uint32_t events);
/* Give a held connection back: to the pool when `reusable` and there is room, else closed.
 * The owner's callback is not called again. */
void fy_origin_release(fy_origin_conn_t *oc, bool reusable);

#endif
