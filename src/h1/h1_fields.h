/* Folder-internal: the field rules shared by the request parser (h1_parse.c) and the response
 * parser (h1_resp.c) of RFC 9112 / RFC 9110: byte classes, line endings, field lines, and the
 * framing and connection headers. Not a public interface: only src/h1/ includes it.
 *
 * The helpers that run per byte or per field line are static inline here, so the parsers'
 * loops keep them inlined; the per-header-value parsers are in h1_fields.c. Like the parsers,
 * the helpers that take a `const unsigned char *` into a head rely on the head ending with LF,
 * which no byte class contains: a class loop needs no bound, and p[1] is read only after
 * *p == '\r', which is never the last byte of a head.
 * Threads: pure; no shared state, callable from any thread. */
#ifndef FY_H1_FIELDS_H
#define FY_H1_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "h1/h1_parse.h"

/* Byte classes, bits of fy__h1_cls[] */
enum {
    FY__H1_C_TCHAR = 1,   /* RFC 9110 tchar */
    FY__H1_C_VALUE = 2,   /* field-vchar, SP, HTAB, obs-text (also the reason-phrase bytes) */
    FY__H1_C_TARGET = 4,  /* request-target byte: VCHAR except '#' */
    FY__H1_C_HOST = 8,    /* reg-name byte: unreserved / sub-delims */
    FY__H1_C_HEX = 16,    /* HEXDIG */
    FY__H1_C_QDTEXT = 32, /* qdtext of a quoted-string */
    FY__H1_C_DIGIT = 64,  /* DIGIT */
};

/* The class bits of each byte; no class contains '\n'. Generated from the RFC 9110 / RFC 3986
 * grammar; h1_parse_test.c checks every entry. */
extern const uint8_t fy__h1_cls[256];

static inline bool fy__h1_is_ows(int c)
{
    return c == ' ' || c == '\t';
}

/* Case-insensitive compare of s[0..n) with the lowercase literal lit[0..n), for s made of
 * request-target, token or field-value bytes (no control byte but HTAB) and lit of lowercase
 * letters, digits, '-', ':' and '/': then c | 0x20 equals a byte of lit only if c matches it
 * case-insensitively (the other candidates, c ^ 0x20, are control bytes, and HTAB | 0x20 is
 * ')'). */
static inline bool fy__h1_eq_lc(const char *s, const char *lit, size_t n)
{
    size_t i = 0;
    for (uint64_t a, b; i + 8 <= n; i += 8) {
        memcpy(&a, s + i, 8);
        memcpy(&b, lit + i, 8);
        if ((a | 0x2020202020202020ull) != b) return false;
    }
    for (; i < n; i++)
        if (((unsigned char)s[i] | 0x20) != (unsigned char)lit[i]) return false;
    return true;
}

/* fy__h1_eq_lc of s[0..n) with a string literal, lengths included */
#define FY__H1_EQ_LIT(s, n, lit)                                                                   \
    ((n) == sizeof(lit) - 1 && fy__h1_eq_lc((s), (lit), sizeof(lit) - 1))

/* Ends a line at p: CRLF or a bare LF. Returns the byte after it, or NULL. */
static inline const unsigned char *fy__h1_eol(const unsigned char *p)
{
    if (*p == '\r') return p[1] == '\n' ? p + 2 : NULL;
    return *p == '\n' ? p + 1 : NULL;
}

/* At the start of a line of the header section (or of a trailer section): 0 at a field line,
 * 1 at the empty line ending the section, FY_H1_EBADHDR at a bare CR, FY_H1_EOBSFOLD at
 * whitespace (obsolete line folding). */
static inline int fy__h1_line_kind(const unsigned char *p)
{
    if (*p == '\n') return 1;
    if (*p == '\r') return p[1] == '\n' ? 1 : FY_H1_EBADHDR;
    return fy__h1_is_ows(*p) ? FY_H1_EOBSFOLD : 0;
}

/* Searches buf[*pos..end) for the LF that ends an empty line, buf[0] being the start of a line.
 * Whether a line is empty is decided from the (at most two) bytes before its LF, so the search
 * can resume anywhere. Returns the offset just past that LF (> 0), or 0 when there is none yet:
 * then *pos is moved to `end` if it was below it. */
static inline size_t fy__h1_find_empty_line(const char *buf, size_t *pos, size_t end)
{
    for (size_t i = *pos; i < end;) {
        const char *nl = memchr(buf + i, '\n', end - i);
        if (!nl) break;
        size_t p = (size_t)(nl - buf);
        if (p == 0 || buf[p - 1] == '\n' || (buf[p - 1] == '\r' && (p == 1 || buf[p - 2] == '\n')))
            return p + 1;
        i = p + 1;
    }
    if (*pos < end) *pos = end;
    return 0;
}

/* A skipper returns the first byte at or after p that is not of its class; it stops at or
 * before the LF known to precede `end`, and may use `end` to read ahead in bulk. The plain
 * ones walk the table; h1_parse.c has vectorised ones with the same contract. */
typedef const unsigned char *fy__h1_skip_fn(const unsigned char *p, const unsigned char *end);

static inline const unsigned char *fy__h1_skip_tchar(const unsigned char *p,
                                                     const unsigned char *end)
{
    (void)end;
    while (fy__h1_cls[*p] & FY__H1_C_TCHAR) p++;
    return p;
}

static inline const unsigned char *fy__h1_skip_value(const unsigned char *p,
                                                     const unsigned char *end)
{
    (void)end;
    while (fy__h1_cls[*p] & FY__H1_C_VALUE) p++;
    return p;
}

/* field-line = field-name ":" OWS field-value OWS, then CRLF or LF, starting at *pp and ending
 * at or before the LF known to precede `end`. Fills h with slices (value trimmed of OWS) and
 * advances *pp past the line ending. Returns 0, or FY_H1_EBADHDR: an empty name, a space
 * before the colon, NUL, bare CR, DEL or another control byte. The skippers are constants at
 * each call site, so after inlining they are direct, inlined calls. */
static inline int fy__h1_parse_field_line(const unsigned char **pp, const unsigned char *end,
                                          fy_h1_header_t *h, fy__h1_skip_fn *skip_name,
                                          fy__h1_skip_fn *skip_value)
{
    const unsigned char *p = *pp, *name = p;
    p = skip_name(p, end);
    if (p == name || *p != ':') return FY_H1_EBADHDR;
    h->name.p = (const char *)name;
    h->name.len = (size_t)(p - name);
    p++;
    while (fy__h1_is_ows(*p)) p++;
    const unsigned char *v = p;
    p = skip_value(p, end);
    const unsigned char *ve = p;
    if (!(p = fy__h1_eol(p))) return FY_H1_EBADHDR;
    while (ve > v && fy__h1_is_ows(ve[-1])) ve--;
    h->value.p = (const char *)v;
    h->value.len = (size_t)(ve - v);
    *pp = p;
    return 0;
}

/* What both parsers record from the framing (RFC 9112 §6) and Connection headers. */
struct fy__h1_framing {
    bool have_cl, have_te, tok_close, tok_keep_alive, tok_upgrade;
    uint64_t cl; /* valid when have_cl */
};

/* One Content-Length field: 1#DIGIT, a list repeating one value (RFC 9110 §8.6), no empty
 * elements, at most INT64_MAX, and equal to any earlier Content-Length. Returns 0 or
 * FY_H1_EBADCL. */
int fy__h1_on_content_length(struct fy__h1_framing *f, fy_h1_str_t v);

/* One Transfer-Encoding field: only a lone "chunked" is supported. Returns 0 or FY_H1_EBADTE. */
int fy__h1_on_transfer_encoding(struct fy__h1_framing *f, fy_h1_str_t v);

/* Connection = #connection-option: records close, keep-alive and upgrade. Returns 0 or
 * FY_H1_EBADHDR. */
int fy__h1_parse_connection(struct fy__h1_framing *f, fy_h1_str_t v);

/* Records one header field into f if it is Connection, Content-Length or Transfer-Encoding;
 * other fields are ignored. Returns 0 or the error of the field's parser above. */
static inline int fy__h1_framing_field(struct fy__h1_framing *f, const fy_h1_header_t *h)
{
    const char *n = h->name.p;
    switch (h->name.len) {
    case 10:
        return fy__h1_eq_lc(n, "connection", 10) ? fy__h1_parse_connection(f, h->value) : 0;
    case 14:
        return fy__h1_eq_lc(n, "content-length", 14) ? fy__h1_on_content_length(f, h->value) : 0;
    case 17:
        return fy__h1_eq_lc(n, "transfer-encoding", 17) ? fy__h1_on_transfer_encoding(f, h->value)
                                                        : 0;
    }
    return 0;
}

/* The framing errors of a complete head, for requests and responses alike (RFC 9112 §6.1):
 * FY_H1_ECL_TE for both Content-Length and Transfer-Encoding, FY_H1_EBADTE for
 * Transfer-Encoding in HTTP/1.0. Returns 0 otherwise. */
static inline int fy__h1_framing_check(const struct fy__h1_framing *f, int minor_version)
{
    if (f->have_cl && f->have_te) return FY_H1_ECL_TE;
    if (f->have_te && minor_version == 0) return FY_H1_EBADTE;
    return 0;
}

/* Whether the connection closes after this message: "close", or HTTP/1.0 without
 * "keep-alive". */
static inline bool fy__h1_conn_close(const struct fy__h1_framing *f, int minor_version)
{
    return f->tok_close || (minor_version == 0 && !f->tok_keep_alive);
}

#endif
