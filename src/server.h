/* The running server: listeners bound per worker with SO_REUSEPORT, worker threads with their
 * own loops, routers and handlers built from one config generation, graceful drain. */
#ifndef FY_SERVER_H
#define FY_SERVER_H

#include "config.h"

typedef struct fy_server fy_server_t;

/* Build everything from `cfg` (borrowed, must outlive the server) and bind every socket.
 * Returns NULL after logging the reason (bad certificate, address in use, ...). */
fy_server_t *fy_server_new(const fy_config_t *cfg);
/* Reload: build a new generation from `cfg` (owned: freed on failure, or with its
 * generation once no connection uses it), bind the listeners it adds, and hand it to every
 * worker through its loop; connections already open finish on the generation they started
 * on, unchanged listeners keep their sockets. One thread at a time (main.c serializes SIGHUP
 * and the admin API), after fy_server_start.
 * Returns 0 once every worker took it (logged "reload: generation N active on all
 * workers"), or -1 after logging why (the running generation goes on serving). */
int fy_server_reload(fy_server_t *s, fy_config_t *cfg);
/* Start the worker threads. Returns 0 or -errno. */
int fy_server_start(fy_server_t *s);
/* Graceful stop: write out every worker's access log, log the drain notice, stop accepting,
 * finish in-flight responses (at most `drain_ms`), join. */
void fy_server_stop(fy_server_t *s, uint64_t drain_ms);
void fy_server_free(fy_server_t *s);
/* The intercepting proxy's handler (listeners of kind intercept/socks5), or NULL. */
struct fy_handler;
struct fy_handler *fy_server_mitm(fy_server_t *s);
/* Give the current generation's `webtransport: app` routes these callbacks (copied); returns
 * how many routes took them. Before fy_server_start. */
struct ferry_wt_ops;
int fy_server_set_wt_app(fy_server_t *s, const struct ferry_wt_ops *ops);
/* The current generation's config, id and upstreams (ops/admin.c through main.c). Read them
 * on the thread that reloads, or under the lock that serializes reloads (main.c). */
struct fy_upstream;
const fy_config_t *fy_server_config(const fy_server_t *s, unsigned *generation);
size_t fy_server_upstreams(const fy_server_t *s, struct fy_upstream *const **v);
/* Print one line per listener URL ("http://127.0.0.1:8080/") to `out`. */
void fy_server_print_urls(const fy_server_t *s, FILE *out);

#endif
