/* libFuzzer driver: the dry-run diff. The input is two configs separated by the first NUL byte
 * (the running one and a POST /config body); when both load, they are diffed both ways. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "ops/admin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul) return 0;
    size_t n1 = (size_t)(nul - data);
    fy_config_t *a = fy_config_load_text("a.yaml", (const char *)data, n1, devnull);
    fy_config_t *b = fy_config_load_text("b.yaml", (const char *)nul + 1, size - n1 - 1, devnull);
    if (a && b) {
        fy_admin_diff(fy_config_table, a, b, devnull);
        fy_admin_diff(fy_config_table, b, a, devnull);
    }
    fy_config_free(a);
    fy_config_free(b);
    return 0;
}
