/* The upstream's own state (servers, per-worker pools, health probes, the discovery slot
 * table), shared by upstream.c (picking, pools), upstream_health.c (active checks) and
 * upstream_slots.c (discovery) and upstream_resil.c (breakers, retry budget). Threads: as
 * stated per field; no file outside these four. */
#ifndef FY_UPSTREAM_STATE_H
#define FY_UPSTREAM_STATE_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/counters.h"

#include "upstream/discovery.h"
#include "upstream/upstream.h"
#include "upstream/upstream_breaker.h"
#include "upstream/upstream_int.h"

enum { OC_CONNECTING = 1, OC_HANDSHAKE, OC_IDLE, OC_BUSY };

typedef struct srv_state {
    fy_origin_conn_t *idle; /* pool: most recently used first */
    size_t nidle;
    int inflight;
    double ewma_us; /* least-time: decaying average of time to first byte */
    /* ewma_us's bits + its owner's sample count != 0, published for other threads (the admin
       API): written by the worker only (relaxed), read with relaxed loads; 0 = no sample */
    _Atomic uint64_t ewma_pub;
    uint64_t samples;
    uint64_t last_pick_ms;
    int64_t cur_weight; /* smooth weighted round robin */
    unsigned fails;
    uint64_t ejected_until;
    void *h2;             /* HTTP/2 sessions (upstream_h2.c) */
    void *h3;             /* HTTP/3 connections (upstream_h3.c) */
    unsigned nconns;      /* HTTP/1.1 origin connections alive (pooled or held) */
    unsigned incarnation; /* discovery: the slot's server this state is about */
    fy_breaker_t brk;     /* `circuit-breaker` (this worker's) */
} srv_state_t;

typedef struct up_worker {
    srv_state_t *srv;
    uint64_t rnd;
    fy_retry_budget_t budget; /* `retry-budget` (this worker's) */
} up_worker_t;

typedef struct hc_probe {
    fy_upstream_t *u;
    int server;
    fy_origin_conn_t *oc;
    fy_timer_t timeout;
    char buf[2048];
    size_t len;
    unsigned fails, oks;
    fy__mux_probe_t *mp; /* HTTP/2 and HTTP/3 servers: the probe is a stream on a pooled
                            connection (origin_probe.c) */
} hc_probe_t;

/* ---- discovery: a server set that changes at run time ----
 * The servers live in a fixed table of `cap` slots (plus one placeholder that never takes
 * traffic, picked when no server is known: its empty address fails the connect, a 502). A
 * slot's server is its identity (URL and weight): it keeps its index, health state and pools
 * for as long as it is listed, and gets them back if it returns while draining. The discovery
 * loop (worker 0) is the only writer: it fills a free slot and then publishes the set of live
 * slots, one atomic mask (release), and a version. Workers read the mask when they pick
 * (acquire), so a slot's conf is complete before anyone can choose it; a removed slot leaves
 * the mask at once (no new requests), while requests in flight keep using its conf. Every
 * worker that used the upstream runs a sweep every FY_DISC_SWEEP_MS: it closes its idle
 * connections to removed slots (busy ones close when released) and publishes which removed
 * slots it holds nothing of any more, with the version it saw. A removed slot is reused for
 * another server only once every such worker has swept since the removal and holds nothing
 * of it: the RCU grace period, with the sweep as the quiescent point. Until then a new server
 * takes another free slot (max-servers bounds them). */
#define FY_DISC_SWEEP_MS 500
enum { SLOT_FREE = 0, SLOT_LIVE, SLOT_DRAINING };

typedef struct dyn_worker {
    fy_upstream_t *u;
    int w;
    fy_loop_t *loop; /* set on its first acquire: the sweep runs there */
    fy_timer_t sweep;
    atomic_bool used;       /* has picked a server of this upstream */
    _Atomic uint64_t clear; /* removed slots it holds nothing of */
    _Atomic unsigned seen;  /* the version `clear` was computed at */
} dyn_worker_t;

typedef struct dyn {
    _Atomic uint64_t live; /* slots that take new requests */
    _Atomic unsigned version;
    size_t cap;
    fy_upstream_server_conf_t *slots; /* cap + 1; strings owned (malloc) */
    _Atomic unsigned *incarnation;    /* per slot: bumped when it gets another server */
    /* the discovery loop only */
    int state[64];
    unsigned removed_at[64];
    dyn_worker_t *w;
    fy__discovery_t *disc;
    /* the set last published, for the next generation (fy_upstream_carry_health) */
    pthread_mutex_t lock;
    fy_disc_entry_t *last;
    size_t nlast;
    bool lookup_now; /* the set came from the generation before: look up at once */
} dyn_t;

struct fy_upstream {
    const fy_upstream_conf_t *conf;
    fy_upstream_conf_t own_conf; /* discovery: conf with servers = the slot table */
    dyn_t *dyn;                  /* NULL: the configured servers, fixed */
    atomic_bool *down;           /* per server, set by the health checker, read by every worker */
    atomic_uint *downs;          /* per server: how many times the health checker marked it down */
    /* per server: passive ejection, until this loop time (ms), set by the worker that saw
       max-fails in a row and obeyed by every worker (each would otherwise keep sending
       until it had seen as many failures itself) */
    _Atomic uint64_t *ejected_until;
    atomic_bool *drained; /* per server: the admin API drained it */
    /* per server, configured upstreams with detailed metrics only (fy_counters_detail) */
    fy_counter_id_t *pool_ids, *retry_ids, *eject_ids;
    /* per server, the same: origin connections open (TCP for h1 and h2, QUIC for h3), and
       requests waiting for a stream on an h2/h3 connection */
    fy_counter_id_t *conn_ids, *wait_ids;
    /* per server, with `circuit-breaker`: workers whose breaker is open / half-open (gauges),
       transitions to open, half-open, closed (counters) */
    fy_counter_id_t *brk_open_ids, *brk_half_ids, *brk_to_ids[3];
    fy_counter_id_t budget_id; /* ferry_upstream_retry_budget_exhausted_total{upstream} */
    fy_counter_id_t hedge_id, hedge_win_id; /* ferry_upstream_hedges_total, _hedge_wins_total */
    char (*ids)[17];                        /* per server: opaque sticky id (hash of its URL) */
    hc_probe_t *probes;                     /* the checking worker's, NULL elsewhere */
    fy_timer_t hc_tick;
    fy_loop_t *hc_loop;
    int hc_worker;
    const fy_upstream_server_conf_t *servers;
    size_t nservers;
    int64_t total_weight;
    fy_tls_client_ctx_t *tls;
    fy_tls_client_ctx_t *tls_h2;    /* ALPN h2, for h2:// servers */
    bool tls_shared, tls_h2_shared; /* borrowed (fy_upstream_new_with_tls), not freed */
    up_worker_t *workers;
    int nworkers;
};

/* upstream_resil.c: counters of the breakers and the budget (at build), freed with u; an
 * outcome for worker w's breaker of `server` (with `circuit-breaker` only). */
void fy__upstream_resil_init(fy_upstream_t *u);
void fy__upstream_resil_free(fy_upstream_t *u);
void fy__upstream_breaker_record(fy_upstream_t *u, int w, int server, bool ok, uint64_t now_ms);

/* gauge ids[server] += d, when the per-server series exist (fy_counters_detail) */
static inline void fy__upstream_gauge(const fy_counter_id_t *ids, int server, int64_t d)
{
    if (ids) fy_gauge_add(ids[server], d);
}

/* upstream_health.c: stop the active check of one server (its slot is being reused). */
void fy__upstream_hc_stop_probe(fy_upstream_t *u, hc_probe_t *p);

#endif
