/* Typed HTTP/2 settings and abuse limits (`http2:`). Table: h2/h2_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_H2_H2_CONF_H
#define FY_H2_H2_CONF_H

#include <stdint.h>

#include "conf/conf.h"

typedef struct fy_h2_conf {
    int64_t max_concurrent_streams;  /* `max-concurrent-streams`, default 256 */
    uint64_t initial_window_size;    /* `initial-window-size`, default 64k (per stream) */
    uint64_t connection_window_size; /* `connection-window-size`, default 1m */
    uint64_t max_frame_size;         /* `max-frame-size`, default 16k */
    int64_t reset_burst;             /* `reset-burst`: RST_STREAMs a client may send at once,
                                        default 1000 (CVE-2023-44487 budget) */
    int64_t reset_rate;              /* `reset-rate`: RST_STREAM tokens regained per second,
                                        default 33 */
    int64_t max_continuations;       /* `max-continuations`, default 8 */
    int64_t max_glitches;            /* `max-glitches`: empty DATA frames, PINGs and SETTINGS
                                        beyond what a client needs, per connection, default 1000;
                                        over it: GOAWAY ENHANCE_YOUR_CALM */
} fy_h2_conf_t;

extern const fy_conf_directive_t fy_h2_conf_table[];

#endif
