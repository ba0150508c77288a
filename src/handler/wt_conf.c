/* Directive table of `webtransport:` in a route. */
#include "handler/wt_conf.h"

#include <stddef.h>

static const char *const wt_handlers[] = {"echo", NULL};

const fy_conf_directive_t fy_wt_conf_table[] = {
    {.key = "handler",
     .type = FY_CT_ENUM,
     .offset = offsetof(fy_wt_conf_t, handler),
     .enums = wt_handlers,
     .dflt = "echo",
     .doc = "What answers the WebTransport sessions of the route: `echo` (bidirectional "
            "streams echoed, unidirectional ones answered on a new stream, datagrams "
            "echoed)."},
    {.key = NULL},
};
