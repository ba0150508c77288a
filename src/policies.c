#include "policies.h"

#include "policy/trace.h"
#include "core/log.h"
#include "policy/compress.h"
#include "policy/jwt.h"
#include "policy/transform.h"

int fy_policies_build_route(const fy_config_t *cfg, size_t i, fy_filter_chain_t *out)
{
    const fy_route_conf_t *rc = &((const fy_route_conf_t *)cfg->routes.v)[i];
    (void)rc;
    (void)out;

    /* ---- tracing: traceparent / tracestate (policy/trace.c) ---- */
    if (cfg->tracing.enabled && fy_trace_filter_add(&cfg->tracing, out) < 0) return -1;

    /* ---- access and limits: cidr, rate limits (policy/cidr*.c, policy/ratelimit*.c) ---- */

    /* ---- auth and transforms: jwt, headers/rewrite/redirect, compression ---- */
    const void *auth[3] = {rc->jwt, rc->transform,
                           rc->compress && rc->compress->enabled ? rc->compress : NULL};
    for (int k = 0; k < 3; k++) {
        if (!auth[k]) continue;
        char err[256] = "out of memory";
        fy_filter_t *pf = k == 0   ? fy_jwt_filter_new(rc->jwt, err, sizeof err)
                          : k == 1 ? fy_transform_filter_new(rc->transform, err, sizeof err)
                                   : fy_compress_filter_new(rc->compress, err, sizeof err);
        if (pf && fy_filter_chain_add(out, pf) == 0) continue;
        if (pf) pf->ops->destroy(pf);
        fy_log(FY_LOG_EMERG, "route %zu: %s", i, err);
        return -1;
    }

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
