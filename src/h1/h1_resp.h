/* Strict, zero-copy, restartable HTTP/1.1 *response* head parser (RFC 9112), for the client
 * codec that talks to origins. Same conventions as h1_parse.h (slices of the caller's buffer,
 * FY_H1_INCOMPLETE, negative enum fy_h1_err), and the chunked decoder of h1_parse.h is reused
 * for bodies.
 * Threads: pure; no shared state, callable from any thread. */
#ifndef FY_H1_H1_RESP_H
#define FY_H1_H1_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "h1/h1_parse.h"

/* How the response body is delimited (RFC 9112 §6.3, from the client's side). */
enum fy_h1_resp_body {
    FY_H1_RESP_NONE = 0,    /* no body: 1xx, 204, 304, or a response to HEAD */
    FY_H1_RESP_LENGTH = 1,  /* Content-Length bytes */
    FY_H1_RESP_CHUNKED = 2, /* Transfer-Encoding: chunked */
    FY_H1_RESP_CLOSE = 3,   /* until the origin closes the connection */
};

typedef struct fy_h1_resp {
    /* filled on success */
    int status;              /* 100..999 */
    fy_h1_str_t reason;      /* may be empty */
    int minor_version;       /* 0 or 1 */
    fy_h1_header_t *headers; /* caller-provided, limits->max_headers entries */
    size_t nheaders;
    int body_kind;           /* enum fy_h1_resp_body (uses the request's method: see below) */
    uint64_t content_length; /* when body_kind == FY_H1_RESP_LENGTH */
    bool conn_close;         /* Connection: close, or HTTP/1.0 without keep-alive */
    bool conn_upgrade;       /* Connection: upgrade (with 101) */
    /* parser state; zeroed by fy_h1_resp_init */
    size_t scanned;
    size_t line_start;
} fy_h1_resp_t;

void fy_h1_resp_init(fy_h1_resp_t *r, fy_h1_header_t *headers);

/* Parse a response head from buf[0..len). `head_request`: the request was HEAD (then there is
 * never a body). Returns the head length (>0), FY_H1_INCOMPLETE, or a negative fy_h1_err:
 * FY_H1_EBADREQ (bad status line: not "HTTP/1.x SP 3DIGIT SP reason"), FY_H1_EVERSION,
 * FY_H1_EBADHDR / FY_H1_EOBSFOLD (same header rules as requests), FY_H1_ECL_TE,
 * FY_H1_EBADCL, FY_H1_EBADTE (Transfer-Encoding other than a final chunked; a response with
 * TE whose final coding is not chunked is delimited by close per RFC 9112 §6.3 — we are strict
 * and reject it), FY_H1_EHDR_TOO_LARGE, FY_H1_ETOO_MANY_HDRS. Interim 1xx responses parse like
 * any other (body_kind NONE); the caller loops for the final one. Never reads buf[len]. */
int fy_h1_parse_response(fy_h1_resp_t *r, const char *buf, size_t len, bool head_request,
                         const fy_h1_limits_t *limits);

/* Write the field name `name` (len bytes) at p for an HTTP/1.1 response head and return the end
 * (exactly len bytes are written). An all-lowercase name (the names Ferry generates, and those of
 * h2/h3 origins) gets its canonical case: "content-type" -> "Content-Type", "etag" -> "ETag",
 * "www-authenticate" -> "WWW-Authenticate"; a name holding any uppercase letter (an h1 origin's
 * or a config's own spelling) is written as given. Case carries no meaning (RFC 9110 §5.1): this
 * is for people and for clients that compare names case-sensitively. */
char *fy__h1_put_field_name_case(char *p, const char *name, size_t len); /* h1_resp.c */
static inline char *fy_h1_put_field_name(char *p, const char *name, size_t len)
{
    /* Inline, the common case of a name of 8..16 bytes with a capital among its first 8 (an h1
       origin's "Content-Type", a configured name in its h1 spelling): two overlapping 8-byte
       copies, no call. A byte of the word is a capital when its low 7 bits + 0x3f carry into
       bit 7 (>= 'A') and + 0x25 do not (<= 'Z'), and its own bit 7 is clear. */
    if (len >= 8 && len <= 16) {
        uint64_t w, t;
        memcpy(&w, name, 8);
        uint64_t l7 = w & 0x7f7f7f7f7f7f7f7full;
        if ((l7 + 0x3f3f3f3f3f3f3f3full) & ~(l7 + 0x2525252525252525ull) & ~w &
            0x8080808080808080ull) {
            memcpy(&t, name + len - 8, 8);
            memcpy(p, &w, 8);
            memcpy(p + len - 8, &t, 8);
            return p + len;
        }
    }
    return fy__h1_put_field_name_case(p, name, len);
}

#endif
