/* libFuzzer entry for the PROXY protocol v1/v2 parser (src/l4/l4_proxy.c). A header that parses
 * with addresses is rebuilt in both versions and parsed again: the addresses must survive. */
#include "l4/l4_proxy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sockaddr_storage src, dst, s2, d2;
    bool has = false, has2 = false;
    int r = fy_l4_proxy_parse(data, size, &src, &dst, &has);
    if (r > (int)size || r > FY_L4_PROXY_MAX) abort();
    if (r > 0 && has) {
        for (int v = 1; v <= 2; v++) {
            uint8_t out[FY_L4_PROXY_MAX];
            size_t n = fy_l4_proxy_build(v, (struct sockaddr *)&src, (struct sockaddr *)&dst, out);
            int r2 = fy_l4_proxy_parse(out, n, &s2, &d2, &has2);
            if (r2 != (int)n || !has2) abort();
            if (src.ss_family != s2.ss_family || dst.ss_family != d2.ss_family) abort();
        }
    }
    return 0;
}
