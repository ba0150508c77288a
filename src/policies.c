#include "policies.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf_valid.h"
#include "core/log.h"
#include "ops/inspector.h"
#include "policy/cache.h"
#include "policy/cidr.h"
#include "policy/compress.h"
#include "policy/jwt.h"
#include "policy/ratelimit.h"
#include "policy/trace.h"
#include "policy/transform.h"
#include "policy/waf.h"

/* ---- access and limits: named lists (cidr-lists, client-limits) ---- */

static const fy_cidr_conf_t *cidr_named(const fy_config_t *cfg, const char *name)
{
    const fy_cidr_conf_t *v = cfg->cidr_lists.v;
    for (size_t i = 0; i < cfg->cidr_lists.n; i++)
        if (!strcmp(v[i].name, name)) return &v[i];
    return NULL;
}

static const fy_client_limits_conf_t *climits_named(const fy_config_t *cfg, const char *name)
{
    const fy_client_limits_conf_t *v = cfg->client_limits.v;
    for (size_t i = 0; i < cfg->client_limits.n; i++)
        if (!strcmp(v[i].name, name)) return &v[i];
    return NULL;
}

static const fy_ratelimit_conf_t *rl_named(const fy_config_t *cfg, const char *name)
{
    const fy_ratelimit_conf_t *v = cfg->rate_limits.v;
    for (size_t i = 0; i < cfg->rate_limits.n; i++)
        if (v[i].name && !strcmp(v[i].name, name)) return &v[i];
    return NULL;
}

static const fy_waf_conf_t *waf_named(const fy_config_t *cfg, const char *name)
{
    const fy_waf_conf_t *v = cfg->waf_policies.v;
    for (size_t i = 0; i < cfg->waf_policies.n; i++)
        if (v[i].name && !strcmp(v[i].name, name)) return &v[i];
    return NULL;
}

static const fy_conf_node_t *node_at(const fy_conf_node_t *map, const char *list, size_t i,
                                     const char *k1, const char *k2)
{
    const fy_conf_node_t *n = fy_conf_map_at(map, list);
    if (n == map || n->kind != FY_CONF_SEQ || i >= n->n) return map;
    n = n->items[i];
    const fy_conf_node_t *m = fy_conf_map_at(n, k1);
    if (m != n && k2 && m->kind == FY_CONF_MAP) m = fy_conf_map_at(m, k2);
    return m;
}

static int unknown(fy_conf_ctx_t *ctx, const fy_conf_node_t *at, const char *list, size_t i,
                   const char *key, const char *name, const char *top)
{
    char k[64];
    snprintf(k, sizeof k, "%s[%zu].%s", list, i, key);
    fy_conf_error(ctx, at, k, "no %s entry named '%s'", top, name);
    return -1;
}

int fy_policies_check(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, fy_config_t *cfg)
{
    int rc = 0;
    const fy_listener_conf_t *ls = cfg->listeners.v;
    for (size_t i = 0; i < cfg->listeners.n; i++) {
        if (ls[i].cidr && !cidr_named(cfg, ls[i].cidr))
            rc = unknown(ctx, node_at(map, "listeners", i, "cidr", NULL), "listeners", i, "cidr",
                         ls[i].cidr, "cidr-lists");
        if (ls[i].client_limits && !climits_named(cfg, ls[i].client_limits))
            rc = unknown(ctx, node_at(map, "listeners", i, "client-limits", NULL), "listeners", i,
                         "client-limits", ls[i].client_limits, "client-limits");
        if (ls[i].rate_limit && !rl_named(cfg, ls[i].rate_limit))
            rc = unknown(ctx, node_at(map, "listeners", i, "rate-limit", NULL), "listeners", i,
                         "rate-limit", ls[i].rate_limit, "rate-limits");
        if (ls[i].waf && !waf_named(cfg, ls[i].waf))
            rc = unknown(ctx, node_at(map, "listeners", i, "waf", NULL), "listeners", i, "waf",
                         ls[i].waf, "waf-policies");
    }
    const fy_route_conf_t *rs = cfg->routes.v;
    for (size_t i = 0; i < cfg->routes.n; i++) {
        if (rs[i].cidr && rs[i].cidr->use && !cidr_named(cfg, rs[i].cidr->use))
            rc = unknown(ctx, node_at(map, "routes", i, "cidr", "use"), "routes", i, "cidr",
                         rs[i].cidr->use, "cidr-lists");
        const fy_client_limits_conf_t *cl = rs[i].client_limits;
        if (cl && cl->use && !(cl = climits_named(cfg, cl->use)))
            rc = unknown(ctx, node_at(map, "routes", i, "client-limits", "use"), "routes", i,
                         "client-limits", rs[i].client_limits->use, "client-limits");
        if (cl && cl->connection_rate) {
            char k[64];
            snprintf(k, sizeof k, "routes[%zu].client-limits", i);
            fy_conf_error(ctx, node_at(map, "routes", i, "client-limits", NULL), k,
                          "connection-rate is checked at accept: set it on a listener");
            rc = -1;
        }
    }
    const fy_ratelimit_conf_t *rl = cfg->rate_limits.v;
    for (size_t i = 0; i < cfg->rate_limits.n; i++) {
        if (rl[i].name) continue;
        fy_conf_error(ctx, node_at(map, "rate-limits", i, "rate", NULL), "rate-limits",
                      "entry %zu needs a `name` (listeners refer to it)", i);
        rc = -1;
    }
    const fy_waf_conf_t *wp = cfg->waf_policies.v;
    for (size_t i = 0; i < cfg->waf_policies.n; i++) {
        if (wp[i].name) continue;
        fy_conf_error(ctx, node_at(map, "waf-policies", i, "mode", NULL), "waf-policies",
                      "entry %zu needs a `name` (listeners refer to it)", i);
        rc = -1;
    }
    const char *what[2] = {"cidr-lists", "client-limits"};
    for (int l = 0; l < 2; l++) {
        const fy_conf_list_t *list = l ? &cfg->client_limits : &cfg->cidr_lists;
        for (size_t i = 0; i < list->n; i++)
            for (size_t j = 0; j < i; j++) {
                const char *a = l ? ((fy_client_limits_conf_t *)list->v)[i].name
                                  : ((fy_cidr_conf_t *)list->v)[i].name;
                const char *b = l ? ((fy_client_limits_conf_t *)list->v)[j].name
                                  : ((fy_cidr_conf_t *)list->v)[j].name;
                if (strcmp(a, b)) continue;
                fy_conf_error(ctx, node_at(map, what[l], i, "name", NULL), what[l],
                              "two entries are named '%s'", a);
                rc = -1;
            }
    }
    return rc;
}

static int add(fy_filter_chain_t *out, fy_filter_t *f)
{
    if (!f) return -1;
    if (fy_filter_chain_add(out, f) < 0) {
        fy_error("out of memory building filters");
        if (f->refs == 0 && f->ops->destroy) f->ops->destroy(f);
        return -1;
    }
    return 0;
}

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

static int add_waf(const fy_config_t *cfg, const fy_waf_conf_t *c, const char *where,
                   fy_filter_chain_t *out)
{
    char err[512] = "out of memory", label[96];
    snprintf(label, sizeof label, "%s%s%s", where, c->name ? " " : "", c->name ? c->name : "");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN); /* `workers: auto`, as server.c counts them */
    int nw = cfg->workers > 0 ? (int)cfg->workers : ncpu > 0 ? (int)ncpu : 1;
    fy_filter_t *f = fy_waf_filter_new(c, label, nw, cfg, err, sizeof err);
    if (!f) {
        fy_log(FY_LOG_EMERG, "%s.waf: %s", where, err);
        return -1;
    }
    return add(out, f);
}

int fy_policies_build_route(const fy_config_t *cfg, size_t i, fy_filter_chain_t *out)
{
    const fy_route_conf_t *rc = &((const fy_route_conf_t *)cfg->routes.v)[i];

    /* ---- tracing: traceparent / tracestate (policy/trace.c) ---- */
    if (cfg->tracing.enabled && fy_trace_filter_add(&cfg->tracing, out) < 0) return -1;

    /* ---- capture: the inspector's flight recorder (ops/inspector.c) ---- */
    if (rc->capture && !cfg->inspector) {
        fy_log(FY_LOG_EMERG, "routes[%zu].capture: needs an `inspector:` section", i);
        return -1;
    }
    if (rc->capture && add_capture(cfg, rc->capture, out) < 0) return -1;
    (void)out;

    /* ---- access and limits: cidr, rate limits (policy/cidr*.c, policy/ratelimit*.c) ---- */
    char where[48], name[32];
    snprintf(where, sizeof where, "routes[%zu]", i);
    if (rc->cidr) {
        const fy_cidr_conf_t *c = rc->cidr->use ? cidr_named(cfg, rc->cidr->use) : rc->cidr;
        if (add(out, fy_cidr_filter_new(c, where)) < 0) return -1;
    }
    if (rc->client_limits) {
        const fy_client_limits_conf_t *c = rc->client_limits;
        if (c->use) c = climits_named(cfg, c->use);
        if (add(out, fy_client_limits_filter_new(c, where)) < 0) return -1;
    }
    if (rc->rate_limit) {
        snprintf(name, sizeof name, "route-%zu", i);
        if (add(out, fy_ratelimit_filter_new(rc->rate_limit, name, where)) < 0) return -1;
    }

    /* ---- WAF: ModSecurity + CRS (policy/waf*.c); rules load here, once per generation ---- */
    if (rc->waf && add_waf(cfg, rc->waf, where, out) < 0) return -1;

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
    if (rc->cache) {
        fy_filter_t *f = fy_cache_filter_new(rc->cache);
        if (!f || fy_filter_chain_add(out, f) < 0) return -1;
    }

    return 0;
}

bool fy_policies_admit_connection(const fy_filter_chain_t *chain, const struct sockaddr *sa,
                                  uint64_t now_ms)
{
    return fy_client_limits_admit(chain, sa, now_ms);
}

int fy_policies_build_listener(const fy_config_t *cfg, size_t i, fy_filter_chain_t *out)
{
    const fy_listener_conf_t *lc = &((const fy_listener_conf_t *)cfg->listeners.v)[i];

    /* ---- capture of intercepted flows (ops/inspector.c) ---- */
    if (cfg->inspector && cfg->inspector->intercepted && lc->kind != FY_LISTENER_HTTP &&
        add_capture(cfg, NULL, out) < 0)
        return -1;

    /* ---- access and limits: cidr, connection limits ---- */
    char where[48];
    snprintf(where, sizeof where, "listeners[%zu]", i);
    if (lc->cidr && add(out, fy_cidr_filter_new(cidr_named(cfg, lc->cidr), where)) < 0) return -1;
    if (lc->client_limits &&
        add(out, fy_client_limits_filter_new(climits_named(cfg, lc->client_limits), where)) < 0)
        return -1;
    if (lc->rate_limit) {
        const fy_ratelimit_conf_t *c = rl_named(cfg, lc->rate_limit);
        if (add(out, fy_ratelimit_filter_new(c, c->name, where)) < 0) return -1;
    }
    if (lc->waf && add_waf(cfg, waf_named(cfg, lc->waf), where, out) < 0) return -1;

    return 0;
}
