/* Byte relay between two tunnel transports (core/tunnel_io.h): what one side reads the other
 * writes, one buffer in flight each way (a side is not read while its buffer waits for the
 * other to take it: that is the backpressure), an end of stream becomes the other side's
 * half-close, and the relay is done when both directions are shut or on an error.
 * Threads: the relay and both transports belong to one loop. */
#ifndef FY_CORE_TUNNEL_RELAY_H
#define FY_CORE_TUNNEL_RELAY_H

#include <stdbool.h>
#include <stddef.h>

#include "core/tunnel_io.h"

typedef struct fy_tio_relay_dir {
    char *buf; /* owned, `cap` bytes */
    size_t len, off;
    bool eof, shut; /* the source ended / the sink was half-closed */
} fy_tio_relay_dir_t;

typedef struct fy_tio_relay {
    fy_tio_t *a, *b;           /* borrowed; their on_ready/data are the relay's while it runs */
    fy_tio_relay_dir_t ab, ba; /* a to b, b to a */
    size_t cap;
    /* After progress (err 0: moved bytes, the caller may re-arm an idle timer), or the end:
       done true with err 0 (both sides shut) or <0. Called last: the caller may free. */
    void (*event)(struct fy_tio_relay *r, bool done, int err);
    void *data;
    bool finished;
} fy_tio_relay_t;

/* Start relaying between a and b with buffers of cap bytes; `pre` (may be NULL) are bytes
   already read from a, sent to b first. Runs one step now (event may come before return). */
void fy_tio_relay_start(fy_tio_relay_t *r, fy_tio_t *a, fy_tio_t *b, size_t cap, const void *pre,
                        size_t pre_len);
/* Stop (no more callbacks) and free the buffers; the transports stay the caller's. */
void fy_tio_relay_stop(fy_tio_relay_t *r);

#endif
