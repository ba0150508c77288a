/* Folder-internal: what upstream.c, origin*.c, upstream_h2.c and upstream_h3.c share. */
#ifndef FY_UPSTREAM_UPSTREAM_INT_H
#define FY_UPSTREAM_UPSTREAM_INT_H

#include "core/arena.h"
#include "http/exchange.h"
#include "upstream/origin.h"
#include "upstream/upstream.h"

/* The heads of worker w's HTTP/2 and HTTP/3 connection lists for `server` (upstream_mux.c). */
void **fy__upstream_h2_slot(fy_upstream_t *u, int w, int server);
/* Close and free a connection at once (worker exit: no loop turn left). */
void fy__origin_close_now(fy_origin_conn_t *oc);
/* Close worker w's HTTP/2 and HTTP/3 connections (worker exit; upstream_mux.c). */
void fy__upstream_mux_worker_close(fy_upstream_t *u, int w);
/* How many times the health checker has marked `server` down (any worker may read it):
 * origin connections made before the last time are not reused. */
unsigned fy__upstream_downs(fy_upstream_t *u, int server);
void **fy__upstream_h3_slot(fy_upstream_t *u, int w, int server);

/* The request fields of an h2/h3 health-check GET for `path` on server `sv` (upstream.c). */
void fy__probe_fields(fy_arena_t *a, fy_headers_t *hs, const fy_upstream_server_conf_t *sv,
                      const char *path, bool tls);

/* An active health probe over HTTP/2 or HTTP/3 (origin_probe.c): a GET stream through the
 * origin interface on a pooled connection of the checking worker. `done` gets the final status
 * (>0) or 0 with a static reason; it is called once, never from inside start. Stop releases
 * everything (safe when idle or finished). */
typedef struct fy__mux_probe {
    fy_origin_stream_t os;
    fy_upstream_t *u;
    int server;
    const char *path;
    fy_arena_t arena;
    char first[1024];
    bool running;
    bool submitted;
    bool arena_live;
    fy_defer_t later; /* reports a failure to start outside of start */
    const char *err;
    void (*done)(void *ud, int status, const char *why);
    void *ud;
} fy__mux_probe_t;

/* ---- discovery (upstream.c; see there) ---- */
typedef struct fy_disc_entry fy_disc_entry_t;
/* Publish a new server set (the discovery loop's thread, or before any worker uses u):
 * servers gone are drained, new ones fill free slots, listed ones keep theirs. */
void fy__upstream_set_servers(fy_upstream_t *u, const fy_disc_entry_t *e, size_t n);
/* The server (slot) takes no new requests: removed by discovery, or never filled. False for
 * upstreams without discovery. Any worker. */
bool fy__upstream_gone(const fy_upstream_t *u, int server);
/* Worker w uses the (discovery) upstream on `loop`: its sweep starts there. */
void fy__upstream_dyn_touch(fy_upstream_t *u, int w, fy_loop_t *loop);
static inline void fy__upstream_mux_touch(fy_upstream_t *u, int w, fy_loop_t *loop)
{
    if (fy_upstream_conf(u)->discovery) fy__upstream_dyn_touch(u, w, loop);
}
/* The first set was the running generation's (a reload): discovery looks up at once. */
bool fy__upstream_lookup_now(const fy_upstream_t *u);
/* Servers taking requests now (tests, logs). */
size_t fy__upstream_live_servers(const fy_upstream_t *u);
/* Worker w's HTTP/2 and HTTP/3 connections to `server`: idle ones closed now, busy ones take
 * no new streams and close after their last (upstream_mux.c). */
void fy__upstream_mux_drain(fy_upstream_t *u, int w, int server);

void fy__mux_probe_start(fy__mux_probe_t *p, fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                         const char *path, void (*done)(void *ud, int status, const char *why),
                         void *ud);
void fy__mux_probe_stop(fy__mux_probe_t *p, fy_loop_t *loop);

#endif
