/* libFuzzer driver: admin API request targets (peer bytes) through the target splitter and the
 * server-index parser, as the admin handler uses them. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/admin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char buf[FY_ADMIN_MAX_TARGET + 1];
    const char *seg[8];
    bool dry;
    int n = fy_admin_split_target((const char *)data, size, buf, seg, 8, &dry);
    for (int i = 0; i < n; i++) {
        if (strlen(seg[i]) > size) __builtin_trap();
        (void)fy_admin_parse_index(seg[i]);
    }
    return 0;
}
