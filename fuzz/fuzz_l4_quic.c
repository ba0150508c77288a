/* libFuzzer entry for the QUIC v1 Initial decoder (src/l4/l4_quic.c): the input is split into
 * datagrams at 0xff 0xfe 0xfd markers and fed to one reassembly state, as a flow's first
 * datagrams would be. Header parsing of every datagram is exercised too. Prints nothing. */
#include "l4/l4_quic.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fy_quic_crypto_t c;
    if (fy_quic_crypto_init(&c, 4096) < 0) return 0;
    size_t o = 0;
    while (o <= size) {
        const uint8_t *e = NULL;
        for (size_t i = o; i + 2 < size; i++)
            if (data[i] == 0xff && data[i + 1] == 0xfe && data[i + 2] == 0xfd) {
                e = data + i;
                break;
            }
        size_t len = e ? (size_t)(e - (data + o)) : size - o;
        fy_quic_hdr_t h;
        if (fy_quic_parse_hdr(data + o, len, &h) == 0 && h.is_long &&
            (h.dcid_len > FY_QUIC_CID_MAX || h.scid_len > FY_QUIC_CID_MAX))
            abort();
        fy_l4_hello_t hello;
        int r = fy_quic_initial_feed(&c, data + o, len, &hello);
        if (c.contig > c.cap) abort();
        if (r > 0 && hello.sni_len != strlen(hello.sni)) abort();
        if (r != FY_L4_HELLO_NEED_MORE) break;
        if (!e) break;
        o += len + 3;
    }
    fy_quic_crypto_free(&c);
    return 0;
}
