/* Interception rules at run time (`intercept.rules`, handler/mitm_conf.h): match an exchange,
 * edit request headers, answer it (respond / block), redirect it (map-remote), and install a
 * filter sink that edits the response head and rewrites bodies (decoded from gzip/br/zstd and
 * re-encoded) up to `body-cap`, streaming larger ones through unchanged. Folder-internal.
 * Threads: the compiled rules are read-only after load and shared by workers; matching and
 * body rewriting run on the exchange's worker thread. */
#ifndef FY_HANDLER_MITM_RULES_H
#define FY_HANDLER_MITM_RULES_H

#include <stdbool.h>

#include "handler/mitm_conf.h"
#include "http/exchange.h"

typedef struct fy_mitm_rules fy_mitm_rules_t;

/* Compile regexes, read `respond.file`s. NULL after logging. `conf` borrowed. */
fy_mitm_rules_t *fy__mitm_rules_new(const fy_intercept_conf_t *conf);
void fy__mitm_rules_free(fy_mitm_rules_t *r);

/* Where a request goes after the rules. */
typedef struct fy_mitm_target {
    const char *host; /* NUL-terminated */
    int port;
    bool tls;
    const char *sni; /* NULL: host */
    bool insecure;
    bool h2; /* the origin speaks HTTP/2 (its ALPN in the probe): forward over h2 */
} fy_mitm_target_t;

/* Apply the rules to `ex` bound for `t` (host for matching: t->host). When the request was
 * answered by a rule, returns without calling `go`. Otherwise calls go(ex, t2, ud) exactly
 * once, now or after the request body was buffered and rewritten, with the target (possibly
 * map-remote's; valid for the call). Runs no rule work when there are no rules. */
void fy__mitm_rules_run(fy_mitm_rules_t *r, fy_exchange_t *ex, const fy_mitm_target_t *t,
                        void (*go)(fy_exchange_t *ex, const fy_mitm_target_t *t, void *ud),
                        void *ud);

/* Body codecs (exposed for tests): decode `enc` ("gzip", "br", "zstd") into a malloc'd buffer
 * of at most `cap` bytes (-1 on error or over cap); encode back. */
long fy__mitm_decode(const char *enc, const char *in, size_t len, size_t cap, char **out);
long fy__mitm_encode(const char *enc, const char *in, size_t len, char **out);

#endif
