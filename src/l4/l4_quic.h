/* QUIC v1 Initial decoder for passthrough routing (RFC 9000 §17.2, RFC 9001 §5): derive the
 * client's Initial keys from the Destination Connection ID, remove header protection, decrypt
 * the payload, and collect its CRYPTO frames into a bounded reassembly buffer until the
 * ClientHello inside is complete. Pure (no sockets); OpenSSL for HKDF, AES-ECB and AES-GCM.
 * Threads: pure; no shared state, callable from any thread. */
#ifndef FY_L4_L4_QUIC_H
#define FY_L4_L4_QUIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "l4/l4_hello.h"

#define FY_QUIC_V1 0x00000001u
#define FY_QUIC_CID_MAX 20

/* What the first bytes of a datagram say (no decryption). */
typedef struct fy_quic_hdr {
    bool is_long;
    uint32_t version; /* long header only */
    int type;         /* long header packet type (0 = Initial) */
    uint8_t dcid[FY_QUIC_CID_MAX];
    size_t dcid_len; /* long header only (short headers carry no length) */
    uint8_t scid[FY_QUIC_CID_MAX];
    size_t scid_len;
} fy_quic_hdr_t;

/* Parse the invariant header of the first packet of a datagram (RFC 8999).
 * Returns 0, or -1 when the bytes are not QUIC. */
int fy_quic_parse_hdr(const uint8_t *d, size_t len, fy_quic_hdr_t *h);

/* CRYPTO stream reassembly of one connection's Initial packets. */
typedef struct fy_quic_crypto {
    uint8_t *buf;  /* owned: `cap` bytes */
    uint8_t *have; /* owned: bitmap of received bytes */
    size_t cap;    /* bound on the ClientHello size */
    size_t contig; /* bytes received without a gap from offset 0 */
} fy_quic_crypto_t;

/* Returns 0 or -ENOMEM. */
int fy_quic_crypto_init(fy_quic_crypto_t *c, size_t cap);
void fy_quic_crypto_free(fy_quic_crypto_t *c);

/* Feed one client datagram (QUIC v1): every coalesced Initial packet in it is decrypted and its
 * CRYPTO frames stored. Returns 1 with `out` filled once the ClientHello is complete,
 * FY_L4_HELLO_NEED_MORE when more Initials are needed, FY_L4_HELLO_EBAD for a packet that does
 * not decrypt or parse, FY_L4_HELLO_ELIMIT when the ClientHello exceeds the bound. */
int fy_quic_initial_feed(fy_quic_crypto_t *c, const uint8_t *d, size_t len, fy_l4_hello_t *out);

#endif
