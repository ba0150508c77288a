/* ferry-load: shared types of the load generator (tools/load).
 *
 * ferry-load is a standalone program: one epoll loop per thread (fl_worker_t), each thread
 * owning its share of the connections (fl_conn_t). A connection speaks one protocol, chosen by
 * its `ops` table: HTTP/1.1 (h1.c), HTTP/2 through nghttp2's client session (h2.c), or the
 * TCP/UDP echo modes (echo.c). worker.c owns sockets, TLS, timers and scheduling; the codecs
 * only turn "issue one request" into bytes and bytes into "request finished".
 *
 * Nothing on the request path allocates: buffers are per connection and reused, h1 requests
 * are copied from pre-rendered templates, h2 streams use a per-connection slot array.
 */
#ifndef FL_H
#define FL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <openssl/ssl.h>

#define FL_MAX_URLS 64
#define FL_MAX_HEADERS 64
#define FL_PIPELINE_MAX 1024
#define FL_STREAMS_MAX 4096
#define FL_IBUF_SIZE (64 * 1024)
#define FL_OBUF_SIZE (64 * 1024)

/* ---- histogram (hist.c): fixed memory, log buckets with 128 linear sub-buckets per power of
 * two, so every recorded value is within 0.4% of its bucket midpoint; 1 ns .. ~18 min. */
#define FL_HIST_SUB_BITS 7
#define FL_HIST_MAX_EXP 40
#define FL_HIST_BUCKETS                                                                            \
    (((FL_HIST_MAX_EXP - FL_HIST_SUB_BITS) << FL_HIST_SUB_BITS) + (2 << FL_HIST_SUB_BITS))

typedef struct fl_hist {
    uint64_t count;
    uint64_t min, max; /* ns, exact */
    double sum;        /* ns, for the mean */
    uint64_t b[FL_HIST_BUCKETS];
} fl_hist_t;

/* Adds one value in ns (values beyond the range land in the last bucket; max stays exact). */
void fl_hist_record(fl_hist_t *h, uint64_t ns);
/* Adds every count of src into dst. */
void fl_hist_merge(fl_hist_t *dst, const fl_hist_t *src);
/* The value (ns) at quantile q in [0,1]: the midpoint of the bucket holding the ceil(q*count)-th
 * smallest value, clamped to [min,max]; 0 when empty. */
uint64_t fl_hist_quantile(const fl_hist_t *h, double q);

/* ---- errors ---- */
enum fl_err {
    FL_ERR_CONNECT, /* connect() failed or timed out */
    FL_ERR_TLS,     /* handshake failed, or ALPN did not select the wanted protocol */
    FL_ERR_STATUS,  /* response status was not 2xx (or not --expect-status) */
    FL_ERR_BODY,    /* body length differs from --expect-bytes, truncated body, wrong echo */
    FL_ERR_PARSE,   /* malformed response (h1 syntax, h2 protocol error) */
    FL_ERR_RESET,   /* connection reset/closed with requests in flight, RST_STREAM, GOAWAY error */
    FL_ERR_TIMEOUT, /* no progress for --timeout with requests in flight */
    FL_ERR_MAX
};
extern const char *const fl_err_names[FL_ERR_MAX];

typedef struct fl_stats {
    uint64_t requests;   /* completed responses (any status) or echo round trips */
    uint64_t ok;         /* of which passed every check */
    uint64_t bytes;      /* every byte received after TLS (heads, framing, bodies) */
    uint64_t body_bytes; /* response body bytes (echo: payload bytes) */
    uint64_t errors[FL_ERR_MAX];
    uint64_t status[6]; /* by class: [1]=1xx .. [5]=5xx, [0]=other */
    uint64_t connects;  /* connections established (after TLS) */
    fl_hist_t hist;
} fl_stats_t;

/* ---- configuration (main.c), immutable once threads start ---- */
enum fl_proto { FL_H1, FL_H2, FL_TCP_ECHO, FL_UDP_ECHO, FL_WS_ECHO, FL_H3, FL_WT };

typedef struct fl_url {
    char *path; /* owned: request target, e.g. "/a?b" */
    char *tmpl; /* owned: the whole h1 request (head + body), sent as is */
    size_t tmpl_len;
} fl_url_t;

typedef struct fl_header {
    char *name;  /* owned; lower-cased copy used for h2 */
    char *value; /* owned */
} fl_header_t;

typedef struct fl_config {
    enum fl_proto proto;
    bool tls;
    bool insecure;
    char host[256];      /* from the URL, for SNI and Host */
    char authority[300]; /* host[:port] as sent in Host / :authority */
    char port[8];
    struct sockaddr_storage addr; /* the server, or the --proxy */
    socklen_t addrlen;
    fl_url_t urls[FL_MAX_URLS];
    int nurls;
    const char *method;
    bool head; /* method is HEAD: responses have no body */
    fl_header_t headers[FL_MAX_HEADERS];
    int nheaders;
    bool user_host; /* -H Host: given */
    char *body;     /* owned, may be NULL */
    size_t body_len;
    int conns;
    int streams;  /* h2: concurrent streams per connection; echo: messages in flight */
    int pipeline; /* h1: requests in flight per connection */
    int threads;
    double duration, warmup, timeout; /* seconds */
    double hold;          /* h3: seconds to keep the connections open after the run (idle-memory) */
    double rate;          /* total requests/s; 0 = closed loop */
    uint64_t total;       /* -n: stop after this many requests; 0 = by time */
    int expect_status;    /* 0 = any 2xx */
    int64_t expect_bytes; /* -1 = not checked */
    size_t echo_size;     /* tcp/udp: message size; wt: bytes per stream */
    int wt_sessions;      /* wt: --sessions per connection (1) */
    double wt_datagram_rate; /* wt: --datagram-rate per session per second (0) */
    size_t wt_datagram_size; /* wt: --datagram-size (64) */
    bool wt_uni;             /* wt: --wt-uni: unidirectional streams, answered on the server's */
    bool wt_datagrams_only;  /* wt: --datagrams-only: no streams, datagram echoes are the round
                                trips (latency from the timestamp each carries) */
    int wt_fault; /* wt: --wt-fault (tests): 1 unknown-session, 2 close-mid-stream, 3 bad-datagram,
                     4 late-settings, 5 reset-stream, 6 stop-sending, 7 drain */
    bool json;
    bool proxy_connect;     /* --proxy: CONNECT authority through addr first */
    bool proxy_absolute;    /* --proxy with plain h1: absolute-form request targets */
    uint32_t connect_hosts; /* --connect-hosts N: CONNECT to connect_base + (k mod N) */
    uint32_t connect_base;  /* the URL's IPv4 address, host order */
    SSL_CTX *ssl_ctx;
    const char *url_text; /* borrowed: the first URL as given */
} fl_config_t;

extern fl_config_t fl_cfg;

/* ---- connections ---- */
struct fl_worker;
struct fl_conn;

enum fl_conn_state {
    FL_CONN_IDLE,
    FL_CONN_CONNECTING,
    FL_CONN_TUNNEL, /* --proxy: CONNECT sent, awaiting the proxy's 2xx */
    FL_CONN_HANDSHAKE,
    FL_CONN_READY
};

/* A protocol on a ready connection. Every callback runs on the connection's worker thread. */
struct fl_proto_ops {
    const char *name;
    /* Called once the transport is ready; 0 or -1 (connection is then failed). */
    int (*on_ready)(struct fl_conn *c);
    /* Issue one request started at t_ns (scheduled time in open loop). 0 or -1. */
    int (*issue)(struct fl_conn *c, uint64_t t_ns);
    /* Consume received bytes c->ibuf[ipos, ilen), leaving an incomplete tail there; 0, or -1
     * after counting the error (the connection is then closed). */
    int (*on_data)(struct fl_conn *c);
    /* Append pending output at c->obuf + c->oend (called when the buffer is empty; for
     * datagrams exactly one message); 0, or -1 on a codec failure. */
    int (*fill_obuf)(struct fl_conn *c);
    /* True if the connection can take another request now. */
    bool (*can_issue)(struct fl_conn *c);
    /* The peer closed (EOF): complete a close-delimited response if any; 0 or -1. */
    int (*on_eof)(struct fl_conn *c);
    /* Release protocol state; in-flight requests are accounted by the caller (c->inflight). */
    void (*reset)(struct fl_conn *c);
};

typedef struct fl_h1_state {
    int state; /* parser state, h1.c */
    uint64_t remaining;
    uint64_t body_seen;
    int status;
    bool close_after;                  /* Connection: close / HTTP/1.0 */
    size_t scan_from;                  /* where to resume the \r\n\r\n search in ibuf */
    uint64_t sent_at[FL_PIPELINE_MAX]; /* ring of start times of requests in flight */
    uint32_t head, count;              /* ring */
    uint32_t sendq;                    /* requests issued but not yet copied to obuf */
    uint32_t url_next;                 /* template being copied */
    size_t tmpl_off;
    uint32_t url_rr;
} fl_h1_state_t;

typedef struct fl_h2_slot {
    uint64_t t_start;
    uint64_t body;
    int32_t stream_id;
    int status;
    size_t body_off; /* request body sent so far */
    int next_free;
} fl_h2_slot_t;

typedef struct fl_conn {
    struct fl_worker *w; /* borrowed */
    const struct fl_proto_ops *ops;
    int fd;
    int idx;
    enum fl_conn_state state;
    SSL *ssl;        /* owned */
    bool writable;   /* last write did not hit EAGAIN */
    bool dirty;      /* on the worker's flush list */
    bool ever_ready; /* connected at least once */
    bool draining;   /* stop issuing; close when idle (Connection: close, GOAWAY) */
    uint32_t inflight;
    uint64_t last_progress; /* ns: last byte received / state change */
    uint64_t retry_at;      /* ns: reconnect not before */
    uint8_t *ibuf;          /* owned, FL_IBUF_SIZE */
    size_t ilen, ipos;
    uint8_t *obuf; /* owned, FL_OBUF_SIZE */
    size_t ostart, oend;
    union {
        fl_h1_state_t h1;
        struct {
            void *session;       /* nghttp2_session *, owned */
            fl_h2_slot_t *slots; /* owned, fl_cfg.streams */
            int free_head;
            const uint8_t *pend; /* borrowed from nghttp2 until the next mem_send */
            size_t pend_len;
            bool goaway;
            int32_t goaway_last;
            uint32_t url_rr;
        } h2;
        struct {
            uint64_t sent_at[FL_STREAMS_MAX]; /* ring */
            uint32_t head, count;
            uint64_t seq_sent, seq_recv; /* message sequence numbers */
            size_t out_off;              /* tcp: bytes of the current message written */
            size_t in_off;               /* tcp: bytes of the current reply verified */
            uint32_t sendq;
            uint8_t ws;      /* ws: 0 upgrade not sent, 1 awaiting 101, 2 open */
            bool ws_payload; /* ws: inside a frame's payload (in_off counts it) */
        } echo;
    } u;
} fl_conn_t;

typedef struct fl_worker {
    int id;
    int epfd;
    fl_conn_t *conns; /* owned */
    int nconns;
    uint64_t t0, measure_start, end; /* ns, CLOCK_MONOTONIC */
    uint64_t budget;                 /* -n share; 0 = unlimited */
    uint64_t issued, finished;       /* toward the budget (counted from t0, warm-up included) */
    uint64_t finish_ns;              /* when the worker stopped */
    double rate;                     /* this worker's share of --rate */
    uint64_t interval_ns, next_sched;
    uint64_t slots_free; /* open loop: spare capacity over ready connections (hint) */
    int rr;
    fl_conn_t **flush; /* owned, connections with pending output */
    int nflush;
    uint64_t now;
    bool stopping;
    fl_stats_t st;
    uint64_t progress; /* completed requests, read by the main thread (relaxed atomics) */
    uint64_t progress_err;
} fl_worker_t;

uint64_t fl_now_ns(void);

/* wt.c: WebTransport (wt://) workers, and the datagram counts after the report */
void *fl_wt_worker_run(fl_worker_t *w);
void fl_wt_report(bool json);

/* worker.c */
void *fl_worker_run(void *arg);
/* Accounts a finished request: latency from t_start, status (0 for echo), body byte count,
 * error kind (-1 none). */
void fl_finish(fl_conn_t *c, uint64_t t_start, int status, uint64_t body, int err);
/* Counts an error not tied to a response (e.g. a reset with requests in flight) n times. */
void fl_count_error(fl_conn_t *c, int err, uint64_t n);
/* Marks the connection as having output to flush at the end of this event batch. */
void fl_conn_want_flush(fl_conn_t *c);
/* Returns a request the protocol could not send back to the pool (e.g. refused by GOAWAY). */
void fl_unissue(fl_conn_t *c);

/* h3.c: a whole worker thread on ferry's loop and HTTP/3 client codec (QUIC owns its I/O). */
void *fl_h3_worker_run(fl_worker_t *w);

/* h1.c, h2.c, echo.c */
extern const struct fl_proto_ops fl_h1_ops, fl_h2_ops, fl_tcp_echo_ops, fl_udp_echo_ops,
    fl_ws_echo_ops;
/* Builds the echo message pattern (--size); 0 or -1. */
int fl_echo_init(void);
/* Renders the request templates (Host, headers, Content-Length, body); 0 or -1. */
int fl_h1_build_templates(void);

#endif
