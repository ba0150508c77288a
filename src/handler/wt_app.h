/* `webtransport: app`: WebTransport sessions handed to an embedder's C callbacks
 * (include/ferry/webtransport.h, which this file implements over h3/h3_wt.h). Without
 * callbacks set, sessions are refused with 503.
 * Threads: the embedder's callbacks are called on the session's worker thread, and the session
 * calls must be made there too. */
#ifndef FY_HANDLER_WT_APP_H
#define FY_HANDLER_WT_APP_H

#include <ferry/webtransport.h>
#include <stdbool.h>

#include "handler/wt_conf.h"
#include "http/handler.h"

fy_handler_t *fy_wt_app_handler_new(const fy_wt_conf_t *conf);
/* Whether `h` is one of these handlers; set its callbacks (copied; before the workers run). */
bool fy_wt_app_is(const fy_handler_t *h);
void fy_wt_app_set(fy_handler_t *h, const ferry_wt_ops_t *ops);

#endif
