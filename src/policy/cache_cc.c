/* Cache-Control, targeted cache control and Age parsing (policy/cache_cc.h). */
#include "policy/cache_cc.h"

#include <string.h>

void fy_cache_cc_init(fy_cache_cc_t *cc)
{
    memset(cc, 0, sizeof *cc);
}

/* RFC 9110 §5.6.2 tchar */
static const unsigned char tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1,  ['~'] = 1, ['0'] = 1,
    ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,  ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1,  ['f'] = 1, ['g'] = 1,
    ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1,  ['n'] = 1, ['o'] = 1,
    ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1,  ['v'] = 1, ['w'] = 1,
    ['x'] = 1, ['y'] = 1, ['z'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1,  ['D'] = 1, ['E'] = 1,
    ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1,  ['L'] = 1, ['M'] = 1,
    ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1,  ['T'] = 1, ['U'] = 1,
    ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
};

static bool is_tchar(unsigned char c)
{
    return tchar[c] != 0;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* delta-seconds: 1*DIGIT, clamped; -1 when not digits */
static int64_t delta(const char *p, size_t n)
{
    if (n == 0) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        if (v < FY_CC_DELTA_MAX) v = v * 10 + (p[i] - '0');
    }
    return v > FY_CC_DELTA_MAX ? FY_CC_DELTA_MAX : v;
}

struct dir {
    const char *name;
    uint32_t bit;
    size_t off; /* offset of the int64_t value, or 0 for a flag */
    size_t len;
};

static const struct dir dirs[] = {
    {"no-store", FY_CC_NO_STORE, 0, 8},
    {"no-cache", FY_CC_NO_CACHE, 0, 8},
    {"private", FY_CC_PRIVATE, 0, 7},
    {"public", FY_CC_PUBLIC, 0, 6},
    {"must-revalidate", FY_CC_MUST_REVALIDATE, 0, 15},
    {"proxy-revalidate", FY_CC_PROXY_REVALIDATE, 0, 16},
    {"must-understand", FY_CC_MUST_UNDERSTAND, 0, 15},
    {"no-transform", FY_CC_NO_TRANSFORM, 0, 12},
    {"only-if-cached", FY_CC_ONLY_IF_CACHED, 0, 14},
    {"immutable", FY_CC_IMMUTABLE, 0, 9},
    {"max-age", FY_CC_MAX_AGE, offsetof(fy_cache_cc_t, max_age), 7},
    {"s-maxage", FY_CC_S_MAXAGE, offsetof(fy_cache_cc_t, s_maxage), 8},
    {"max-stale", FY_CC_MAX_STALE, offsetof(fy_cache_cc_t, max_stale), 9},
    {"min-fresh", FY_CC_MIN_FRESH, offsetof(fy_cache_cc_t, min_fresh), 9},
    {"stale-while-revalidate", FY_CC_SWR, offsetof(fy_cache_cc_t, swr), 22},
    {"stale-if-error", FY_CC_SIE, offsetof(fy_cache_cc_t, sie), 14},
};

/* p[0..n) is a token (tchar only): `| 0x20` folds exactly the uppercase letters onto the
   lowercase ones and maps no other tchar onto a letter or '-' (only CR, not a tchar, would). A
   targeted field's names are compared exactly (fold false). */
static bool name_is(const char *p, size_t n, const char *lower, size_t l, bool fold)
{
    if (l != n) return false;
    unsigned char m = fold ? 0x20 : 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)(p[i] | m) != (unsigned char)lower[i]) return false;
    return true;
}

/* The directive named p[0..n) (case-folded unless targeted), or NULL: one switch on the length
   and a distinguishing letter, then one comparison (not a walk of the table). */
static const struct dir *find_dir(const char *p, size_t n, bool fold)
{
    int k = -1;
    char c0 = (char)(p[0] | (fold ? 0x20 : 0)); /* letters only matter: others fail the compare */
    switch (n) {
    case 6:
        k = 3;
        break;
    case 7:
        k = c0 == 'p' ? 2 : 10;
        break;
    case 8:
        k = c0 == 's' ? 11 : (p[3] | 0x20) == 's' ? 0 : 1;
        break;
    case 9:
        k = c0 == 'i' ? 9 : (p[1] | 0x20) == 'a' ? 12 : 13;
        break;
    case 12:
        k = 7;
        break;
    case 14:
        k = c0 == 'o' ? 8 : 15;
        break;
    case 15:
        k = (p[5] | 0x20) == 'r' ? 4 : 6;
        break;
    case 16:
        k = 5;
        break;
    case 22:
        k = 14;
        break;
    default:
        return NULL;
    }
    const struct dir *d = &dirs[k];
    return name_is(p, n, d->name, d->len, fold) ? d : NULL;
}

/* One member: name, and its value (unquoted content; has_v says "=" was there; quoted says
   it was a quoted-string). Unknown names are ignored. */
static void apply(fy_cache_cc_t *cc, const char *np, size_t nn, const char *vp, size_t vn,
                  bool has_v, bool quoted, bool targeted)
{
    const struct dir *d = find_dir(np, nn, !targeted);
    if (!d) return;
    bool seen = (cc->flags & d->bit) != 0;
    cc->flags |= d->bit;
    if (!d->off)
        return; /* flags: a value (no-cache="f", private="f") qualifies them;
                   a shared cache may treat them as unqualified (§5.2.2) */
    int64_t v;
    if (!has_v)
        v = d->bit == FY_CC_MAX_STALE ? FY_CC_DELTA_MAX : -1;
    else if (quoted && targeted)
        v = -1; /* sf-integer only */
    else
        v = delta(vp, vn);
    int64_t *slot = (int64_t *)((char *)cc + d->off);
    if (v < 0)
        cc->bad |= d->bit;
    else if (seen && *slot != v)
        cc->bad |= d->bit; /* duplicates that disagree: stale (§4.2.1) */
    else
        *slot = v;
}

static int parse(fy_cache_cc_t *cc, const char *p, size_t n, bool targeted)
{
    size_t i = 0;
    int rc = 0;
    while (i < n) {
        while (i < n && (is_ows(p[i]) || p[i] == ',')) i++;
        if (i >= n) break;
        size_t ns = i;
        while (i < n && is_tchar((unsigned char)p[i])) i++;
        size_t nn = i - ns;
        const char *vp = NULL;
        size_t vn = 0;
        bool has_v = false, quoted = false, ok = nn > 0;
        if (ok && i < n && p[i] == '=') {
            i++;
            has_v = true;
            if (i < n && p[i] == '"') {
                quoted = true;
                i++;
                vp = p + i;
                size_t s = i;
                bool closed = false;
                while (i < n) {
                    if (p[i] == '\\' && i + 1 < n) {
                        i += 2;
                        continue;
                    }
                    if (p[i] == '"') {
                        closed = true;
                        break;
                    }
                    if ((unsigned char)p[i] < 0x20 && p[i] != '\t') break;
                    i++;
                }
                vn = i - s;
                if (closed)
                    i++;
                else
                    ok = false;
            } else {
                size_t s = i;
                while (i < n && is_tchar((unsigned char)p[i])) i++;
                vp = p + s;
                vn = i - s;
                if (vn == 0) ok = false;
            }
        }
        if (targeted && ok && i < n && p[i] == ';') ok = false; /* parameters: not ours */
        while (i < n && is_ows(p[i])) i++;
        if (ok && i < n && p[i] != ',') ok = false;
        if (!ok) {
            cc->syntax_error = true;
            rc = -1;
            /* skip to the next comma outside a quoted string */
            bool q = false;
            while (i < n && (q || p[i] != ',')) {
                if (p[i] == '"') q = !q;
                if (q && p[i] == '\\') i++;
                i++;
            }
            continue;
        }
        apply(cc, p + ns, nn, vp, vn, has_v, quoted, targeted);
    }
    return rc;
}

void fy_cache_cc_parse(fy_cache_cc_t *cc, const char *p, size_t n)
{
    parse(cc, p, n, false);
}

int fy_cache_cc_parse_targeted(fy_cache_cc_t *cc, const char *p, size_t n)
{
    /* sf-keys are lowercase: an uppercase letter makes the field invalid */
    for (size_t i = 0; i < n; i++)
        if (p[i] >= 'A' && p[i] <= 'Z') {
            bool inq = false;
            for (size_t j = 0; j < i; j++)
                if (p[j] == '"') inq = !inq;
            if (!inq) return -1;
        }
    int rc = parse(cc, p, n, true);
    if (rc == 0 && cc->bad) rc = -1;
    return rc;
}

int64_t fy_cache_parse_age(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && is_ows(p[i])) i++;
    size_t s = i;
    while (i < n && p[i] != ',') i++;
    size_t e = i;
    while (e > s && is_ows(p[e - 1])) e--;
    return delta(p + s, e - s);
}
