#include "ops/http_metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"

enum { NCLASS = 5, NPROTO = 3 };
static const char *const proto_names[NPROTO] = {"h1", "h2", "h3"};

/* limit rejections the observer can tell by status (index order of `limit_names`) */
static const char *const limit_names[] = {"request-timeout", "body-size", "uri-size",
                                          "header-size"};

struct fy_http_metrics {
    const fy_route_t *routes; /* borrowed: the router's array */
    size_t nroutes;
    fy_counter_id_t *resp;       /* owned: [(nroutes + 1) * NCLASS * NPROTO]; last = no route */
    fy_counter_id_t *ttfb, *dur; /* owned: [nroutes + 1] histograms */
    fy_counter_id_t bytes_in[NPROTO], bytes_out[NPROTO];
};

static fy_counter_id_t limit_ids[4];

int fy_http_metrics_setup(int nworkers)
{
    int r = fy_counters_init(nworkers);
    if (r < 0) return r;
    fy_counters_register_builtin();
    for (size_t i = 0; i < 4; i++) {
        char l[64];
        snprintf(l, sizeof l, "limit=\"%s\"", limit_names[i]);
        limit_ids[i] = fy_counter_register("ferry_limit_rejections_total", l, FY_COUNTER);
    }
    return 0;
}

fy_http_metrics_t *fy_http_metrics_new(const char *listener, const fy_router_t *rt)
{
    fy_http_metrics_t *m = fy_xcalloc(1, sizeof *m);
    m->routes = rt->routes;
    m->nroutes = rt->n;
    m->resp = fy_xcalloc((rt->n + 1) * NCLASS * NPROTO, sizeof *m->resp);
    m->ttfb = fy_xcalloc(rt->n + 1, sizeof *m->ttfb);
    m->dur = fy_xcalloc(rt->n + 1, sizeof *m->dur);
    char l[256], route[24];
    for (size_t r = 0; r <= rt->n; r++) {
        if (r < rt->n)
            snprintf(route, sizeof route, "%zu", r);
        else
            snprintf(route, sizeof route, "-");
        for (int c = 0; c < NCLASS; c++)
            for (int p = 0; p < NPROTO; p++) {
                snprintf(l, sizeof l, "listener=\"%s\",route=\"%s\",code=\"%dxx\",proto=\"%s\"",
                         listener, route, c + 1, proto_names[p]);
                m->resp[(r * NCLASS + c) * NPROTO + p] =
                    fy_counter_register("ferry_http_responses_total", l, FY_COUNTER);
            }
        snprintf(l, sizeof l, "route=\"%s\"", route);
        m->ttfb[r] = fy_counter_register("ferry_http_ttfb_seconds", l, FY_HISTOGRAM);
        m->dur[r] = fy_counter_register("ferry_http_duration_seconds", l, FY_HISTOGRAM);
    }
    for (int p = 0; p < NPROTO; p++) {
        snprintf(l, sizeof l, "listener=\"%s\",proto=\"%s\"", listener, proto_names[p]);
        m->bytes_in[p] = fy_counter_register("ferry_http_request_bytes_total", l, FY_COUNTER);
        m->bytes_out[p] = fy_counter_register("ferry_http_response_bytes_total", l, FY_COUNTER);
    }
    return m;
}

void fy_http_metrics_exchange(fy_exchange_t *ex, void *arg)
{
    fy_http_metrics_t *m = arg;
    size_t r = ex->route ? (size_t)(ex->route - m->routes) : m->nroutes;
    if (r > m->nroutes) r = m->nroutes; /* another router's route (cannot happen today) */
    unsigned cls = (unsigned)ex->res.status / 100u - 1u;
    if (cls >= NCLASS) cls = NCLASS - 1;
    unsigned p = ex->req.version >= 30 ? 2 : ex->req.version >= 20;
    fy_counter_inc(m->resp[(r * NCLASS + cls) * NPROTO + p]);
    fy_counter_add(m->bytes_in[p], ex->body_received);
    fy_counter_add(m->bytes_out[p], ex->bytes_sent);
    uint64_t now = ex->ctx->loop->now_ms;
    uint64_t head = ex->head_ms ? ex->head_ms : now;
    fy_hist_observe(m->ttfb[r], (head - ex->start_ms) * 1000);
    fy_hist_observe(m->dur[r], (now - ex->start_ms) * 1000);
    if (cls == 3) {
        int s = ex->res.status;
        int li = s == 408 ? 0 : s == 413 ? 1 : s == 414 ? 2 : s == 431 ? 3 : -1;
        if (li >= 0) fy_counter_inc(limit_ids[li]);
    }
}

void fy_http_metrics_free(fy_http_metrics_t *m)
{
    if (!m) return;
    free(m->resp);
    free(m->ttfb);
    free(m->dur);
    free(m);
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
