/* Typed config of the reverse-proxy handler (`proxy:` in a route). Table: proxy_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_HANDLER_PROXY_CONF_H
#define FY_HANDLER_PROXY_CONF_H

#include <stdbool.h>

#include "conf/conf.h"

typedef struct fy_proxy_conf {
    char *upstream;               /* required: the name of an entry of `upstreams:` */
    char *strip_prefix;           /* `strip-prefix`: removed from the path when it starts with it */
    char *add_prefix;             /* `add-prefix`: put in front of the (stripped) path */
    bool preserve_host;           /* `preserve-host`, default true: the client's Host goes to the
                                     origin; false: the upstream server's host:port */
    bool forwarded;               /* `forwarded`, default true: X-Forwarded-For/Proto/Host */
    bool via;                     /* `via`, default false: add "Via: 1.1 ferry" both ways */
    int forward_path;             /* `forward-path`: 0 normalised (default), 1 original */
    fy_conf_strmap_t set_headers; /* `set-headers` on the request */
    fy_conf_strlist_t remove_headers;          /* `remove-headers` from the request */
    fy_conf_strmap_t response_set_headers;     /* `response-set-headers` */
    fy_conf_strlist_t response_remove_headers; /* `response-remove-headers` */
} fy_proxy_conf_t;

extern const fy_conf_directive_t fy_proxy_conf_table[];

#endif
