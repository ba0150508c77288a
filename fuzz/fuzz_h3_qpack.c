/* libFuzzer driver: the QPACK input path of the h3 codec. Input: 2 bytes (big-endian length
 * of the encoder-stream part), the encoder stream (peer's inserts, fed to nghttp3's decoder as
 * the codec does), then one field section decoded by fy_h3_qpack_decode (h3/h3_qpack.c) with
 * the codec's table capacity and blocked-stream limit. Decoder-stream output is drained. */
#include <nghttp3/nghttp3.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "h3/h3_qpack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void field(void *ud, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
    size_t *total = ud;
    *total += nl + vl;
    if (nl && n[0] == 0xff && vl && v[vl - 1] == 0xff) *total += 1; /* touch every byte's ends */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t elen = ((size_t)data[0] << 8 | data[1]) % (size - 1);
    const uint8_t *enc = data + 2, *blk = data + 2 + elen;
    size_t blen = size - 2 - elen;
    const nghttp3_mem *mem = nghttp3_mem_default();
    nghttp3_qpack_decoder *dec;
    if (nghttp3_qpack_decoder_new(&dec, 4096, 16, mem) != 0) return 0;
    nghttp3_qpack_decoder_set_max_concurrent_streams(dec, 108);
    nghttp3_qpack_stream_context *sctx;
    if (nghttp3_qpack_stream_context_new(&sctx, 0, mem) != 0) {
        nghttp3_qpack_decoder_del(dec);
        return 0;
    }
    if (nghttp3_qpack_decoder_read_encoder(dec, enc, elen) >= 0) {
        size_t used = 0, total = 0;
        const char *err = NULL;
        int r = fy_h3_qpack_decode(dec, sctx, blk, blen, &used, field, &total, &err);
        if (r == FY_H3_QPACK_ERROR && !err) __builtin_trap();
        if (used > blen) __builtin_trap();
        size_t dl = nghttp3_qpack_decoder_get_decoder_streamlen(dec);
        if (dl) {
            uint8_t *b = malloc(dl);
            nghttp3_buf buf = {b, b + dl, b, b};
            nghttp3_qpack_decoder_write_decoder(dec, &buf);
            free(b);
        }
    }
    nghttp3_qpack_stream_context_del(sctx);
    nghttp3_qpack_decoder_del(dec);
    return 0;
}
