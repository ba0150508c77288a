/* HAR 1.2 capture of intercepted flows (`intercept.capture.har`). The file is written as
 * flows complete: each entry is written together with the closing `]}}` after it, in one
 * pwrite at the offset where the previous closing began, so between writes the file is always
 * a complete, valid HAR document. A crash in the middle of a write tears at most that entry:
 * cutting the file after the last line that starts with "  {" and ends with "}" or "}," and
 * appending "\n]}}" recovers every earlier flow. Heads, sizes, timings and bodies (as the
 * client saw them, up to intercept.capture.body-cap, from handler/mitm_capture.c's capture filter)
 * are written. Shared by all workers (one mutex: a write per flow). */
#ifndef FY_OPS_HAR_H
#define FY_OPS_HAR_H

#include <stddef.h>

#include "http/exchange.h"

typedef struct fy_har fy_har_t;

/* Create or truncate `path` (mode 0600) and write the empty log. NULL with *err (static) on
 * failure. */
fy_har_t *fy_har_open(const char *path, const char **err);
/* One finished exchange (a completion observer, fy_observer_t.on_done; CONNECT exchanges are
 * skipped). Thread-safe. */
void fy_har_exchange(fy_exchange_t *ex, void *har);
/* Entries written so far. */
size_t fy_har_count(fy_har_t *h);
void fy_har_close(fy_har_t *h);

#endif
