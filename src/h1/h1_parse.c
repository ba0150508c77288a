/* Strict HTTP/1.1 request parser and chunked decoder; the contract is in h1_parse.h.
 *
 * The request parser works in two steps. find_head_end() searches for the empty line that
 * ends the head, resuming where the previous call stopped (req->scanned), and enforces the two
 * size limits. Only when the whole head is present does parse_head() validate it, in one pass.
 * Because the head is known to end with '\n', and none of the byte classes (h1_fields.h) contains
 * '\n', the per-byte loops of parse_head() need no bounds checks: they always stop at or before the
 * final LF, and p[1] is read only after *p == '\r', which is never the last byte.
 */
#include "h1/h1_parse.h"
#include "h1/h1_fields.h"

#include <limits.h>
#include <string.h>

#define HEADERS_PHASE SIZE_MAX /* req->line_start once the request line is complete */
#define MAX_PORT_DIGITS 5
#define MAX_SIZE_LINE 1024
#define MAX_CHUNK_HEX 16

typedef const unsigned char uchar;

static inline int lower(int c)
{
    return (unsigned)(c - 'A') < 26u ? c + ('a' - 'A') : c;
}

/* Case-insensitive compare of s[0..n) with the lowercase literal lit[0..n). */
static bool eq_ci(const char *s, const char *lit, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (lower((uchar)s[i]) != lit[i]) return false;
    return true;
}

bool fy_h1_str_eq_lit(fy_h1_str_t s, const char *lower_lit)
{
    return s.len == strlen(lower_lit) && eq_ci(s.p, lower_lit, s.len);
}

void fy_h1_req_init(fy_h1_req_t *req, fy_h1_header_t *headers)
{
    memset(req, 0, sizeof *req);
    req->headers = headers;
}

/* Vectorised skipping of the long runs (header values, request-targets): 16 bytes per step with
 * SSE2 (baseline on x86-64), else 8 per step in a 64-bit word (SWAR), while no byte needs a
 * closer look; the table then decides about that byte. Never reads at or past `end`, and the
 * caller knows a LF (a stop byte) precedes `end`. */
#if defined(__SSE2__)
#include <emmintrin.h>

static inline uchar *skip_value(uchar *p, uchar *end)
{
    const __m128i c1f = _mm_set1_epi8(0x1f), c7f = _mm_set1_epi8(0x7f);
    for (;; p++) {
        for (; end - p >= 16; p += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
            __m128i ctl = _mm_cmpeq_epi8(_mm_min_epu8(x, c1f), x); /* x <= 0x1f */
            int m = _mm_movemask_epi8(_mm_or_si128(ctl, _mm_cmpeq_epi8(x, c7f)));
            if (m) {
                p += __builtin_ctz((unsigned)m);
                break;
            }
        }
        /* the table decides: the end, or an HTAB, or a byte of the short tail */
        if (!(fy__h1_cls[*p] & FY__H1_C_VALUE)) return p;
    }
}

/* Header names are mostly letters, digits and '-': those are skipped 16 at a time. */
static inline uchar *skip_name(uchar *p, uchar *end)
{
    const __m128i c20 = _mm_set1_epi8(0x20), a = _mm_set1_epi8('a'), z = _mm_set1_epi8('z');
    const __m128i d0 = _mm_set1_epi8('0'), d9 = _mm_set1_epi8('9'), dash = _mm_set1_epi8('-');
    for (;; p++) {
        for (; end - p >= 16; p += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
            __m128i l = _mm_or_si128(x, c20);
            __m128i alpha = _mm_cmpeq_epi8(_mm_max_epu8(_mm_min_epu8(l, z), a), l);
            __m128i digit = _mm_cmpeq_epi8(_mm_max_epu8(_mm_min_epu8(x, d9), d0), x);
            __m128i ok = _mm_or_si128(_mm_or_si128(alpha, digit), _mm_cmpeq_epi8(x, dash));
            unsigned m = ~(unsigned)_mm_movemask_epi8(ok) & 0xffff;
            if (m) {
                p += __builtin_ctz(m);
                break;
            }
        }
        /* the table decides: the end, or a rarer tchar, or a byte of the tail */
        if (!(fy__h1_cls[*p] & FY__H1_C_TCHAR)) return p;
    }
}

static inline uchar *skip_target(uchar *p, uchar *end)
{
    const __m128i c20 = _mm_set1_epi8(0x20), c7f = _mm_set1_epi8(0x7f), hash = _mm_set1_epi8('#');
    for (;; p++) {
        for (; end - p >= 16; p += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
            __m128i lo = _mm_cmpeq_epi8(_mm_min_epu8(x, c20), x); /* x <= 0x20 */
            __m128i hi = _mm_cmpeq_epi8(_mm_max_epu8(x, c7f), x); /* x >= 0x7f */
            int m = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(lo, hi), _mm_cmpeq_epi8(x, hash)));
            if (m) {
                p += __builtin_ctz((unsigned)m);
                break;
            }
        }
        if (!(fy__h1_cls[*p] & FY__H1_C_TARGET)) return p;
    }
}
#else
static inline uchar *skip_name(uchar *p, uchar *end)
{
    return fy__h1_skip_tchar(p, end);
}

/* HAS_LESS(w, n) is nonzero iff some byte of w is below n (exact for n <= 128) */
#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
#define HAS_LESS(w, n) (((w)-ONES * (n)) & ~(w)&HIGHS)

static inline uchar *skip_value(uchar *p, uchar *end)
{
    for (;;) {
        for (uint64_t w; end - p >= 8; p += 8) {
            memcpy(&w, p, 8);
            if (HAS_LESS(w, 0x20) | HAS_LESS(w ^ (ONES * 0x7f), 1)) break; /* CTL, HTAB, DEL */
        }
        for (int i = 0; i < 8; i++, p++)
            if (!(fy__h1_cls[*p] & FY__H1_C_VALUE)) return p;
    }
}

static inline uchar *skip_target(uchar *p, uchar *end)
{
    for (;;) {
        for (uint64_t w; end - p >= 8; p += 8) {
            memcpy(&w, p, 8);
            /* SP or CTL, >= 0x7f (a 0xff carrying out of w + ONES is caught by w itself), '#' */
            if (HAS_LESS(w, 0x21) | ((w | (w + ONES)) & HIGHS) | HAS_LESS(w ^ (ONES * '#'), 1))
                break;
        }
        for (int i = 0; i < 8; i++, p++)
            if (!(fy__h1_cls[*p] & FY__H1_C_TARGET)) return p;
    }
}
#endif

/* ---- head search ---- */

/* Searches buf[0..len) for the empty line ending the head, resuming at req->scanned.
 * Phases, told apart by req->line_start:
 *   - empty lines before the request line: scanned == line_start, the start of the current line
 *     (a lone "\r" at the end of the buffer is left unscanned);
 *   - request line: scanned > line_start, the request line's first byte;
 *   - header lines: line_start == HEADERS_PHASE; whether a line is empty is decided from the two
 *     bytes before its LF, as the LF ending the previous line is known to exist.
 * Only bytes below max_header_bytes are searched, so the outcome does not depend on how the
 * bytes were split across calls. */
static int find_head_end(fy_h1_req_t *req, const char *buf, size_t len, const fy_h1_limits_t *lim)
{
    size_t maxh = lim->max_header_bytes < INT_MAX ? lim->max_header_bytes : INT_MAX;
    size_t end = len < maxh ? len : maxh;
    if (req->scanned > len) req->scanned = 0; /* not the same buffer grown: start over */
    size_t pos = req->scanned;
    if (pos == 0) req->line_start = 0;
    size_t rl = req->line_start;

    if (rl != HEADERS_PHASE && pos == rl) {
        for (;;) {
            if (pos == end) goto incomplete;
            if (buf[pos] == '\n') {
                pos++;
            } else if (buf[pos] == '\r' && (pos + 1 == end || buf[pos + 1] == '\n')) {
                if (pos + 1 == end) goto incomplete;
                pos += 2;
            } else {
                break;
            }
            req->scanned = req->line_start = pos;
        }
        rl = pos++; /* buf[rl] is not LF: the request line has begun */
    }
    if (rl != HEADERS_PHASE) {
        const char *nl = memchr(buf + pos, '\n', end - pos);
        size_t stop = nl ? (size_t)(nl - buf) : end;
        size_t n = stop - rl - (buf[stop - 1] == '\r');
        if (n > lim->max_request_line) return FY_H1_EURI_TOO_LONG;
        if (!nl) {
            req->scanned = end;
            goto incomplete;
        }
        pos = stop + 1;
        req->line_start = HEADERS_PHASE;
    }
    size_t head = fy__h1_find_empty_line(buf, &pos, end);
    if (head) return (int)head;
    req->scanned = pos;
incomplete:
    return len >= maxh ? FY_H1_EHDR_TOO_LARGE : FY_H1_INCOMPLETE;
}

/* ---- head validation ---- */

/* host = uri-host [ ":" port ] (RFC 3986 §3.2.2), no userinfo. An empty string is valid (an
 * empty Host header, RFC 9112 §3.2) unless a port is required (authority-form).
 * s[n] must be readable and not a host byte: it is the OWS, CR or LF after a field value, or
 * the '/', '?' or SP after an authority in the request line. */
static bool valid_host(const char *s, size_t n, bool need_port)
{
    uchar *p = (uchar *)s, *e = p + n;
    if (n == 0) return !need_port;
    if (*p == '[') { /* IP-literal: IPv6address / IPvFuture, checked loosely */
        uchar *b = ++p;
        while (p < e && ((fy__h1_cls[*p] & FY__H1_C_HOST) || *p == ':')) p++;
        if (p == b || p == e || *p != ']') return false;
        p++;
    } else { /* reg-name; the loop needs no bound, as s[n] is not a host byte */
        uchar *b = p;
        for (;;) {
            while (fy__h1_cls[*p] & FY__H1_C_HOST) p++;
            if (*p != '%' || e - p < 3 || !(fy__h1_cls[p[1]] & fy__h1_cls[p[2]] & FY__H1_C_HEX))
                break;
            p += 3;
        }
        if (p == b) return false;
    }
    if (p == e) return !need_port;
    if (*p++ != ':' || e - p > MAX_PORT_DIGITS || (need_port && p == e)) return false;
    for (; p < e; p++)
        if (!(fy__h1_cls[*p] & FY__H1_C_DIGIT)) return false;
    return true;
}

/* Classifies the request-target by form (RFC 9112 §3.2); its bytes are already checked. */
static int check_target(fy_h1_str_t m, fy_h1_str_t t)
{
    if (m.len == 7 && memcmp(m.p, "CONNECT", 7) == 0)
        return valid_host(t.p, t.len, true) ? 0 : FY_H1_EBADTARGET;
    if (t.p[0] == '/') return 0;
    if (t.len == 1 && t.p[0] == '*')
        return m.len == 7 && memcmp(m.p, "OPTIONS", 7) == 0 ? 0 : FY_H1_EBADTARGET;
    size_t skip;
    if (t.len > 7 && fy__h1_eq_lc(t.p, "http://", 7))
        skip = 7;
    else if (t.len > 8 && fy__h1_eq_lc(t.p, "https://", 8))
        skip = 8;
    else
        return FY_H1_EBADTARGET;
    const char *a = t.p + skip, *e = t.p + t.len, *ae = a;
    while (ae < e && *ae != '/' && *ae != '?') ae++;
    return ae > a && valid_host(a, (size_t)(ae - a), false) ? 0 : FY_H1_EBADTARGET;
}

struct head_state {
    unsigned nhost;
    bool have_upgrade;
    struct fy__h1_framing fr;
};

/* Records what the server codec needs from one header field. */
static int on_header(fy_h1_req_t *req, struct head_state *st, const fy_h1_header_t *h)
{
    const char *n = h->name.p;
    fy_h1_str_t v = h->value;
    switch (h->name.len) {
    case 4:
        if (!fy__h1_eq_lc(n, "host", 4)) break;
        if (++st->nhost > 1) return FY_H1_ENOHOST;
        if (!valid_host(v.p, v.len, false)) return FY_H1_EBADHDR;
        req->host = v;
        break;
    case 6:
        if (fy__h1_eq_lc(n, "expect", 6) && FY__H1_EQ_LIT(v.p, v.len, "100-continue"))
            req->expect_continue = true;
        break;
    case 7:
        if (fy__h1_eq_lc(n, "upgrade", 7) && v.len > 0) st->have_upgrade = true;
        break;
    default:
        return fy__h1_framing_field(&st->fr, h);
    }
    return 0;
}

/* fy__h1_parse_field_line with the vectorised skippers above. */
static int parse_field_line(uchar **pp, uchar *end, fy_h1_header_t *h)
{
    return fy__h1_parse_field_line(pp, end, h, skip_name, skip_value);
}

/* Validates the complete head buf[0..head_len) and fills req. */
static int parse_head(fy_h1_req_t *req, const char *buf, size_t head_len, const fy_h1_limits_t *lim)
{
    uchar *p = (uchar *)buf, *end = p + head_len;
    struct head_state st = {0};
    int r;

    req->nheaders = 0;
    req->body_kind = FY_H1_BODY_NONE;
    req->content_length = 0;
    req->host.p = NULL;
    req->host.len = 0;
    req->conn_close = req->conn_keep_alive = req->expect_continue = req->conn_upgrade = false;

    while (*p == '\n' || (*p == '\r' && p[1] == '\n')) p += 1 + (*p == '\r');

    /* request-line = method SP request-target SP HTTP-version */
    uchar *m = p;
    while (fy__h1_cls[*p] & FY__H1_C_TCHAR) p++;
    if (p == m || *p != ' ') return FY_H1_EBADREQ;
    req->method.p = (const char *)m;
    req->method.len = (size_t)(p - m);
    uchar *t = ++p;
    p = skip_target(p, end);
    if (p == t) return FY_H1_EBADREQ;
    if (*p != ' ') return *p == '\r' || *p == '\n' ? FY_H1_EBADREQ : FY_H1_EBADTARGET;
    req->target.p = (const char *)t;
    req->target.len = (size_t)(p - t);
    p++;
    if (end - p >= 9 && memcmp(p, "HTTP/1.", 7) == 0 && (p[7] == '0' || p[7] == '1')) {
        req->minor_version = p[7] - '0';
        p += 8;
    } else if (end - p >= 9 && memcmp(p, "HTTP/", 5) == 0 && (fy__h1_cls[p[5]] & FY__H1_C_DIGIT) &&
               p[6] == '.' && (fy__h1_cls[p[7]] & FY__H1_C_DIGIT) &&
               (p[8] == '\r' || p[8] == '\n')) {
        return FY_H1_EVERSION;
    } else {
        return FY_H1_EBADREQ;
    }
    if (!(p = fy__h1_eol(p))) return FY_H1_EBADREQ;
    if ((r = check_target(req->method, req->target)) < 0) return r;

    /* *( field-line CRLF ) CRLF */
    /* whitespace after the start-line, RFC 9112 §2.2 */
    if (fy__h1_is_ows(*p)) return FY_H1_EBADREQ;
    while ((r = fy__h1_line_kind(p)) == 0) {
        if (req->nheaders == lim->max_headers) return FY_H1_ETOO_MANY_HDRS;
        fy_h1_header_t *h = &req->headers[req->nheaders++];
        if ((r = parse_field_line(&p, end, h)) < 0) return r;
        if ((r = on_header(req, &st, h)) < 0) return r;
    }
    if (r < 0) return r;

    if ((r = fy__h1_framing_check(&st.fr, req->minor_version)) < 0) return r;
    if (req->minor_version == 1 && st.nhost != 1) return FY_H1_ENOHOST;
    if (st.fr.have_te) {
        req->body_kind = FY_H1_BODY_CHUNKED;
    } else if (st.fr.have_cl) {
        req->body_kind = FY_H1_BODY_LENGTH;
        req->content_length = st.fr.cl;
    }
    req->conn_keep_alive = st.fr.tok_keep_alive;
    req->conn_close = fy__h1_conn_close(&st.fr, req->minor_version);
    req->conn_upgrade = st.fr.tok_upgrade && st.have_upgrade;
    /* a 100-continue expectation in HTTP/1.0 is ignored (RFC 9110 §10.1.1) */
    if (req->minor_version == 0) req->expect_continue = false;
    return (int)head_len;
}

int fy_h1_parse_request(fy_h1_req_t *req, const char *buf, size_t len, const fy_h1_limits_t *limits)
{
    int r = find_head_end(req, buf, len, limits);
    return r < 0 ? r : parse_head(req, buf, (size_t)r, limits);
}

int fy_h1_err_status(int err)
{
    switch (err) {
    case FY_H1_EURI_TOO_LONG:
        return 414;
    case FY_H1_EHDR_TOO_LARGE:
    case FY_H1_ETOO_MANY_HDRS:
        return 431;
    case FY_H1_EVERSION:
        return 505;
    default:
        return 400;
    }
}

const char *fy_h1_err_str(int err)
{
    switch (err) {
    case FY_H1_INCOMPLETE:
        return "incomplete";
    case FY_H1_EBADREQ:
        return "malformed request line";
    case FY_H1_EBADTARGET:
        return "invalid request-target";
    case FY_H1_EVERSION:
        return "unsupported HTTP version";
    case FY_H1_EURI_TOO_LONG:
        return "request line too long";
    case FY_H1_EHDR_TOO_LARGE:
        return "header section too large";
    case FY_H1_ETOO_MANY_HDRS:
        return "too many header fields";
    case FY_H1_EBADHDR:
        return "invalid header field (bad byte, bare CR or space before colon)";
    case FY_H1_EOBSFOLD:
        return "obsolete line folding";
    case FY_H1_ECL_TE:
        return "both Content-Length and Transfer-Encoding";
    case FY_H1_EBADCL:
        return "invalid or conflicting Content-Length";
    case FY_H1_EBADTE:
        return "unsupported Transfer-Encoding";
    case FY_H1_ENOHOST:
        return "missing or repeated Host";
    case FY_H1_EBADCHUNK:
        return "malformed chunk";
    case FY_H1_ECHUNK_OVERFLOW:
        return "chunk size too large";
    case FY_H1_EBADTRAILER:
        return "invalid trailer field";
    default:
        return err >= 0 ? "ok" : "unknown error";
    }
}

/* ---- chunked transfer coding ---- */

/* chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
 * chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] ) */
enum {
    CK_SIZE0 = 0,    /* first hex digit of chunk-size */
    CK_SIZE,         /* more hex digits, or what may follow them */
    CK_BWS,          /* BWS before ';' */
    CK_EXT_NAME0,    /* BWS, then the first byte of ext-name */
    CK_EXT_NAME,     /* ext-name */
    CK_EXT_NAME_BWS, /* BWS after ext-name, before '=' or ';' */
    CK_EXT_VAL0,     /* BWS, then the first byte of ext-val */
    CK_EXT_TOKEN,    /* token ext-val */
    CK_EXT_QS,       /* quoted-string ext-val */
    CK_EXT_QP,       /* after a backslash in the quoted-string */
    CK_EXT_QS_END,   /* after the closing quote */
    CK_SIZE_LF,      /* after CR of the size line */
    CK_DATA,
    CK_DATA_CR,
    CK_DATA_LF,
    CK_TRAILER, /* at the start of a trailer line (line-at-a-time, re-fed by the caller) */
    CK_DONE,
};

void fy_h1_chunked_init(fy_h1_chunked_t *c)
{
    memset(c, 0, sizeof *c);
}

static inline unsigned hexval(unsigned ch)
{
    return ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10;
}

/* Handles one complete trailer line in[0..n), LF included. */
static int trailer_line(const char *in, size_t n, fy_h1_str_t *name, fy_h1_str_t *value)
{
    fy_h1_header_t h;
    uchar *p = (uchar *)in;
    if (fy__h1_is_ows(*p) || parse_field_line(&p, (uchar *)in + n, &h) < 0 || p != (uchar *)in + n)
        return FY_H1_EBADTRAILER;
    *name = h.name;
    *value = h.value;
    return 0;
}

int fy_h1_chunked_decode(fy_h1_chunked_t *c, const char *in, size_t len, size_t *consumed,
                         size_t max_trailer_bytes,
                         void (*on_data)(void *ud, const char *p, size_t n),
                         void (*on_trailer)(void *ud, fy_h1_str_t name, fy_h1_str_t value),
                         void *ud)
{
    size_t i = 0;
    int r = 0;
    if (c->state < 0 || c->state == CK_DONE) {
        *consumed = 0;
        return c->state < 0 ? c->state : 1;
    }
    while (i < len) {
        int st = c->state;
        if (st == CK_DATA) {
            size_t n = len - i;
            if (n > c->remaining) n = (size_t)c->remaining;
            if (on_data) on_data(ud, in + i, n);
            i += n;
            c->remaining -= n;
            if (c->remaining == 0) c->state = CK_DATA_CR;
            continue;
        }
        if (st == CK_TRAILER) {
            const char *line = in + i;
            size_t avail = len - i;
            const char *nl = memchr(line, '\n', avail);
            if (!nl) {
                bool maybe_empty = avail == 1 && line[0] == '\r';
                if (!maybe_empty && avail > max_trailer_bytes - c->trailer_bytes) {
                    r = FY_H1_EHDR_TOO_LARGE;
                    goto fail;
                }
                break; /* the caller re-feeds this line */
            }
            size_t n = (size_t)(nl - line) + 1;
            if (n == 1 || (n == 2 && line[0] == '\r')) {
                c->state = CK_DONE;
                i += n;
                r = 1;
                break;
            }
            if (n > max_trailer_bytes - c->trailer_bytes) {
                r = FY_H1_EHDR_TOO_LARGE;
                goto fail;
            }
            fy_h1_str_t name, value;
            if ((r = trailer_line(line, n, &name, &value)) < 0) goto fail;
            c->trailer_bytes += n;
            if (on_trailer) on_trailer(ud, name, value);
            i += n;
            continue;
        }

        unsigned ch = (uchar)in[i++];
        if (st < CK_SIZE_LF && ch != '\r' && ch != '\n' && ++c->line_len > MAX_SIZE_LINE) goto bad;
        switch (st) {
        case CK_SIZE0:
            if (!(fy__h1_cls[ch] & FY__H1_C_HEX)) goto bad;
            c->remaining = hexval(ch);
            c->nhex = 1;
            c->state = CK_SIZE;
            continue;
        case CK_SIZE:
            if (fy__h1_cls[ch] & FY__H1_C_HEX) {
                if (++c->nhex > MAX_CHUNK_HEX || (c->remaining >> 59) != 0) {
                    r = FY_H1_ECHUNK_OVERFLOW;
                    goto fail;
                }
                c->remaining = c->remaining << 4 | hexval(ch);
                continue;
            }
            break;
        case CK_BWS:
            if (fy__h1_is_ows(ch)) continue;
            if (ch != ';') goto bad;
            c->state = CK_EXT_NAME0;
            continue;
        case CK_EXT_NAME0:
            if (fy__h1_is_ows(ch)) continue;
            if (!(fy__h1_cls[ch] & FY__H1_C_TCHAR)) goto bad;
            c->state = CK_EXT_NAME;
            continue;
        case CK_EXT_NAME:
            if (fy__h1_cls[ch] & FY__H1_C_TCHAR) continue;
            if (ch == '=') {
                c->state = CK_EXT_VAL0;
                continue;
            }
            if (fy__h1_is_ows(ch)) {
                c->state = CK_EXT_NAME_BWS;
                continue;
            }
            break;
        case CK_EXT_NAME_BWS:
            if (fy__h1_is_ows(ch)) continue;
            if (ch == '=')
                c->state = CK_EXT_VAL0;
            else if (ch == ';')
                c->state = CK_EXT_NAME0;
            else
                goto bad;
            continue;
        case CK_EXT_VAL0:
            if (fy__h1_is_ows(ch)) continue;
            if (ch == '"')
                c->state = CK_EXT_QS;
            else if (fy__h1_cls[ch] & FY__H1_C_TCHAR)
                c->state = CK_EXT_TOKEN;
            else
                goto bad;
            continue;
        case CK_EXT_TOKEN:
            if (fy__h1_cls[ch] & FY__H1_C_TCHAR) continue;
            break;
        case CK_EXT_QS:
            if (ch == '"')
                c->state = CK_EXT_QS_END;
            else if (ch == '\\')
                c->state = CK_EXT_QP;
            else if (!(fy__h1_cls[ch] & FY__H1_C_QDTEXT))
                goto bad;
            continue;
        case CK_EXT_QP:
            if (!(fy__h1_cls[ch] & FY__H1_C_VALUE)) goto bad;
            c->state = CK_EXT_QS;
            continue;
        case CK_EXT_QS_END:
            break;
        case CK_SIZE_LF:
            if (ch != '\n') goto bad;
            goto size_line_done;
        case CK_DATA_CR:
            if (ch == '\r') {
                c->state = CK_DATA_LF;
                continue;
            }
            if (ch != '\n') goto bad;
            c->state = CK_SIZE0;
            continue;
        case CK_DATA_LF:
            if (ch != '\n') goto bad;
            c->state = CK_SIZE0;
            continue;
        default:
            goto bad;
        }

        /* the end of chunk-size or of an extension: what may follow it */
        if (ch == ';') {
            c->state = CK_EXT_NAME0;
        } else if (fy__h1_is_ows(ch)) {
            c->state = CK_BWS;
        } else if (ch == '\r') {
            c->state = CK_SIZE_LF;
        } else if (ch == '\n') {
            goto size_line_done;
        } else {
            goto bad;
        }
        continue;
    size_line_done:
        c->line_len = 0;
        c->state = c->remaining ? CK_DATA : CK_TRAILER;
    }
    *consumed = i;
    return r;
bad:
    r = FY_H1_EBADCHUNK;
fail:
    c->state = r;
    *consumed = i;
    return r;
}
