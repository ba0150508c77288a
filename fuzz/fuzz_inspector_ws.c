/* libFuzzer target: the WebSocket bytes of a captured tunnel, as the inspector's recorder
 * (ops/inspector_ws.c) parses them. The first byte splits the input between the directions
 * and sets the feed size. Invariants: at most FY_INSP_WS_MAX_MSGS messages, each keeping no
 * more payload than its size, and no direction keeping more than its budget. */
#include <stdint.h>
#include <stdlib.h>

#include "ops/inspector_ws.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t step = (data[0] & 0x1f) + 1, cut = size / 2;
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 4096);
    fy_insp_ws_t w;
    fy_insp_ws_init(&w, &a, 4096);
    for (size_t i = 1; i < size; i += step) {
        size_t k = i + step > size ? size - i : step;
        fy_insp_ws_feed(&w, i < cut, data + i, k);
    }
    if (w.n > FY_INSP_WS_MAX_MSGS) abort();
    uint64_t kept[2] = {0, 0};
    for (size_t i = 0; i < w.n; i++) {
        if (w.msgs[i].len > w.msgs[i].size) abort();
        kept[w.msgs[i].from_client] += w.msgs[i].len;
    }
    if (kept[0] > 4096 || kept[1] > 4096) abort();
    fy_arena_free(&a);
    return 0;
}
