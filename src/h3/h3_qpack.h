/* The QPACK input path: one field section (a HEADERS frame payload) through nghttp3's QPACK
 * decoder, fields handed to a callback. Shared by the server codec and the fuzz driver.
 * Threads: a decoder belongs to one connection, on its worker thread. */
#ifndef FY_H3_H3_QPACK_H
#define FY_H3_H3_QPACK_H

#include <nghttp3/nghttp3.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*fy_h3_field_cb)(void *ud, const uint8_t *name, size_t nlen, const uint8_t *value,
                               size_t vlen);

#define FY_H3_QPACK_DONE 0
#define FY_H3_QPACK_BLOCKED 1 /* waits for encoder-stream inserts; call again with the rest */
#define FY_H3_QPACK_ERROR (-1)

/* Decode p[0..n) (a whole field section) for the stream of `sctx`; *used gets the bytes
 * consumed (on BLOCKED, call again later with p + *used). Returns DONE (sctx reset for the next
 * section), BLOCKED, or ERROR (*err names it: QPACK_DECOMPRESSION_FAILED and friends). */
int fy_h3_qpack_decode(nghttp3_qpack_decoder *dec, nghttp3_qpack_stream_context *sctx,
                       const uint8_t *p, size_t n, size_t *used, fy_h3_field_cb cb, void *ud,
                       const char **err);

#endif
