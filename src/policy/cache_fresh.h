/* The semantics of a shared cache (RFC 9111 §3, §4; RFC 5861; RFC 9213): what a response's
 * and a request's fields say about storing, freshness, age and staleness. Pure functions
 * over header lists; no allocation; any thread. */
#ifndef FY_POLICY_CACHE_FRESH_H
#define FY_POLICY_CACHE_FRESH_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "http/exchange.h"
#include "policy/cache_cc.h"

/* What the cache needs from a response head. */
typedef struct fy_cache_resp_info {
    fy_cache_cc_t cc;      /* the effective directives: the targeted field when valid, else
                              Cache-Control (all lines) */
    bool targeted;         /* cc came from the targeted field (RFC 9213) */
    time_t date;           /* Date, or -1 */
    time_t expires;        /* Expires; 0 when invalid (already expired, §5.3); -1 absent */
    bool expires_conflict; /* two Expires lines that disagree: stale (§4.2.1) */
    time_t last_modified;  /* Last-Modified, or -1 */
    int64_t age;           /* Age (first member), or -1 when absent or invalid */
    bool set_cookie;
    bool vary_star; /* Vary: * (never matches, §4.1) */
    bool has_vary;
    fy_str_t etag; /* first ETag, or empty */
} fy_cache_resp_info_t;

/* Scan a response's headers. `target` is the lowercase name of the targeted field this cache
 * obeys ("cdn-cache-control"), or NULL for none. */
void fy_cache_resp_scan(const fy_headers_t *hs, const char *target, fy_cache_resp_info_t *ri);

/* The request's directives: Cache-Control, and Pragma: no-cache when there is no
 * Cache-Control (§5.4). Also whether it carries Authorization. */
typedef struct fy_cache_req_info {
    fy_cache_cc_t cc;
    bool authorization;
} fy_cache_req_info_t;

void fy_cache_req_scan(const fy_headers_t *hs, fy_cache_req_info_t *qi);

/* Why a response is not stored (0: it may be). */
enum fy_cache_nostore {
    FY_CACHE_STORE_OK = 0,
    FY_CACHE_NS_STATUS,     /* 206, 304, 1xx, or a status not understood with must-understand */
    FY_CACHE_NS_NO_STORE,   /* no-store (response or request) */
    FY_CACHE_NS_PRIVATE,    /* private: a shared cache must not store it */
    FY_CACHE_NS_AUTH,       /* request had Authorization, response allows no shared use */
    FY_CACHE_NS_NO_FRESH,   /* no explicit freshness and not heuristically cacheable */
    FY_CACHE_NS_VARY_STAR,  /* Vary: * */
    FY_CACHE_NS_SET_COOKIE, /* Set-Cookie (unless configured) */
};

/* May a shared cache store this response (§3, §3.5)? `status` is the final status. */
int fy_cache_storable(int status, const fy_cache_resp_info_t *ri, const fy_cache_req_info_t *qi,
                      bool store_set_cookie);

/* Statuses a cache may give heuristic freshness to (RFC 9110 §15.1). */
bool fy_cache_status_heuristic(int status);
/* Statuses whose caching rules this cache implements (for must-understand, §5.2.2.3). */
bool fy_cache_status_understood(int status);

/* Freshness lifetime in seconds (§4.2.1): s-maxage, max-age, Expires - Date, else the
 * heuristic (pct percent of Date - Last-Modified, at most heuristic_max seconds) for the
 * statuses that allow it (or any with public), else `dflt` (configured; 0 = none). Invalid
 * or conflicting values give 0 (stale). `response_time` stands in for a missing Date. */
int64_t fy_cache_lifetime(int status, const fy_cache_resp_info_t *ri, time_t response_time,
                          int64_t pct, int64_t heuristic_max, int64_t dflt, bool *heuristic);

/* Age of a stored response now (§4.2.3). */
int64_t fy_cache_current_age(int64_t age_value, time_t date, time_t request_time,
                             time_t response_time, time_t now);

/* What a stored response is good for, given the request (§4.2, §4.2.4, RFC 5861). */
enum fy_cache_use {
    FY_CACHE_USE_FRESH = 0, /* serve it */
    FY_CACHE_USE_STALE,     /* serve it stale: the request's max-stale allows it */
    FY_CACHE_USE_SWR,       /* serve it stale while one request revalidates (RFC 5861 §3) */
    FY_CACHE_USE_REVALIDATE /* ask the origin first (stale, no-cache, request max-age...) */
};

/* The stored response's directives, kept with it. */
typedef struct fy_cache_fresh {
    int64_t lifetime; /* seconds */
    int64_t swr, sie; /* seconds of stale-while-revalidate / stale-if-error; 0: none */
    bool no_cache;    /* response no-cache: revalidate every time */
    bool never_stale; /* must-revalidate, proxy-revalidate, s-maxage: no stale ever */
} fy_cache_fresh_t;

int fy_cache_use(const fy_cache_fresh_t *f, int64_t age, const fy_cache_req_info_t *qi,
                 bool ignore_request_no_cache);

/* May a stale response be served because revalidation failed (stale-if-error)? */
bool fy_cache_stale_if_error(const fy_cache_fresh_t *f, int64_t age, const fy_cache_req_info_t *qi);

#endif
