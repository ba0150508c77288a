/* libFuzzer entry for the ClientHello server_name extension parser (fy_mint_parse_sni in
 * src/tls/mint.c): peer bytes seen while an intercepted handshake is paused. Checks that a
 * success yields a NUL-terminated, lowercase name of the returned length within the output,
 * made only of host-name bytes, for several output sizes. Prints nothing. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tls/mint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t caps[] = {1, 2, 16, 256};
    for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
        char *out = malloc(caps[k]);
        int n = fy_mint_parse_sni(data, size, out, caps[k]);
        if (n >= 0) {
            if ((size_t)n + 1 > caps[k] || n == 0 || out[n] != '\0' || strlen(out) != (size_t)n)
                abort();
            for (int i = 0; i < n; i++)
                if (isupper((unsigned char)out[i]) ||
                    !(isalnum((unsigned char)out[i]) || strchr(".-_", out[i])))
                    abort();
        }
        free(out);
    }
    return 0;
}
