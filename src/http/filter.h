/* The filter chain: code that runs around the exchanges of a listener or a route, in one fixed
 * order, between the codec and the handler (DESIGN.md §2). Threads: filters are built once per
 * config generation (single-threaded) and then shared by every worker; their ops touch only the
 * exchange, per-worker state (index by ex->ctx->worker_id) or atomics.
 *
 * Request phase. After the route is matched, the listener's chain (fy_http_ctx_t.filters) and
 * then the route's chain (fy_route_t.filters) run in stage order; each filter's on_request says
 * NEXT (go on), DONE (it answered or failed the exchange: stop) or WAIT (it answers later, or
 * calls fy_filter_resume(ex) to go on with the filter after it; e.g. a Redis round trip). A
 * filter that waits registers an arena reset callback (fy_arena_on_reset) so that a client that
 * goes away meanwhile cancels it; after the reset it must not touch the exchange.
 *
 * Response phase. A filter that needs to see or change the response (headers, body) pushes a
 * sink layer on the exchange in its on_request. The handler's sends go through the layers
 * from the highest stage down to the codec: the response meets the filters in the reverse of
 * the request order (as in nginx and Envoy), so the lowest stage (capture) sees exactly what
 * the client gets. A layer op that is NULL passes through; a layer hands on with
 * fy_layer_next_*. Layers also see request-body reads (read_body) on their way to the codec. */
#ifndef FY_HTTP_FILTER_H
#define FY_HTTP_FILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "http/exchange.h"

typedef enum fy_filter_verdict {
    FY_FILTER_NEXT = 0, /* go on with the next filter, then the handler */
    FY_FILTER_DONE = 1, /* the filter answered or failed the exchange */
    FY_FILTER_WAIT = 2, /* later: fy_filter_resume(ex), or an answer */
} fy_filter_verdict_t;

/* The one documented order (docs/ARCHITECTURE.md, "Filters"). A chain is kept sorted by stage
 * whatever order the config names its filters in; equal stages keep the config's order. */
enum fy_filter_stage {
    FY_STAGE_CAPTURE = 10,   /* HAR / inspector capture: nearest the codec on the response */
    FY_STAGE_PROTOCOL = 20,  /* what every server must refuse: CONNECT 405, OPTIONS *, 413 */
    FY_STAGE_TRACE = 30,     /* traceparent propagation / generation */
    FY_STAGE_ACCESS = 100,   /* CIDR allow/deny, connection and concurrency limits */
    FY_STAGE_AUTH = 200,     /* JWT */
    FY_STAGE_LIMIT = 300,    /* rate limits (local, Redis) */
    FY_STAGE_WAF = 400,      /* ModSecurity */
    FY_STAGE_COMPRESS = 500, /* response compression (below the cache: it stores identity) */
    FY_STAGE_REWRITE = 600,  /* header/body transforms, intercept rules, C hooks */
    FY_STAGE_CACHE = 700,    /* last before the handler: a hit answers here */
};

typedef struct fy_filter fy_filter_t;

typedef struct fy_filter_ops {
    const char *name; /* for logs and metrics ("cidr", "jwt", ...) */
    int stage;        /* enum fy_filter_stage */
    fy_filter_verdict_t (*on_request)(fy_filter_t *f, fy_exchange_t *ex);
    /* Free the filter (the last chain holding it went away). */
    void (*destroy)(fy_filter_t *f);
} fy_filter_ops_t;

/* Embedded first in each filter's own struct; refcounted by the chains that hold it (one named
 * policy may sit on several routes and listeners). */
struct fy_filter {
    const fy_filter_ops_t *ops;
    unsigned refs; /* changed only while a generation is built or freed (one thread) */
};

typedef struct fy_filter_chain {
    fy_filter_t **v; /* owned array, sorted by stage; each entry holds one reference */
    size_t n, cap;
    /* v[0]->ops->on_request when the chain has exactly one filter, else NULL: resolved when the
       chain is built, so that fy_filter_run's usual case is one load and one call */
    fy_filter_verdict_t (*only)(fy_filter_t *f, fy_exchange_t *ex);
} fy_filter_chain_t;

/* Add f (takes a reference) at its stage's place. 0, or -1 when out of memory. */
int fy_filter_chain_add(fy_filter_chain_t *c, fy_filter_t *f);
/* Drop every reference (destroying filters that reach 0) and the array. */
void fy_filter_chain_free(fy_filter_chain_t *c);

/* Run the exchange's filters from where it stands, then its route's handler (router.c calls
 * it from fy_exchange_dispatch; it runs the listener's chain, then the route's). */
void fy_filter_run(fy_exchange_t *ex);
/* A filter that returned WAIT lets the exchange go on with the filter after it. */
static inline void fy_filter_resume(fy_exchange_t *ex)
{
    fy_filter_run(ex);
}

/* ---- request fields that filters add ----
 *
 * Names of the request fields a filter may add that no handler has a rule of its own for:
 * lowercase, not hop-by-hop, not framing, not Host. A filter that adds such a field points
 * its name into this table (FY_FILTER_FIELD_*, NUL-terminated, lengths as noted); a handler may
 * then forward a field so named without classifying its name (the proxy still applies a
 * Connection list and the route's remove/set rules to it). A field whose name points
 * elsewhere is treated as a received one. */
extern const char fy_filter_field_names[];
#define FY_FILTER_FIELD_NAMES_LEN 23                            /* the table's size */
#define FY_FILTER_FIELD_TRACEPARENT (fy_filter_field_names + 0) /* "traceparent", 11 */
#define FY_FILTER_FIELD_TRACESTATE (fy_filter_field_names + 12) /* "tracestate", 10 */

/* Does `name` point into fy_filter_field_names (a field a filter added)? */
static inline bool fy_filter_field_is_ours(const char *name)
{
    return (uintptr_t)name - (uintptr_t)fy_filter_field_names < FY_FILTER_FIELD_NAMES_LEN;
}

/* ---- sink layers ---- */

typedef struct fy_sink_layer fy_sink_layer_t;

typedef struct fy_layer_ops {
    const char *name;
    void (*send)(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                 int state);
    void (*send_file)(fy_sink_layer_t *l, fy_exchange_t *ex, int fd, off_t off, size_t len,
                      int state);
    void (*read_body)(fy_sink_layer_t *l, fy_exchange_t *ex);
    void (*send_informational)(fy_sink_layer_t *l, fy_exchange_t *ex, int status,
                               const fy_headers_t *headers);
    int (*detach)(fy_sink_layer_t *l, fy_exchange_t *ex, int *fd, char *buf, size_t cap,
                  size_t *len);
} fy_layer_ops_t;

/* Embedded first in a layer's own (arena-allocated) state. */
struct fy_sink_layer {
    const fy_layer_ops_t *ops;
    fy_sink_layer_t *below; /* the next layer towards the codec; NULL: the codec's sink */
    int stage;
};

/* Put l (ops, stage) on ex's response path at its stage's place (arena memory; lives until the
 * exchange is done). */
void fy_exchange_push_layer(fy_exchange_t *ex, fy_sink_layer_t *l, const fy_layer_ops_t *ops,
                            int stage);
/* The layer of ex whose ops are `ops`, or NULL (e.g. the HAR observer finds the capture). */
fy_sink_layer_t *fy_exchange_find_layer(const fy_exchange_t *ex, const fy_layer_ops_t *ops);

/* Hand on from inside layer l's op to the layer below it (or the codec). */
void fy_layer_next_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                        int state);
void fy_layer_next_send_file(fy_sink_layer_t *l, fy_exchange_t *ex, int fd, off_t off, size_t len,
                             int state);
void fy_layer_next_read_body(fy_sink_layer_t *l, fy_exchange_t *ex);
void fy_layer_next_send_informational(fy_sink_layer_t *l, fy_exchange_t *ex, int status,
                                      const fy_headers_t *headers);
int fy_layer_next_detach(fy_sink_layer_t *l, fy_exchange_t *ex, int *fd, char *buf, size_t cap,
                         size_t *len);

#endif
