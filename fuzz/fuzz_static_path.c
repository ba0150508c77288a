/* libFuzzer target: request paths through the static handler's decoder/normaliser, and HTTP
 * dates through the If-Modified-Since parser. Invariants: the result never starts with '/',
 * never contains a ".." segment, and stays within the output buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "handler/static.h"
#include "http/exchange.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char out[512];
    int n = fy_static_normalize((const char *)data, size, out, sizeof out);
    if (n >= 0) {
        if ((size_t)n >= sizeof out || out[n] != '\0') abort();
        if (n > 0 && out[0] == '/') abort();
        /* no ".." segment may survive */
        for (int i = 0; i + 1 < n; i++)
            if (out[i] == '.' && out[i + 1] == '.' && (i == 0 || out[i - 1] == '/') &&
                (i + 2 == n || out[i + 2] == '/'))
                abort();
    }
    (void)fy_http_date_parse(fy_str((const char *)data, size));
    return 0;
}
