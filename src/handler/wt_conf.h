/* Typed config of a WebTransport route (`webtransport: echo`, `webtransport: {handler:
 * echo}`, or `webtransport: {handler: proxy, upstream: NAME}`). Table: wt_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_HANDLER_WT_CONF_H
#define FY_HANDLER_WT_CONF_H

#include "conf/conf.h"

enum fy_wt_handler { FY_WT_ECHO = 0, FY_WT_PROXY = 1, FY_WT_APP = 2 };

typedef struct fy_wt_conf {
    int handler;    /* `handler`: enum fy_wt_handler */
    char *upstream; /* `upstream`: proxy: the name of an `upstreams:` entry of h3:// servers */
} fy_wt_conf_t;

extern const fy_conf_directive_t fy_wt_conf_table[];

#endif
