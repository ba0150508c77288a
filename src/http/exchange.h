/* The exchange: one request/response pair, protocol-neutral (DESIGN.md §2). Server codecs
 * (h1 now; h2, h3 later) fill the request, dispatch it, and implement the sink; handlers answer
 * through the functions below and never see a wire format.
 *
 * Response bodies are pulled (h2o's model): a handler sets ex->res, calls
 * fy_exchange_start_response with a producer, then sends at most once per `proceed`:
 * fy_exchange_send / fy_exchange_send_file with FY_SEND_MORE, and finally FY_SEND_FINAL.
 * The head is written together with the first body bytes. Buffers passed to a send must stay
 * valid until `proceed` is called (MORE) or the exchange is done (FINAL); codecs may copy small
 * ones instead. Request bodies are delivered by `on_body`; the slice is valid until the handler
 * calls fy_exchange_read_body again, and the codec reads nothing more until then
 * (backpressure). */
#ifndef FY_HTTP_EXCHANGE_H
#define FY_HTTP_EXCHANGE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "core/arena.h"
#include "core/fwd.h"
#include "core/list.h"
#include "core/loop.h"
#include "core/str.h"
#include "core/transport.h"
#include "http/http_conf.h"

typedef struct fy_header {
    fy_str_t name; /* lowercase for headers made by ferry (except a transform's configured
                      response names on an h1 exchange: their h1 spelling, e.g. "ETag", which
                      the h1 writer copies as is); as received for request headers */
    fy_str_t value;
} fy_header_t;

typedef struct fy_headers {
    fy_header_t *v; /* arena-owned array */
    size_t n, cap;
} fy_headers_t;

enum fy_method {
    FY_M_OTHER = 0,
    FY_M_GET,
    FY_M_HEAD,
    FY_M_POST,
    FY_M_PUT,
    FY_M_DELETE,
    FY_M_OPTIONS,
    FY_M_PATCH,
    FY_M_CONNECT,
    FY_M_TRACE,
};

typedef struct fy_request {
    fy_str_t method;
    int method_id;      /* enum fy_method */
    fy_str_t scheme;    /* "http" or "https" */
    fy_str_t authority; /* Host / :authority, as received (may include a port) */
    fy_str_t target;    /* origin-form path?query as received */
    fy_str_t path;      /* target before '?'; normalised by the router (http/path.h) */
    fy_str_t query;     /* after '?', without it; empty if none */
    fy_str_t protocol;  /* :protocol of an extended CONNECT (RFC 8441/9220): a tunnel
                           exchange whose bodies are the tunnel's two directions */
    int version;        /* 10, 11, 20, 30 */
    bool absolute_form; /* the request-target was an absolute URI (a forward-proxy request) */
    fy_headers_t headers;
    int64_t content_length; /* -1: unknown length (chunked); 0: no body */
    bool expect_continue;
} fy_request_t;

typedef struct fy_response {
    int status;
    fy_headers_t headers;   /* without Date/Server/Content-Length/framing: codecs add those */
    int64_t content_length; /* -1: unknown (h1 uses chunked) */
} fy_response_t;

enum fy_send_state { FY_SEND_MORE = 0, FY_SEND_FINAL = 1, FY_SEND_ERROR = 2 };

/* Implemented by handlers: the response-body producer. */
typedef struct fy_producer_ops {
    /* The previous send was consumed: send the next piece (or FINAL). */
    void (*proceed)(fy_exchange_t *ex);
    /* The client went away or the codec failed: release resources; no more sends. */
    void (*stop)(fy_exchange_t *ex);
} fy_producer_ops_t;

/* Implemented by server codecs. */
typedef struct fy_sink_ops {
    const char *name;
    void (*send)(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state);
    void (*send_file)(fy_exchange_t *ex, int fd, off_t off, size_t len, int state);
    /* The handler is ready for (more) request body. */
    void (*read_body)(fy_exchange_t *ex);
    /* An interim response (103 Early Hints, 102...) before the final one; ignored for
       clients that cannot take it (HTTP/1.0) or once the final head left. `headers` are
       borrowed for the call only (codecs copy what they keep). */
    void (*send_informational)(fy_exchange_t *ex, int status, const fy_headers_t *headers);
    /* CONNECT on a forward-proxy listener (mitm): hand the client connection to the handler.
       On success (0) the codec writes nothing more, stops watching the fd and frees itself;
       *fd is then the handler's (plain socket), with the *len bytes the client already sent
       after the request copied into buf (cap bytes). The exchange must not be touched after.
       -1: not possible (TLS client side, bytes pending, more than cap bytes read ahead, or a
       codec that multiplexes: h2). NULL in codecs that never can. */
    int (*detach)(fy_exchange_t *ex, int *fd, char *buf, size_t cap, size_t *len);
} fy_sink_ops_t;

typedef struct fy_router fy_router_t;
struct fy_sink_layer;   /* http/filter.h */
struct fy_filter_chain; /* http/filter.h */

/* An HTTP/1.1 request that asked to continue in h2c (`Upgrade: h2c`, RFC 7540 §3.2): the
 * h2 codec answers 101 and serves it as stream 1. */
typedef struct fy_h2_upgrade {
    const fy_request_t *req;       /* borrowed for the call: the h2 codec copies it */
    const unsigned char *settings; /* decoded HTTP2-Settings payload */
    size_t settings_len;
} fy_h2_upgrade_t;

/* What every server connection (h1, h2) puts in its context's list, so that shutdown can
 * reach it without knowing its codec. */
typedef struct fy_conn_node {
    fy_list_t link;
    void (*drain)(struct fy_conn_node *n); /* finish current work, then close */
    void (*close)(struct fy_conn_node *n); /* close now */
} fy_conn_node_t;

/* A completion observer: told once per exchange when its response is done or failed (access
 * log, HAR capture, metrics). It runs on the exchange's worker, inside the codec's completion
 * path: it may read the exchange (request, response, error, arena) but must not send, fail or
 * keep pointers into it. */
typedef struct fy_observer {
    void (*on_done)(fy_exchange_t *ex, void *ud);
    void *ud; /* borrowed */
} fy_observer_t;

#define FY_HTTP_MAX_OBSERVERS 8

/* Per listener and worker: what codecs need to dispatch and to account. */
typedef struct fy_http_ctx {
    const fy_router_t *router;      /* borrowed */
    const fy_http_limits_t *limits; /* borrowed */
    fy_loop_t *loop;
    int worker_id;
    bool is_tls;
    /* completion observers, called in this order by fy_exchange_done (fy_http_ctx_observe) */
    fy_observer_t observers[FY_HTTP_MAX_OBSERVERS];
    unsigned nobservers;
    void *tls;          /* fy_tls_ctx_t* for TLS listeners, else NULL */
    unsigned protocols; /* FY_PROTO_* of the listener */
    const void *h2conf; /* const fy_h2_conf_t* (h2 settings and limits) */
    bool forward_proxy; /* intercept listener: CONNECT and absolute-form requests reach the
                           handler (elsewhere CONNECT is 405) */
    /* Hand a connection that speaks HTTP/2 (ALPN h2, or the h2c preface) to the h2 codec:
       `fd` and `tls` (NULL for plain) pass to it, with `len` bytes already read. */
    int (*start_h2)(struct fy_http_ctx *ctx, int fd, fy_transport_t *tls, const struct sockaddr *sa,
                    socklen_t salen, const char *data, size_t len, const fy_h2_upgrade_t *upgrade);
    /* connections of this listener on this worker (owned by the codecs) */
    fy_list_t conns;
    size_t nconns;
    bool draining; /* graceful shutdown: finish current responses, then close */
    /* called after a conn is freed (listener resumes accepting; drain completes) */
    void (*on_conn_closed)(struct fy_http_ctx *ctx);
    void *data;          /* owner's (the worker's listener slot) */
    const char *alt_svc; /* Alt-Svc value added to h1/h2 responses (listener serves h3), or NULL */
    const struct fy_filter_chain *filters; /* borrowed: the listener's filters (run before the
                                              route's), or NULL */
} fy_http_ctx_t;

struct fy_exchange {
    fy_request_t req;
    fy_response_t res;
    fy_headers_t req_trailers; /* filled before on_body(end=true) when the client sent some */
    fy_headers_t res_trailers; /* set by the handler before its FINAL send (chunked h1, h2, h3) */
    fy_arena_t *arena;         /* per exchange; reset when the exchange is done */
    fy_http_ctx_t *ctx;
    const struct sockaddr *remote; /* borrowed from the conn */
    /* codec side */
    const fy_sink_ops_t *sink;
    void *codec; /* the codec's per-exchange/conn state */
    /* handler side */
    const fy_producer_ops_t *producer;
    void *handler_data;
    void (*on_body)(fy_exchange_t *ex, const char *p, size_t n, bool end);
    void *tunnel; /* borrowed: the intercepted tunnel (handler/mitm) this exchange came
                     through, or NULL */
    /* state and accounting */
    bool response_started;
    bool head_sent; /* set by the codec once the response head is on its way to the client */
    bool done;
    uint64_t start_ms;
    uint64_t head_ms;             /* loop time the handler started its response (0: never) */
    const struct fy_route *route; /* borrowed: the route that got it (NULL: none matched) */
    uint64_t bytes_sent;          /* response body bytes */
    uint64_t body_received;       /* request body bytes */
    const char *error;            /* static reason when the exchange failed (for the log) */
    const char *trace_id;         /* 32 hex (arena): set by policy/trace.c, or NULL */
    struct fy_upstream *upstream; /* borrowed: the upstream a proxy sent it to, or NULL */
    int upstream_server;          /* the server of `upstream` that got the last attempt */
    bool refused; /* fy_exchange_refuse: the request's body is not wanted (h1 closes after) */
    /* filters (http/filter.h) */
    struct fy_sink_layer *layers; /* response layers pushed by filters, highest stage first */
    unsigned filter_pos;          /* the next filter to run: listener's chain, then route's */
    /* The origin side's timings for the inspector, µs, filled by the handler that proxied it
       (set false: none measured; -1: it did not happen, e.g. a pooled connection needs no
       connect). connect is TCP alone, tls the handshake after it, wait the request sent to
       the origin's response head. `want`: a capture asked for them (the proxy measures only
       then). */
    struct {
        int32_t dns_us, connect_us, tls_us, wait_us;
        bool set, dns_set, want;
    } timing;
    uint32_t stream_id; /* the client's h2/h3 stream (0: h1), set by the server codec */
};

/* Graceful shutdown of every conn of ctx (each finishes its current work), and the hard stop
 * after the drain deadline. */
void fy_http_ctx_drain(fy_http_ctx_t *ctx);
void fy_http_ctx_close_all(fy_http_ctx_t *ctx);

/* Route the exchange to its handler (http/router.c). If no route matches: 404. */
void fy_exchange_dispatch(fy_exchange_t *ex);

/* Add an observer to ctx (worker setup, before the listener accepts). Observers run in the
 * order added; server.c adds them in one documented order (docs/ARCHITECTURE.md). Returns 0, or
 * -ENOSPC when FY_HTTP_MAX_OBSERVERS are already there. */
int fy_http_ctx_observe(fy_http_ctx_t *ctx, void (*on_done)(fy_exchange_t *ex, void *ud), void *ud);

/* Codecs: the exchange's response is done or failed (once per exchange that has a status);
 * tells every observer of its context. */
static inline void fy_exchange_done(fy_exchange_t *ex)
{
    const fy_http_ctx_t *ctx = ex->ctx;
    for (unsigned i = 0; i < ctx->nobservers; i++)
        ctx->observers[i].on_done(ex, ctx->observers[i].ud);
}

/* Alt-Svc for listeners that also serve h3 (RFC 7838): added to h1/h2 final responses once,
   here, when the head is made (http/exchange.c). */
void fy__exchange_alt_svc(fy_exchange_t *ex);

static inline void fy_exchange_start_response(fy_exchange_t *ex, const fy_producer_ops_t *p)
{
    if (__builtin_expect(ex->ctx->alt_svc != NULL, 0)) fy__exchange_alt_svc(ex);
    ex->producer = p;
    ex->head_ms = ex->ctx->loop->now_ms;
    ex->response_started = true;
}

/* Through the filters' layers when there are any (http/filter.c). */
void fy__layers_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state);
void fy__layers_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state);
void fy__layers_send_informational(fy_exchange_t *ex, int status, const fy_headers_t *headers);
void fy__layers_read_body(fy_exchange_t *ex);
/* CONNECT on a forward-proxy listener: the sink's detach through the layers (-1 when the codec
   has none). */
int fy_exchange_detach(fy_exchange_t *ex, int *fd, char *buf, size_t cap, size_t *len);

static inline void fy_exchange_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                                    int state)
{
    if (__builtin_expect(ex->layers != NULL, 0))
        fy__layers_send(ex, bufs, n, state);
    else
        ex->sink->send(ex, bufs, n, state);
}

static inline void fy_exchange_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len,
                                         int state)
{
    if (__builtin_expect(ex->layers != NULL, 0))
        fy__layers_send_file(ex, fd, off, len, state);
    else
        ex->sink->send_file(ex, fd, off, len, state);
}

/* Send an interim 1xx response (not 100 or 101: the codecs own those) before the final one. */
static inline void fy_exchange_send_informational(fy_exchange_t *ex, int status,
                                                  const fy_headers_t *headers)
{
    if (__builtin_expect(ex->layers != NULL, 0))
        fy__layers_send_informational(ex, status, headers);
    else if (ex->sink->send_informational)
        ex->sink->send_informational(ex, status, headers);
}

/* Ask for (more) request body; on_body gets it. Call again after each on_body to continue. */
void fy_exchange_read_body(fy_exchange_t *ex,
                           void (*on_body)(fy_exchange_t *ex, const char *p, size_t n, bool end));

/* A whole response in one call: status, optional content type, body copied into the arena.
 * Also sets Content-Length. */
void fy_exchange_respond(fy_exchange_t *ex, int status, const char *content_type, const char *body,
                         size_t len);

/* Fail the exchange with one call: while no response head has left (even if the handler had
 * started its response), a small error page with `status` (of the headers set so far only
 * Allow, WWW-Authenticate, Retry-After and Location are kept); after, the codec aborts the
 * stream (h1: closes the connection; h2: RST_STREAM). `reason` is a static string for the
 * log. */
void fy_exchange_fail(fy_exchange_t *ex, int status, const char *reason);

/* Refuse the request with `status` (405, 413: http/protocol.h): fy_exchange_fail with
 * ex->refused set, which tells the codec that the request's body is not wanted. h1 then logs
 * the refusal, answers with `Connection: close` and reads no more; h2 and h3 keep the stream
 * open and drain its body. */
void fy_exchange_refuse(fy_exchange_t *ex, int status, const char *reason);

/* Standard reason phrase ("Not Found"), or "Unknown". */
const char *fy_http_reason(int status);

/* Header lists (memory from the exchange's arena). Names of added headers are lowercase. */
void fy_headers_add(fy_arena_t *a, fy_headers_t *hs, const char *name, size_t nlen,
                    const char *value, size_t vlen);
/* First header named `lower` (lowercase, case-insensitive), or NULL. */
const fy_header_t *fy_headers_find(const fy_headers_t *hs, const char *lower, size_t n);
#define FY_HDR_FIND(hs, lit) fy_headers_find((hs), (lit), sizeof(lit) - 1)
#define FY_HDR_ADD(a, hs, nlit, v, vlen)                                                           \
    fy_headers_add((a), (hs), (nlit), sizeof(nlit) - 1, (v), (vlen))

int fy_http_method_id(fy_str_t m);

/* "Mon, 30 Nov 2026 04:24:53 GMT" for `now` (cached per second per thread; 29 bytes). */
const char *fy_http_date(time_t now);
/* Format `t` the same way into buf (>= 30 bytes). */
void fy_http_date_fmt(time_t t, char *buf);
/* Parse an IMF-fixdate; returns -1 on error. */
time_t fy_http_date_parse(fy_str_t s);

#endif
