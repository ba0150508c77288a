/* A field name known at config time, compared with a peer's field names (any case) eight
 * bytes at a time: the per-request filters (jwt, transform) test every request or response
 * field against their configured names, and a byte loop through fy_lower costs more than the
 * rest of their work. Names are tokens (RFC 9110 §5.6.2), never a control byte.
 *
 * A word of the peer's name matches when (word | mask) == lower, where mask has 0x20 at the
 * letters: a letter position accepts exactly its two cases, every other byte only itself. */
#ifndef FY_POLICY_HNAME_H
#define FY_POLICY_HNAME_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/str.h"

#define FY_HNAME_WORDS 4 /* names up to 32 bytes by words; longer ones byte by byte */

typedef struct fy_hname {
    const char *lower; /* the name, lowercase (borrowed from the config) */
    size_t len;
    uint64_t w[FY_HNAME_WORDS], m[FY_HNAME_WORDS]; /* whole words from the start */
    uint64_t wl, ml;                               /* the last 8 bytes (len >= 8) */
} fy_hname_t;

static inline uint64_t fy__hname_word(const char *s, uint64_t *mask)
{
    unsigned char m[8];
    for (int i = 0; i < 8; i++) m[i] = s[i] >= 'a' && s[i] <= 'z' ? 0x20 : 0;
    uint64_t w;
    memcpy(&w, s, 8); /* both in memory order: any byte order works */
    memcpy(mask, m, 8);
    return w;
}

/* lower: the name in lowercase, NUL-terminated, kept alive by the caller. */
static inline void fy_hname_init(fy_hname_t *h, const char *lower)
{
    memset(h, 0, sizeof *h);
    h->lower = lower;
    h->len = strlen(lower);
    if (h->len < 8 || h->len > 8 * FY_HNAME_WORDS) return;
    for (size_t i = 0; i + 8 <= h->len; i += 8)
        h->w[i / 8] = fy__hname_word(lower + i, &h->m[i / 8]);
    h->wl = fy__hname_word(lower + h->len - 8, &h->ml);
}

static inline bool fy_hname_eq(const fy_hname_t *h, fy_str_t s)
{
    if (s.len != h->len) return false;
    if (h->len < 8 || h->len > 8 * FY_HNAME_WORDS) return fy_str_ieq(s, h->lower, h->len);
    uint64_t x;
    size_t i = 0;
    for (; i + 8 <= h->len; i += 8) {
        memcpy(&x, s.p + i, 8);
        if ((x | h->m[i / 8]) != h->w[i / 8]) return false;
    }
    if (i == h->len) return true;
    memcpy(&x, s.p + h->len - 8, 8);
    return (x | h->ml) == h->wl;
}

#endif
