/* libFuzzer entry for the W3C Trace Context parsers (src/policy/trace.c): `traceparent` and
 * `tracestate` trimming take peer bytes. Traps when a parsed traceparent does not format back
 * to the same version-00 value (for version 00 input), when an id is all zeros, or when a trim
 * is longer than asked, ends on a separator or space, or cuts a member. */
#include "policy/trace.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    fy_traceparent_t tp;
    if (fy_traceparent_parse(p, size, &tp) == 0) {
        static const uint8_t zero[16];
        if (!memcmp(tp.trace_id, zero, 16) || !memcmp(tp.parent_id, zero, 8)) abort();
        char out[FY_TRACEPARENT_LEN + 1];
        fy_traceparent_format(&tp, out);
        if (strlen(out) != FY_TRACEPARENT_LEN) abort();
        if (tp.version == 0 && memcmp(out, p, FY_TRACEPARENT_LEN)) abort();
        fy_traceparent_t again;
        if (fy_traceparent_parse(out, FY_TRACEPARENT_LEN, &again) != 0) abort();
        if (memcmp(again.trace_id, tp.trace_id, 16) || again.flags != tp.flags) abort();
    }
    size_t max = size ? data[0] : 0;
    size_t k = fy_tracestate_trim(p, size, max);
    if (k > size || k > max) abort();
    if (k) {
        char last = p[k - 1];
        if (last == ',' || last == ' ' || last == '\t') abort();
        if (k < size && p[k] != ',' && p[k] != ' ' && p[k] != '\t') abort(); /* mid-member */
    }
    return 0;
}
