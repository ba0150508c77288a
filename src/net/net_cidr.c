/* Short CIDR lists: parse and linear match (see net_cidr.h). */
#include "net/net_cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

int fy_net_cidr_parse(const char *s, fy_net_cidr_t *c)
{
    char buf[64];
    const char *slash = strchr(s, '/');
    size_t hl = slash ? (size_t)(slash - s) : strlen(s);
    if (hl == 0 || hl >= sizeof buf) return -1;
    memcpy(buf, s, hl);
    buf[hl] = '\0';
    memset(c, 0, sizeof *c);
    int max;
    if (inet_pton(AF_INET, buf, c->addr) == 1) {
        c->family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, buf, c->addr) == 1) {
        c->family = AF_INET6;
        max = 128;
    } else {
        return -1;
    }
    c->bits = max;
    if (slash) {
        const char *b = slash + 1;
        if (!*b || strlen(b) > 3 || strspn(b, "0123456789") != strlen(b)) return -1;
        long v = strtol(b, NULL, 10);
        if (v > max) return -1;
        c->bits = (int)v;
    }
    return 0;
}

bool fy_net_cidr_match(const fy_net_cidr_t *c, size_t n, const struct sockaddr *addr)
{
    const uint8_t *a;
    int fam = addr->sa_family;
    uint8_t mapped[4];
    if (fam == AF_INET) {
        a = (const uint8_t *)&((const struct sockaddr_in *)addr)->sin_addr;
    } else if (fam == AF_INET6) {
        a = ((const struct sockaddr_in6 *)addr)->sin6_addr.s6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)addr)->sin6_addr)) {
            memcpy(mapped, a + 12, 4);
            a = mapped;
            fam = AF_INET;
        }
    } else {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (c[i].family != fam) continue;
        int bits = c[i].bits, k = 0;
        for (; bits >= 8; bits -= 8, k++)
            if (a[k] != c[i].addr[k]) break;
        if (bits >= 8) continue;
        if (bits == 0 || ((a[k] ^ c[i].addr[k]) & (uint8_t)(0xff << (8 - bits))) == 0) return true;
    }
    return false;
}
