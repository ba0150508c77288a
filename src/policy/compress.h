/* The compression filter (stage FY_STAGE_COMPRESS, `compress:` per route): a sink layer that
 * encodes the response body with gzip (zlib, libdeflate), br (brotli) or zstd as the client's
 * Accept-Encoding prefers. A gzip or zstd body whose length is known (Content-Length, or a first
 * send that is also the last) and at most `one-shot-max` is held until whole and compressed in one
 * call (compress_oneshot.h: libdeflate for gzip), its Content-Length then the compressed length;
 * while it holds a piece the layer stands in for the handler's producer (a deferred proceed
 * asks for the next, a stop cancels it). Any other body streams: each send is compressed and
 * flushed on its own, so nothing is buffered beyond one send, and static files (send_file) are
 * read in `file-chunk` pieces at the client's pace (the layer becomes the producer for them).
 * A body longer than it announced leaves the one-shot path and streams, held bytes first. It never
 * touches HEAD, 1xx, 204, 304, 206 or Content-Range responses, already-encoded bodies,
 * `Cache-Control: no-transform`, types not listed, or bodies known to be smaller than `min-size`;
 * it adds `Vary: Accept-Encoding` to every response of a compressible type, removes Accept-Ranges
 * and weakens a strong ETag when it compresses, and removes Content-Length when it streams.
 *
 * Threads: made and destroyed on the main thread; the layer lives in the exchange's arena on
 * its worker. */
#ifndef FY_POLICY_COMPRESS_H
#define FY_POLICY_COMPRESS_H

#include <stddef.h>

#include "http/filter.h"
#include "policy/compress_conf.h"

/* The filter for `conf` (borrowed for the generation's life), or NULL with err. */
fy_filter_t *fy_compress_filter_new(const fy_compress_conf_t *conf, char *err, size_t errlen);

#endif
