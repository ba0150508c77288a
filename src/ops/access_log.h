/* Access log: one line per exchange in combined, common or JSON-lines format, buffered per
 * worker (flushed when the buffer fills, before the first line of a new second, just after
 * every wall-clock second, before the drain notice and at exit) so that the hot path does no
 * system call for it.
 * Threads: one buffer per worker, written only by that worker; a full buffer goes out in one
 * write(2). */
#ifndef FY_OPS_ACCESS_LOG_H
#define FY_OPS_ACCESS_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "http/exchange.h"
#include "ops/log_conf.h"

typedef struct fy_access_log fy_access_log_t;

/* Open the destination named in conf ("stdout" or a path, appended). Returns NULL when the
 * access log is "off"; sets *err to a static message and returns NULL on failure. */
int fy_access_log_open(const fy_log_conf_t *conf, int *fd_out, const char **err);

/* A per-worker writer on `fd` (borrowed). */
fy_access_log_t *fy_access_log_new(int fd, int format, size_t bufsize);
/* The fields of each line (enum fy_access_field, copied): json's keys in order (none: the
 * default set), or what text formats append. Before the first line. */
void fy_access_log_set_fields(fy_access_log_t *l, const uint8_t *ids, size_t n);
/* A completion observer (fy_observer_t.on_done). */
void fy_access_log_exchange(fy_exchange_t *ex, void *log);
void fy_access_log_flush(fy_access_log_t *l);
void fy_access_log_free(fy_access_log_t *l);

#endif
