/* The admin API's cache endpoints (issue 16): `GET /cache` (each zone's memory and disk
 * figures) and `POST /cache/purge?url=URL | prefix=URL | tag=TAG [&zone=NAME]` (remove from
 * memory and disk; every zone unless one is named). Admin thread. */
#ifndef FY_OPS_ADMIN_CACHE_H
#define FY_OPS_ADMIN_CACHE_H

#include "http/exchange.h"

/* Answer ex, whose target's path segments are seg[0..n) with seg[0] "cache". */
void fy_admin_cache(fy_exchange_t *ex, const char **seg, int n);

#endif
