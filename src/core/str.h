/* Length-delimited string slices.
 * Threads: pure; no shared state, callable from any thread. */
#ifndef FY_CORE_STR_H
#define FY_CORE_STR_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct fy_str {
    const char *p;
    size_t len;
} fy_str_t;

#define FY_STR_LIT(s) ((fy_str_t){(s), sizeof(s) - 1})
#define FY_STR_NULL ((fy_str_t){NULL, 0})

static inline fy_str_t fy_str(const char *p, size_t len)
{
    return (fy_str_t){p, len};
}

static inline char fy_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
}

/* Case-insensitive equality with a lowercase literal of length n. */
static inline bool fy_str_ieq(fy_str_t s, const char *lower, size_t n)
{
    if (s.len != n) return false;
    for (size_t i = 0; i < n; i++)
        if (fy_lower(s.p[i]) != lower[i]) return false;
    return true;
}

static inline bool fy_str_eq(fy_str_t s, const char *p, size_t n)
{
    return s.len == n && memcmp(s.p, p, n) == 0;
}

/* Does the comma-separated list `s` contain `tok` (lowercase, case-insensitive match)?
 * Parameters are ignored, except that "tok;q=0" counts as absent (refused). */
bool fy_str_list_has(fy_str_t s, const char *tok, size_t n);

/* Decode base64url (RFC 4648 §5; '=' padding optional) into out[0..cap). Returns the decoded
 * length, or -1 on an invalid character, bad length or overflow of `cap`. */
int fy_base64url_decode(const char *in, size_t len, unsigned char *out, size_t cap);

#endif
