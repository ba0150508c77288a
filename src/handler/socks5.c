/* SOCKS5 parser. */
#include "handler/socks5.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int fy_socks5_parse(int stage, const unsigned char *p, size_t len, fy_socks5_msg_t *m)
{
    if (len < 2) return 0;
    if (stage == FY_SOCKS5_GREETING) {
        if (p[0] != 5 || p[1] == 0) return FY_SOCKS5_EBAD;
        size_t n = p[1];
        if (len < 2 + n) return 0;
        m->methods = 0;
        for (size_t i = 0; i < n; i++) {
            if (p[2 + i] == 0) m->methods |= FY_SOCKS5_M_NOAUTH;
            if (p[2 + i] == 2) m->methods |= FY_SOCKS5_M_USERPASS;
        }
        return (int)(2 + n);
    }
    if (stage == FY_SOCKS5_AUTH) {
        if (p[0] != 1) return FY_SOCKS5_EBAD;
        size_t ul = p[1];
        if (len < 2 + ul + 1) return 0;
        size_t pl = p[2 + ul];
        if (len < 3 + ul + pl) return 0;
        memcpy(m->user, p + 2, ul);
        m->user[ul] = '\0';
        m->user_len = ul;
        memcpy(m->pass, p + 3 + ul, pl);
        m->pass[pl] = '\0';
        m->pass_len = pl;
        return (int)(3 + ul + pl);
    }
    if (stage != FY_SOCKS5_REQUEST) return FY_SOCKS5_EBAD;
    if (len < 4) return 0;
    if (p[0] != 5 || p[2] != 0) return FY_SOCKS5_EBAD;
    m->cmd = p[1];
    size_t need;
    switch (p[3]) {
    case 1: /* IPv4 */
        need = 4 + 4 + 2;
        if (len < need) return 0;
        if (!inet_ntop(AF_INET, p + 4, m->host, sizeof m->host)) return FY_SOCKS5_EBAD;
        break;
    case 4: /* IPv6 */
        need = 4 + 16 + 2;
        if (len < need) return 0;
        if (!inet_ntop(AF_INET6, p + 4, m->host, sizeof m->host)) return FY_SOCKS5_EBAD;
        break;
    case 3: { /* domain name */
        if (len < 5) return 0;
        size_t nl = p[4];
        need = 5 + nl + 2;
        if (len < need) return 0;
        if (nl == 0) return FY_SOCKS5_EBAD;
        for (size_t i = 0; i < nl; i++) {
            unsigned char c = p[5 + i];
            if (!(isalnum(c) || c == '.' || c == '-' || c == '_')) return FY_SOCKS5_EBAD;
            m->host[i] = (char)tolower(c);
        }
        m->host[nl] = '\0';
        break;
    }
    default:
        return FY_SOCKS5_EATYP;
    }
    m->port = p[need - 2] << 8 | p[need - 1];
    if (m->port == 0) return FY_SOCKS5_EBAD;
    return (int)need;
}
