/* Router: the first route whose host, path prefix and method match gets the exchange. */
#ifndef FY_HTTP_ROUTER_H
#define FY_HTTP_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "http/exchange.h"
#include "http/filter.h"
#include "http/handler.h"

typedef struct fy_route {
    char **hosts; /* borrowed from config: exact lowercase or "*.suffix"; none = any */
    size_t nhosts;
    const char *path; /* prefix; "/" = everything */
    size_t path_len;
    unsigned methods;       /* bit (1 << enum fy_method); 0 = any */
    const char *path_exact; /* borrowed; NULL = not checked */
    void *regex;            /* owned pcre2_code (JIT), NULL = none; made by fy_route_set_regex */
    char **header_names, **header_values; /* borrowed, n_headers pairs; value "*" = present */
    size_t n_headers;
    char **query_names, **query_values; /* borrowed, n_query pairs; value "*" = present */
    size_t n_query;
    fy_handler_t *handler;     /* owned by the router */
    fy_filter_chain_t filters; /* owned (references): run after the listener's, in stage order */
    size_t index;              /* its position in the router's array (the metrics' route label) */
} fy_route_t;

/* Compile `pattern` (PCRE2, JIT when available) into r->regex. Returns 0, or -1 with the
 * reason in err. */
int fy_route_set_regex(fy_route_t *r, const char *pattern, char *err, size_t errlen);
/* Is `pattern` a valid PCRE2 pattern? 0, or -1 with the reason (config validation). */
int fy_regex_check(const char *pattern, char *err, size_t errlen);

struct fy_router {
    fy_route_t *routes; /* owned */
    size_t n;
};

/* Does `host` (as received, possibly with ":port") match the route's host list? */
bool fy_route_host_matches(const fy_route_t *r, fy_str_t host);
const fy_route_t *fy_router_match(const fy_router_t *rt, const fy_exchange_t *ex);
void fy_router_free(fy_router_t *rt);
/* Free the calling worker thread's regex match block (at worker exit). */
void fy_router_thread_cleanup(void);

#endif
