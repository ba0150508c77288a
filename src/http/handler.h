/* Handler interface: the code that answers an exchange (static, respond, echo; later proxy,
 * mitm, tunnel). A handler object is built once from its config and shared by all workers:
 * on_request must only touch per-exchange or per-thread state. */
#ifndef FY_HTTP_HANDLER_H
#define FY_HTTP_HANDLER_H

#include "core/fwd.h"

typedef struct fy_handler_ops {
    const char *name;
    /* Answer `ex` (synchronously or later); must eventually send FINAL or fail the exchange. */
    void (*on_request)(fy_handler_t *h, fy_exchange_t *ex);
    void (*destroy)(fy_handler_t *h);
} fy_handler_ops_t;

/* Embedded first in each handler's own struct. */
struct fy_handler {
    const fy_handler_ops_t *ops;
};

#endif
