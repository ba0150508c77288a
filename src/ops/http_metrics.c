#include "ops/http_metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"
#include "upstream/upstream.h"

enum { NCLASS = 5, NPROTO = 3 };
static const char *const proto_names[NPROTO] = {"h1", "h2", "h3"};

/* One block of consecutive slots per listener x route x protocol (responses by class, then
 * body bytes), and one per route (TTFB histogram, then total): the observer loads two ids and
 * writes at constant offsets from them. */
enum { B_RESP = 0, B_IN = NCLASS, B_OUT = NCLASS + 1, B_N = NCLASS + 2 };
enum { H_TTFB = 0, H_DUR = FY_HIST_NSLOTS };

/* Per upstream server, one block: responses by class, then the TTFB and total histograms. */
enum { U_RESP = 0, U_TTFB = NCLASS, U_DUR = NCLASS + FY_HIST_NSLOTS, U_N = NCLASS + 2 };

/* The upstream of one proxy route, registered the first time the route proxies on this
 * worker (a route has one upstream; the handler does not tell it before). */
typedef struct route_up {
    const fy_upstream_t *u; /* borrowed; NULL until seen */
    fy_counter_id_t *blk;   /* owned: per server */
    size_t n;
} route_up_t;

struct fy_http_metrics {
    const fy_route_t *routes; /* borrowed: the router's array */
    size_t nroutes;
    fy_counter_id_t *blk;  /* owned: [(nroutes + 1) * NPROTO]; route nroutes = none matched */
    fy_counter_id_t *hist; /* owned: [nroutes + 1] */
    route_up_t *ups;       /* owned: [nroutes] */
};

int fy_http_metrics_setup(int nworkers)
{
    int r = fy_counters_init(nworkers);
    if (r < 0) return r;
    fy_counters_register_builtin();
    return 0;
}

fy_http_metrics_t *fy_http_metrics_new(const char *listener, const fy_router_t *rt)
{
    fy_http_metrics_t *m = fy_xcalloc(1, sizeof *m);
    m->routes = rt->routes;
    m->nroutes = rt->n;
    m->blk = fy_xcalloc((rt->n + 1) * NPROTO, sizeof *m->blk);
    m->hist = fy_xcalloc(rt->n + 1, sizeof *m->hist);
    m->ups = fy_xcalloc(rt->n + 1, sizeof *m->ups);
    char lab[B_N][256], route[24];
    const char *names[B_N], *labels[B_N];
    int kinds[B_N];
    for (size_t r = 0; r <= rt->n; r++) {
        if (r < rt->n)
            snprintf(route, sizeof route, "%zu", r);
        else
            snprintf(route, sizeof route, "-");
        for (int p = 0; p < NPROTO; p++) {
            for (int c = 0; c < NCLASS; c++) {
                snprintf(lab[B_RESP + c], sizeof lab[0],
                         "listener=\"%s\",route=\"%s\",code=\"%dxx\",proto=\"%s\"", listener, route,
                         c + 1, proto_names[p]);
                names[B_RESP + c] = "ferry_http_responses_total";
            }
            snprintf(lab[B_IN], sizeof lab[0], "listener=\"%s\",route=\"%s\",proto=\"%s\"",
                     listener, route, proto_names[p]);
            memcpy(lab[B_OUT], lab[B_IN], sizeof lab[0]);
            names[B_IN] = "ferry_http_request_bytes_total";
            names[B_OUT] = "ferry_http_response_bytes_total";
            for (int i = 0; i < B_N; i++) labels[i] = lab[i], kinds[i] = FY_COUNTER;
            m->blk[r * NPROTO + p] = fy_counter_register_block(names, labels, kinds, B_N);
        }
        snprintf(lab[0], sizeof lab[0], "route=\"%s\"", route);
        const char *hn[2] = {"ferry_http_ttfb_seconds", "ferry_http_duration_seconds"};
        const char *hl[2] = {lab[0], lab[0]};
        const int hk[2] = {FY_HISTOGRAM, FY_HISTOGRAM};
        m->hist[r] = fy_counter_register_block(hn, hl, hk, 2);
        /* the route's histograms count every exchange of its blocks: their first bucket is
           implicit (most exchanges take under the clock's 1 ms and then write no slot) */
        for (int p = 0; p < NPROTO && m->hist[r]; p++)
            if (m->blk[r * NPROTO + p]) {
                fy_counter_hist_count_from(m->hist[r] + H_TTFB, m->blk[r * NPROTO + p] + B_RESP,
                                           NCLASS);
                fy_counter_hist_count_from(m->hist[r] + H_DUR, m->blk[r * NPROTO + p] + B_RESP,
                                           NCLASS);
            }
    }
    return m;
}

static __attribute__((noinline, cold)) void route_up_register(route_up_t *ru,
                                                              const fy_upstream_t *u)
{
    const fy_upstream_conf_t *uc = fy_upstream_conf(u);
    const fy_upstream_server_conf_t *sv = uc->servers.v;
    ru->u = u;
    ru->n = uc->servers.n;
    ru->blk = fy_xcalloc(ru->n ? ru->n : 1, sizeof *ru->blk);
    char lab[U_N][384];
    const char *names[U_N], *labels[U_N];
    int kinds[U_N];
    for (size_t i = 0; i < ru->n; i++) {
        for (int c = 0; c < NCLASS; c++) {
            snprintf(lab[U_RESP + c], sizeof lab[0], "upstream=\"%s\",server=\"%s\",code=\"%dxx\"",
                     uc->name, sv[i].url, c + 1);
            names[U_RESP + c] = "ferry_upstream_responses_total";
            kinds[U_RESP + c] = FY_COUNTER;
        }
        snprintf(lab[NCLASS], sizeof lab[0], "upstream=\"%s\",server=\"%s\"", uc->name, sv[i].url);
        memcpy(lab[NCLASS + 1], lab[NCLASS], sizeof lab[0]);
        names[NCLASS] = "ferry_upstream_ttfb_seconds";
        names[NCLASS + 1] = "ferry_upstream_duration_seconds";
        kinds[NCLASS] = kinds[NCLASS + 1] = FY_HISTOGRAM;
        for (int k = 0; k < U_N; k++) labels[k] = lab[k];
        fy_counter_id_t b = ru->blk[i] = fy_counter_register_block(names, labels, kinds, U_N);
        if (b) {
            fy_counter_hist_count_from(b + U_TTFB, b + U_RESP, NCLASS);
            fy_counter_hist_count_from(b + U_DUR, b + U_RESP, NCLASS);
        }
    }
}

/* A 4xx that is a limit's: the h1 codec counts its own head limits (414, 431) where it
 * parses; h2 and h3 heads (nghttp2, QPACK) are told here by their status. */
static void count_limit(const fy_exchange_t *ex)
{
    int st = ex->res.status, l = -1;
    if (st == 413)
        l = FY_LIMIT_BODY_SIZE;
    else if (ex->req.version >= 20 && st == 414)
        l = FY_LIMIT_REQUEST_LINE;
    else if (ex->req.version >= 20 && st == 431)
        l = FY_LIMIT_HEADER_BYTES;
    if (l >= 0) fy_counter_inc(fy_cid_limit[l]);
}

static inline size_t route_index(const fy_http_metrics_t *m, const fy_exchange_t *ex)
{
    size_t r = ex->route ? (size_t)(ex->route - m->routes) : m->nroutes;
    return r > m->nroutes ? m->nroutes : r; /* another router's route (cannot happen today) */
}

static inline unsigned status_class(int status)
{
    unsigned cls = (unsigned)status / 100u - 1u;
    return cls >= NCLASS ? NCLASS - 1 : cls;
}

static inline fy_counter_id_t route_block(const fy_http_metrics_t *m, const fy_exchange_t *ex,
                                          size_t r)
{
    unsigned p = ex->req.version >= 30 ? 2 : ex->req.version >= 20;
    return m->blk[r * NPROTO + p];
}

/* Every case: the first use of a route's upstream (registration), an exchange that took 1 ms
 * or more by the loop's clock (the histograms' other buckets and sums), a 4xx that may be a
 * limit. Off the common path, which is fy_http_metrics_exchange's copy of the counter part. */
static __attribute__((noinline, cold)) void exchange_full(fy_exchange_t *ex,
                                                          const fy_http_metrics_t *m)
{
    _Atomic uint64_t *c = fy__counters_mine;
    size_t r = route_index(m, ex);
    unsigned cls = status_class(ex->res.status);
    fy_counter_id_t b = route_block(m, ex, r);
    if (b) {
        fy_counter_add_at(c, b + B_RESP + cls, 1);
        fy_counter_add_at(c, b + B_IN, ex->body_received);
        fy_counter_add_at(c, b + B_OUT, ex->bytes_sent);
    }
    fy_counter_id_t ub = 0;
    if (ex->upstream && r < m->nroutes) {
        route_up_t *ru = &m->ups[r];
        if (!ru->u) route_up_register(ru, ex->upstream);
        if (ru->u == ex->upstream && (size_t)ex->upstream_server < ru->n)
            ub = ru->blk[ex->upstream_server];
        if (ub) fy_counter_add_at(c, ub + U_RESP + cls, 1);
    }
    uint64_t now = ex->ctx->loop->now_ms, start = ex->start_ms;
    uint64_t head = ex->head_ms ? ex->head_ms : now;
    uint64_t ttfb_us = (head - start) * 1000, dur_us = (now - start) * 1000;
    fy_counter_id_t h = m->hist[r];
    if (h && dur_us) {
        fy_hist_observe_above_at(c, h + H_TTFB, ttfb_us);
        fy_hist_observe_above_at(c, h + H_DUR, dur_us);
    }
    if (ub && dur_us) {
        fy_hist_observe_above_at(c, ub + U_TTFB, ttfb_us);
        fy_hist_observe_above_at(c, ub + U_DUR, dur_us);
    }
    if (cls == 3) count_limit(ex);
}

/* The request path's cost: four counter adds and no call. Every histogram here counts its
 * first bucket implicitly (from the response counters; fy_counter_hist_count_from), so an
 * exchange under the loop clock's millisecond writes no histogram slot. */
void fy_http_metrics_exchange(fy_exchange_t *ex, void *arg)
{
    const fy_http_metrics_t *m = arg;
    size_t r = route_index(m, ex);
    const route_up_t *ru = &m->ups[r];
    if (__builtin_expect(ex->ctx->loop->now_ms != ex->start_ms ||
                             (unsigned)(ex->res.status - 408) <= 431 - 408 ||
                             (ex->upstream && r < m->nroutes && !ru->u),
                         0)) {
        exchange_full(ex, m);
        return;
    }
    _Atomic uint64_t *c = fy__counters_mine;
    unsigned cls = status_class(ex->res.status);
    fy_counter_id_t b = route_block(m, ex, r);
    if (b) {
        fy_counter_add_at(c, b + B_RESP + cls, 1);
        fy_counter_add_at(c, b + B_IN, ex->body_received);
        fy_counter_add_at(c, b + B_OUT, ex->bytes_sent);
    }
    if (ex->upstream && r < m->nroutes && ru->u == ex->upstream &&
        (size_t)ex->upstream_server < ru->n) {
        fy_counter_id_t ub = ru->blk[ex->upstream_server];
        if (ub) fy_counter_add_at(c, ub + U_RESP + cls, 1);
    }
}

void fy_http_metrics_free(fy_http_metrics_t *m)
{
    if (!m) return;
    for (size_t r = 0; r <= m->nroutes; r++) free(m->ups[r].blk);
    free(m->ups);
    free(m->blk);
    free(m->hist);
    free(m);
}

void fy_http_metrics_want(void)
{
    fy_counters_detail = true; /* the admin listener serves /metrics */
}

bool fy_http_metrics_wanted(void)
{
    const char *path = getenv("FERRY_DUMP_COUNTERS");
    return fy_counters_detail || (path && *path);
}

void fy_http_metrics_dump_env(void)
{
    const char *path = getenv("FERRY_DUMP_COUNTERS");
    if (!path || !*path) return;
    FILE *f = fopen(path, "w");
    if (!f) {
        fy_warn("FERRY_DUMP_COUNTERS: %s: %s", path, strerror(errno));
        return;
    }
    fy_counters_snapshot_t s;
    if (fy_counters_snapshot(&s) == 0) {
        fy_counters_write_text(&s, f);
        fy_counters_snapshot_free(&s);
    }
    fclose(f);
}
