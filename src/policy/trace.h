/* W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` parser and
 * formatter, `tracestate` trimming, and the trace filter (http/filter.h, stage
 * FY_STAGE_TRACE) that policies.c puts on every route when `tracing.enabled`.
 *
 * The filter, per request: a valid `traceparent` keeps its trace id and flags and gets a new
 * parent id (Ferry is the origin's parent span); an absent or malformed one (or several)
 * becomes a new trace when `tracing.generate` (else it is removed); `tracestate` goes on only
 * with a valid received `traceparent`, several fields joined with ",", cut to
 * `tracing.tracestate-max` bytes at a member boundary and to 32 members. The exchange's
 * trace_id then names the trace for the access log.
 *
 * Threads: the parser is pure; a filter is made while a generation is built and then only
 * read; ids come from a per-thread generator seeded from getrandom(2). */
#ifndef FY_POLICY_TRACE_H
#define FY_POLICY_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "http/filter.h"
#include "policy/trace_conf.h"

#define FY_TRACEPARENT_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */
#define FY_TRACESTATE_MAX_MEMBERS 32

typedef struct fy_traceparent {
    uint8_t version;
    uint8_t trace_id[16];
    uint8_t parent_id[8];
    uint8_t flags;
} fy_traceparent_t;

/* Parse a `traceparent` value (`p`, `n` bytes, not NUL-terminated; peer bytes). Version 00 is
 * exactly 55 bytes; a higher version (not ff) is at least 55 and, when longer, has '-' after
 * the flags. Lowercase hex only; an all-zero trace id or parent id is invalid. Returns 0 and
 * fills *out, or -1 (malformed). */
int fy_traceparent_parse(const char *p, size_t n, fy_traceparent_t *out);
/* Write `tp` as a version-00 value: FY_TRACEPARENT_LEN characters and a NUL into `out`. */
void fy_traceparent_format(const fy_traceparent_t *tp, char out[FY_TRACEPARENT_LEN + 1]);
/* How many leading bytes of the `tracestate` value `p` (n bytes) to pass on: whole members
 * (comma-separated, optional spaces and tabs around them) up to `max` bytes and
 * FY_TRACESTATE_MAX_MEMBERS members, without a trailing separator; 0 when none fits. */
size_t fy_tracestate_trim(const char *p, size_t n, size_t max);

/* A new trace filter for `conf` (borrowed: it lives in the generation's config and is not
 * changed after this call; `sampled` is read here), added to `chain` (which takes the only
 * reference). 0, or -1 when out of memory. */
int fy_trace_filter_add(const fy_trace_conf_t *conf, fy_filter_chain_t *chain);

#endif
