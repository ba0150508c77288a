/* Fixed responses (`respond: {status, headers, body}`): health checks and benchmarks.
 * Threads: the handler object is built with its generation and read-only after; each
 * exchange's state lives on its connection's worker thread only. */
#ifndef FY_HANDLER_RESPOND_H
#define FY_HANDLER_RESPOND_H

#include "handler/respond_conf.h"
#include "http/handler.h"

/* Build the handler from its config (borrowed: must outlive the handler). Never fails. */
fy_handler_t *fy_respond_handler_new(const fy_respond_conf_t *conf);

#endif
