/* libFuzzer driver: arbitrary bytes as the capsule stream of a WebTransport CONNECT stream
 * (h3/h3_wt.c's capsule reader), fed in pieces whose sizes the first byte picks; a CLOSE's
 * reason is re-serialized and read back; the error-code mapping is round-tripped. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "h3/h3_wt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    unsigned pattern = data[0];
    data++;
    size--;
    fy_wt_capsule_rd_t rd;
    memset(&rd, 0, sizeof rd);
    size_t at = 0, step = 0;
    while (at < size) {
        size_t piece = 1 + ((pattern >> (step++ % 8)) & 7) * 61;
        if (piece > size - at) piece = size - at;
        fy_wt_capsule_ev_t ev;
        size_t u = fy_wt_capsule_feed(&rd, data + at, piece, &ev);
        if (u > piece) abort();
        at += u;
        if (ev.kind == -1) break;
        if (ev.kind == 1) {
            if (ev.reason_len > FY_WT_CLOSE_REASON_MAX) abort();
            static uint8_t b[16 + 4 + FY_WT_CLOSE_REASON_MAX];
            size_t k = fy_wt_capsule_close(b, ev.code, ev.reason, ev.reason_len);
            fy_wt_capsule_rd_t rd2;
            memset(&rd2, 0, sizeof rd2);
            fy_wt_capsule_ev_t ev2;
            uint32_t code = ev.code;
            size_t rl = ev.reason_len;
            if (fy_wt_capsule_feed(&rd2, b, k, &ev2) != k || ev2.kind != 1 || ev2.code != code ||
                ev2.reason_len != rl)
                abort();
            if (fy_wt_code_from_h3(fy_wt_code_to_h3(code)) != (int64_t)code) abort();
        }
        if (u == 0 && ev.kind == 0) abort(); /* no progress without an event */
    }
    return 0;
}
