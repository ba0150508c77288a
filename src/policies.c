#include "policies.h"

#include "policy/trace.h"

int fy_policies_build_route(const fy_config_t *cfg, size_t i, fy_filter_chain_t *out)
{
    const fy_route_conf_t *rc = &((const fy_route_conf_t *)cfg->routes.v)[i];
    (void)rc;
    (void)out;

    /* ---- tracing: traceparent / tracestate (policy/trace.c) ---- */
    if (cfg->tracing.enabled && fy_trace_filter_add(&cfg->tracing, out) < 0) return -1;

    /* ---- access and limits: cidr, rate limits (policy/cidr*.c, policy/ratelimit*.c) ---- */

    /* ---- auth and transforms: jwt, headers/rewrite/redirect, compression ---- */

    /* ---- cache (policy/cache*.c) ---- */

    return 0;
}

int fy_policies_build_listener(const fy_config_t *cfg, size_t i, fy_filter_chain_t *out)
{
    const fy_listener_conf_t *lc = &((const fy_listener_conf_t *)cfg->listeners.v)[i];
    (void)lc;
    (void)out;

    /* ---- access and limits: cidr, connection limits ---- */

    return 0;
}
