/* The WAF filter (stage FY_STAGE_WAF, `waf:` per route): ModSecurity v3 (libmodsecurity3) as
 * the engine, the OWASP Core Rule Set (Debian modsecurity-crs) as the rules.
 *
 * Per exchange it feeds ModSecurity the connection, the request line, the headers (Host made
 * from :authority for h2/h3) and the request body. The body is held in the exchange's arena
 * up to `body-limit` before the handler runs, so a request the rules deny never reaches the
 * origin, not even in part; once ModSecurity passed it, the held bytes are handed to the
 * handler through a sink layer's read_body as if the codec delivered them. A longer body is
 * refused (413) or, with `body-overflow: pass`, inspected up to the limit and the rest streamed
 * uninspected. Blocking mode answers ModSecurity's intervention status (the CRS denies with
 * 403); detection mode logs each matching rule (id, message) as a warning and lets the request
 * through. The audit log (JSON) is written by ModSecurity when the exchange ends.
 *
 * The rule set is parsed once per filter, i.e. once per config generation, on the main thread;
 * workers share it read-only. Each worker has its own ModSecurity instance: the persistent
 * collections (`initcol` of the CRS: GLOBAL, IP) live there, and 3.0.9's in-memory backend
 * locks its writes but not its reads, so one instance shared by workers would race; per-worker
 * collections mean an IP counter (the CRS DoS rules, off by default) counts per worker. Calls on
 * the loop are CPU only except the audit log's write(2) to a local file (see docs/ARCHITECTURE.md,
 * "WAF"). */
#ifndef FY_POLICY_WAF_H
#define FY_POLICY_WAF_H

#include <stddef.h>

#include "http/filter.h"
#include "policy/waf_conf.h"

/* The filter for `conf` (borrowed during the call only), for exchanges of workers
 * 0..nworkers-1 (others are answered 500). Loads the rules now and logs how many and how long
 * it took; NULL with "FILE: reason" in err when one does not load. `where` names it in logs
 * ("routes[0]"). `gen` (may be NULL) identifies the configuration generation: a second call
 * with the same gen and identical settings returns the first filter (another chain then holds
 * it) instead of loading the rules again. A new filter holds no reference yet. Main thread. */
fy_filter_t *fy_waf_filter_new(const fy_waf_conf_t *conf, const char *where, int nworkers,
                               const void *gen, char *err, size_t errlen);

#endif
