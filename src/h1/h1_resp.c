/* Strict HTTP/1.1 response head parser; the contract is in h1_resp.h.
 *
 * It works like the request parser in h1_parse.c, in two steps. find_head_end() searches for
 * the empty line ending the head, resuming where the previous call stopped (r->scanned), and
 * enforces max_header_bytes; only a complete head is validated, in one pass, by parse_head().
 * Because the head is known to end with '\n', and no byte class (h1_fields.h) contains '\n',
 * the per-byte loops need no bounds checks: they stop at or before the final LF, and p[1] is
 * read only after *p == '\r', which is never the last byte.
 *
 * The byte classes, the field-line syntax and the framing and Connection headers follow the
 * same rules as for requests and come from h1_fields.h. The loops here are plain table walks,
 * not the vectorised skippers of h1_parse.c: a response head is parsed once per exchange, and
 * the head search, which sees every byte of a slow origin, is memchr.
 */
#include "h1/h1_resp.h"
#include "h1/h1_fields.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

typedef const unsigned char uchar;

void fy_h1_resp_init(fy_h1_resp_t *r, fy_h1_header_t *headers)
{
    memset(r, 0, sizeof *r);
    r->headers = headers;
}

/* ---- head search ---- */

/* Searches buf[0..len) for the empty line ending the head, resuming at r->scanned (just past
 * the last LF seen, or the end of the bytes searched). Whether a line is empty is decided from
 * the bytes before its LF, which are always present, so there is no phase to remember and
 * r->line_start stays 0. An empty first line ends the head at once (parse_head() rejects it):
 * leading empty lines are tolerated only before requests (RFC 9112 §2.2).
 * Only bytes below max_header_bytes are searched, so the outcome does not depend on how the
 * bytes were split across calls. */
static int find_head_end(fy_h1_resp_t *r, const char *buf, size_t len, const fy_h1_limits_t *lim)
{
    size_t maxh = lim->max_header_bytes < INT_MAX ? lim->max_header_bytes : INT_MAX;
    size_t end = len < maxh ? len : maxh;
    if (r->scanned > len) r->scanned = 0; /* not the same buffer grown: start over */
    size_t pos = r->scanned;
    size_t head = fy__h1_find_empty_line(buf, &pos, end);
    if (head) return (int)head;
    r->scanned = pos;
    return len >= maxh ? FY_H1_EHDR_TOO_LARGE : FY_H1_INCOMPLETE;
}

/* ---- head validation ---- */

/* Validates the complete head buf[0..head_len) and fills r. */
static int parse_head(fy_h1_resp_t *r, const char *buf, size_t head_len, bool head_request,
                      const fy_h1_limits_t *lim)
{
    uchar *p = (uchar *)buf, *end = p + head_len;
    struct fy__h1_framing st = {0};
    int rc;

    r->status = 0;
    r->reason.p = NULL;
    r->reason.len = 0;
    r->minor_version = 0;
    r->nheaders = 0;
    r->body_kind = FY_H1_RESP_NONE;
    r->content_length = 0;
    r->conn_close = r->conn_upgrade = false;

    /* status-line = HTTP-version SP status-code SP [ reason-phrase ]; HTTP-name is
     * case-sensitive (RFC 9112 §2.3). The head ends with LF, so 9 bytes can be read only if
     * there are at least 10. */
    if (end - p < 10 || memcmp(p, "HTTP/", 5) != 0 || !(fy__h1_cls[p[5]] & FY__H1_C_DIGIT) ||
        p[6] != '.' || !(fy__h1_cls[p[7]] & FY__H1_C_DIGIT) || p[8] != ' ')
        return FY_H1_EBADREQ;
    if (p[5] != '1' || p[7] > '1') return FY_H1_EVERSION;
    r->minor_version = p[7] - '0';
    p += 9;
    if (*p < '1' || *p > '9' || !(fy__h1_cls[p[1]] & FY__H1_C_DIGIT) ||
        !(fy__h1_cls[p[2]] & FY__H1_C_DIGIT))
        return FY_H1_EBADREQ;
    r->status = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
    p += 3;
    r->reason.p = (const char *)p;
    if (*p == ' ') { /* a missing SP + reason-phrase is tolerated: origins do send it */
        uchar *s = ++p;
        while (fy__h1_cls[*p] & FY__H1_C_VALUE) p++;
        r->reason.p = (const char *)s;
        r->reason.len = (size_t)(p - s);
    }
    if (!(p = fy__h1_eol(p))) return FY_H1_EBADREQ;

    /* *( field-line CRLF ) CRLF */
    /* whitespace after the start-line, RFC 9112 §2.2 */
    if (fy__h1_is_ows(*p)) return FY_H1_EBADREQ;
    while ((rc = fy__h1_line_kind(p)) == 0) {
        if (r->nheaders == lim->max_headers) return FY_H1_ETOO_MANY_HDRS;
        fy_h1_header_t *h = &r->headers[r->nheaders++];
        if ((rc = fy__h1_parse_field_line(&p, end, h, fy__h1_skip_tchar, fy__h1_skip_value)) < 0)
            return rc;
        /* the framing headers are checked even when the status or the method means no body */
        if ((rc = fy__h1_framing_field(&st, h)) < 0) return rc;
    }
    if (rc < 0) return rc;

    /* Framing errors are errors even for a response without a body: a message with both is
     * a smuggling attempt or a broken origin either way (RFC 9112 §6.1), and Transfer-Encoding
     * in HTTP/1.0 means faulty framing. */
    if ((rc = fy__h1_framing_check(&st, r->minor_version)) < 0) return rc;
    /* RFC 9112 §6.3 items 1 and 4-8, from the client's side */
    if (head_request || r->status < 200 || r->status == 204 || r->status == 304) {
        r->body_kind = FY_H1_RESP_NONE;
    } else if (st.have_te) {
        r->body_kind = FY_H1_RESP_CHUNKED;
    } else if (st.have_cl) {
        r->body_kind = FY_H1_RESP_LENGTH;
        r->content_length = st.cl;
    } else {
        r->body_kind = FY_H1_RESP_CLOSE;
    }
    r->conn_close = fy__h1_conn_close(&st, r->minor_version);
    /* only a 101 switches: origins (Apache with h2) advertise "Upgrade" on ordinary responses */
    r->conn_upgrade = st.tok_upgrade && r->status == 101;
    return (int)head_len;
}

int fy_h1_parse_response(fy_h1_resp_t *r, const char *buf, size_t len, bool head_request,
                         const fy_h1_limits_t *limits)
{
    int rc = find_head_end(r, buf, len, limits);
    return rc < 0 ? rc : parse_head(r, buf, (size_t)rc, head_request, limits);
}

/* ---- field-name case on the way out ---- */

/* The canonical spelling of a lowercase name whose registered spelling is not
 * "Each-Word-Capitalised" (RFC 9110 §8.8.3, RFC 6455 §11.3, the IANA field name registry), or
 * NULL. A switch on the length leaves at most two candidates, and each memcmp has a constant
 * size, so the compiler makes it a few word compares instead of a call. */
#define IRREGULAR(lower, canon)                                                                    \
    if (memcmp(n, lower, sizeof lower - 1) == 0) return canon
static const char *irregular(const char *n, size_t len)
{
    switch (len) {
    case 2:
        IRREGULAR("te", "TE");
        break;
    case 3:
        IRREGULAR("dnt", "DNT");
        break;
    case 4:
        IRREGULAR("etag", "ETag");
        break;
    case 11:
        IRREGULAR("content-md5", "Content-MD5");
        break;
    case 15:
        IRREGULAR("x-ua-compatible", "X-UA-Compatible");
        break;
    case 16:
        IRREGULAR("www-authenticate", "WWW-Authenticate");
        IRREGULAR("x-xss-protection", "X-XSS-Protection");
        break;
    case 20:
        IRREGULAR("sec-websocket-accept", "Sec-WebSocket-Accept");
        break;
    case 21:
        IRREGULAR("sec-websocket-version", "Sec-WebSocket-Version");
        break;
    case 22:
        IRREGULAR("sec-websocket-protocol", "Sec-WebSocket-Protocol");
        IRREGULAR("x-dns-prefetch-control", "X-DNS-Prefetch-Control");
        break;
    case 24:
        IRREGULAR("sec-websocket-extensions", "Sec-WebSocket-Extensions");
        break;
    }
    return NULL;
}
#undef IRREGULAR

/* Eight bytes at a time (names are tokens: ASCII, so no byte's sum below carries into the
 * next): the high bit of each byte in [lo, hi], and of each byte equal to c. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fy_h1_put_field_name reads names as little-endian words"
#endif
#define ONES 0x0101010101010101ULL
#define HIGH 0x8080808080808080ULL
static inline uint64_t bytes_in(uint64_t x, unsigned lo, unsigned hi)
{
    return (x + ONES * (0x80 - lo)) & ~(x + ONES * (0x7f - hi)) & ~x & HIGH;
}

static inline uint64_t bytes_eq(uint64_t x, unsigned c)
{
    uint64_t y = x ^ (ONES * c);
    return ~(((y & ~HIGH) + ~HIGH) | y) & HIGH;
}

static inline uint64_t word_at(const char *s, size_t i, size_t len)
{
    uint64_t x; /* the 8 bytes at i, or, near the end, the last 8 (they overlap the ones before) */
    memcpy(&x, s + (i + 8 <= len ? i : len - 8), 8);
    return x;
}

static inline void capitalise(char *c)
{
    if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 32);
}

/* fy_h1_put_field_name past its inline fast path (h1_resp.h) */
char *fy__h1_put_field_name_case(char *p, const char *name, size_t len)
{
    const char *c;
    if (len < 8) { /* short names byte by byte */
        memcpy(p, name, len);
        for (size_t i = 0; i < len; i++)
            if (name[i] >= 'A' && name[i] <= 'Z') return p + len; /* someone chose this case */
        if ((c = irregular(name, len))) {
            memcpy(p, c, len);
            return p + len;
        }
        capitalise(p);
        for (size_t i = 0; i + 1 < len; i++)
            if (name[i] == '-') capitalise(p + i + 1);
        return p + len;
    }
    /* the first word decides most names (a configured or an h1 origin's spelling) */
    uint64_t w0 = word_at(name, 0, len);
    memcpy(p, name, len);
    if (bytes_in(w0, 'A', 'Z')) return p + len;
    for (size_t i = 8; i < len; i += 8)
        if (bytes_in(word_at(name, i, len), 'A', 'Z')) return p + len;
    if ((c = irregular(name, len))) {
        memcpy(p, c, len);
        return p + len;
    }
    capitalise(p); /* Each-Word-Capitalised: the first letter and each after a '-' */
    for (size_t i = 0; i < len; i += 8) {
        size_t at = i + 8 <= len ? i : len - 8;
        for (uint64_t d = bytes_eq(word_at(name, i, len), '-'); d; d &= d - 1) {
            size_t k = at + (size_t)__builtin_ctzll(d) / 8 + 1;
            if (k < len) capitalise(p + k); /* twice where words overlap: no harm */
        }
    }
    return p + len;
}
