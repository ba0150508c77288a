/* libFuzzer entry for the TLS ClientHello peek (src/l4/l4_hello.c). Parses the input as a record
 * stream whole and as every prefix length a TCP split could give (a sample of them), and traps
 * if a prefix says "done" with a different result than the whole, or if a shorter prefix
 * fails where the whole succeeded. Also runs the bare-handshake entry (QUIC CRYPTO data). */
#include "l4/l4_hello.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t scratch[1 << 17];
    if (size > sizeof scratch) return 0;
    size_t max = 16384;
    fy_l4_hello_t whole, part;
    int rw = fy_l4_hello_parse_records(data, size, max, scratch, &whole);
    if (rw > 0) {
        if (whole.sni_len != strlen(whole.sni) || whole.alpn_len > sizeof whole.alpn) abort();
        size_t step = size / 64 + 1;
        for (size_t n = 0; n < size; n += step) {
            int rp = fy_l4_hello_parse_records(data, n, max, scratch, &part);
            if (rp < 0) abort(); /* a prefix of a good hello is never bad */
            if (rp > 0 && (part.sni_len != whole.sni_len || strcmp(part.sni, whole.sni))) abort();
        }
    }
    fy_l4_hello_t h;
    int rh = fy_l4_hello_parse_handshake(data, size, max, &h);
    if (rh > 0 && h.sni_len != strlen(h.sni)) abort();
    return 0;
}
