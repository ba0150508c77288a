/* Internals shared by the reverse proxy's files (proxy.c: the handler, origin attempts,
 * retries, timers and the request body; proxy_fields.c: the request's fields for the origin
 * and the response's header rules; proxy_resp.c: the origin's response delivered to the
 * client; proxy_ws.c: WebSocket tunnel framing and our Close frames). Not for use outside
 * them.
 *
 * Thread rules: a proxy_handler_t is made at generation build and read-only after; a
 * proxy_req_t belongs to one exchange and lives on that exchange's worker thread (its arena);
 * the open-WebSocket list is per thread. Nothing here takes a lock. */
#ifndef FY_HANDLER_PROXY_INT_H
#define FY_HANDLER_PROXY_INT_H

#include "handler/proxy.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/list.h"
#include "http/exchange.h"
#include "upstream/origin.h"

typedef struct proxy_handler {
    fy_handler_t h;
    const fy_proxy_conf_t *conf;
    fy_upstream_t *up;
    bool resil; /* the upstream has a circuit breaker or a retry budget */
    bool hedge; /* ... `hedge` */
} proxy_handler_t;

/* A hedge (proxy_hedge.c): made in the exchange's arena when a request is armed for one. */
typedef struct proxy_hedge {
    fy_timer_t timer;      /* `hedge.delay` after the first attempt's request went out */
    fy_origin_stream_t os; /* the second stream (ops: fy__proxy_stream_ops[1]) */
    bool used;             /* os was opened: free it at the end */
    bool side;             /* os is the hedge in flight (the current one has no head yet) */
    int server;            /* its server */
    uint64_t sent_us;
} proxy_hedge_t;

enum { T_FIRST_BYTE = 1, T_IDLE };

/* Where a WebSocket's frames (RFC 6455 §5.2) end in one direction of a tunnel: a Close frame
 * of ours may only go in between two frames. */
typedef struct ws_track {
    uint64_t left;   /* payload bytes of the current frame still to pass */
    uint8_t hdr[14]; /* a frame header being read */
    uint8_t hlen;
} ws_track_t;

typedef struct proxy_req {
    fy_exchange_t *ex;
    proxy_handler_t *ph;
    fy_loop_t *loop;
    int worker;
    int server;
    uint64_t tried;
    int attempts;
    int sticky_hit;   /* the server the sticky cookie/header named, or -1 */
    uint64_t sent_us; /* request head handed to the origin (least-time) */
    fy_timer_t timer;
    int timer_kind;
    int in_codec; /* inside a call into the origin stream: fy__proxy_deliver after it returns */
    bool req_body_waiting; /* asked the client codec for body, not given yet */
    bool sent_any;         /* request body bytes reached the codec: no more retry */
    bool got_bytes;        /* the failed attempt had received response bytes */
    bool inflight;
    bool res_sending; /* bytes handed to the client codec, waiting for proceed */
    size_t sending_len;
    bool finished;
    bool stopped;
    bool tunnel;       /* Upgrade / extended CONNECT: raw bytes both ways after 101 */
    bool tunnel_open;  /* the origin accepted the tunnel */
    bool o_head;       /* the final head arrived */
    bool o_end;        /* the response is complete at the origin's side */
    bool fb_timed_out; /* an attempt ran out of first-byte time: the origin may have the
                          request, so retries go only to servers not tried yet */
    bool no_retry;     /* the failure is the origin's answer itself (too many 1xx) */
    /* the origin stream of the current attempt (upstream/origin.h), whatever it speaks */
    fy_origin_stream_t *os; /* the current attempt's: &os_a or &hg->os (calls on it are no-ops
                               while nothing is open) */
    fy_origin_stream_t os_a;
    proxy_hedge_t *hg; /* NULL unless armed for a hedge */
    const char *zp;    /* response bytes lent by the origin stream until consumed */
    size_t zn;
    const char *qp; /* client body slice not yet taken by the codec */
    size_t qn;
    bool q_end;
    bool in_read_body;
    bool trail;       /* early response: the rest of the request body still goes to the origin */
    bool trail_abort; /* ... not any more (origin error, timeout): close it instead */
    int refusals;     /* streams the origin refused (not processed): retried apart from `retries` */
    uint64_t start_ms; /* the first attempt's start (upstream `retry-timeout`) */
    int64_t interim;   /* interim (1xx) heads of this attempt (limits.informational-responses) */
    fy_timer_t body_timer; /* limits.body-total-timeout, while the request body comes */
    bool body_timing;
    /* an open WebSocket tunnel: frame boundaries both ways, and our Close frames */
    bool ws;           /* the tunnel's protocol is websocket */
    bool ws_closing;   /* going away (stop, tunnel timeout): Close 1001 to both sides */
    bool ws_down_sent; /* ours went to the client: the origin's later bytes are dropped */
    bool ws_up_sent;   /* ours went to the origin (then its end): the client's are dropped */
    ws_track_t ws_down, ws_up; /* origin -> client, client -> origin */
    uint8_t ws_up_frame[8];    /* our masked Close for the origin */
    fy_list_t ws_node;         /* in this thread's fy__proxy_open_ws while `ws` */
} proxy_req_t;

/* Refused streams (REFUSED_STREAM, past a GOAWAY) were not processed, so they are retried
 * this many times more than `retries`: an origin rotating connections (nginx after
 * keepalive_requests) refuses whole batches, and under load one request can be caught by
 * several GOAWAYs in a row (3 was not enough with 40 requests in flight and 20 per
 * connection; 8 failed about one run in five under a loaded machine, because the order in
 * which a GOAWAY's refused streams come back is arbitrary). So a refused request also waits
 * ahead of the others for the next connection (waiter priority = refusals), which takes the
 * lowest stream ids there. Bounded, so an origin that refuses everything still gets a 502. */
#define FY_PROXY_REFUSED_EXTRA 16

/* An HTTP/1.1 origin that answers before the request body is all sent (nginx `return`, an
 * early 401 or 413) leaves the connection reusable only once the body's end went out. Up to
 * this many unsent bytes the body of an HTTP/1.1 client keeps flowing after the response (it
 * gets the whole response at once; only the exchange's end waits), so that the connection
 * goes back to the pool instead of costing a new one per request; more, and it is closed. */
#define FY_PROXY_TRAIL_MAX (1u << 20)

/* Fields with a rule of their own, by name (one switch on the length per field instead of a
 * chain of comparisons: this runs for every field of every request and response). */
enum {
    F_PASS = 0,
    F_HOP,   /* hop-by-hop (RFC 9110 §7.6.1), proxy authentication */
    F_TE,    /* hop-by-hop, but "te: trailers" goes on to HTTP/2 and HTTP/3 origins */
    F_CL,    /* content-length: the codecs frame bodies */
    F_HOST,  /* host: from the route or the client's authority */
    F_DATE,  /* date, server: ours in responses */
    F_XFF,   /* x-forwarded-for */
    F_XFX,   /* x-forwarded-proto, x-forwarded-host */
    F_WSKEY, /* sec-websocket-key */
    F_WSACC, /* sec-websocket-accept */
};

/* proxy.c */
uint64_t fy__proxy_now_us(void);
void fy__proxy_o_on_open(void *ud, const char *err);
void fy__proxy_o_after_io(void *ud);
void fy__proxy_o_on_error(void *ud, int kind, uint64_t code, const char *why);
ssize_t fy__proxy_o_read_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers);
ssize_t fy__proxy_take_body(void *ud, const char **p, size_t len, const fy_headers_t **trailers);
void fy__proxy_set_timer(proxy_req_t *pr, int kind);
void fy__proxy_drop_origin(proxy_req_t *pr, bool reusable);
void fy__proxy_origin_failed(proxy_req_t *pr, int status, const char *why, bool count_fail);

/* proxy_hedge.c: the callbacks of os_a and hg->os (each passes its stream's events on to the
 * o_* functions while it is the current one, else treats them as the hedge's); arming the
 * hedge after the first attempt's request went out (ph->hedge only); the hedge taking over
 * when the current attempt fails before any head (true: nothing else to do); dropping it;
 * the end (timer stopped, stream freed). */
extern const fy_origin_stream_ops_t fy__proxy_stream_ops[2];
void fy__proxy_hedge_arm(proxy_req_t *pr);
bool fy__proxy_hedge_take_over(proxy_req_t *pr, bool count_fail, const char *why);
void fy__proxy_hedge_drop(proxy_req_t *pr, bool count_fail);
void fy__proxy_hedge_free(proxy_req_t *pr);

/* proxy_fields.c */
int fy__proxy_field_class(fy_str_t n);
bool fy__proxy_in_list(const fy_conf_strlist_t *l, fy_str_t n);
bool fy__proxy_in_map(const fy_conf_strmap_t *m, fy_str_t n);
void fy__proxy_add_response_extras(proxy_req_t *pr);
void fy__proxy_build_fields(proxy_req_t *pr, fy_headers_t *hs);
bool fy__proxy_ws_accept(fy_str_t key, char out[32]);

/* proxy_resp.c */
void fy__proxy_deliver(proxy_req_t *pr);
void fy__proxy_resume_body(proxy_req_t *pr);
void fy__proxy_o_on_head(void *ud, int status, fy_headers_t *hs, bool end);
void fy__proxy_o_on_data(void *ud, const char *p, size_t n);
void fy__proxy_o_on_end(void *ud, fy_headers_t *trailers);

/* proxy_ws.c */
extern __thread fy_list_t fy__proxy_open_ws;
extern __thread bool fy__proxy_open_ws_init;
void fy__proxy_ws_feed(ws_track_t *t, const void *data, size_t n);
bool fy__proxy_ws_at_boundary(const ws_track_t *t);
void fy__proxy_ws_close_down(proxy_req_t *pr);
void fy__proxy_ws_close_up(proxy_req_t *pr);
void fy__proxy_ws_going_away(proxy_req_t *pr);
void fy__proxy_ws_drop_down(proxy_req_t *pr);

#endif
