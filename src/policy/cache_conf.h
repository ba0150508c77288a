/* Directive table of the HTTP cache (`cache:` on a route; policy/cache.c). */
#ifndef FY_POLICY_CACHE_CONF_H
#define FY_POLICY_CACHE_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf.h"

typedef struct fy_cache_cidr {
    int family;
    unsigned char addr[16];
    int bits;
} fy_cache_cidr_t;

typedef struct fy_cache_conf {
    char *zone;                         /* `zone`: routes naming one zone share its objects */
    uint64_t size;                      /* `size`: bytes of the zone's memory tier */
    uint64_t max_object_size;           /* `max-object-size`: larger bodies stream through */
    fy_conf_strlist_t methods;          /* `methods`: served from the cache (GET, HEAD) */
    fy_conf_strlist_t key_headers;      /* `key-headers`: request headers added to the key */
    uint64_t default_ttl_ms;            /* `default-ttl`: when the response gives no freshness */
    uint64_t max_ttl_ms;                /* `max-ttl`: cap on any freshness lifetime (0: none) */
    uint64_t force_ttl_ms;              /* `force-ttl`: store with this lifetime whatever the
                                           response's directives say (0: off) */
    int64_t heuristic_percent;          /* `heuristic-percent` of Date - Last-Modified */
    uint64_t heuristic_max_ms;          /* `heuristic-max` */
    bool store_set_cookie;              /* `store-set-cookie` */
    bool ignore_request_no_cache;       /* `ignore-request-no-cache` */
    uint64_t stale_while_revalidate_ms; /* `stale-while-revalidate` (when the response has none) */
    uint64_t stale_if_error_ms;         /* `stale-if-error` (when the response has none) */
    bool collapse;                      /* `collapse`: concurrent misses share one fetch */
    uint64_t collapse_timeout_ms;       /* `collapse-timeout`: then each goes alone */
    fy_conf_strlist_t purge_allow;      /* `purge-allow`: client CIDRs allowed to PURGE */
    char *targeted_field;               /* `targeted-field`: "CDN-Cache-Control"; "" none */
    fy_conf_strlist_t strip_headers;    /* `strip-request-headers`: unkeyed request headers that
                                           could change a response, removed before the origin */
    char *status_name;                  /* `status-name`: our name in Cache-Status */
    char *disk_path;                    /* `disk-path`: directory of the disk tier; "" none */
    uint64_t disk_size;                 /* `disk-size`: bytes of files the disk tier holds */
    int64_t disk_queue;                 /* `disk-queue`: writes (and loads) waiting, at most */
    /* derived by the validators */
    fy_cache_cidr_t *purge_cidrs;
    size_t npurge_cidrs;
    char *targeted_lower; /* lowercase targeted_field, or NULL */
} fy_cache_conf_t;

extern const fy_conf_directive_t fy_cache_conf_table[];

/* Is `sa` inside one of conf's purge-allow CIDRs? Any thread. */
bool fy_cache_conf_purge_allowed(const fy_cache_conf_t *c, const struct sockaddr *sa);
/* Parse "10.0.0.0/8", "::1", ... 0 or -1. */
int fy_cache_cidr_parse(const char *s, fy_cache_cidr_t *out);

#endif
