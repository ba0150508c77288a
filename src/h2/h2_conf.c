/* Directive table of `http2:`. */
#include "h2/h2_conf.h"

#include <stddef.h>

#define F(f) offsetof(fy_h2_conf_t, f)

const fy_conf_directive_t fy_h2_conf_table[] = {
    {.key = "max-concurrent-streams",
     .type = FY_CT_INT,
     .offset = F(max_concurrent_streams),
     .dflt = "256",
     .min = 1,
     .max = 65536,
     .doc = "SETTINGS_MAX_CONCURRENT_STREAMS: streams a client may open at once."},
    {.key = "initial-window-size",
     .type = FY_CT_SIZE,
     .offset = F(initial_window_size),
     .dflt = "64k",
     .min = 1024,
     .max = 2147483647,
     .doc = "SETTINGS_INITIAL_WINDOW_SIZE: request body bytes buffered per stream before the "
            "handler reads them; also the most of a body still read (and checked) after an "
            "early response before RST_STREAM NO_ERROR."},
    {.key = "connection-window-size",
     .type = FY_CT_SIZE,
     .offset = F(connection_window_size),
     .dflt = "1m",
     .min = 65535,
     .max = 2147483647,
     .doc = "Connection-level receive window (request body bytes in flight on one connection)."},
    {.key = "max-frame-size",
     .type = FY_CT_SIZE,
     .offset = F(max_frame_size),
     .dflt = "16k",
     .min = 16384,
     .max = 16777215,
     .doc = "SETTINGS_MAX_FRAME_SIZE we accept."},
    {.key = "reset-burst",
     .type = FY_CT_INT,
     .offset = F(reset_burst),
     .dflt = "1000",
     .min = 1,
     .max = 1000000,
     .doc = "RST_STREAM frames a client may send in a burst (rapid reset, CVE-2023-44487); "
            "past the budget: GOAWAY."},
    {.key = "reset-rate",
     .type = FY_CT_INT,
     .offset = F(reset_rate),
     .dflt = "33",
     .min = 1,
     .max = 1000000,
     .doc = "RST_STREAM budget regained per second."},
    {.key = "max-continuations",
     .type = FY_CT_INT,
     .offset = F(max_continuations),
     .dflt = "8",
     .min = 1,
     .max = 1024,
     .doc = "CONTINUATION frames allowed after one HEADERS (CONTINUATION flood); past it: "
            "the connection is closed."},
    {.key = "max-glitches",
     .type = FY_CT_INT,
     .offset = F(max_glitches),
     .dflt = "1000",
     .min = 1,
     .max = 1000000,
     .doc = "Suspicious frames tolerated per connection (empty DATA, PING and SETTINGS floods); "
            "past it: GOAWAY ENHANCE_YOUR_CALM."},
    {.key = NULL},
};
