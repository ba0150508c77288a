/* Typed config of the transform filter (`transform:` in a route). Table: transform_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_POLICY_TRANSFORM_CONF_H
#define FY_POLICY_TRANSFORM_CONF_H

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"

typedef struct fy_transform_rule {
    char *match;    /* `match`: PCRE2 pattern over the path */
    char *to;       /* `to`: template ($0..$9, {var}) */
    int64_t status; /* `status` (redirects): 301, 302, 303, 307, 308 */
} fy_transform_rule_t;

typedef struct fy_transform_headers {
    fy_conf_strmap_t set;     /* `set`: name -> template (replaces) */
    fy_conf_strmap_t append;  /* `append`: name -> template (adds another) */
    fy_conf_strlist_t remove; /* `remove`: names */
} fy_transform_headers_t;

typedef struct fy_transform_conf {
    fy_conf_list_t redirect; /* `redirect`: of fy_transform_rule_t; first match answers */
    fy_conf_list_t rewrite;  /* `rewrite`: of fy_transform_rule_t; first match rewrites */
    fy_transform_headers_t request_headers;  /* `request-headers` */
    fy_transform_headers_t response_headers; /* `response-headers` */
    char *request_id;                        /* `request-id`: header name; NULL = off */
    bool request_id_response;                /* `request-id-response`: echo it on the response */
} fy_transform_conf_t;

extern const fy_conf_directive_t fy_transform_conf_table[];

/* Is `t` a valid template? NULL, or a static reason ("unknown variable", ...). Variables:
 * {host} {authority} {path} {query} {request_uri} {method} {scheme} {client} {request_id}
 * {header.NAME}; $0..$9 are the regex's captures. (transform.c) */
const char *fy_transform_template_why(const char *t);

#endif
