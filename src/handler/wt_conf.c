/* Directive table of `webtransport:` in a route. */
#include "handler/wt_conf.h"

#include <stddef.h>

static const char *const wt_handlers[] = {"echo", "proxy", "app", NULL};

const fy_conf_directive_t fy_wt_conf_table[] = {
    {.key = "handler",
     .type = FY_CT_ENUM,
     .offset = offsetof(fy_wt_conf_t, handler),
     .enums = wt_handlers,
     .dflt = "echo",
     .doc = "What answers the WebTransport sessions of the route: `echo` (bidirectional "
            "streams echoed, unidirectional ones answered on a new stream, datagrams "
            "echoed), `proxy` (each session re-originated to a server of `upstream`, "
            "streams and datagrams relayed both ways), or `app` (an embedder's C callbacks: "
            "include/ferry/webtransport.h)."},
    {.key = "upstream",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_wt_conf_t, upstream),
     .doc = "proxy: the `upstreams:` entry (h3:// servers) whose balancing picks the origin of "
            "each session."},
    {.key = NULL},
};
