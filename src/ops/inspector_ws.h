/* WebSocket messages of a captured tunnel (RFC 6455 §5): a restartable parser over one
 * direction's bytes, as the peer sent them, that records each message (a data frame and its
 * continuations, or a control frame) with its direction, opcode and size, and the unmasked
 * payload within a byte budget shared by the direction. A permessage-deflate message (RFC
 * 7692: RSV1 on its first frame) is inflated as it streams, one raw-deflate context per
 * direction (kept across messages: a peer that resets its compressor per message, with
 * no_context_takeover, still inflates right), so the payload kept is the message's text;
 * once a direction's budget is spent, or its deflate data is bad, its later compressed messages
 * are kept as sent. Pure: no I/O, no threads; the caller owns the memory (an arena, which also
 * holds zlib's state: nothing to free). */
#ifndef FY_OPS_INSPECTOR_WS_H
#define FY_OPS_INSPECTOR_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"

#define FY_INSP_WS_MAX_MSGS 1000 /* messages kept per flow (both directions); more are counted */

typedef struct fy_insp_ws_msg {
    bool from_client;
    uint8_t opcode;
    bool cut;        /* the payload kept is a prefix of size bytes */
    bool compressed; /* RSV1: permessage-deflate (RFC 7692) */
    bool inflated;   /* compressed, and the payload kept is inflated (else: as sent) */
    uint64_t size;   /* the whole message's payload bytes (inflated: the inflated bytes) */
    char *data;      /* arena: the kept payload */
    size_t len, cap;
} fy_insp_ws_msg_t;

/* One direction's state. */
typedef struct fy_insp_ws_dir {
    bool from_client;
    uint8_t hdr[14];
    unsigned hlen;
    uint64_t left;   /* payload bytes of the current frame still to come */
    uint8_t mask[4]; /* of the current frame (masked: from the client) */
    bool masked;
    unsigned mpos;
    uint64_t budget;      /* payload bytes this direction may still keep */
    int cur;              /* index of the message being filled, -1 none */
    int frag;             /* index of the data message a continuation extends, -1 none */
    bool fin;             /* the current frame ends its message */
    bool bad;             /* not WebSocket framing: stop parsing */
    struct z_stream_s *z; /* permessage-deflate: the raw inflate context (arena), made on use */
    bool zoff;            /* no more inflating (bad deflate data, or the budget is spent) */
} fy_insp_ws_dir_t;

/* Both directions of one tunnel and the messages, in the order they began. */
typedef struct fy_insp_ws {
    fy_arena_t *arena; /* borrowed */
    fy_insp_ws_dir_t up, down;
    fy_insp_ws_msg_t *msgs;
    size_t n, cap;
    uint64_t dropped; /* messages past FY_INSP_WS_MAX_MSGS */
} fy_insp_ws_t;

/* Start with `budget` payload bytes kept per direction. */
void fy_insp_ws_init(fy_insp_ws_t *w, fy_arena_t *arena, uint64_t budget);
/* Feed bytes of one direction (from_client: the up direction), any split. */
void fy_insp_ws_feed(fy_insp_ws_t *w, bool from_client, const void *data, size_t n);

#endif
