/* Content negotiation for the compression filter: `Accept-Encoding` with q-values (RFC 9110
 * §12.5.3) and MIME type lists. Pure; any thread. */
#ifndef FY_POLICY_COMPRESS_NEG_H
#define FY_POLICY_COMPRESS_NEG_H

#include <stdbool.h>
#include <stddef.h>

#include "conf/conf.h"
#include "core/str.h"

enum fy_coding {
    FY_CODING_UNKNOWN = -1,
    FY_CODING_IDENTITY = 0,
    FY_CODING_GZIP,
    FY_CODING_BR,
    FY_CODING_ZSTD,
};

/* "gzip" -> FY_CODING_GZIP, "identity", ... (case-insensitive); FY_CODING_UNKNOWN otherwise. */
int fy_compress_coding_id(const char *s, size_t n);
/* The token of a coding ("gzip", "br", "zstd"). */
const char *fy_compress_coding_name(int coding);

/* The coding to use for a request whose Accept-Encoding is `ae` (may be empty: identity),
 * given our offered codings `offer[0..n)` best first: the highest q > 0 wins (an explicit
 * entry, else `*`), our order breaks ties; FY_CODING_IDENTITY when none is acceptable.
 * Malformed q-values count as q=0 for that entry. */
int fy_compress_negotiate(fy_str_t ae, const int *offer, size_t n);

/* Does the Content-Type value `ct` (parameters allowed) match one of `types` (lowercase,
 * a wildcard "major/" + "*")? */
bool fy_compress_type_matches(fy_str_t ct, const fy_conf_strlist_t *types);

#endif
