/* Upstream discovery (`discovery:` on an upstream): the server set found in a watched file or
 * in DNS (A/AAAA/SRV, re-resolved per TTL), run on the loop of the worker that runs the health
 * checks (worker 0), and handed to upstream.c, which publishes it to every worker
 * (fy__upstream_set_servers, see there for how a set changes safely). */
#ifndef FY_UPSTREAM_DISCOVERY_H
#define FY_UPSTREAM_DISCOVERY_H

#include <stddef.h>
#include <stdint.h>

#include "core/loop.h"
#include "upstream/upstream_conf.h"

#define FY_DISC_URL_MAX 300
#define FY_DISC_FILE_MAX (1024 * 1024) /* bytes of a discovery file read */

/* One server found: its URL (the identity: same URL, same server across sets), weight, and
 * for DNS the name TLS and Host use (empty: the URL's host). */
typedef struct fy_disc_entry {
    char url[FY_DISC_URL_MAX];
    char name[256];
    int64_t weight;
} fy_disc_entry_t;

/* Parse a discovery file's bytes (`path` names it in errors): a YAML sequence of URLs or
 * {url, weight} maps, or one URL per line optionally followed by `weight=N`, `#` comments.
 * Each URL must parse with an IP address for host (fy_upstream_url_parse, numeric). Returns
 * the number of entries written to out (at most max; more is an error), or -1 with
 * "PATH:LINE[:COL]: reason" in err. Pure: any thread, no I/O. */
int fy_discovery_parse(const char *path, const char *text, size_t len, fy_disc_entry_t *out,
                       size_t max, char *err, size_t errlen);

typedef struct fy_upstream fy_upstream_t;
typedef struct fy__discovery fy__discovery_t;

/* The first set, while the configuration is loaded (main thread, blocking: the file read, or
 * one DNS lookup bounded by resolve-timeout). Returns the entries written (0 and a logged
 * warning when none could be found). */
size_t fy__discovery_initial(const fy_upstream_conf_t *uc, fy_disc_entry_t *out, size_t max);
/* Watch on `loop` (the health-check worker's thread) and call fy__upstream_set_servers on
 * every change. Stop on the same thread before the loop goes. */
fy__discovery_t *fy__discovery_start(fy_upstream_t *u, const fy_upstream_conf_t *uc,
                                     fy_loop_t *loop);
void fy__discovery_stop(fy__discovery_t *d);

#endif
