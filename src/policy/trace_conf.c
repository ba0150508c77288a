/* Directive table of `tracing:`. */
#include "policy/trace_conf.h"

#include <stddef.h>

#define T(f) offsetof(fy_trace_conf_t, f)

const fy_conf_directive_t fy_trace_conf_table[] = {
    {.key = "enabled",
     .type = FY_CT_BOOL,
     .offset = T(enabled),
     .dflt = "false",
     .doc = "Propagate W3C `traceparent`/`tracestate` to origins (a new parent id per hop) and "
            "put the trace id in the access log; on every route."},
    {.key = "generate",
     .type = FY_CT_BOOL,
     .offset = T(generate),
     .dflt = "true",
     .doc = "Start a trace (new trace id) when a request has no `traceparent` or a malformed "
            "one; off: such requests get none, and a malformed one is removed."},
    {.key = "sampled",
     .type = FY_CT_BOOL,
     .offset = T(sampled),
     .dflt = "false",
     .doc = "The sampled flag (`-01`) of the traces Ferry starts; received flags are kept."},
    {.key = "tracestate-max",
     .type = FY_CT_SIZE,
     .offset = T(tracestate_max),
     .dflt = "512",
     .min = 0,
     .max = 8192,
     .doc = "Longest `tracestate` passed on: a longer one is cut after its last whole member "
            "that fits (W3C: at most 32 members), and one with none that fits is dropped."},
    {.key = NULL},
};
