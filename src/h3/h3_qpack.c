/* QPACK field-section decoding on nghttp3 (see h3_qpack.h). */
#include "h3/h3_qpack.h"

int fy_h3_qpack_decode(nghttp3_qpack_decoder *dec, nghttp3_qpack_stream_context *sctx,
                       const uint8_t *p, size_t n, size_t *used, fy_h3_field_cb cb, void *ud,
                       const char **err)
{
    size_t off = 0;
    for (;;) {
        nghttp3_qpack_nv nv;
        uint8_t flags = 0;
        nghttp3_ssize r =
            nghttp3_qpack_decoder_read_request(dec, sctx, &nv, &flags, p + off, n - off, 1);
        if (r < 0) {
            *used = off;
            *err = nghttp3_strerror((int)r);
            return FY_H3_QPACK_ERROR;
        }
        off += (size_t)r;
        if (flags & NGHTTP3_QPACK_DECODE_FLAG_BLOCKED) {
            *used = off;
            return FY_H3_QPACK_BLOCKED;
        }
        if (flags & NGHTTP3_QPACK_DECODE_FLAG_EMIT) {
            nghttp3_vec a = nghttp3_rcbuf_get_buf(nv.name), b = nghttp3_rcbuf_get_buf(nv.value);
            cb(ud, a.base, a.len, b.base, b.len);
            nghttp3_rcbuf_decref(nv.name);
            nghttp3_rcbuf_decref(nv.value);
        }
        if (flags & NGHTTP3_QPACK_DECODE_FLAG_FINAL) break;
        if (r == 0 && !(flags & NGHTTP3_QPACK_DECODE_FLAG_EMIT)) {
            *used = off;
            *err = "truncated field section";
            return FY_H3_QPACK_ERROR;
        }
    }
    *used = off;
    nghttp3_qpack_stream_context_reset(sctx);
    return FY_H3_QPACK_DONE;
}
