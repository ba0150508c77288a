/* Typed config of a WebTransport route (`webtransport: echo`, or `webtransport: {handler:
 * echo}`). Table: wt_conf.c. */
#ifndef FY_HANDLER_WT_CONF_H
#define FY_HANDLER_WT_CONF_H

#include "conf/conf.h"

enum fy_wt_handler { FY_WT_ECHO = 0 };

typedef struct fy_wt_conf {
    int handler; /* `handler`: enum fy_wt_handler (only `echo` so far) */
} fy_wt_conf_t;

extern const fy_conf_directive_t fy_wt_conf_table[];

#endif
