/* Cache directives as peers send them (RFC 9111 §5.2, RFC 5861, RFC 9213): a strict parser of
 * Cache-Control and of targeted fields (CDN-Cache-Control), and of the Age field (§5.1). Pure
 * functions over bytes; no allocation; any thread. */
#ifndef FY_POLICY_CACHE_CC_H
#define FY_POLICY_CACHE_CC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* RFC 9111 §1.2.2: a delta-seconds too large to represent is this. */
#define FY_CC_DELTA_MAX 2147483648LL

enum {
    FY_CC_NO_STORE = 1u << 0,
    FY_CC_NO_CACHE = 1u << 1,
    FY_CC_PRIVATE = 1u << 2,
    FY_CC_PUBLIC = 1u << 3,
    FY_CC_MUST_REVALIDATE = 1u << 4,
    FY_CC_PROXY_REVALIDATE = 1u << 5,
    FY_CC_MUST_UNDERSTAND = 1u << 6,
    FY_CC_NO_TRANSFORM = 1u << 7,
    FY_CC_ONLY_IF_CACHED = 1u << 8,
    FY_CC_IMMUTABLE = 1u << 9,
    /* valued directives: present (with a valid or invalid value) */
    FY_CC_MAX_AGE = 1u << 16,
    FY_CC_S_MAXAGE = 1u << 17,
    FY_CC_MAX_STALE = 1u << 18,
    FY_CC_MIN_FRESH = 1u << 19,
    FY_CC_SWR = 1u << 20, /* stale-while-revalidate */
    FY_CC_SIE = 1u << 21, /* stale-if-error */
};

/* The parsed directives of one message (all its field lines). */
typedef struct fy_cache_cc {
    uint32_t flags;  /* FY_CC_* present */
    uint32_t bad;    /* FY_CC_* valued directives whose value was invalid or given twice with
                        different values: the response is to be treated as stale (§4.2.1) */
    int64_t max_age; /* seconds, valid when flags has the bit and bad does not */
    int64_t s_maxage;
    int64_t max_stale; /* FY_CC_DELTA_MAX for a bare max-stale (any staleness) */
    int64_t min_fresh;
    int64_t swr, sie;
    bool syntax_error; /* some member was not `token [= token / quoted-string]` */
} fy_cache_cc_t;

/* Start an empty set. */
void fy_cache_cc_init(fy_cache_cc_t *cc);

/* Add the directives of one Cache-Control field line `p[0..n)` (a comma-separated list of
 * `token [ "=" ( token / quoted-string ) ]`, case-insensitive names, OWS around commas).
 * Delta-seconds are 1*DIGIT, also in quoted form (`max-age="5"`, §5.2); larger than
 * FY_CC_DELTA_MAX clamps to it. A member that is not well-formed sets syntax_error and is
 * skipped up to the next comma outside a quoted string. Unknown directives are ignored. */
void fy_cache_cc_parse(fy_cache_cc_t *cc, const char *p, size_t n);

/* A targeted field (RFC 9213: a Structured Fields Dictionary, RFC 8941). Stricter than
 * Cache-Control: integers only unquoted, no duplicates of different values, members are
 * `key[=item]` with sf-key names (lowercase). Returns 0 when the whole field is valid (then
 * it replaces Cache-Control for this cache), -1 when it is not (then the field is ignored,
 * RFC 9213 §2.1). `cc` is filled either way. */
int fy_cache_cc_parse_targeted(fy_cache_cc_t *cc, const char *p, size_t n);

/* The Age field (§5.1): the first member of a list, 1*DIGIT, clamped to FY_CC_DELTA_MAX.
 * Returns the age, or -1 when the value is invalid (negative, a float, empty): ignore it. */
int64_t fy_cache_parse_age(const char *p, size_t n);

#endif
