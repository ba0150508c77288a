/* ClientHello peek (RFC 8446 §4.1.2, RFC 6066 §3, RFC 7301). Strict: every length must fit
 * inside its parent; anything else is FY_L4_HELLO_EBAD. */
#include "l4/l4_hello.h"

#include <ctype.h>
#include <string.h>

static unsigned get16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

static int parse_sni(const uint8_t *p, size_t len, fy_l4_hello_t *out)
{
    if (len < 2 || get16(p) != len - 2) return FY_L4_HELLO_EBAD;
    p += 2, len -= 2;
    while (len) {
        if (len < 3) return FY_L4_HELLO_EBAD;
        unsigned type = p[0], nl = get16(p + 1);
        if (nl > len - 3) return FY_L4_HELLO_EBAD;
        if (type == 0 && out->sni_len == 0) {
            if (nl == 0 || nl > FY_L4_SNI_MAX) return FY_L4_HELLO_EBAD;
            for (unsigned i = 0; i < nl; i++) {
                unsigned char c = p[3 + i];
                if (c <= 0x20 || c >= 0x7f) return FY_L4_HELLO_EBAD;
                out->sni[i] = (char)tolower(c);
            }
            out->sni[nl] = '\0';
            out->sni_len = nl;
        }
        p += 3 + nl, len -= 3 + nl;
    }
    return 0;
}

static int parse_alpn(const uint8_t *p, size_t len, fy_l4_hello_t *out)
{
    if (len < 2 || get16(p) != len - 2) return FY_L4_HELLO_EBAD;
    p += 2, len -= 2;
    size_t o = 0;
    while (len) {
        size_t pl = p[0];
        if (pl == 0 || pl > len - 1) return FY_L4_HELLO_EBAD;
        if (o + 1 + pl <= sizeof out->alpn) {
            memcpy(out->alpn + o, p, 1 + pl);
            o += 1 + pl;
        }
        p += 1 + pl, len -= 1 + pl;
    }
    out->alpn_len = o;
    return 0;
}

/* The body of a ClientHello message (after the 4-byte handshake header). */
static int parse_body(const uint8_t *p, size_t len, fy_l4_hello_t *out)
{
    memset(out, 0, sizeof *out);
    if (len < 2 + 32 + 1) return FY_L4_HELLO_EBAD;
    p += 34, len -= 34; /* legacy_version, random */
    size_t sid = p[0];
    if (sid > 32 || sid + 1 > len) return FY_L4_HELLO_EBAD;
    p += 1 + sid, len -= 1 + sid;
    if (len < 2) return FY_L4_HELLO_EBAD;
    size_t cs = get16(p);
    if (cs < 2 || (cs & 1) || cs + 2 > len) return FY_L4_HELLO_EBAD;
    p += 2 + cs, len -= 2 + cs;
    if (len < 1) return FY_L4_HELLO_EBAD;
    size_t cm = p[0];
    if (cm < 1 || cm + 1 > len) return FY_L4_HELLO_EBAD;
    p += 1 + cm, len -= 1 + cm;
    if (len == 0) return 1; /* no extensions: no SNI */
    if (len < 2 || get16(p) != len - 2) return FY_L4_HELLO_EBAD;
    p += 2, len -= 2;
    while (len) {
        if (len < 4) return FY_L4_HELLO_EBAD;
        unsigned type = get16(p), el = get16(p + 2);
        if (el > len - 4) return FY_L4_HELLO_EBAD;
        int r = 0;
        if (type == 0)
            r = parse_sni(p + 4, el, out);
        else if (type == 16)
            r = parse_alpn(p + 4, el, out);
        if (r < 0) return r;
        p += 4 + el, len -= 4 + el;
    }
    return 1;
}

int fy_l4_hello_parse_handshake(const uint8_t *hs, size_t len, size_t max, fy_l4_hello_t *out)
{
    if (len >= 1 && hs[0] != 1) return FY_L4_HELLO_EBAD; /* client_hello */
    if (len < 4) return FY_L4_HELLO_NEED_MORE;
    size_t ml = (size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3];
    if (ml + 4 > max) return FY_L4_HELLO_ELIMIT;
    if (len < ml + 4) return FY_L4_HELLO_NEED_MORE;
    return parse_body(hs + 4, ml, out);
}

int fy_l4_hello_parse_records(const uint8_t *buf, size_t len, size_t max, uint8_t *scratch,
                              fy_l4_hello_t *out)
{
    size_t o = 0, hl = 0;
    if (len > max) len = max;
    while (o < len) {
        if (buf[o] != 22) return FY_L4_HELLO_EBAD; /* handshake record */
        if (len - o >= 2 && buf[o + 1] != 3) return FY_L4_HELLO_EBAD;
        if (len - o < 5) break;
        size_t rl = get16(buf + o + 3);
        if (rl == 0 || rl > 16384) return FY_L4_HELLO_EBAD;
        size_t avail = len - o - 5 < rl ? len - o - 5 : rl;
        memcpy(scratch + hl, buf + o + 5, avail);
        hl += avail;
        int r = fy_l4_hello_parse_handshake(scratch, hl, max, out);
        if (r != FY_L4_HELLO_NEED_MORE) return r;
        if (avail < rl) break;
        o += 5 + rl;
    }
    /* incomplete: would the next byte still be inside the bound? */
    if (len >= max) return FY_L4_HELLO_ELIMIT;
    return FY_L4_HELLO_NEED_MORE;
}
