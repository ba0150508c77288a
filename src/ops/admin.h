/* The admin listener: GET /metrics (Prometheus text) and a JSON API over the running
 * configuration (GET/POST /config, dry-run diffs, rollback, upstream servers' state, drain and
 * enable), served with Ferry's own h1 codec on a thread of its own with its own loop, so that
 * slow work (a reload waits for every worker to take the generation) never stalls a worker
 * and the API answers while the workers are saturated.
 *
 * The admin layer (ops) cannot see the top-level config type or the server: the process
 * (main.c) hands it a host table of callbacks. Every callback that reads or swaps the running
 * generation is called with the admin's lock held; the process takes the same lock
 * (fy_admin_reload_source) for its own reloads (SIGHUP), so reloads never run at once. */
#ifndef FY_OPS_ADMIN_H
#define FY_OPS_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "conf/conf.h"
#include "http/http_conf.h"
#include "ops/admin_conf.h"
#include "upstream/upstream.h"

struct fy_config; /* src/config.h */

typedef struct fy_admin_host {
    const fy_conf_directive_t *table; /* the config's top-level table (dumps, diffs) */
    /* Parse and validate a config text as `ferry check` does; NULL with its errors
       ("name:line:col: key: message" lines) written to errf. */
    struct fy_config *(*load)(const char *name, const char *text, size_t len, FILE *errf);
    void (*free)(struct fy_config *cfg);
    void (*dump)(const struct fy_config *cfg, FILE *out); /* effective config as YAML */
    /* With the lock held: */
    const struct fy_config *(*current)(void *ud, unsigned *generation);
    /* Apply cfg (owned, freed on failure) as a new generation: 0, or -1 (logged). */
    int (*apply)(void *ud, struct fy_config *cfg);
    /* The running generation's upstreams, in config order. */
    size_t (*upstreams)(void *ud, fy_upstream_t *const **v);
    void *ud;
} fy_admin_host_t;

typedef struct fy_admin fy_admin_t;

/* Bind conf->address and start the admin thread. `limits` (borrowed, outlives the admin) are
 * the HTTP limits it starts from (its own max-body and timeout replace the body size and
 * the timeouts); `host` is copied. `source` is the config file the process runs (NULL: the
 * embedded text `text`), `text`/`len` the running config's text (copied; kept for
 * rollback). `data_dir` for a self-signed certificate. Returns NULL after logging why. Main
 * thread, after the server started (call fy_admin_prepare before building it). */
fy_admin_t *fy_admin_start(const fy_admin_conf_t *conf, const fy_http_limits_t *limits,
                           const char *data_dir, const fy_admin_host_t *host, const char *source,
                           const char *text, size_t len);
/* The process will run an admin listener: turn the detailed metrics on (the per-exchange
 * observer, per-server series). Main thread, before the server is built. */
void fy_admin_prepare(void);
/* Stop the thread, close every admin connection, free. Main thread; NULL is fine. */
void fy_admin_stop(fy_admin_t *a);

/* Reload the config file the process runs (SIGHUP, `ferry reload`, POST /config/reload)
 * under the admin's lock, keeping the running text for rollback. Errors go to errf and the
 * log. Returns 0 or -1. Any thread. */
int fy_admin_reload_source(fy_admin_t *a, FILE *errf);

/* ---- pure helpers (admin_api.c), exposed for the unit test and the fuzzer ---- */

/* Split a request target "/a/b?x=1&dry-run=1" into at most `max` path segments (borrowed
 * pointers into `buf`, a copy of the target the caller owns, at most FY_ADMIN_MAX_TARGET
 * bytes) and tell whether the query has dry-run=1 (or dry-run=true). Empty segments ("//")
 * and percent-escapes are refused. Returns the number of segments, or -1. */
#define FY_ADMIN_MAX_TARGET 1024
int fy_admin_split_target(const char *target, size_t len, char *buf, const char **seg, int max,
                          bool *dry_run);
/* A decimal server index ("0".."999"), or -1. */
int fy_admin_parse_index(const char *s);
/* Write s as a JSON string (quotes included). */
void fy_admin_json_str(FILE *out, const char *s);

/* Write the JSON diff of two configs described by `table` ({"listeners": {"added": [...],
 * "removed": [...], "changed": [...]}, "routes": ..., "upstreams": ..., "sections": [top-level
 * keys whose value changed]}) to out. admin_diff.c. */
void fy_admin_diff(const fy_conf_directive_t *table, const void *from, const void *to, FILE *out);

#endif
