/* HTTP/3 framing (RFC 9114 §7): QUIC variable-length integers, an incremental frame-header
 * reader, SETTINGS payloads, and the error, frame, stream-type and setting codepoints. Pure
 * functions over bytes: no allocation, no I/O.
 * Threads: pure; no shared state, callable from any thread. */
#ifndef FY_H3_H3_FRAME_H
#define FY_H3_H3_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* frame types */
#define FY_H3_DATA 0x0u
#define FY_H3_HEADERS 0x1u
#define FY_H3_CANCEL_PUSH 0x3u
#define FY_H3_SETTINGS 0x4u
#define FY_H3_PUSH_PROMISE 0x5u
#define FY_H3_GOAWAY 0x7u
#define FY_H3_MAX_PUSH_ID 0xdu

/* unidirectional stream types */
#define FY_H3_STREAM_CONTROL 0x0u
#define FY_H3_STREAM_PUSH 0x1u
#define FY_H3_STREAM_QPACK_ENCODER 0x2u
#define FY_H3_STREAM_QPACK_DECODER 0x3u

/* settings */
#define FY_H3_SETTINGS_QPACK_MAX_TABLE_CAPACITY 0x1u
#define FY_H3_SETTINGS_MAX_FIELD_SECTION_SIZE 0x6u
#define FY_H3_SETTINGS_QPACK_BLOCKED_STREAMS 0x7u
#define FY_H3_SETTINGS_ENABLE_CONNECT_PROTOCOL 0x8u
#define FY_H3_SETTINGS_H3_DATAGRAM 0x33u

/* error codes (RFC 9114 §8.1, RFC 9204 §6) */
#define FY_H3_NO_ERROR 0x100u
#define FY_H3_GENERAL_PROTOCOL_ERROR 0x101u
#define FY_H3_INTERNAL_ERROR 0x102u
#define FY_H3_STREAM_CREATION_ERROR 0x103u
#define FY_H3_CLOSED_CRITICAL_STREAM 0x104u
#define FY_H3_FRAME_UNEXPECTED 0x105u
#define FY_H3_FRAME_ERROR 0x106u
#define FY_H3_EXCESSIVE_LOAD 0x107u
#define FY_H3_ID_ERROR 0x108u
#define FY_H3_SETTINGS_ERROR 0x109u
#define FY_H3_MISSING_SETTINGS 0x10au
#define FY_H3_REQUEST_REJECTED 0x10bu
#define FY_H3_REQUEST_CANCELLED 0x10cu
#define FY_H3_REQUEST_INCOMPLETE 0x10du
#define FY_H3_MESSAGE_ERROR 0x10eu
#define FY_H3_CONNECT_ERROR 0x10fu
#define FY_H3_VERSION_FALLBACK 0x110u
#define FY_H3_QPACK_DECOMPRESSION_FAILED 0x200u
#define FY_H3_QPACK_ENCODER_STREAM_ERROR 0x201u
#define FY_H3_QPACK_DECODER_STREAM_ERROR 0x202u

#define FY_H3_VARINT_MAX ((1ull << 62) - 1)

/* Decode one varint from p[0..n). Returns its length (1, 2, 4 or 8), or 0 if n is too short. */
size_t fy_h3_varint_decode(const uint8_t *p, size_t n, uint64_t *v);
/* Bytes needed for v (v <= FY_H3_VARINT_MAX). */
size_t fy_h3_varint_len(uint64_t v);
/* Write v at p (room for fy_h3_varint_len(v) bytes); returns the length. */
size_t fy_h3_varint_encode(uint8_t *p, uint64_t v);

/* Incremental reader of frame headers (type + length). Zero it to start. */
typedef struct fy_h3_frame_rd {
    uint8_t hb[16];
    uint8_t hn;
    bool have_hdr; /* type/len are valid; `left` payload bytes follow */
    uint64_t type, len, left;
} fy_h3_frame_rd_t;

/* Feed bytes to a reader whose header is not complete yet: returns how many were consumed
 * (all of them when the header is still incomplete); sets have_hdr/type/len/left when done. */
size_t fy_h3_frame_hdr_feed(fy_h3_frame_rd_t *rd, const uint8_t *p, size_t n);

/* Frame types that are reserved HTTP/2 codepoints (0x2, 0x6, 0x8, 0x9): FRAME_UNEXPECTED. */
bool fy_h3_frame_is_h2_reserved(uint64_t type);

/* Walk a SETTINGS payload; `cb` gets each (id, value) and may return nonzero to stop with that
 * error. Returns 0, an H3 error code (FRAME_ERROR for a truncated payload, SETTINGS_ERROR for
 * a duplicate or an HTTP/2 setting), or cb's nonzero result. */
uint64_t fy_h3_settings_parse(const uint8_t *p, size_t n,
                              uint64_t (*cb)(void *ud, uint64_t id, uint64_t value), void *ud);

#endif
