#include "policies.h"

#include "core/log.h"
#include "ops/inspector.h"

/* The inspector (ops/inspector.h), started by the first generation that configures it;
 * replays go through the first intercepting listener. */
static fy_inspector_t *inspector(const fy_config_t *cfg)
{
    const fy_listener_conf_t *lc = cfg->listeners.v;
    for (size_t i = 0; i < cfg->listeners.n; i++)
        if (lc[i].kind != FY_LISTENER_HTTP)
            return fy_inspector_start(cfg->inspector, cfg->data_dir,
                                      (const struct sockaddr *)&lc[i].addr, lc[i].addrlen);
    return fy_inspector_start(cfg->inspector, cfg->data_dir, NULL, 0);
}

/* Put the inspector's capture filter on `out`; rc NULL: an intercepting listener. */
static int add_capture(const fy_config_t *cfg, const fy_capture_route_conf_t *rc,
                       fy_filter_chain_t *out)
{
    fy_inspector_t *ins = inspector(cfg);
    if (!ins) return -1;
    fy_filter_t *f = fy_inspector_filter_new(ins, rc);
    if (!f || fy_filter_chain_add(out, f) < 0) return -1; /* the chain holds it */
    return 0;
}

int fy_policies_build_route(const fy_config_t *cfg, size_t i, fy_filter_chain_t *out)
{
    const fy_route_conf_t *rc = &((const fy_route_conf_t *)cfg->routes.v)[i];
    (void)rc;
    (void)out;

    /* ---- capture: the inspector's flight recorder (ops/inspector.c) ---- */
    if (rc->capture && !cfg->inspector) {
        fy_log(FY_LOG_EMERG, "routes[%zu].capture: needs an `inspector:` section", i);
        return -1;
    }
    if (rc->capture && add_capture(cfg, rc->capture, out) < 0) return -1;

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

    /* ---- capture of intercepted flows (ops/inspector.c) ---- */
    if (cfg->inspector && cfg->inspector->intercepted && lc->kind != FY_LISTENER_HTTP &&
        add_capture(cfg, NULL, out) < 0)
        return -1;

    /* ---- access and limits: cidr, connection limits ---- */

    return 0;
}
