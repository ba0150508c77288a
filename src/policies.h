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

#endif
