/* Folder-internal: what upstream.c and upstream_h2.c share. */
#ifndef FY_UPSTREAM_UPSTREAM_INT_H
#define FY_UPSTREAM_UPSTREAM_INT_H

#include "upstream/upstream.h"

/* The head of worker w's HTTP/2 session list for `server` (owned by upstream_h2.c). */
void **fy__upstream_h2_slot(fy_upstream_t *u, int w, int server);
/* Close and free a connection at once (worker exit: no loop turn left). */
void fy__origin_close_now(fy_origin_conn_t *oc);
/* Close worker w's HTTP/2 sessions (worker exit). */
void fy__upstream_h2_worker_close(fy_upstream_t *u, int w);

#endif
