/* The inspector (docs/INSPECTOR.md): flows of the intercepting listeners, and sampled flows of
 * reverse-proxy routes with `capture:`, kept in a disk store (ops/capture_store.h) and shown by
 * a web UI with a JSON API on its own loopback listener (ops/inspector_http.c).
 *
 * One inspector per process: the first generation whose config has an `inspector:` section
 * starts it (store, writer thread, listener thread); later generations (reloads) share it, and
 * changes to the section need a restart (a notice says so). Threads: fy_inspector_start,
 * fy_inspector_filter_new and fy_inspector_shutdown on the main thread; fy_inspector_exchange
 * and the filter's ops on workers (they never wait for the store). */
#ifndef FY_OPS_INSPECTOR_H
#define FY_OPS_INSPECTOR_H

#include <sys/socket.h>

#include "http/exchange.h"
#include "http/filter.h"
#include "ops/inspector_conf.h"

typedef struct fy_inspector fy_inspector_t;

/* Start (or return) the process's inspector. `data_dir` gives the store's default folder;
 * `proxy` (may be NULL) is the intercepting listener replays are sent through. NULL after
 * logging why (the listener address cannot be bound). */
fy_inspector_t *fy_inspector_start(const fy_inspector_conf_t *c, const char *data_dir,
                                   const struct sockaddr *proxy, socklen_t proxylen);
/* The running inspector, or NULL. */
fy_inspector_t *fy_inspector_get(void);
/* Stop the listener and the store (after it wrote what is queued). Idempotent. */
void fy_inspector_shutdown(void);

/* The capture filter (stage FY_STAGE_CAPTURE): on an intercepting listener (rc NULL) every
 * flow but CONNECT and extended-CONNECT tunnels; on a route, the flows `rc` may keep. It
 * pushes a sink layer keeping bodies up to body-cap. NULL when out of memory; refs is 0 (the
 * chain that adds it takes the reference). */
fy_filter_t *fy_inspector_filter_new(fy_inspector_t *ins, const fy_capture_route_conf_t *rc);

/* Completion observer (fy_observer_t.on_done, ud = the inspector): stores the exchange when
 * the capture filter marked it. */
void fy_inspector_exchange(fy_exchange_t *ex, void *ins);

#endif
