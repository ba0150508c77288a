/* RFC 9113 §8 checks of a request's header fields and body length, done by Ferry instead of
 * nghttp2 (its HTTP messaging is off: nghttp2_option_set_no_http_messaging), with the same
 * verdicts as nghttp2 1.52: every failure is a stream error PROTOCOL_ERROR. No state but the
 * caller's fy_h2_check_t (one per stream); no allocation; thread-safe. */
#ifndef FY_H2_H2_CHECK_H
#define FY_H2_H2_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    FY_H2K_METHOD = 1 << 0,
    FY_H2K_SCHEME = 1 << 1,
    FY_H2K_PATH = 1 << 2,
    FY_H2K_AUTHORITY = 1 << 3,
    FY_H2K_PROTOCOL = 1 << 4,
    FY_H2K_HOST = 1 << 5,
    FY_H2K_CONNECT = 1 << 6,    /* :method CONNECT */
    FY_H2K_OPTIONS = 1 << 7,    /* :method OPTIONS */
    FY_H2K_PATH_SLASH = 1 << 8, /* :path starts with '/' */
    FY_H2K_PATH_STAR = 1 << 9,  /* :path is "*" */
    FY_H2K_HTTP = 1 << 10,      /* :scheme http or https (any case) */
    FY_H2K_REGULAR = 1 << 11,   /* a regular field was seen: no more pseudo-headers */
    FY_H2K_CL = 1 << 12,        /* content-length was given (cl) */
};

typedef struct fy_h2_check {
    uint16_t flags;
    int64_t cl;    /* content-length, when FY_H2K_CL */
    uint64_t recv; /* DATA payload bytes received */
} fy_h2_check_t;

/* One field of a request head (trailer: of its trailers). `nstatic`/`vstatic`: the bytes are
 * HPACK's static table's, valid by construction (their characters are not looked at). 0, or
 * -1: the request is malformed. */
int fy__h2_check_field(fy_h2_check_t *k, const uint8_t *name, size_t nlen, bool nstatic,
                       const uint8_t *value, size_t vlen, bool vstatic, bool trailer);
/* The head is complete: are the pseudo-headers it needs there (§8.3.1, §8.5, RFC 8441 §4)? */
bool fy__h2_check_head(const fy_h2_check_t *k);
/* `n` more DATA bytes: false once past content-length. */
bool fy__h2_check_data(fy_h2_check_t *k, size_t n);
/* END_STREAM: false when content-length was given and the DATA do not add up to it. */
bool fy__h2_check_end(const fy_h2_check_t *k);

/* The character rules, exposed for the unit test (nghttp2's own functions are its oracle). */
bool fy__h2_valid_name(const uint8_t *p, size_t n);   /* a lower-case token, ':' first allowed */
bool fy__h2_valid_value(const uint8_t *p, size_t n);  /* RFC 9113 §8.2.1 */
bool fy__h2_valid_method(const uint8_t *p, size_t n); /* a token */
bool fy__h2_valid_path(const uint8_t *p, size_t n);
bool fy__h2_valid_authority(const uint8_t *p, size_t n);
bool fy__h2_valid_scheme(const uint8_t *p, size_t n); /* ALPHA *( ALPHA / DIGIT / + - . ) */

#endif
