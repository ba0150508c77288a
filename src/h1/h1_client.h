/* HTTP/1.1 client codec (origins): one exchange at a time on one origin connection, behind the
 * same stream-ops shape as the HTTP/2 and HTTP/3 client codecs (h2/h2_client.h), so that the
 * proxy maps an exchange to an origin stream in one code path whatever the origin speaks.
 *
 * The codec owns the HTTP/1.1 state machine: request head serialisation from a field list
 * (pseudo-headers first, as for h2), request body framing (Content-Length or chunked, the
 * request's trailers after the last chunk), the response head (h1/h1_resp.c), 1xx, body
 * framing and chunked decoding, Upgrade (101: raw bytes both ways, the end of the request body
 * becomes a half-close), early responses, and the keep-alive decision. It does not decide:
 * retries, timeouts, header rules and balancing are its owner's.
 *
 * It reads and writes the transport it is given, but knows no loop: its owner forwards
 * readiness (fy_h1_client_io) and is told which readiness to watch through `want`.
 *
 * Differences from the h2 contract, both for zero copy on the hot path:
 *  - on_data's bytes stay valid until the owner calls fy_h1_client_consume for all of them;
 *    the codec reads nothing more until then (that is the backpressure). on_end may follow
 *    while they are still unconsumed (the last piece and the end arrive together).
 *  - submit takes the request body length (0 none, >0 Content-Length, -1 chunked).
 * Threads: a codec instance lives on its origin connection's worker thread only. */
#ifndef FY_H1_H1_CLIENT_H
#define FY_H1_H1_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/arena.h"
#include "core/transport.h"
#include "h1/h1_parse.h"
#include "http/client_stream.h"
#include "http/exchange.h"

typedef struct fy_h1_client fy_h1_client_t;

/* Streams use http/client_stream.h's ops (see the header comment for on_data and ref_body)
 * and its errors: FY_CLIENT_CONN (code 1 when the origin closed the connection before any
 * response head, i.e. its failure; 0 otherwise) and FY_CLIENT_PROTOCOL (code 1). on_head's
 * `hs` (names as received, no pseudo-headers) and its strings are arena memory. */

/* Readiness the codec waits for on the transport's fd: EPOLLIN and/or EPOLLOUT. Returns 0 or
 * <0 (then the codec fails the stream with FY_CLIENT_CONN). */
typedef int (*fy_h1_client_want_fn)(void *ud, uint32_t events);

/* A codec for one request on `t` (connected, handshake done); `ops` get `ud`, `want` gets
 * `want_ud`; its heads and fields live in
 * arena `a`, its buffers come from the chunk pool (until fy_h1_client_free). `limits` bound the
 * response head; `head_request`: the request is HEAD (no response body whatever the head says). */
fy_h1_client_t *fy_h1_client_new(fy_arena_t *a, fy_transport_t *t, const fy_h1_limits_t *limits,
                                 bool head_request, const fy_client_stream_ops_t *ops,
                                 fy_h1_client_want_fn want, void *want_ud, void *ud);

/* Send the request: `hs` pseudo-headers first (":method", ":authority", ":path", optional
 * ":protocol" which makes it an Upgrade: CONNECT becomes GET, a WebSocket key is made up when
 * the fields have none), then the fields (Host, Content-Length, Transfer-Encoding, Connection,
 * Upgrade and TE among them are ignored: the codec writes its own; cookie crumbs are joined).
 * `body_len`: 0 no body, >0 its length, -1 chunked (pulled through read_body). Writes what
 * it can at once. */
void fy_h1_client_submit(fy_h1_client_t *c, const fy_headers_t *hs, int64_t body_len);
/* Readiness (EPOLLIN/EPOLLOUT/EPOLLHUP/EPOLLERR) on the transport's fd. */
void fy_h1_client_io(fy_h1_client_t *c, uint32_t events);
/* `n` bytes given to on_data were passed on (all of them, in order). */
void fy_h1_client_consume(fy_h1_client_t *c, size_t n);
/* More request body is available after read_body deferred. */
void fy_h1_client_resume(fy_h1_client_t *c);
/* Whether request bytes are still to go out (body not all pulled, or queued): after a
 * complete early response the codec goes on sending them, and release says the connection is
 * reusable only once they are out. */
bool fy_h1_client_sending(const fy_h1_client_t *c);
/* Whether any response byte arrived (a pooled connection that closed without one was stale). */
bool fy_h1_client_got_bytes(const fy_h1_client_t *c);
/* Done: no more callbacks and no more transport use (the connection may go back to a pool at
 * once). Returns whether the connection may carry another request (both messages complete and
 * delimited, no extra bytes, no close, no upgrade). Bytes given to on_data stay valid. */
bool fy_h1_client_release(fy_h1_client_t *c);
/* After release, once on_data's bytes are no longer needed: buffers back to the pool, and
 * the codec freed (at once, or when the call into it that led here returns). Every codec
 * made must be freed. */
void fy_h1_client_free(fy_h1_client_t *c);

#endif
