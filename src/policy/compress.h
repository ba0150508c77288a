/* The compression filter (stage FY_STAGE_COMPRESS, `compress:` per route): a sink layer that
 * encodes the response body with gzip (zlib), br (brotli) or zstd as the client's
 * Accept-Encoding prefers, streaming: each send is compressed and flushed on its own, so
 * nothing is buffered beyond one send. Static files (send_file) are read in `file-chunk` pieces
 * at the client's pace (the layer becomes the producer for them). It never touches HEAD, 1xx,
 * 204, 304, 206 or Content-Range responses, already-encoded bodies, `Cache-Control:
 * no-transform`, types not listed, or bodies known to be smaller than `min-size`; it adds
 * `Vary: Accept-Encoding` to every response of a compressible type, removes Content-Length and
 * Accept-Ranges and weakens a strong ETag when it compresses.
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
