/* TLS ClientHello peek: a pure, bounded parser that reads the first flight of a TLS connection
 * (a stream of TLS records) or the CRYPTO stream of a QUIC Initial (bare handshake messages)
 * and extracts the server name (SNI) and the ALPN protocols, without terminating TLS.
 * Restartable by re-parsing: call again with a longer prefix of the same stream.
 * Threads: pure; no shared state, callable from any thread. */
#ifndef FY_L4_L4_HELLO_H
#define FY_L4_L4_HELLO_H

#include <stddef.h>
#include <stdint.h>

#define FY_L4_SNI_MAX 255
#define FY_L4_ALPN_MAX 128

/* Results (besides >0 = done). */
#define FY_L4_HELLO_NEED_MORE 0
#define FY_L4_HELLO_EBAD (-1)   /* not a TLS ClientHello, or malformed */
#define FY_L4_HELLO_ELIMIT (-2) /* the ClientHello does not fit in the bound */

typedef struct fy_l4_hello {
    char sni[FY_L4_SNI_MAX + 1]; /* lower-cased host_name, "" when the client sent none */
    size_t sni_len;
    /* ALPN protocol names as on the wire: each preceded by its length byte (truncated to
       FY_L4_ALPN_MAX bytes) */
    uint8_t alpn[FY_L4_ALPN_MAX];
    size_t alpn_len;
} fy_l4_hello_t;

/* Parse a TLS record stream `buf[0..len)` that should start with a ClientHello.
 * `max` bounds the bytes looked at (records included). `scratch` (at least min(len, max)
 * bytes, caller-owned) receives the reassembled handshake message.
 * Returns 1 and fills `out` when the whole ClientHello is there, FY_L4_HELLO_NEED_MORE when
 * `buf` is a valid but incomplete prefix, FY_L4_HELLO_ELIMIT when the ClientHello would need
 * more than `max` bytes, FY_L4_HELLO_EBAD when the bytes are not a ClientHello. */
int fy_l4_hello_parse_records(const uint8_t *buf, size_t len, size_t max, uint8_t *scratch,
                              fy_l4_hello_t *out);

/* Parse bare handshake bytes (a QUIC CRYPTO stream from offset 0). Same results; `max` bounds
 * the message length. */
int fy_l4_hello_parse_handshake(const uint8_t *hs, size_t len, size_t max, fy_l4_hello_t *out);

#endif
