/* libFuzzer driver: arbitrary bytes as an HTTP/3 stream through our framing layer
 * (h3/h3_frame.c): frame headers fed in pieces of varying size (the first byte picks the piece
 * pattern), SETTINGS payloads parsed, GOAWAY/MAX_PUSH_ID ids decoded, varints round-tripped. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "h3/h3_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t count_setting(void *ud, uint64_t id, uint64_t v)
{
    (*(size_t *)ud)++;
    return id == 0x21 && v == 0x21 ? 1 : 0; /* a callback that sometimes refuses */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    unsigned pattern = data[0];
    data++;
    size--;
    fy_h3_frame_rd_t rd;
    memset(&rd, 0, sizeof rd);
    static uint8_t payload[4096];
    size_t plen = 0, at = 0, step = 0;
    while (at < size) {
        size_t piece = 1 + ((pattern >> (step++ % 8)) & 7) * 97;
        if (piece > size - at) piece = size - at;
        const uint8_t *p = data + at;
        size_t n = piece;
        at += piece;
        while (n) {
            if (!rd.have_hdr) {
                size_t k = fy_h3_frame_hdr_feed(&rd, p, n);
                p += k;
                n -= k;
                plen = 0;
                if (!rd.have_hdr) break;
                if (rd.len > sizeof payload &&
                    (rd.type == FY_H3_SETTINGS || rd.type == FY_H3_GOAWAY))
                    return 0; /* the codec closes the connection: EXCESSIVE_LOAD */
            } else {
                size_t take = n < rd.left ? n : (size_t)rd.left;
                if (plen + take <= sizeof payload) memcpy(payload + plen, p, take);
                plen += take;
                p += take;
                n -= take;
                rd.left -= take;
            }
            if (rd.have_hdr && rd.left == 0) {
                rd.have_hdr = false;
                if (rd.type == FY_H3_SETTINGS && plen <= sizeof payload) {
                    size_t nset = 0;
                    (void)fy_h3_settings_parse(payload, plen, count_setting, &nset);
                } else if ((rd.type == FY_H3_GOAWAY || rd.type == FY_H3_MAX_PUSH_ID) &&
                           plen <= sizeof payload) {
                    uint64_t id;
                    (void)fy_h3_varint_decode(payload, plen, &id);
                }
                (void)fy_h3_frame_is_h2_reserved(rd.type);
            }
        }
    }
    /* varints: decode what is there, encode it back, compare */
    for (size_t i = 0; i + 8 <= size; i += 8) {
        uint64_t v, w;
        size_t l = fy_h3_varint_decode(data + i, 8, &v);
        uint8_t b[8];
        size_t e = fy_h3_varint_encode(b, v);
        if (!l || e != fy_h3_varint_len(v) || fy_h3_varint_decode(b, e, &w) != e || w != v)
            __builtin_trap();
    }
    return 0;
}
