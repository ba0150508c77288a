/* The transform filter (stage FY_STAGE_REWRITE, `transform:` per route): redirects and path
 * rewrites by PCRE2 regex with captures, request and response header set/append/remove with
 * templates over the request ({host}, {path}, {client}, {header.NAME}, ...), and a request-id
 * header kept or generated. Response edits are made by a sink layer at the first send, so they
 * apply to whatever answers (handler, error page).
 *
 * Threads: made and destroyed on the main thread; on_request runs on workers and touches only
 * the exchange and its worker's regex match block. */
#ifndef FY_POLICY_TRANSFORM_H
#define FY_POLICY_TRANSFORM_H

#include <stddef.h>

#include "http/filter.h"
#include "policy/transform_conf.h"

/* The filter for `conf` (borrowed for the generation's life). NULL with err on a bad regex. */
fy_filter_t *fy_transform_filter_new(const fy_transform_conf_t *conf, char *err, size_t errlen);

#endif
