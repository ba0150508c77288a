/* The admin API's parsing of peer bytes: request targets and server indexes. */
#include "ops/admin.h"

#include <string.h>

int fy_admin_split_target(const char *target, size_t len, char *buf, const char **seg, int max,
                          bool *dry_run)
{
    *dry_run = false;
    if (len == 0 || len > FY_ADMIN_MAX_TARGET || target[0] != '/') return -1;
    memcpy(buf, target, len);
    buf[len] = '\0';
    if (memchr(buf, '\0', len)) return -1;
    char *q = strchr(buf, '?');
    if (q) {
        *q++ = '\0';
        for (char *p = q; *p;) {
            char *amp = strchr(p, '&');
            if (amp) *amp = '\0';
            if (!strcmp(p, "dry-run=1") || !strcmp(p, "dry-run=true") || !strcmp(p, "dry-run"))
                *dry_run = true;
            if (!amp) break;
            p = amp + 1;
        }
    }
    int n = 0;
    char *p = buf + 1;
    if (!*p) return 0;
    for (;;) {
        char *slash = strchr(p, '/');
        if (slash) *slash = '\0';
        if (!*p || n == max) return -1;
        for (const unsigned char *c = (const unsigned char *)p; *c; c++)
            if (*c == '%' || *c <= 0x20 || *c >= 0x7f) return -1;
        seg[n++] = p;
        if (!slash) return n;
        p = slash + 1;
    }
}

int fy_admin_parse_index(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 3 || (n > 1 && s[0] == '0')) return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}
