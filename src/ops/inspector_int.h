/* Inspector internals shared by ops/inspector*.c. */
#ifndef FY_OPS_INSPECTOR_INT_H
#define FY_OPS_INSPECTOR_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ops/capture_store.h"
#include "ops/inspector.h"

struct fy_inspector {
    fy_cs_t *store;
    uint64_t body_cap;
    char *token;  /* owned, or NULL */
    char *listen; /* owned: the address as configured */
    int lfd;      /* listening socket */
    int wake[2];  /* pipe: shutdown wakes the accept loop */
    pthread_t thread;
    atomic_int clients; /* connections being served */
    int max_clients;
    uint64_t replay_timeout_ms;
    struct sockaddr_storage proxy; /* the intercepting listener (replays), family 0: none */
    socklen_t proxylen;
    atomic_bool stopping;
    atomic_uint_fast64_t sampled_out; /* route flows not kept by `capture:` */
    /* breakpoints (inspector_break.c), under bp_lock */
    pthread_mutex_t bp_lock;
    atomic_bool bp_on;     /* a request breakpoint filter is set (read without the lock) */
    atomic_bool bp_res_on; /* a response breakpoint filter is set */
    struct fy_insp_expr *bp_expr, *bp_res_expr;
    char *bp_text, *bp_res_text;
    struct fy__insp_held *held;
    uint64_t bp_next;
    uint64_t bp_timeout_ms;
};

struct fy__sb;
/* inspector_break.c */
typedef struct fy__insp_held fy__insp_held_t;
/* On a worker: hold ex when the breakpoint filter matches its request (true: the caller
   returns FY_FILTER_WAIT; the exchange goes on, or fails with 502 when dropped, later). */
bool fy__insp_break(fy_inspector_t *ins, fy_exchange_t *ex);
/* In the capture layer's first send (the response head not yet on its way): hold it when the
   response breakpoint matches. True: the hold keeps the send (the bytes stay the handler's,
   unsent) and later calls pass(l, ex, ...) with it, or with a replacement body (FINAL). */
typedef void (*fy__insp_pass_fn)(struct fy_sink_layer *l, fy_exchange_t *ex,
                                 const struct iovec *bufs, size_t n, int state);
bool fy__insp_break_response(fy_inspector_t *ins, fy_exchange_t *ex, struct fy_sink_layer *l,
                             const struct iovec *bufs, size_t n, int state, fy__insp_pass_fn pass);
/* Set (or, with a blank filter, clear) the request or the response breakpoint. 0, or -1 with
 *err and *at. */
int fy__insp_break_set(fy_inspector_t *ins, bool response, const char *filter, size_t n,
                       const char **err, size_t *at);
/* {"filter", "response", "timeout", "held": [...]} */
void fy__insp_break_list(fy_inspector_t *ins, struct fy__sb *b);
/* What the UI decided for a held request or response. */
typedef struct fy__insp_decision {
    bool drop;
    const char *headers; /* replacement headers ("name: value" lines), or NULL */
    int status;          /* response: the new status, 0 unchanged */
    const char *body;    /* response: the new body, or NULL (unchanged) */
    size_t body_len;
} fy__insp_decision_t;
/* Decide held request or response `id`. 0, or -1 when it is not held (any more). */
int fy__insp_break_decide(fy_inspector_t *ins, uint64_t id, const fy__insp_decision_t *d);
void fy__insp_break_free(fy_inspector_t *ins);

/* inspector_meta.c: the flow's TLS facts as meta pairs, the strings borrowed from the tunnel
   (the timings go as fy_cs_flow_t.t_us, which the store writes). The number of pairs written
   (at most max). */
#define FY__INSP_MAX_META 24
size_t fy__insp_meta(fy_exchange_t *ex, fy_cs_header_t *meta, size_t max);
/* The recorded WebSocket messages as FY_CS_META_WS pairs (and the count of those not kept),
   values in ex's arena: at most w->n + 1 pairs. */
struct fy_insp_ws;
size_t fy__insp_ws_meta(fy_exchange_t *ex, const struct fy_insp_ws *w, fy_cs_header_t *meta);
/* Flow f's meta `name`: true and *out, or false when absent. */
bool fy__insp_meta_get(const fy_cs_flow_t *f, const char *name, fy_str_t *out);
/* A timing meta in ms: -1 it did not happen, -2 unknown. */
double fy__insp_meta_ms(const fy_cs_flow_t *f, const char *name);
/* `"timings": {...}, "tls": {...}` (members of the flow's JSON object, no comma around). */
struct fy__sb;
void fy__insp_meta_json(struct fy__sb *b, const fy_cs_flow_t *f);
/* `"ws": [{"from", "opcode", "size", "cut", "text"|"base64"}...]` (and `"ws_dropped"`). */
void fy__insp_ws_json(struct fy__sb *b, const fy_cs_flow_t *f);

/* inspector_http.c: serve the listener until stopping (the thread's body). */
void *fy__insp_http_main(void *arg);

/* A growing output buffer (malloc; aborts on OOM). */
typedef struct fy__sb {
    char *p;
    size_t len, cap;
} fy__sb_t;
void fy__sb_put(fy__sb_t *b, const void *p, size_t n);
void fy__sb_puts(fy__sb_t *b, const char *s);
void fy__sb_printf(fy__sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* JSON string with quotes; bytes >= 0x80 that are not valid UTF-8 become U+FFFD. */
void fy__sb_json(fy__sb_t *b, const char *s, size_t n);
void fy__sb_base64(fy__sb_t *b, const char *s, size_t n);

/* inspector_api.c: answer one API or UI request. `body` is the request body (POST). Writes
   the whole response (status line, headers, body) into out; returns the status, or 0 for the
   event stream (the caller then runs fy__insp_events). */
typedef struct fy__insp_req {
    const char *method;
    const char *path; /* before '?' */
    const char *query;
    size_t query_len;
    const char *body;
    size_t body_len;
} fy__insp_req_t;
int fy__insp_api(fy_inspector_t *ins, const fy__insp_req_t *r, fy__sb_t *out);
/* Server-sent events on fd: the flows matching ?filter= newer than ?after= (or Last-Event-ID),
   until the client goes away or the inspector stops. */
void fy__insp_events(fy_inspector_t *ins, int fd, const fy__insp_req_t *r, uint64_t last_id);

/* inspector_har.c */
/* One flow as a HAR 1.2 entry (JSON object). */
void fy__insp_har_entry(fy__sb_t *b, const fy_cs_flow_t *f);
/* Import a HAR document: every entry becomes a stored flow (flag FY_CS_IMPORTED). The number
   imported, or -1 with *err (static) when the document is not a HAR log. */
long fy__insp_har_import(fy_inspector_t *ins, const char *s, size_t n, const char **err);

/* inspector_export.c: flow f's request as a Python (urllib) snippet. */
void fy__insp_python(struct fy__sb *b, const fy_cs_flow_t *f);

/* inspector_replay.c: send flow f again (through the intercepting listener when there is one,
   else straight to its origin), with its edits applied by the caller. The response status, or
   -1 with *err (static). The replayed flow is captured like any other. */
int fy__insp_replay(fy_inspector_t *ins, const fy_cs_flow_t *f, const char **err);

/* One request as flow f made it, to host:port (TLS unverified, SNI the flow's host), read
   with Connection: close until the end (at most cap bytes, within replay-timeout) into resp:
   the raw response. 0, or -1 with *err (static). Not captured. */
int fy__insp_fetch(fy_inspector_t *ins, const fy_cs_flow_t *f, const char *host, const char *port,
                   bool tls, size_t cap, struct fy__sb *resp, const char **err);

/* inspector_api.c: the ids of the stored flows matching x (NULL: all), oldest first, at most
   max of them. */
struct fy_insp_expr;
size_t fy__insp_select(fy_inspector_t *ins, const struct fy_insp_expr *x, uint64_t *ids,
                       size_t max);

/* inspector_compare.c: POST /api/compare (form `upstream`, `filter` or `ids`, `limit`,
   `ignore`): the stored flows sent again to another upstream, and how the answers differ.
   Returns the HTTP status of the report it wrote into out (a JSON body, no head). */
int fy__insp_compare(fy_inspector_t *ins, const char *form, size_t n, struct fy__sb *out);

/* The UI files embedded at build time (ui/, tools/embed-ui.sh). */
typedef struct fy__insp_asset {
    const char *name; /* "index.html" */
    const char *type;
    const unsigned char *data;
    size_t len;
} fy__insp_asset_t;
extern const fy__insp_asset_t fy__insp_assets[];
extern const size_t fy__insp_nassets;

#endif
