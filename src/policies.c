#include "policies.h"

#include "policy/cache.h"

int fy_policies_build_route(const fy_config_t *cfg, size_t i, fy_filter_chain_t *out)
{
    const fy_route_conf_t *rc = &((const fy_route_conf_t *)cfg->routes.v)[i];
    (void)out;

    /* ---- access and limits: cidr, rate limits (policy/cidr*.c, policy/ratelimit*.c) ---- */

    /* ---- auth and transforms: jwt, headers/rewrite/redirect, compression ---- */

    /* ---- cache (policy/cache*.c) ---- */
    if (rc->cache) {
        fy_filter_t *f = fy_cache_filter_new(rc->cache);
        if (!f || fy_filter_chain_add(out, f) < 0) return -1;
    }

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
