/* Scalar converters (sizes, durations, booleans, integers) shared by user input and defaults,
 * and the readable units messages and the dump print them back in. Pure functions. */
#include "conf/conf_int.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scalar converters ---- */

/* Parse a run of decimal digits at *s into *v (no sign, no spaces). */
static int parse_digits(const char **s, uint64_t *v)
{
    const char *p = *s;
    uint64_t n = 0;
    if (!isdigit((unsigned char)*p)) return -1;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (n > (UINT64_MAX - d) / 10) return -1;
        n = n * 10 + d;
    }
    *s = p;
    *v = n;
    return 0;
}

int fy_conf_parse_size(const char *s, uint64_t *out)
{
    uint64_t n;
    if (parse_digits(&s, &n) < 0) return -1;
    unsigned shift = 0;
    switch (tolower((unsigned char)*s)) {
    case '\0':
        break;
    case 'b':
        if (s[1]) return -1;
        s++;
        break;
    case 'k':
        shift = 10;
        break;
    case 'm':
        shift = 20;
        break;
    case 'g':
        shift = 30;
        break;
    case 't':
        shift = 40;
        break;
    default:
        return -1;
    }
    if (shift) {
        s++;
        /* "k", "kb", "kib" in any case */
        if (tolower((unsigned char)*s) == 'i') {
            if (tolower((unsigned char)s[1]) != 'b') return -1;
            s += 2;
        } else if (tolower((unsigned char)*s) == 'b') {
            s++;
        }
        if (*s) return -1;
        if (n > (UINT64_MAX >> shift)) return -1;
        n <<= shift;
    }
    *out = n;
    return 0;
}

int fy_conf_parse_duration_ms(const char *s, uint64_t *out)
{
    uint64_t total = 0, n;
    if (parse_digits(&s, &n) < 0) return -1;
    if (!*s) { /* bare number: seconds */
        if (n > UINT64_MAX / 1000) return -1;
        *out = n * 1000;
        return 0;
    }
    for (;;) {
        uint64_t mul;
        if (s[0] == 'm' && s[1] == 's') {
            mul = 1;
            s += 2;
        } else {
            switch (*s) {
            case 's':
                mul = 1000;
                break;
            case 'm':
                mul = 60000;
                break;
            case 'h':
                mul = 3600000;
                break;
            case 'd':
                mul = 86400000;
                break;
            default:
                return -1;
            }
            s++;
        }
        if (n > UINT64_MAX / mul || total > UINT64_MAX - n * mul) return -1;
        total += n * mul;
        if (!*s) break;
        if (parse_digits(&s, &n) < 0) return -1; /* compound: "1m30s" */
    }
    *out = total;
    return 0;
}

int fy_conf_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};
    for (size_t i = 0; i < 3; i++) {
        if (!strcasecmp(s, yes[i])) {
            *out = true;
            return 0;
        }
        if (!strcasecmp(s, no[i])) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

int parse_int(const char *s, int64_t *out)
{
    bool neg = *s == '-';
    if (neg) s++;
    uint64_t n;
    if (parse_digits(&s, &n) < 0 || *s) return -1;
    if (neg ? n > (uint64_t)INT64_MAX + 1 : n > (uint64_t)INT64_MAX) return -1;
    *out = neg ? (int64_t)(0 - n) : (int64_t)n;
    return 0;
}

/* ---- readable units, shared by messages and dump ---- */

void fmt_size(char *buf, size_t len, uint64_t v)
{
    static const char units[] = "tgmk";
    for (int i = 0; i < 4; i++) {
        unsigned shift = (unsigned)(40 - 10 * i);
        uint64_t unit = (uint64_t)1 << shift;
        if (v >= unit && v % unit == 0) {
            snprintf(buf, len, "%" PRIu64 "%c", v >> shift, units[i]);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64, v);
}

void fmt_duration(char *buf, size_t len, uint64_t ms)
{
    static const struct {
        uint64_t ms;
        const char *u;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
    if (ms == 0) {
        snprintf(buf, len, "0s");
        return;
    }
    for (size_t i = 0; i < 4; i++) {
        if (ms % units[i].ms == 0) {
            snprintf(buf, len, "%" PRIu64 "%s", ms / units[i].ms, units[i].u);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64 "ms", ms);
}
