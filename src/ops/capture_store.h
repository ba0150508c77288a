/* The inspector's capture store: flows (request and response heads, bodies up to a cap,
 * timings) kept on disk in append-only segment files, with an in-memory index rebuilt from the
 * segments at start.
 *
 * Layout: DIR/seg-<16 hex digits>.fys, numbered in write order. A segment is a sequence of
 * records `FYR1` u32 length (of the whole record), then the fields (capture_store.c, "record
 * format"). A torn record at the end of the newest segment (a crash mid-write) is ignored when
 * the index is rebuilt, and writing goes on in a new segment.
 *
 * Bounds: when the segments add up to more than max_size, or a segment's newest flow is older
 * than max_age, the oldest segments are deleted with their index entries (a ring). The index
 * holds one small entry per stored flow, so memory follows the number of stored flows, which
 * max_size bounds.
 *
 * Threads: fy_cs_submit may be called from any thread (workers): it redacts the flow and
 * encodes its record once, straight into the queue (a buffer the writer swaps for an empty one),
 * without waiting for the disk; a full queue (max_queue flows or max_queue_bytes of records)
 * drops the flow and counts it. One writer thread appends the queued records and indexes them;
 * a write error (disk full, directory gone) drops the flow and counts it. Readers (fy_cs_list,
 * fy_cs_load...) take the index lock and may run on any thread. */
#ifndef FY_OPS_CAPTURE_STORE_H
#define FY_OPS_CAPTURE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/str.h"

typedef struct fy_cs fy_cs_t;

typedef struct fy_cs_conf {
    const char *dir;       /* created (0700) when missing */
    uint64_t max_size;     /* bytes of segments kept */
    uint64_t max_age_ms;   /* 0: no age bound */
    uint64_t segment_size; /* a segment is closed past this many bytes */
    uint64_t body_cap;     /* body bytes kept per direction (callers cut; the store checks) */
    bool redact;           /* Authorization, Cookie, Set-Cookie, Proxy-Authorization + below */
    const char *const *redact_headers; /* NULL-terminated, lowercase; may be NULL */
    const char *const *redact_json;    /* NULL-terminated JSON member names; may be NULL */
    size_t max_queue;                  /* flows waiting for the writer */
    uint64_t max_queue_bytes;          /* bytes waiting for the writer */
} fy_cs_conf_t;

typedef struct fy_cs_header {
    fy_str_t name, value;
} fy_cs_header_t;

/* One flow as callers hand it in and as fy_cs_load gives it back. */
typedef struct fy_cs_flow {
    uint64_t id;          /* set by the store */
    int64_t start_us;     /* wall clock, µs since the epoch */
    uint32_t duration_ms; /* request start to response done */
    uint32_t ttfb_ms;     /* request start to the response head (0: unknown) */
    int status;
    int version;        /* 10 11 20 30 */
    uint32_t stream_id; /* h2/h3 stream (0: h1 or unknown) */
    unsigned flags;     /* FY_CS_* */
    fy_str_t method, scheme, authority, target, error;
    const fy_cs_header_t *req_headers, *res_headers;
    size_t n_req_headers, n_res_headers;
    fy_str_t req_body, res_body; /* what was kept (up to body_cap) */
    uint64_t req_size, res_size; /* whole body sizes */
    /* Named facts about the flow, "name" → "value" (FY_CS_META_* below): timings in µs, TLS
       details, WebSocket messages... Stored as given (no redaction: callers put no secrets). */
    const fy_cs_header_t *meta;
    size_t n_meta;
    /* The timings, stored as the first meta (before `meta`) in the order dns, connect, tls,
       wait: t_us[i] (µs, negative: "-1", did not happen) when bit i of t_set is set. The
       store writes their digits straight into the record (no strings built per flow); a
       loaded flow has them in `meta` and t_set 0. */
    unsigned t_set;
    int32_t t_us[4];
} fy_cs_flow_t;

/* Meta names the inspector writes (values are decimal µs for the timings; absent: unknown,
   "-1": did not happen, e.g. a reused connection has no connect). */
#define FY_CS_META_DNS "t.dns"
#define FY_CS_META_CONNECT "t.connect"
#define FY_CS_META_TLS "t.tls"
/* One WebSocket message each, in order: direction ('>' from the client, '<' from the origin),
   the opcode as one hex digit, flags as one hex digit (1: the payload is cut, 2: compressed
   with permessage-deflate, 4: and the payload kept is the inflated one), the whole size in
   decimal (inflated: the inflated size), ':', then the payload kept (text messages whose
   payload is not compressed — sent so, or inflated — are JSON-redacted as bodies are). */
#define FY_CS_META_WS "ws"
#define FY_CS_META_WS_DROPPED "ws.dropped" /* messages past the per-flow count, decimal */
#define FY_CS_META_WAIT "t.wait"           /* the request sent to the origin to its response head */

enum {
    FY_CS_REQ_TRUNCATED = 1, /* req_body is a prefix of req_size bytes */
    FY_CS_RES_TRUNCATED = 2,
    FY_CS_INTERCEPTED = 4, /* came through the intercepting proxy */
    FY_CS_IMPORTED = 8,    /* from a HAR import */
    FY_CS_REPLAY = 16,     /* sent by the inspector's replay */
};

/* Index entry: what the flow list shows and the cheap filters test (strings owned by the
 * store; valid while the caller holds the entry through fy_cs_list's callback). */
typedef struct fy_cs_entry {
    uint64_t id;
    int64_t start_us;
    uint32_t duration_ms;
    int status, version;
    uint32_t stream_id;
    unsigned flags;
    uint64_t req_size, res_size;
    char *method, *host, *target, *ctype; /* owned, NUL-terminated */
    uint64_t seg;                         /* segment number */
    uint64_t off;                         /* record offset in it */
    uint32_t len;                         /* record length */
} fy_cs_entry_t;

typedef struct fy_cs_stats {
    uint64_t stored;        /* flows written since start (or rebuilt) */
    uint64_t dropped_queue; /* queue full */
    uint64_t dropped_write; /* disk error */
    uint64_t deleted;       /* flows removed by the ring */
    uint64_t flows;         /* flows in the index now */
    uint64_t bytes;         /* bytes of segments now */
    uint64_t segments;      /* segment files now */
    uint64_t queued;        /* waiting for the writer */
    uint64_t last_id;       /* newest id */
} fy_cs_stats_t;

/* Open the store (rebuilds the index from DIR's segments) and start its writer thread. A
 * directory that cannot be created or read is not fatal: the store starts empty, logs why,
 * and every flow then counts as dropped_write until the directory becomes writable. `conf`
 * strings are copied. NULL only when out of memory or no thread could be started. */
fy_cs_t *fy_cs_open(const fy_cs_conf_t *conf);
/* Stop the writer after it wrote what is queued, and free everything. */
void fy_cs_close(fy_cs_t *cs);

/* Queue f's record (id is assigned; f is not used after the call). Never blocks on the
   writer (only on the queue's lock). 0, or -1 when dropped. */
int fy_cs_submit(fy_cs_t *cs, const fy_cs_flow_t *f);
/* Wait until the writer has handled everything queued before the call (tests, export). */
void fy_cs_flush(fy_cs_t *cs);

void fy_cs_stats(fy_cs_t *cs, fy_cs_stats_t *out);

/* Walk index entries under the index lock: newest first when `reverse`, from `from_id`
 * (exclusive; 0: from the end) onwards; stop when cb returns false. cb must not call back into
 * the store except fy_cs_load_locked. */
void fy_cs_walk(fy_cs_t *cs, bool reverse, uint64_t from_id,
                bool (*cb)(const fy_cs_entry_t *e, void *ud), void *ud);

/* A loaded flow: f's strings point into buf (owned; free with fy_cs_loaded_free). */
typedef struct fy_cs_loaded {
    fy_cs_flow_t f;
    char *buf;
    fy_cs_header_t *hdrs; /* owned: both header arrays */
    fy_cs_header_t *meta; /* owned, or NULL */
} fy_cs_loaded_t;

/* Read flow `id` from its segment. 0, -ENOENT (not stored or deleted), -EIO (unreadable). */
int fy_cs_load(fy_cs_t *cs, uint64_t id, fy_cs_loaded_t *out);
/* The same for an entry seen inside fy_cs_walk's callback (the lock is held). */
int fy_cs_load_entry(fy_cs_t *cs, const fy_cs_entry_t *e, fy_cs_loaded_t *out);
void fy_cs_loaded_free(fy_cs_loaded_t *l);

/* Wait (up to timeout_ms) for a flow newer than `after_id`. True when there is one. */
bool fy_cs_wait_newer(fy_cs_t *cs, uint64_t after_id, int timeout_ms);

/* ---- pure helpers (also used by the inspector and the tests) ---- */

/* Replace the values of JSON members named in `names` (strings, numbers, literals, objects,
 * arrays) by "[redacted]" in body[0..len): returns a new malloc'd body and its length in
 * *out_len, or NULL when nothing matched. Tolerates invalid JSON (stops scanning). */
char *fy_cs_redact_json(const char *body, size_t len, const char *const *names, size_t *out_len);
/* A body redacted as the store redacts bodies (its redact-json names; NULL when redaction
 * is off or nothing matched): for comparing a new body with a stored one. */
char *fy_cs_redact_body(const fy_cs_t *cs, const char *body, size_t len, size_t *out_len);
/* Is the (any case) header name one the store redacts? */
bool fy_cs_header_redacted(const fy_cs_t *cs, fy_str_t name);

#endif
