/* The metrics observer: per listener, counts every finished exchange into core/counters by
 * route, status class and protocol, with time-to-first-byte and total latency histograms per
 * route, request/response body bytes, and limit rejections by limit name. Also the
 * process-wide counters of the layers below (core/counters.h's fy_cid_*) and the debug dump.
 *
 * Metric names (the operations issue renders them as Prometheus text):
 *   ferry_http_responses_total{listener,route,code,proto}  code = 1xx..5xx, route = index or "-"
 *   ferry_http_ttfb_seconds{route}, ferry_http_duration_seconds{route}   histograms
 *   ferry_http_request_bytes_total{listener,proto}, ferry_http_response_bytes_total{...}
 *   ferry_upstream_responses_total{upstream,server,code}, ferry_upstream_ttfb_seconds and
 *   ferry_upstream_duration_seconds{upstream,server}: proxied exchanges by the server that got
 *   the last attempt (ex->upstream, set by handler/proxy.c), on routes of this router
 *   ferry_limit_rejections_total{limit}   by the `limits:` key (core/counters.h fy_limit_names):
 *                                         body-size (413) here, and request-line (414) and
 *                                         header-bytes (431) of h2/h3 heads; the h1 codec counts
 *                                         its own head and timeout limits, the listener
 *                                         `connections`
 * Latencies use the worker loop's cached clock (millisecond resolution): the exchange's start
 * (head parsed), the handler's fy_exchange_start_response, and completion.
 *
 * Thread rules: fy_http_metrics_new/free on the worker that uses it (registration takes the
 * registry mutex); fy_http_metrics_exchange on that worker only. */
#ifndef FY_OPS_HTTP_METRICS_H
#define FY_OPS_HTTP_METRICS_H

#include "http/exchange.h"
#include "http/router.h"

typedef struct fy_http_metrics fy_http_metrics_t;

/* Register the process-wide counters (fy_cid_*) and make room for `nworkers` workers. Main
 * thread, before the workers start. Returns 0 or -ENOMEM. */
int fy_http_metrics_setup(int nworkers);
/* The observer state of one listener (named `listener` in labels) routed by `rt` (borrowed,
 * must outlive it). Never NULL (aborts on OOM). */
fy_http_metrics_t *fy_http_metrics_new(const char *listener, const fy_router_t *rt);
/* Matches fy_observer_t.on_done. */
void fy_http_metrics_exchange(fy_exchange_t *ex, void *metrics);
void fy_http_metrics_free(fy_http_metrics_t *m);

/* Whether anything reads the per-exchange counters, so that the observer is worth its ~100
 * instructions per request (3.8% of a static HTTP/1.1 response): today only the debug dump
 * (FERRY_DUMP_COUNTERS); the operations issue's metrics endpoint will be the other reader.
 * The layers' own counters (connections, streams, handshakes, retries) are always kept. */
bool fy_http_metrics_wanted(void);
/* Something reads the per-exchange counters (the admin listener's GET /metrics): attach the
 * observer from now on. Main thread, before the workers start. */
void fy_http_metrics_want(void);
/* If the environment names a file in FERRY_DUMP_COUNTERS, write a snapshot there (Prometheus
 * text; a hidden debug aid used by tests/test_ops_counters.py). Any thread; after the workers
 * stopped for exact final values. */
void fy_http_metrics_dump_env(void);

#endif
