/* Typed config of `tracing:` (W3C Trace Context propagation). Table: policy/trace_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_POLICY_TRACE_CONF_H
#define FY_POLICY_TRACE_CONF_H

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"

typedef struct fy_trace_conf {
    bool enabled;            /* `enabled`: the trace filter on every route; default false */
    bool generate;           /* `generate`: start a trace when a request has none (or a
                                malformed one); default true */
    bool sampled;            /* `sampled`: the sampled flag of the traces we start */
    uint64_t tracestate_max; /* `tracestate-max`: bytes of tracestate passed on, default 512 */
} fy_trace_conf_t;

extern const fy_conf_directive_t fy_trace_conf_table[];

#endif
