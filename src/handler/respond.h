/* Fixed responses (`respond: {status, headers, body}`): health checks and benchmarks. */
#ifndef FY_HANDLER_RESPOND_H
#define FY_HANDLER_RESPOND_H

#include "handler/respond_conf.h"
#include "http/handler.h"

/* Build the handler from its config (borrowed: must outlive the handler). Never fails. */
fy_handler_t *fy_respond_handler_new(const fy_respond_conf_t *conf);

#endif
