/* Strict HTTP/1.1 response head parser; the contract is in h1_resp.h.
 *
 * It works like the request parser in h1_parse.c, in two steps. find_head_end() searches for
 * the empty line ending the head, resuming where the previous call stopped (r->scanned), and
 * enforces max_header_bytes; only a complete head is validated, in one pass, by parse_head().
 * Because the head is known to end with '\n', and no byte class below contains '\n', the
 * per-byte loops need no bounds checks: they stop at or before the final LF, and p[1] is read
 * only after *p == '\r', which is never the last byte.
 *
 * Nothing is shared with h1_parse.c (its helpers are static and it stays untouched); the byte
 * table is a copy of its table, and the loops are plain table walks: a response head is parsed
 * once per exchange, and the head search, which sees every byte of a slow origin, is memchr.
 */
#include "h1/h1_resp.h"

#include <limits.h>
#include <string.h>

enum {
    C_TCHAR = 1,  /* RFC 9110 tchar */
    C_VALUE = 2,  /* field-vchar, SP, HTAB, obs-text (also the reason-phrase bytes) */
    C_DIGIT = 64, /* DIGIT */
};

/* A copy of cls[] from h1_parse.c (whose test checks every entry against the grammar); only
 * the three classes above are used here. */
static const uint8_t cls[256] = {
    0,   0,   0,   0,   0,   0,   0,   0,   0,   34,  0,  0,  0,  0,  0,  0,  /* 0x00 */
    0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,  0,  0,  0,  0,  0,  /* 0x10 */
    34,  47,  6,   35,  47,  39,  47,  47,  46,  46,  47, 47, 46, 47, 47, 38, /* 0x20 */
    127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 38, 46, 38, 46, 38, 38, /* 0x30 */
    38,  63,  63,  63,  63,  63,  63,  47,  47,  47,  47, 47, 47, 47, 47, 47, /* 0x40 */
    47,  47,  47,  47,  47,  47,  47,  47,  47,  47,  47, 38, 6,  38, 39, 47, /* 0x50 */
    39,  63,  63,  63,  63,  63,  63,  47,  47,  47,  47, 47, 47, 47, 47, 47, /* 0x60 */
    47,  47,  47,  47,  47,  47,  47,  47,  47,  47,  47, 38, 39, 38, 47, 0,  /* 0x70 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0x80 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0x90 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xa0 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xb0 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xc0 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xd0 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xe0 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xf0 */
};

typedef const unsigned char uchar;

static inline bool is_ows(int c)
{
    return c == ' ' || c == '\t';
}

/* s[0..n) equals the lowercase literal lit[0..litn), case-insensitively. s holds token or
 * field-value bytes (no control byte but HTAB) and lit only lowercase letters and '-', so
 * c | 0x20 equals a byte of lit only if c matches it (see eq_lc in h1_parse.c). */
static bool eq_lc(const char *s, size_t n, const char *lit, size_t litn)
{
    if (n != litn) return false;
    for (size_t i = 0; i < n; i++)
        if (((uchar)s[i] | 0x20) != (uchar)lit[i]) return false;
    return true;
}

#define EQ_LIT(p, n, lit) eq_lc((p), (n), (lit), sizeof(lit) - 1)

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
    while (pos < end) {
        const char *nl = memchr(buf + pos, '\n', end - pos);
        if (!nl) {
            pos = end;
            break;
        }
        size_t p = (size_t)(nl - buf);
        if (p == 0 || buf[p - 1] == '\n' || (buf[p - 1] == '\r' && (p == 1 || buf[p - 2] == '\n')))
            return (int)(p + 1);
        pos = p + 1;
    }
    r->scanned = pos;
    return len >= maxh ? FY_H1_EHDR_TOO_LARGE : FY_H1_INCOMPLETE;
}

/* ---- head validation ---- */

/* Content-Length = 1#DIGIT; a list must repeat one value (RFC 9110 §8.6). Empty list elements
 * are refused: they have no business in a framing header. Same rules as for requests. */
static int parse_content_length(fy_h1_str_t v, uint64_t *out)
{
    uchar *p = (uchar *)v.p, *e = p + v.len;
    bool have = false;
    uint64_t val = 0;
    for (;;) {
        if (p == e || !(cls[*p] & C_DIGIT)) return FY_H1_EBADCL;
        uint64_t x = 0;
        for (; p < e && (cls[*p] & C_DIGIT); p++) {
            unsigned d = *p - '0';
            if (x > ((uint64_t)INT64_MAX - d) / 10) return FY_H1_EBADCL;
            x = x * 10 + d;
        }
        if (have && x != val) return FY_H1_EBADCL;
        val = x;
        have = true;
        while (p < e && is_ows(*p)) p++;
        if (p == e) break;
        if (*p++ != ',') return FY_H1_EBADCL;
        while (p < e && is_ows(*p)) p++;
    }
    *out = val;
    return 0;
}

struct head_state {
    bool have_cl, have_te, tok_close, tok_keep_alive, tok_upgrade;
    uint64_t cl;
};

/* Connection = #connection-option; empty list elements are allowed (RFC 9110 §5.6.1). */
static int parse_connection(struct head_state *st, fy_h1_str_t v)
{
    const char *p = v.p, *e = p + v.len;
    while (p < e) {
        if (*p == ',' || is_ows(*p)) {
            p++;
            continue;
        }
        const char *t = p;
        while (p < e && (cls[(uchar)*p] & C_TCHAR)) p++;
        size_t n = (size_t)(p - t);
        if (n == 0) return FY_H1_EBADHDR;
        while (p < e && is_ows(*p)) p++;
        if (p < e && *p != ',') return FY_H1_EBADHDR;
        if (EQ_LIT(t, n, "close"))
            st->tok_close = true;
        else if (EQ_LIT(t, n, "keep-alive"))
            st->tok_keep_alive = true;
        else if (EQ_LIT(t, n, "upgrade"))
            st->tok_upgrade = true;
    }
    return 0;
}

/* Records what the client codec needs from one header field. The framing headers are checked
 * even when the status or the request method means there is no body. */
static int on_header(struct head_state *st, const fy_h1_header_t *h)
{
    const char *n = h->name.p;
    fy_h1_str_t v = h->value;
    switch (h->name.len) {
    case 10:
        if (EQ_LIT(n, 10, "connection")) return parse_connection(st, v);
        break;
    case 14: {
        if (!EQ_LIT(n, 14, "content-length")) break;
        uint64_t cl;
        if (parse_content_length(v, &cl) < 0 || (st->have_cl && cl != st->cl)) return FY_H1_EBADCL;
        st->have_cl = true;
        st->cl = cl;
        break;
    }
    case 17:
        /* Only a lone "chunked": a repeated header is a list too (RFC 9110 §5.3), and a final
         * chunked after another coding would hand the proxy a body it cannot pass on as is */
        if (!EQ_LIT(n, 17, "transfer-encoding")) break;
        if (st->have_te || !EQ_LIT(v.p, v.len, "chunked")) return FY_H1_EBADTE;
        st->have_te = true;
        break;
    }
    return 0;
}

/* Ends a line at *p: CRLF or a bare LF. Returns the byte after it, or NULL. */
static inline uchar *eol(uchar *p)
{
    if (*p == '\n') return p + 1;
    return *p == '\r' && p[1] == '\n' ? p + 2 : NULL;
}

/* field-line = field-name ":" OWS field-value OWS, then the line ending. */
static int parse_field_line(uchar **pp, fy_h1_header_t *h)
{
    uchar *p = *pp, *name = p;
    while (cls[*p] & C_TCHAR) p++;
    if (p == name || *p != ':') return FY_H1_EBADHDR; /* includes a space before the colon */
    h->name.p = (const char *)name;
    h->name.len = (size_t)(p - name);
    p++;
    while (is_ows(*p)) p++;
    uchar *v = p;
    while (cls[*p] & C_VALUE) p++;
    uchar *ve = p;
    if (!(p = eol(p))) return FY_H1_EBADHDR; /* NUL, bare CR, DEL or another control byte */
    while (ve > v && is_ows(ve[-1])) ve--;
    h->value.p = (const char *)v;
    h->value.len = (size_t)(ve - v);
    *pp = p;
    return 0;
}

/* Validates the complete head buf[0..head_len) and fills r. */
static int parse_head(fy_h1_resp_t *r, const char *buf, size_t head_len, bool head_request,
                      const fy_h1_limits_t *lim)
{
    uchar *p = (uchar *)buf, *end = p + head_len;
    struct head_state st = {0};
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
    if (end - p < 10 || memcmp(p, "HTTP/", 5) != 0 || !(cls[p[5]] & C_DIGIT) || p[6] != '.' ||
        !(cls[p[7]] & C_DIGIT) || p[8] != ' ')
        return FY_H1_EBADREQ;
    if (p[5] != '1' || p[7] > '1') return FY_H1_EVERSION;
    r->minor_version = p[7] - '0';
    p += 9;
    if (*p < '1' || *p > '9' || !(cls[p[1]] & C_DIGIT) || !(cls[p[2]] & C_DIGIT))
        return FY_H1_EBADREQ;
    r->status = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
    p += 3;
    r->reason.p = (const char *)p;
    if (*p == ' ') { /* a missing SP + reason-phrase is tolerated: origins do send it */
        uchar *s = ++p;
        while (cls[*p] & C_VALUE) p++;
        r->reason.p = (const char *)s;
        r->reason.len = (size_t)(p - s);
    }
    if (!(p = eol(p))) return FY_H1_EBADREQ;

    /* *( field-line CRLF ) CRLF */
    if (is_ows(*p)) return FY_H1_EBADREQ; /* whitespace after the start-line, RFC 9112 §2.2 */
    for (;;) {
        if (*p == '\n') break;
        if (*p == '\r') {
            if (p[1] == '\n') break;
            return FY_H1_EBADHDR;
        }
        if (is_ows(*p)) return FY_H1_EOBSFOLD;
        if (r->nheaders == lim->max_headers) return FY_H1_ETOO_MANY_HDRS;
        fy_h1_header_t *h = &r->headers[r->nheaders++];
        if ((rc = parse_field_line(&p, h)) < 0) return rc;
        if ((rc = on_header(&st, h)) < 0) return rc;
    }

    /* Framing errors are errors even for a response without a body: a message with both is
     * a smuggling attempt or a broken origin either way (RFC 9112 §6.1), and Transfer-Encoding
     * in HTTP/1.0 means faulty framing. */
    if (st.have_cl && st.have_te) return FY_H1_ECL_TE;
    if (st.have_te && r->minor_version == 0) return FY_H1_EBADTE;
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
    r->conn_close = st.tok_close || (r->minor_version == 0 && !st.tok_keep_alive);
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
