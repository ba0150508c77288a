/* Builds the filter chains (http/filter.h) of a generation from the policy keys of routes and
 * listeners (config.h): the one place that knows both the typed config and src/policy/. Main
 * thread, while a generation is built (startup and reload). */
#ifndef FY_POLICIES_H
#define FY_POLICIES_H

#include "config.h"
#include "http/filter.h"

/* Add route `i`'s filters to `out`. 0, or -1 after logging why (the generation is not used). */
int fy_policies_build_route(const fy_config_t *cfg, size_t i, fy_filter_chain_t *out);
/* Add listener `i`'s filters to `out` (run before the route's). 0, or -1 after logging why. */
int fy_policies_build_listener(const fy_config_t *cfg, size_t i, fy_filter_chain_t *out);

/* Cross-checks of the policy keys while the config loads (config.c check_config): names of
 * cidr-lists / client-limits entries that listeners and routes use exist and are unique.
 * 0, or -1 after fy_conf_error. */
int fy_policies_check(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, fy_config_t *cfg);

/* A new TCP connection from `sa` on a listener with filters `chain`: false when its
 * client-limits connection-rate says close it (policy/ratelimit.h). Worker thread. */
bool fy_policies_admit_connection(const fy_filter_chain_t *chain, const struct sockaddr *sa,
                                  uint64_t now_ms);

#endif
