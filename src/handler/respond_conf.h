/* Typed config of the fixed-response handler (`respond:` in a route). Table: respond_conf.c
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_HANDLER_RESPOND_CONF_H
#define FY_HANDLER_RESPOND_CONF_H

#include <stdint.h>

#include "conf/conf.h"

typedef struct fy_respond_conf {
    int64_t status;           /* default 200; 100..599 excluding 1xx */
    fy_conf_strmap_t headers; /* extra response headers */
    char *body;               /* default "" */
    size_t body_len;
} fy_respond_conf_t;

extern const fy_conf_directive_t fy_respond_conf_table[];

#endif
