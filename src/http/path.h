/* Request-path normalisation, done once before route matching (http/router.c) so that routes,
 * per-route policies and origins all see one spelling of a path. Pure: no allocation, no
 * global state; any thread may call it. */
#ifndef FY_HTTP_PATH_H
#define FY_HTTP_PATH_H

#include <stdbool.h>
#include <stddef.h>

/* What an encoded '/' (%2F) or '\' (%5C) in a path becomes (`limits.encoded-slash`). */
enum fy_path_slash {
    FY_PATH_SLASH_REJECT = 0, /* the request is refused (400): the default */
    FY_PATH_SLASH_KEEP,       /* stays encoded (as %2F / %5C, hex upper-cased): not a separator */
    FY_PATH_SLASH_DECODE,     /* decoded before dot segments are removed: a separator */
};

typedef struct fy_path_opts {
    enum fy_path_slash encoded_slash;
    bool merge_slashes; /* "//" -> "/" (`limits.merge-slashes`, default true) */
} fy_path_opts_t;

/* Errors of fy_path_normalize (negative, distinct from lengths). */
#define FY_PATH_EBAD (-1)   /* '%' not followed by two hex digits, or input not starting '/' */
#define FY_PATH_ESLASH (-2) /* an encoded '/' or '\' with FY_PATH_SLASH_REJECT */
#define FY_PATH_EABOVE (-3) /* a ".." segment would climb above the root */
#define FY_PATH_ENOSPC (-4) /* the result does not fit in `cap` bytes */

/* Whether fy_path_normalize would return `p` unchanged (no '%', no "." or ".." segment, no
 * "//" when merge_slashes): the common case, decided in one pass without a copy. */
bool fy_path_is_normal(const char *p, size_t len, bool merge_slashes);

/* Normalise the origin-form path `in` (len bytes, starting with '/', no query) into `out`
 * (cap bytes; the caller owns both; they must not overlap). In this order:
 *   1. percent-decoding of the unreserved characters (ALPHA DIGIT - . _ ~); every other
 *      escape stays encoded with its hex digits upper-cased (RFC 3986 §6.2.2.1-2), except %2F
 *      and %5C, which follow opts->encoded_slash;
 *   2. with opts->merge_slashes, runs of '/' become one;
 *   3. removal of "." and ".." segments (RFC 3986 §5.2.4), except that a ".." above the root is
 *      an error instead of being dropped: "/../x" is FY_PATH_EABOVE, not "/x".
 * The result always starts with '/', is never longer than the input, and is not
 * NUL-terminated. Returns its length, or a negative FY_PATH_E*. */
int fy_path_normalize(const char *in, size_t len, char *out, size_t cap,
                      const fy_path_opts_t *opts);

#endif
