/* Router: the first route whose host, path prefix and method match gets the exchange. */
#ifndef FY_HTTP_ROUTER_H
#define FY_HTTP_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "http/exchange.h"
#include "http/handler.h"

typedef struct fy_route {
    char **hosts; /* borrowed from config: exact lowercase or "*.suffix"; none = any */
    size_t nhosts;
    const char *path; /* prefix; "/" = everything */
    size_t path_len;
    unsigned methods; /* bit (1 << enum fy_method); 0 = any */
    fy_handler_t *handler; /* owned by the router */
} fy_route_t;

struct fy_router {
    fy_route_t *routes; /* owned */
    size_t n;
};

/* Does `host` (as received, possibly with ":port") match the route's host list? */
bool fy_route_host_matches(const fy_route_t *r, fy_str_t host);
const fy_route_t *fy_router_match(const fy_router_t *rt, const fy_exchange_t *ex);
void fy_router_free(fy_router_t *rt);

#endif
