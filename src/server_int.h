/* Internals shared by the server's files (server.c: lifecycle and workers; server_gen.c:
 * generations, listener ctxs and reload; server_listen.c: slots, sockets and accepting;
 * server_h3.c: the HTTP/3 side of a listener). Not for use outside them.
 *
 * Thread rules: a slot, a generation and the server are made on the main thread; a
 * generation is immutable once made and shared (refcounted) by the workers; everything
 * under a worker (its listeners' worker parts, its ctxs, its loop) is that worker's thread
 * only, except the fields marked atomic or under flush_mu. */
#ifndef FY_SERVER_INT_H
#define FY_SERVER_INT_H

#include "server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "core/loop.h"
#include "http/router.h"
#include "l4/l4.h"
#include "net/accept.h"
#include "ops/access_log.h"
#include "ops/har.h"
#include "ops/inspector.h"
#include "ops/http_metrics.h"
#include "quic/quic.h"
#include "tls/tls.h"
#include "upstream/upstream.h"

typedef struct slot slot_t;
typedef struct gen_ctx gen_ctx_t;

/* One listening address on one worker. Made when a generation first lists the address and
 * kept (never freed before the server) so that the connections of older generations can
 * still find it; `removed` once a generation no longer lists it. Worker's thread only. */
typedef struct worker_listener {
    fy_io_t io;
    struct fy_worker *w;
    slot_t *slot;
    gen_ctx_t *cur; /* the worker's current generation's ctx: new conns get it */
    size_t nold;    /* retired ctxs of this listener still alive */
    bool started, removed;
    bool paused;               /* at limits.connections */
    fy_accept_pause_t fdpause; /* accept ran out of descriptors */
    int udp_fd; /* h3: this worker's UDP socket until the endpoint takes it, else -1 */
    fy_quic_endpoint_t *quic; /* h3 endpoint (owns udp_fd once started) */
    int l4_front;             /* the listener's `sni:` map in l4/l4.c, or -1 */
    fy_list_t pp_pending;     /* conns from `accept-proxy` fronts still sending the header */
    size_t npending;          /* of them (counted in limits.connections) */
} worker_listener_t;

/* One listening address for every worker (main thread makes it; never freed before the
 * server). An unchanged listener keeps its slot, and so its sockets, across reloads. */
struct slot {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int kind;
    unsigned protocols;
    bool tls, share;
    int64_t backlog;
    char *address, *name;     /* owned copies (the generation that made it may go first) */
    fy_quic_server_t *quic;   /* owned: h3 (GnuTLS certificates replaced on reload) */
    fy_quic_conf_t quic_conf; /* the `quic:` settings it was made with (borrowed by quic) */
    uint64_t cert_hash;       /* of the certificate and key files quic has loaded */
    bool active;              /* main thread: listed by the current generation */
    worker_listener_t *wl;    /* per worker */
    struct slot *next;        /* the server's list of every slot */
};

/* Everything built from one config: immutable once made, refcounted by the server (its
 * current one) and by each worker that uses it; a worker uses it while it is that worker's
 * current generation or while one of its ctxs has a conn. */
typedef struct fy_gen {
    atomic_int refs;
    unsigned id;
    const fy_config_t *cfg;
    fy_config_t *owned_cfg; /* owned (reloaded ones); the first is the caller's */
    fy_router_t router;
    fy_upstream_t **upstreams;   /* per cfg->upstreams entry */
    fy_tls_ctx_t **tls;          /* per listener, NULL for plain */
    const char **alt_svc;        /* per listener: Alt-Svc value for TCP responses, or NULL */
    fy_filter_chain_t *lfilters; /* per listener: its policies' filters (before the route's) */
    slot_t **slots;              /* per listener, borrowed from the server */
    fy_router_t mitm_router;     /* one catch-all route to the mitm handler (intercept listeners) */
    fy_handler_t *mitm;          /* owned by mitm_router */
    fy_har_t *har;               /* intercept.capture.har, or NULL */
    int nworkers;
    int *wrefs;         /* per worker, that worker's thread only */
    fy_defer_t *wdefer; /* per worker: the deferred unref after its release */
    bool health;        /* worker 0 started the active health checks */
} fy_gen_t;

/* The ctx of one listener on one worker for one generation; freed when it is no longer its
 * listener's current one and its last conn has closed. */
struct gen_ctx {
    fy_http_ctx_t ctx;
    fy_gen_t *gen;
    worker_listener_t *wl;
    fy_list_t link;             /* worker's ctxs */
    fy_defer_t reap;            /* retired and empty: free once the conns' deferred frees ran */
    fy_http_metrics_t *metrics; /* owned: the metrics observer of ctx */

    const fy_listener_conf_t *lc; /* borrowed from gen->cfg: the listener's settings */
};

struct fy_worker {
    fy_server_t *srv;
    int id;
    pthread_t thread;
    fy_loop_t loop;
    fy_gen_t *gen;             /* current */
    _Atomic(fy_gen_t *) inbox; /* fy_server_reload: the next generation */
    worker_listener_t **wls;   /* every listener started on this worker */
    size_t nwls, capwls;
    fy_list_t ctxs;  /* every live gen_ctx */
    fy_timer_t tick; /* access-log flush */
    fy_timer_t drain_timer;
    atomic_bool stop_requested;
    atomic_bool flush_requested; /* fy_server_stop: write the access log out now */
    bool draining;
    uint64_t drain_ms;
    fy_access_log_t *alog;
};

struct fy_server {
    const fy_config_t *cfg; /* the first generation's (borrowed): workers, log, l4 */
    int nworkers;
    struct fy_worker *workers;
    fy_gen_t *gen;   /* current (the server's reference) */
    fy_gen_t *l4gen; /* the first generation, pinned while `l4:` relays use its upstreams */
    slot_t *slots;   /* every slot ever made */
    unsigned next_id;
    fy_l4_t *l4; /* layer-4 relays (`l4:`) */
    int access_fd;
    pthread_mutex_t flush_mu; /* fy_server_stop waits for every worker's access-log flush */
    pthread_cond_t flush_cv;
    int nflushed;
    int nadopted; /* workers that took the posted generation (under flush_mu) */
};

/* server_gen.c */
fy_gen_t *gen_new(const fy_config_t *cfg, int nworkers, const fy_gen_t *prev);
void gen_unref(fy_gen_t *g);
void worker_gen_get(struct fy_worker *w, fy_gen_t *g);
void worker_gen_put(struct fy_worker *w, fy_gen_t *g);
void gen_ctx_free(struct fy_worker *w, gen_ctx_t *gc);
void gen_ctx_reap_later(struct fy_worker *w, gen_ctx_t *gc);
void worker_adopt(struct fy_worker *w, fy_gen_t *g);

/* server_h3.c */
int h3_certs(const fy_config_t *cfg, const fy_listener_conf_t *lc, slot_t *sl);
const char *h3_alt_svc(const fy_listener_conf_t *lc);

/* server_listen.c */
int gen_bind(fy_server_t *s, fy_gen_t *g);
void slot_close_unstarted(fy_server_t *s, slot_t *sl);
void on_conn_closed(fy_http_ctx_t *ctx);
void listener_start(struct fy_worker *w, worker_listener_t *wl);
void listener_stop(struct fy_worker *w, worker_listener_t *wl);

/* server.c */
bool all_closed(struct fy_worker *w);

#endif
