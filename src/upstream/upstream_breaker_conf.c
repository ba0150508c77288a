/* Config tables of `circuit-breaker:` and `retry-budget:` under an upstream
 * (upstream/upstream_conf.h; the state machines are upstream_breaker.c). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "upstream/upstream_conf.h"

/* "50%", "50" or "0.5"? The first two: a whole percent 0..100. */
static int parse_percent(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field)
{
    int64_t v = 0;
    size_t n = node->kind == FY_CONF_SCALAR ? node->len : 0;
    if (n && node->str[n - 1] == '%') n--;
    bool ok = n > 0 && n <= 3;
    for (size_t i = 0; ok && i < n; i++) {
        if (node->str[i] < '0' || node->str[i] > '9') ok = false;
        v = v * 10 + (node->str[i] - '0');
    }
    if (!ok || v > 100) {
        fy_conf_error(ctx, node, NULL, "expected a percentage from 0%% to 100%% (e.g. 50%%)");
        return -1;
    }
    *(int64_t *)field = v;
    return 0;
}

static void dump_percent(const void *field, void *file)
{
    fprintf(file, "%lld%%", (long long)*(const int64_t *)field);
}

/* A fraction 0..1 with up to three decimals ("0.2"), kept in per mille. */
static int parse_ratio(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field)
{
    char *end = NULL;
    double d = node->kind == FY_CONF_SCALAR ? strtod(node->str, &end) : -1;
    if (node->kind != FY_CONF_SCALAR || end == node->str || *end || d < 0 || d > 1) {
        fy_conf_error(ctx, node, NULL, "expected a fraction from 0 to 1 (e.g. 0.2)");
        return -1;
    }
    *(int64_t *)field = (int64_t)(d * 1000 + 0.5);
    return 0;
}

static void dump_ratio(const void *field, void *file)
{
    fprintf(file, "%.3g", (double)*(const int64_t *)field / 1000.0);
}

static int check_breaker(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_breaker_conf_t *c = obj;
    if (!c->consecutive && !c->error_rate) {
        fy_conf_error(ctx, map, NULL,
                      "consecutive-failures and error-rate are both 0: it "
                      "could never open");
        return -1;
    }
    if (c->max_open_ms < c->open_ms) c->max_open_ms = c->open_ms;
    return 0;
}

#define B(f) offsetof(fy_breaker_conf_t, f)

const fy_conf_directive_t fy_breaker_conf_table[] = {
    {.key = "consecutive-failures",
     .type = FY_CT_INT,
     .offset = B(consecutive),
     .dflt = "5",
     .min = 0,
     .max = 100000,
     .doc = "Failures in a row that open the breaker; 0: only `error-rate` opens it."},
    {.key = "error-rate",
     .type = FY_CT_CUSTOM,
     .offset = B(error_rate),
     .dflt = "50%",
     .parse = parse_percent,
     .dump = dump_percent,
     .type_name = "percentage `0%`..`100%`",
     .doc = "Failed share of the outcomes in `window` that opens the breaker, once there are "
            "`min-requests` of them; 0%: only `consecutive-failures` opens it."},
    {.key = "window",
     .type = FY_CT_DURATION,
     .offset = B(window_ms),
     .dflt = "10s",
     .min = 100,
     .max = 3600000,
     .doc = "The sliding window of `error-rate` (ten buckets of a tenth each)."},
    {.key = "min-requests",
     .type = FY_CT_INT,
     .offset = B(min_requests),
     .dflt = "20",
     .min = 1,
     .max = 1000000,
     .doc = "Outcomes the window must hold before `error-rate` can open the breaker."},
    {.key = "open-for",
     .type = FY_CT_DURATION,
     .offset = B(open_ms),
     .dflt = "10s",
     .min = 1,
     .max = 3600000,
     .doc = "How long an open breaker refuses before it lets trial requests through "
            "(half-open); doubled each time the trials fail, up to `max-open-for`."},
    {.key = "max-open-for",
     .type = FY_CT_DURATION,
     .offset = B(max_open_ms),
     .dflt = "5m",
     .min = 1,
     .max = 86400000,
     .doc = "The cap of the backoff of `open-for`."},
    {.key = "half-open-requests",
     .type = FY_CT_INT,
     .offset = B(half_open_requests),
     .dflt = "3",
     .min = 1,
     .max = 1000,
     .doc = "Trial requests let through while half-open (at most this many at once); that "
            "many successes close the breaker, one failure opens it again."},
    {.key = "5xx-is-failure",
     .type = FY_CT_BOOL,
     .offset = B(on_5xx),
     .dflt = "true",
     .doc = "A 5xx response counts as a failure (connect errors, TLS failures, timeouts and "
            "resets before the response head always do)."},
    {.key = NULL, .check = check_breaker},
};

const fy_conf_directive_t fy_hedge_conf_table[] = {
    {.key = "delay",
     .type = FY_CT_DURATION,
     .offset = offsetof(fy_hedge_conf_t, delay_ms),
     .dflt = "50ms",
     .min = 1,
     .max = 600000,
     .doc = "Time without a response head after which a GET/HEAD goes to a second server too "
            "(one hedge per request); the first head wins, the other attempt is reset."},
    {.key = NULL},
};

#define R(f) offsetof(fy_retry_budget_conf_t, f)

const fy_conf_directive_t fy_retry_budget_conf_table[] = {
    {.key = "ratio",
     .type = FY_CT_CUSTOM,
     .offset = R(ratio_permille),
     .dflt = "0.2",
     .parse = parse_ratio,
     .dump = dump_ratio,
     .type_name = "fraction 0..1",
     .doc = "Retries allowed per request over the window (0.2: one retry per five requests)."},
    {.key = "min-per-second",
     .type = FY_CT_INT,
     .offset = R(min_per_second),
     .dflt = "10",
     .min = 0,
     .max = 1000000,
     .doc = "Retries allowed on top of `ratio`, per second of `window` (so that a quiet "
            "upstream can still retry)."},
    {.key = "window",
     .type = FY_CT_DURATION,
     .offset = R(window_ms),
     .dflt = "10s",
     .min = 1000,
     .max = 3600000,
     .doc = "The sliding window requests and retries are counted over."},
    {.key = NULL},
};
