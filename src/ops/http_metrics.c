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
_Static_assert(H_DUR - H_TTFB == U_DUR - U_TTFB, "the total follows the TTFB histogram");

/* One route's ids (index nroutes: no route matched), together so that the observer finds
 * them from one index: a block per protocol, the histograms, and the per-server blocks of the
 * route's upstream, registered the first time the route proxies on this worker (a route has
 * one upstream; the handler does not tell it before). */
typedef struct route_m {
    fy_counter_id_t blk[NPROTO + 1]; /* by req.version >> 3: [0] (never) and [1] h1, h2, h3 */
    fy_counter_id_t hist;
    uint32_t n;             /* servers in ublk */
    const fy_upstream_t *u; /* borrowed; NULL until seen */
    fy_counter_id_t *ublk;  /* owned: per server */
} route_m_t;                /* 40 bytes */

/* A status's class (0 = 1xx .. 4 = 5xx and everything else), | CLS_FULL for 408..431 (a 4xx
 * that may be a limit's: the full path); statuses from 600 take the full path too. */
enum { CLS_FULL = 8, NSTATUS = 600 };

struct fy_http_metrics {
    size_t nroutes;
    route_m_t *r;         /* owned: [nroutes + 1] */
    uint8_t cls[NSTATUS]; /* by status: its class, | CLS_FULL */
};

static inline unsigned status_class(int status)
{
    unsigned cls = (unsigned)status / 100u - 1u;
    return cls >= NCLASS ? NCLASS - 1 : cls;
}

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
    m->nroutes = rt->n;
    m->r = fy_xcalloc(rt->n + 1, sizeof *m->r);
    for (unsigned st = 0; st < NSTATUS; st++)
        m->cls[st] = (uint8_t)(status_class((int)st) | (st >= 408 && st <= 431 ? CLS_FULL : 0));
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
            m->r[r].blk[p + 1] = fy_counter_register_block(names, labels, kinds, B_N);
        }
        m->r[r].blk[0] = m->r[r].blk[1]; /* (versions under 8: none) */
        snprintf(lab[0], sizeof lab[0], "route=\"%s\"", route);
        const char *hn[2] = {"ferry_http_ttfb_seconds", "ferry_http_duration_seconds"};
        const char *hl[2] = {lab[0], lab[0]};
        const int hk[2] = {FY_HISTOGRAM, FY_HISTOGRAM};
        m->r[r].hist = fy_counter_register_block(hn, hl, hk, 2);
        /* the route's histograms count every exchange of its blocks: their first bucket is
           implicit (most exchanges take under the clock's 1 ms and then write no slot) */
        for (int p = 0; p < NPROTO && m->r[r].hist; p++)
            if (m->r[r].blk[p + 1]) {
                fy_counter_id_t b = m->r[r].blk[p + 1];
                fy_counter_hist_count_from(m->r[r].hist + H_TTFB, b + B_RESP, NCLASS);
                fy_counter_hist_count_from(m->r[r].hist + H_DUR, b + B_RESP, NCLASS);
            }
    }
    return m;
}

static __attribute__((noinline, cold)) void route_up_register(route_m_t *ru, const fy_upstream_t *u)
{
    const fy_upstream_conf_t *uc = fy_upstream_conf(u);
    const fy_upstream_server_conf_t *sv = uc->servers.v;
    ru->u = u;
    ru->n = (uint32_t)uc->servers.n;
    ru->ublk = fy_xcalloc(ru->n ? ru->n : 1, sizeof *ru->ublk);
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
        fy_counter_id_t b = ru->ublk[i] = fy_counter_register_block(names, labels, kinds, U_N);
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

/* The route's index (fy_route_t.index, set when the router is built), nroutes for none. */
static inline size_t route_index(const fy_http_metrics_t *m, const fy_exchange_t *ex)
{
    size_t r = ex->route ? ex->route->index : m->nroutes;
    return r > m->nroutes ? m->nroutes : r; /* another router's route (cannot happen today) */
}

/* route_m_t.blk's index: 10 and 11 >> 3 = 1 (h1), 20 >> 3 = 2 (h2), 30 >> 3 = 3 (h3) */
static inline unsigned proto_of(const fy_exchange_t *ex)
{
    return ((unsigned)ex->req.version >> 3) & 3u;
}

/* An exchange that took 1 ms or more by the loop's clock: the histograms' other buckets and
 * sums, on the route's and the upstream server's histograms (rm's; after the counter part).
 * Each bucket is found once for both (fy_hist_observe_above_at's work). */
static __attribute__((noinline, cold)) void exchange_hist(const fy_exchange_t *ex,
                                                          _Atomic uint64_t *c, const route_m_t *rm)
{
    fy_counter_id_t h = rm->hist, ub = 0;
    if (ex->upstream && rm->u == ex->upstream && (unsigned)ex->upstream_server < rm->n)
        ub = rm->ublk[ex->upstream_server];
    uint64_t now = ex->ctx->loop->now_ms, start = ex->start_ms;
    uint64_t head = ex->head_ms ? ex->head_ms : now;
    uint64_t ttfb_us = (head - start) * 1000, dur_us = (now - start) * 1000;
    if (!dur_us) return;
    unsigned bt = ttfb_us > fy_hist_bounds_us[0] ? fy_hist_bucket(ttfb_us) : 0;
    unsigned bd = dur_us > fy_hist_bounds_us[0] ? fy_hist_bucket(dur_us) : 0;
    const fy_counter_id_t base[2] = {h, ub}, off[2] = {H_TTFB, U_TTFB};
    for (int i = 0; i < 2; i++) {
        if (!base[i]) continue; /* not registered (or no upstream) */
        fy_counter_id_t t = base[i] + off[i], d = t + (H_DUR - H_TTFB);
        if (bt) fy_counter_add_at(c, t + bt, 1);
        fy_counter_add_at(c, t + FY_HIST_NBOUNDS + 1, ttfb_us);
        if (bd) fy_counter_add_at(c, d + bd, 1);
        fy_counter_add_at(c, d + FY_HIST_NBOUNDS + 1, dur_us);
    }
}

/* The rare cases: the first use of a route's upstream (registration), a 4xx that may be a
 * limit, a status from 600, an upstream other than the route's. Off the common path, which is
 * fy_http_metrics_exchange's copy of the counter part. */
static __attribute__((noinline, cold)) void exchange_full(fy_exchange_t *ex,
                                                          const fy_http_metrics_t *m)
{
    _Atomic uint64_t *c = fy__counters_mine;
    size_t r = route_index(m, ex);
    route_m_t *rm = &m->r[r];
    unsigned cls = status_class(ex->res.status);
    fy_counter_id_t b = rm->blk[proto_of(ex)];
    if (b) {
        fy_counter_add_at(c, b + B_RESP + cls, 1);
        fy_counter_add_at(c, b + B_IN, ex->body_received);
        fy_counter_add_at(c, b + B_OUT, ex->bytes_sent);
    }
    fy_counter_id_t ub = 0;
    if (ex->upstream && r < m->nroutes) {
        if (!rm->u) route_up_register(rm, ex->upstream);
        if (rm->u == ex->upstream && (unsigned)ex->upstream_server < rm->n)
            ub = rm->ublk[ex->upstream_server];
        if (ub) fy_counter_add_at(c, ub + U_RESP + cls, 1);
    }
    if (ex->ctx->loop->now_ms != ex->start_ms) exchange_hist(ex, c, rm);
    if (cls == 3) count_limit(ex);
}

/* The request path's cost: four counter adds and no call. Every histogram here counts its
 * first bucket implicitly (from the response counters; fy_counter_hist_count_from), so an
 * exchange under the loop clock's millisecond writes no histogram slot. An exchange with an
 * upstream other than the one its route registered (the first, or another router's route)
 * takes the full path. */
void fy_http_metrics_exchange(fy_exchange_t *ex, void *arg)
{
    const fy_http_metrics_t *m = arg;
    const route_m_t *rm = &m->r[route_index(m, ex)];
    const fy_upstream_t *up = ex->upstream;
    unsigned st = (unsigned)ex->res.status, cls;
    if (__builtin_expect(st >= NSTATUS || ((cls = m->cls[st]) & CLS_FULL) || (up != rm->u && up),
                         0)) {
        exchange_full(ex, m);
        return;
    }
    _Atomic uint64_t *c = fy__counters_mine;
    fy_counter_id_t b = rm->blk[proto_of(ex)];
    if (__builtin_expect(b != 0, 1)) {
        _Atomic uint64_t *s = c + b; /* the block's slots at constant offsets */
        fy__counter_slot_add(s + B_RESP + cls, 1);
        fy__counter_slot_add(s + B_IN, ex->body_received);
        fy__counter_slot_add(s + B_OUT, ex->bytes_sent);
    }
    if (up && __builtin_expect((unsigned)ex->upstream_server < rm->n, 1)) { /* up == rm->u */
        fy_counter_id_t ub = rm->ublk[ex->upstream_server];
        if (ub) fy__counter_slot_add(c + ub + U_RESP + cls, 1);
    }
    if (__builtin_expect(ex->ctx->loop->now_ms != ex->start_ms, 0)) exchange_hist(ex, c, rm);
}

void fy_http_metrics_free(fy_http_metrics_t *m)
{
    if (!m) return;
    for (size_t r = 0; r <= m->nroutes; r++) free(m->r[r].ublk);
    free(m->r);
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
