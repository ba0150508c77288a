/* Typed configuration of the `cidr:` policy (table: policy/cidr_conf.c): per route inline or
 * by name, per listener by name (listeners[].cidr names an entry of the top-level
 * `cidr-lists:`).
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_POLICY_CIDR_CONF_H
#define FY_POLICY_CIDR_CONF_H

#include <stdint.h>

#include "conf/conf.h"

typedef struct fy_cidr_conf fy_cidr_conf_t;
struct fy_cidr_conf {
    char *name;                        /* `name` (cidr-lists entries) */
    char *use;                         /* `use` (routes): a cidr-lists entry instead of rules */
    fy_conf_strlist_t allow;           /* `allow`: CIDRs or addresses */
    fy_conf_strlist_t deny;            /* `deny` */
    fy_conf_strlist_t trusted_proxies; /* `trusted-proxies`: peers whose X-Forwarded-For /
                                          Forwarded are believed */
    int64_t status;                    /* `status`: answer to a denied client, default 403 */
};

/* Inline form (routes[].cidr; shorthand `cidr: NAME` = `{use: NAME}`). */
extern const fy_conf_directive_t fy_cidr_conf_table[];
/* Named form (items of the top-level `cidr-lists:`). */
extern const fy_conf_directive_t fy_cidr_list_conf_table[];

/* Validator for a list of CIDRs (also used by the rate-limit `trusted-proxies`). */
int fy_cidr_conf_valid_list(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj);

#endif
