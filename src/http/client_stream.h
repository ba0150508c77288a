/* The stream contract every client codec (h1/h1_client.h, h2/h2_client.h, h3/h3_client.h)
 * offers its owner, so that the origin side (upstream/origin.h) drives all three the same way.
 * Thread: a stream and its codec belong to one worker's loop; every call and callback runs
 * there. */
#ifndef FY_HTTP_CLIENT_STREAM_H
#define FY_HTTP_CLIENT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "http/exchange.h"

/* read_body's "nothing now, I will call the codec's resume" */
#define FY_CLIENT_DEFER (-2)

/* Errors an origin stream can end with (on_error's `kind`), whatever the protocol. */
enum fy_client_error {
    FY_CLIENT_RESET = 1, /* the origin reset the stream (code: the protocol's error code) */
    FY_CLIENT_REFUSED,   /* refused (REFUSED_STREAM, H3_REQUEST_REJECTED, past GOAWAY): not
                            processed, so retryable */
    FY_CLIENT_CONN,      /* the connection failed or closed (h1: code 1 when the origin closed
                            it before any response head, i.e. its failure; 0 otherwise) */
    FY_CLIENT_PROTOCOL,  /* the origin's response broke the protocol's or HTTP's rules */
};

/* What a stream's owner implements. `ud` is the owner's pointer given when the stream was
 * opened. The owner may call the codec's consume/resume/release from inside any callback, but
 * must not free the codec (h2/h3 client) from there. */
typedef struct fy_client_stream_ops {
    /* A response head: interim (1xx) ones first, then the final one (h1: also 101). `hs`
       (no pseudo-headers; lowercase names for h2/h3, as received for h1) and its strings are
       memory of the arena given at submit. `end`: no body follows; on_end comes next. */
    void (*on_head)(void *ud, int status, fy_headers_t *hs, bool end);
    /* Response body bytes. h2/h3: borrowed for the call only. h1: valid until the owner
       consumed all of them (upstream/origin.h lends every protocol's bytes that way). */
    void (*on_data)(void *ud, const char *p, size_t n);
    /* The response is complete; `trailers` (may be empty) are arena memory. No more calls. */
    void (*on_end)(void *ud, fy_headers_t *trailers);
    /* The stream failed (fy_client_error `kind`, protocol `code` or 0); no more callbacks. */
    void (*on_error)(void *ud, int kind, uint64_t code, const char *why);
    /* Up to `len` bytes of request body into buf: n > 0, 0 at the end (*trailers set to the
       request's trailers or NULL), or FY_CLIENT_DEFER. */
    ssize_t (*read_body)(void *ud, char *buf, size_t len, const fy_headers_t **trailers);
    /* Optional (h1 uses it when set, instead of read_body): the same, but *p is set to the
       owner's bytes instead of copying them; valid until the next call or the release. */
    ssize_t (*ref_body)(void *ud, const char **p, size_t len, const fy_headers_t **trailers);
} fy_client_stream_ops_t;

#endif
