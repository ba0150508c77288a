/* The inspector's filter language and its query strings (pure functions, any thread).
 *
 * A filter is terms joined by `&` (or juxtaposition), `|` and `!`, with parentheses; `&` binds
 * tighter than `|`. Terms, after mitmproxy's:
 *   ~d S    host contains S            ~u S    path?query contains S (a bare word means ~u)
 *   ~m S    method is S                ~c N    status (N, >N, >=N, <N, <=N, !=N, or 5xx)
 *   ~h S    a request or response header line "name: value" contains S (~hq request, ~hs
 *           response)
 *   ~b S    a request or response body contains S (~bq request, ~bs response)
 *   ~t S    response content type contains S
 *   ~dur N  duration in ms (comparisons as for ~c)   ~size N  response body bytes (as ~c)
 *   ~i      intercepted                              ~e       failed (an error was recorded)
 * S is a word (up to a space or parenthesis) or a "quoted string" (\" and \\ escape); text
 * matches are ASCII case-insensitive. At most 256 terms and 32 levels of nesting. */
#ifndef FY_OPS_INSPECTOR_FILTER_H
#define FY_OPS_INSPECTOR_FILTER_H

#include <stdbool.h>
#include <stddef.h>

#include "ops/capture_store.h"

typedef struct fy_insp_expr fy_insp_expr_t;

/* Parse s[0..n). NULL when s is blank (matches everything: *err NULL) or on an error (*err: a
 * static message, *errpos: the byte offset). The result is owned by the caller. */
fy_insp_expr_t *fy_insp_filter_parse(const char *s, size_t n, const char **err, size_t *errpos);
void fy_insp_filter_free(fy_insp_expr_t *x);
/* Does evaluating x need the whole flow (headers, bodies) rather than the index entry? */
bool fy_insp_filter_needs_flow(const fy_insp_expr_t *x);

/* What a match looks at: the index entry, and the whole flow when the filter needs it (loaded
 * lazily by `load`, which returns NULL when the flow cannot be read: the term is false). */
typedef struct fy_insp_subject {
    const fy_cs_entry_t *e;
    const fy_cs_flow_t *(*load)(void *ud);
    void *ud;
} fy_insp_subject_t;

/* NULL x matches everything. */
bool fy_insp_filter_match(const fy_insp_expr_t *x, fy_insp_subject_t *s);

/* The value of query parameter `name` in q[0..n) (after the '?'), percent- and '+'-decoded
 * into out (NUL-terminated, cut at cap-1 bytes). The decoded length, or -1 when absent. */
long fy_insp_query_get(const char *q, size_t n, const char *name, char *out, size_t cap);
/* Decimal unsigned integer parameter: def when absent or not a number, capped at max. */
unsigned long long fy_insp_query_uint(const char *q, size_t n, const char *name,
                                      unsigned long long def, unsigned long long max);

#endif
