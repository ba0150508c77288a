/* RFC 9113 §8 request checks (h2_check.h): the rules nghttp2 1.52 applies when its HTTP
 * messaging is on (nghttp2_http_on_header, nghttp2_http_on_request_headers, the
 * content-length bookkeeping), done here on the fields the codec reads anyway. Bytes from
 * HPACK's static table are not looked at; the others are classified with one table. */
#include "h2/h2_check.h"

#include <string.h>

enum { C_NAME = 1, C_TOKEN = 2, C_VALUE = 4, C_PATH = 8, C_AUTH = 16, C_SCHEME = 32 };

/* C_NAME: lower-case tchar (RFC 9110 §5.6.2); C_TOKEN: tchar; C_VALUE: HTAB, SP..'~',
   0x80..0xff; C_PATH: '!'..'~', 0x80..0xff; C_AUTH: ALPHA DIGIT -._~!$&'()*+,;=:[]@%;
   C_SCHEME: ALPHA DIGIT + - . */
static const uint8_t cls[256] = {
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x04, 0x1f, 0x0c, 0x0f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1c, 0x1c, 0x1f, 0x3f, 0x1c, 0x3f, 0x3f, 0x0c,
    0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x1c, 0x1c, 0x0c, 0x1c, 0x0c, 0x0c,
    0x1c, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e,
    0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x1c, 0x0c, 0x1c, 0x0f, 0x1f,
    0x0f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f,
    0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x0c, 0x0f, 0x0c, 0x1f, 0x00,
    0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c,
    0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c,
    0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c,
    0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c,
    0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c,
    0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c,
    0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c,
    0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c, 0x0c,
};

/* Every byte of class c? Branch-free: one AND per byte, one test at the end. */
static bool all(const uint8_t *p, size_t n, uint8_t c)
{
    uint8_t acc = c;
    for (size_t i = 0; i < n; i++) acc &= cls[p[i]];
    return acc == c;
}

bool fy__h2_valid_name(const uint8_t *p, size_t n)
{
    if (n && p[0] == ':') p++, n--;
    return n && all(p, n, C_NAME);
}

bool fy__h2_valid_value(const uint8_t *p, size_t n)
{
    if (n == 0) return true;
    if (p[0] == ' ' || p[0] == '\t' || p[n - 1] == ' ' || p[n - 1] == '\t') return false;
    return all(p, n, C_VALUE);
}

bool fy__h2_valid_method(const uint8_t *p, size_t n)
{
    return n && all(p, n, C_TOKEN);
}

bool fy__h2_valid_path(const uint8_t *p, size_t n)
{
    return all(p, n, C_PATH);
}

bool fy__h2_valid_authority(const uint8_t *p, size_t n)
{
    return all(p, n, C_AUTH);
}

bool fy__h2_valid_scheme(const uint8_t *p, size_t n)
{
    if (n == 0 || !((p[0] | 0x20) >= 'a' && (p[0] | 0x20) <= 'z')) return false;
    return all(p + 1, n - 1, C_SCHEME);
}

static bool eq(const uint8_t *p, size_t n, const char *lit, size_t ln)
{
    return n == ln && memcmp(p, lit, ln) == 0;
}

static bool ieq(const uint8_t *p, size_t n, const char *lit, size_t ln)
{
    if (n != ln) return false;
    for (size_t i = 0; i < n; i++)
        if ((p[i] | 0x20) != (uint8_t)lit[i]) return false;
    return true;
}

/* A pseudo-header seen once, with a value (nghttp2: check_pseudo_header) */
static int once(fy_h2_check_t *k, uint16_t flag, size_t vlen)
{
    if ((k->flags & flag) || vlen == 0) return -1;
    k->flags |= flag;
    return 0;
}

static int pseudo(fy_h2_check_t *k, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl,
                  bool vstatic)
{
    if (k->flags & FY_H2K_REGULAR) return -1; /* §8.3: pseudo-headers come first */
    switch (nl) {
    case 5: /* :path */
        if (!eq(n, nl, ":path", 5) || once(k, FY_H2K_PATH, vl) < 0) return -1;
        if (!vstatic && !fy__h2_valid_path(v, vl)) return -1;
        if (v[0] == '/')
            k->flags |= FY_H2K_PATH_SLASH;
        else if (vl == 1 && v[0] == '*')
            k->flags |= FY_H2K_PATH_STAR;
        return 0;
    case 7:
        if (eq(n, nl, ":method", 7)) {
            if (once(k, FY_H2K_METHOD, vl) < 0) return -1;
            if (vstatic) return 0; /* HPACK's static table has GET and POST */
            if (!fy__h2_valid_method(v, vl)) return -1;
            if (eq(v, vl, "CONNECT", 7))
                k->flags |= FY_H2K_CONNECT;
            else if (eq(v, vl, "OPTIONS", 7))
                k->flags |= FY_H2K_OPTIONS;
            return 0;
        }
        if (eq(n, nl, ":scheme", 7)) {
            if (once(k, FY_H2K_SCHEME, vl) < 0) return -1;
            if (vstatic) { /* HPACK's static table has http and https */
                k->flags |= FY_H2K_HTTP;
                return 0;
            }
            if (!fy__h2_valid_scheme(v, vl)) return -1;
            if (ieq(v, vl, "http", 4) || ieq(v, vl, "https", 5)) k->flags |= FY_H2K_HTTP;
            return 0;
        }
        return -1;
    case 9: /* :protocol (RFC 8441; SETTINGS_ENABLE_CONNECT_PROTOCOL is always sent) */
        if (!eq(n, nl, ":protocol", 9) || once(k, FY_H2K_PROTOCOL, vl) < 0) return -1;
        return vstatic || fy__h2_valid_value(v, vl) ? 0 : -1;
    case 10: /* :authority */
        if (!eq(n, nl, ":authority", 10) || once(k, FY_H2K_AUTHORITY, vl) < 0) return -1;
        return vstatic || fy__h2_valid_authority(v, vl) ? 0 : -1;
    default:
        return -1; /* unknown pseudo-header */
    }
}

static int64_t parse_uint(const uint8_t *p, size_t n)
{
    if (n == 0) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

int fy__h2_check_field(fy_h2_check_t *k, const uint8_t *n, size_t nl, bool nstatic,
                       const uint8_t *v, size_t vl, bool vstatic, bool trailer)
{
    if (!nstatic && !fy__h2_valid_name(n, nl)) return -1; /* also: no upper case (§8.2.1) */
    if (n[0] == ':') return trailer ? -1 : pseudo(k, n, nl, v, vl, vstatic);
    if (!vstatic && !fy__h2_valid_value(v, vl)) return -1;
    k->flags |= FY_H2K_REGULAR;
    switch (nl) {
    case 2: /* te: only "trailers" (§8.2.2) */
        return eq(n, nl, "te", 2) && !ieq(v, vl, "trailers", 8) ? -1 : 0;
    case 4:
        if (eq(n, nl, "host", 4)) {
            if ((k->flags & FY_H2K_HOST) || vl == 0) return -1;
            k->flags |= FY_H2K_HOST;
            return vstatic || fy__h2_valid_authority(v, vl) ? 0 : -1;
        }
        return 0;
    case 7: /* connection-specific fields (§8.2.2) */
        return eq(n, nl, "upgrade", 7) ? -1 : 0;
    case 10:
        return eq(n, nl, "connection", 10) || eq(n, nl, "keep-alive", 10) ? -1 : 0;
    case 14:
        if (eq(n, nl, "content-length", 14)) {
            if (k->flags & FY_H2K_CL) return -1;
            k->cl = parse_uint(v, vl);
            if (k->cl < 0) return -1;
            k->flags |= FY_H2K_CL;
        }
        return 0;
    case 16:
        return eq(n, nl, "proxy-connection", 16) ? -1 : 0;
    case 17:
        return eq(n, nl, "transfer-encoding", 17) ? -1 : 0;
    default:
        return 0;
    }
}

bool fy__h2_check_head(const fy_h2_check_t *k)
{
    uint16_t f = k->flags;
    if ((f & FY_H2K_CONNECT) && !(f & FY_H2K_PROTOCOL)) {
        /* §8.5: CONNECT has :authority and neither :scheme nor :path */
        return (f & FY_H2K_AUTHORITY) && !(f & (FY_H2K_SCHEME | FY_H2K_PATH));
    }
    const uint16_t req = FY_H2K_METHOD | FY_H2K_SCHEME | FY_H2K_PATH;
    if ((f & req) != req || !(f & (FY_H2K_AUTHORITY | FY_H2K_HOST))) return false;
    /* RFC 8441 §4: :protocol only with CONNECT and :authority */
    if ((f & FY_H2K_PROTOCOL) && (!(f & FY_H2K_CONNECT) || !(f & FY_H2K_AUTHORITY))) return false;
    /* §8.3.1: http(s) paths are origin-form, or "*" for OPTIONS */
    if ((f & FY_H2K_HTTP) && !(f & FY_H2K_PATH_SLASH) &&
        !((f & FY_H2K_OPTIONS) && (f & FY_H2K_PATH_STAR)))
        return false;
    return true;
}

bool fy__h2_check_data(fy_h2_check_t *k, size_t n)
{
    k->recv += n;
    return !(k->flags & FY_H2K_CL) || k->recv <= (uint64_t)k->cl;
}

bool fy__h2_check_end(const fy_h2_check_t *k)
{
    return !(k->flags & FY_H2K_CL) || k->recv == (uint64_t)k->cl;
}
