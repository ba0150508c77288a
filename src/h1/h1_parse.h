/* Strict, zero-copy, restartable HTTP/1.1 request parser and chunked-body decoder (RFC 9112).
 *
 * The parser never allocates and never copies: every string it returns is a slice of the
 * caller's buffer. It is restartable in the picohttpparser sense: call it again with the same
 * buffer grown by more bytes; `fy_h1_req_t.scanned` remembers how far the head was already
 * searched for its end, so a head arriving byte by byte costs O(n) overall, not O(n^2).
 * Threads: pure; no shared state, callable from any thread. */
#ifndef FY_H1_PARSE_H
#define FY_H1_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parse results. `>0` is the number of bytes the head took (request line + headers + the
 * empty line); these are the other outcomes. */
#define FY_H1_INCOMPLETE (-2) /* need more bytes; nothing is wrong so far */

/* Errors: negative, each maps to one HTTP status chosen by the server codec. */
enum fy_h1_err {
    FY_H1_EBADREQ = -100,        /* 400: malformed request line or header syntax */
    FY_H1_EBADTARGET = -101,     /* 400: request-target has invalid bytes or form */
    FY_H1_EVERSION = -102,       /* 505: HTTP version other than 1.0 / 1.1 */
    FY_H1_EURI_TOO_LONG = -103,  /* 414: request line longer than limits.max_request_line */
    FY_H1_EHDR_TOO_LARGE = -104, /* 431: header section longer than limits.max_header_bytes */
    FY_H1_ETOO_MANY_HDRS = -105, /* 431: more than limits.max_headers header fields */
    FY_H1_EBADHDR = -106,        /* 400: bad byte in name/value, space before colon, bare CR, NUL */
    FY_H1_EOBSFOLD = -107,       /* 400: obsolete line folding */
    FY_H1_ECL_TE = -108,         /* 400: both Content-Length and Transfer-Encoding */
    FY_H1_EBADCL = -109,         /* 400: invalid Content-Length, or differing duplicates */
    FY_H1_EBADTE = -110,         /* 400: Transfer-Encoding other than a final "chunked" (501 for
                                    an unknown coding is not used: strict 400) */
    FY_H1_ENOHOST = -111,        /* 400: HTTP/1.1 request without Host, or more than one Host */
    FY_H1_EBADCHUNK = -112,      /* 400: malformed chunk size line, extension or terminator */
    FY_H1_ECHUNK_OVERFLOW = -113, /* 400: chunk size does not fit in 63 bits */
    FY_H1_EBADTRAILER = -114,     /* 400: malformed trailer field */
};

/* A slice of the caller's buffer. Not NUL-terminated. */
typedef struct fy_h1_str {
    const char *p;
    size_t len;
} fy_h1_str_t;

typedef struct fy_h1_header {
    fy_h1_str_t name;  /* as received (case preserved); validated as an RFC 9110 token */
    fy_h1_str_t value; /* leading/trailing OWS trimmed; validated field-vchar/SP/HTAB */
} fy_h1_header_t;

typedef struct fy_h1_limits {
    size_t max_request_line; /* bytes of the request line without CRLF; over it: 414 */
    size_t max_header_bytes; /* bytes of the whole head incl. request line; over it: 431 */
    size_t max_headers;      /* header fields; over it: 431. Also the capacity of `headers` */
} fy_h1_limits_t;

/* Body framing decided from the headers (RFC 9112 §6.3 for requests). */
enum fy_h1_body_kind {
    FY_H1_BODY_NONE = 0,    /* no Content-Length, no Transfer-Encoding: no body */
    FY_H1_BODY_LENGTH = 1,  /* Content-Length: `content_length` bytes (may be 0) */
    FY_H1_BODY_CHUNKED = 2, /* Transfer-Encoding: chunked */
};

typedef struct fy_h1_req {
    /* Filled by the parser on success; slices into the buffer. */
    fy_h1_str_t method;
    fy_h1_str_t target;      /* request-target as sent (origin-form, absolute-form, authority-form
                                for CONNECT, or "*" for OPTIONS) */
    int minor_version;       /* 0 or 1 */
    fy_h1_header_t *headers; /* caller-provided array of limits->max_headers entries */
    size_t nheaders;
    /* Derived from the headers while parsing (no second pass needed by the codec): */
    int body_kind;           /* enum fy_h1_body_kind */
    uint64_t content_length; /* valid when body_kind == FY_H1_BODY_LENGTH */
    fy_h1_str_t host;        /* the Host value, empty if absent (HTTP/1.0) */
    bool conn_close;         /* Connection: close (or HTTP/1.0 without keep-alive) */
    bool conn_keep_alive;    /* Connection: keep-alive present */
    bool expect_continue;    /* Expect: 100-continue */
    bool conn_upgrade;       /* Connection: upgrade and an Upgrade header present */
    /* Parser state: set to 0 by fy_h1_req_init; keep it between calls on the same buffer.
     * Setting `scanned` to 0 alone also restarts the parse (line_start is then ignored). */
    size_t scanned;
    size_t line_start; /* private: start of the request line while it is incomplete, SIZE_MAX
                          once it is complete; meaningful only while scanned > 0 */
} fy_h1_req_t;

/* Prepare `req` for a new request. `headers` must hold limits->max_headers entries; it is
 * borrowed for the life of the parse. */
void fy_h1_req_init(fy_h1_req_t *req, fy_h1_header_t *headers);

/* Parse a request head from buf[0..len).
 * Returns the head length (>0) when the head is complete and valid; FY_H1_INCOMPLETE when more
 * bytes are needed (and the limits are not yet exceeded); or a negative enum fy_h1_err.
 * Leading empty lines before the request line (RFC 9112 §2.2) are skipped and counted in the
 * returned length (and in limits.max_header_bytes). Bare LF line endings are accepted; a CR not
 * followed by LF is an error.
 * Only the limit errors (EURI_TOO_LONG, EHDR_TOO_LARGE) can be returned before the end of the
 * head has arrived; every other outcome is decided once the empty line ending the head is seen,
 * so feeding a request in pieces gives the same result as feeding it whole.
 * Never reads buf[len] or beyond. Pure: no allocation, no global state. */
int fy_h1_parse_request(fy_h1_req_t *req, const char *buf, size_t len,
                        const fy_h1_limits_t *limits);

/* The HTTP status the server codec answers for a parser error (400, 414, 431, 505). */
int fy_h1_err_status(int err);
/* A short, static, human-readable reason for a parser error, for the log ("bare CR in header"). */
const char *fy_h1_err_str(int err);

/* Case-insensitive compare of a slice with a NUL-terminated lowercase literal. */
bool fy_h1_str_eq_lit(fy_h1_str_t s, const char *lower_lit);

/* ---- chunked transfer coding (RFC 9112 §7.1) ---- */

typedef struct fy_h1_chunked {
    /* all private; zero it (fy_h1_chunked_init) before the first call */
    int state;
    uint64_t remaining; /* bytes left in the current chunk's data */
    size_t line_len;    /* bytes of the current size/trailer line seen, bounded */
    size_t trailer_bytes;
    int nhex;
} fy_h1_chunked_t;

void fy_h1_chunked_init(fy_h1_chunked_t *c);

/* Decode chunked bytes from in[0..len), never copying data: for each piece of chunk data found,
 * calls on_data(ud, ptr, n) with a slice of `in`; trailer fields (after the last chunk) are
 * passed to on_trailer(ud, name, value) if not NULL (the slices are valid only during the call,
 * and a trailer line split across calls is buffered by the caller re-feeding: see below).
 * `*consumed` is set to the bytes of `in` consumed.
 * Returns 1 when the terminating empty line after the last chunk (and trailers) was consumed,
 * 0 when all of `in` was consumed (or a trailer line is incomplete: then *consumed stops at the
 * start of that line and the caller must call again with that line's bytes plus more),
 * or a negative enum fy_h1_err (FY_H1_EBADCHUNK, FY_H1_ECHUNK_OVERFLOW, FY_H1_EBADTRAILER,
 * FY_H1_EHDR_TOO_LARGE when trailers exceed max_trailer_bytes).
 * Chunk extensions are accepted when syntactically valid and ignored. Size lines longer than
 * 1024 bytes (without CRLF), and chunk sizes of more than 16 hex digits (leading zeros
 * included) are an error. `max_trailer_bytes` bounds the trailer field lines including their
 * CRLFs (the final empty line is not counted). Errors are sticky: once one is returned, later
 * calls return it again and consume nothing. */
int fy_h1_chunked_decode(fy_h1_chunked_t *c, const char *in, size_t len, size_t *consumed,
                         size_t max_trailer_bytes,
                         void (*on_data)(void *ud, const char *p, size_t n),
                         void (*on_trailer)(void *ud, fy_h1_str_t name, fy_h1_str_t value),
                         void *ud);

#endif
