/* libFuzzer entry for the SOCKS5 parser (src/handler/socks5.c): data[0] picks the stage, the
 * rest is fed whole and then byte by byte (growing prefixes), which must agree; a success
 * takes no more than it was given and yields NUL-terminated strings. Prints nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "handler/socks5.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int stage = data[0] % 3;
    const unsigned char *p = data + 1;
    size_t len = size - 1;
    fy_socks5_msg_t a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    int r = fy_socks5_parse(stage, p, len, &a);
    if (r > (int)len) abort();
    if (r > 0 &&
        (memchr(a.host, 0, sizeof a.host) == NULL || a.user_len > 255 || a.pass_len > 255 ||
         (stage == FY_SOCKS5_REQUEST && (a.port < 1 || a.port > 65535))))
        abort();
    /* growing prefixes: incomplete until the whole message is there, then the same answer */
    int last = 0;
    for (size_t n = 0; n <= len; n++) {
        last = fy_socks5_parse(stage, p, n, &b);
        if (last != 0) break;
    }
    if (last != r) abort();
    if (r > 0 && (strcmp(a.host, b.host) != 0 || a.port != b.port || a.methods != b.methods))
        abort();
    return 0;
}
