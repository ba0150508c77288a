/* The C hooks of include/ferry/mitm.h on intercepted flows: ferry_flow_t accessors and a sink
 * filter that calls on_response / on_*_body. Folder-internal.
 * Threads: hooks run on the intercepted connection's worker thread; the hook table is
 * read-only after load. */
#ifndef FY_HANDLER_MITM_HOOKS_H
#define FY_HANDLER_MITM_HOOKS_H

#include <ferry/mitm.h>
#include <stdbool.h>

#include "http/exchange.h"

/* Run on_request for `ex` and install the filter for the later hooks. Returns true when the
 * hook answered the request (the exchange may already be gone: touch nothing). */
bool fy__mitm_hooks_begin(const ferry_hooks_t *h, fy_exchange_t *ex);

#endif
