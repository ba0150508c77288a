/* PROXY protocol v1/v2. */
#include "l4/l4_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t v2sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                  0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

size_t fy_l4_proxy_build(int version, const struct sockaddr *src, const struct sockaddr *dst,
                         uint8_t *out)
{
    bool ok = src->sa_family == dst->sa_family &&
              (src->sa_family == AF_INET || src->sa_family == AF_INET6);
    bool v6 = ok && src->sa_family == AF_INET6;
    const struct sockaddr_in *s4 = (const void *)src, *d4 = (const void *)dst;
    const struct sockaddr_in6 *s6 = (const void *)src, *d6 = (const void *)dst;
    if (version == 1) {
        if (!ok) {
            memcpy(out, "PROXY UNKNOWN\r\n", 15);
            return 15;
        }
        char sa[INET6_ADDRSTRLEN], da[INET6_ADDRSTRLEN];
        inet_ntop(src->sa_family, v6 ? (const void *)&s6->sin6_addr : (const void *)&s4->sin_addr,
                  sa, sizeof sa);
        inet_ntop(dst->sa_family, v6 ? (const void *)&d6->sin6_addr : (const void *)&d4->sin_addr,
                  da, sizeof da);
        int n = snprintf((char *)out, FY_L4_PROXY_MAX, "PROXY %s %s %s %u %u\r\n",
                         v6 ? "TCP6" : "TCP4", sa, da, ntohs(v6 ? s6->sin6_port : s4->sin_port),
                         ntohs(v6 ? d6->sin6_port : d4->sin_port));
        return (size_t)n;
    }
    memcpy(out, v2sig, 12);
    if (!ok) {
        out[12] = 0x20; /* v2, LOCAL */
        out[13] = 0x00;
        out[14] = out[15] = 0;
        return 16;
    }
    out[12] = 0x21; /* v2, PROXY */
    size_t o = 16;
    if (v6) {
        out[13] = 0x21; /* TCP over IPv6 */
        memcpy(out + o, &s6->sin6_addr, 16);
        memcpy(out + o + 16, &d6->sin6_addr, 16);
        memcpy(out + o + 32, &s6->sin6_port, 2);
        memcpy(out + o + 34, &d6->sin6_port, 2);
        o += 36;
    } else {
        out[13] = 0x11; /* TCP over IPv4 */
        memcpy(out + o, &s4->sin_addr, 4);
        memcpy(out + o + 4, &d4->sin_addr, 4);
        memcpy(out + o + 8, &s4->sin_port, 2);
        memcpy(out + o + 10, &d4->sin_port, 2);
        o += 12;
    }
    out[14] = (uint8_t)((o - 16) >> 8);
    out[15] = (uint8_t)(o - 16);
    return o;
}

static bool v1_port(const char *s, uint16_t *p)
{
    size_t l = strlen(s);
    if (l == 0 || l > 5 || strspn(s, "0123456789") != l || (s[0] == '0' && l > 1)) return false;
    long v = strtol(s, NULL, 10);
    if (v > 65535) return false;
    *p = htons((uint16_t)v);
    return true;
}

static int parse_v1(const uint8_t *b, size_t len, struct sockaddr_storage *src,
                    struct sockaddr_storage *dst, bool *has_addr)
{
    /* "PROXY " ... "\r\n", at most 107 bytes */
    size_t lim = len < 107 ? len : 107, e;
    for (e = 0; e + 1 < lim; e++)
        if (b[e] == '\r') break;
    if (e + 1 >= lim) return len >= 107 ? -1 : 0;
    if (b[e + 1] != '\n') return -1;
    char line[108];
    memcpy(line, b, e);
    line[e] = '\0';
    char *f[6];
    int nf = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " ", &save); t && nf < 6; t = strtok_r(NULL, " ", &save))
        f[nf++] = t;
    if (nf < 2 || strcmp(f[0], "PROXY")) return -1;
    *has_addr = false;
    if (!strcmp(f[1], "UNKNOWN")) return (int)(e + 2);
    if (nf != 6) return -1;
    int fam = !strcmp(f[1], "TCP4") ? AF_INET : !strcmp(f[1], "TCP6") ? AF_INET6 : 0;
    if (!fam) return -1;
    memset(src, 0, sizeof *src);
    memset(dst, 0, sizeof *dst);
    uint16_t sp, dp;
    if (!v1_port(f[4], &sp) || !v1_port(f[5], &dp)) return -1;
    if (fam == AF_INET) {
        struct sockaddr_in *s = (void *)src, *d = (void *)dst;
        s->sin_family = d->sin_family = AF_INET;
        if (inet_pton(AF_INET, f[2], &s->sin_addr) != 1 ||
            inet_pton(AF_INET, f[3], &d->sin_addr) != 1)
            return -1;
        s->sin_port = sp;
        d->sin_port = dp;
    } else {
        struct sockaddr_in6 *s = (void *)src, *d = (void *)dst;
        s->sin6_family = d->sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, f[2], &s->sin6_addr) != 1 ||
            inet_pton(AF_INET6, f[3], &d->sin6_addr) != 1)
            return -1;
        s->sin6_port = sp;
        d->sin6_port = dp;
    }
    *has_addr = true;
    return (int)(e + 2);
}

int fy_l4_proxy_parse(const uint8_t *b, size_t len, struct sockaddr_storage *src,
                      struct sockaddr_storage *dst, bool *has_addr)
{
    *has_addr = false;
    size_t cmp = len < 12 ? len : 12;
    if (len && b[0] == 'P') {
        if (memcmp(b, "PROXY ", len < 6 ? len : 6)) return -1;
        return parse_v1(b, len, src, dst, has_addr);
    }
    if (memcmp(b, v2sig, cmp)) return -1;
    if (len < 16) return 0;
    if ((b[12] >> 4) != 2) return -1;
    size_t al = (size_t)b[14] << 8 | b[15];
    if (16 + al > FY_L4_PROXY_MAX) return -1;
    if (len < 16 + al) return 0;
    int cmd = b[12] & 0xf;
    if (cmd == 0) return (int)(16 + al); /* LOCAL: keep the real addresses */
    if (cmd != 1) return -1;
    const uint8_t *a = b + 16;
    memset(src, 0, sizeof *src);
    memset(dst, 0, sizeof *dst);
    if (b[13] == 0x11 && al >= 12) {
        struct sockaddr_in *s = (void *)src, *d = (void *)dst;
        s->sin_family = d->sin_family = AF_INET;
        memcpy(&s->sin_addr, a, 4);
        memcpy(&d->sin_addr, a + 4, 4);
        memcpy(&s->sin_port, a + 8, 2);
        memcpy(&d->sin_port, a + 10, 2);
        *has_addr = true;
    } else if (b[13] == 0x21 && al >= 36) {
        struct sockaddr_in6 *s = (void *)src, *d = (void *)dst;
        s->sin6_family = d->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, a, 16);
        memcpy(&d->sin6_addr, a + 16, 16);
        memcpy(&s->sin6_port, a + 32, 2);
        memcpy(&d->sin6_port, a + 34, 2);
        *has_addr = true;
    } else if ((b[13] & 0xf0) == 0x10 || (b[13] & 0xf0) == 0x20) {
        if (b[13] == 0x11 || b[13] == 0x21) return -1; /* too short for its family */
    }
    return (int)(16 + al);
}
