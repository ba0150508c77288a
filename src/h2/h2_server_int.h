/* Internals shared by the h2 server codec's files (h2_server.c: connection, buffers, timers,
 * I/O and start; h2_server_sink.c: streams and the response side; h2_server_session.c:
 * nghttp2's session callbacks; h2_server_scan.c: the frame pre-scanner). Not for use outside
 * src/h2/.
 *
 * Thread rules: a connection (h2_conn_t), its nghttp2 session and its streams belong to the
 * worker whose loop accepted it; every function here runs on that worker's loop thread. The
 * nghttp2 callbacks, options and the stream and read-buffer pools are per thread. */
#ifndef FY_H2_H2_SERVER_INT_H
#define FY_H2_H2_SERVER_INT_H

#include "h2/h2_server.h"
#include "h2/h2_check.h"
#include "h2/h2_mem.h"
#include "h2/h2_client.h"
#include <errno.h>
#include <stddef.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/counters.h"
#include "core/alloc.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/pool.h"
#include "h2/h2_conf.h"
#include "http/protocol.h"
#include "net/sock.h"
#include "tls/tls.h"

#define MAX_PEND 8
#define WBUF_SOFT (32 * 1024) /* stop pulling frames from nghttp2 past this */
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

typedef struct h2_conn h2_conn_t;

/* A read buffer. Request DATA the handler is waiting for are given to it where they lie in
 * this buffer instead of being copied into the stream's: the stream then holds a reference
 * until the handler reads on, and the connection reads into a fresh buffer meanwhile. */
typedef struct h2_rbuf {
    char data[FY_CHUNK_SIZE]; /* first: aligned as malloc aligns */
    int refs;
} h2_rbuf_t;

typedef struct h2_stream {
    fy_exchange_t ex;
    fy_arena_t arena;
    h2_conn_t *c;
    int32_t id;
    size_t hdr_bytes;
    bool hdr_too_large;
    bool bad_request;
    fy_h2_check_t chk; /* RFC 9113 §8 checks (h2_check.h): nghttp2's HTTP messaging is off */
    /* response */
    bool head_submitted;
    bool final;        /* handler sent FINAL */
    bool deferred;     /* data provider returned DEFERRED */
    bool want_proceed; /* the handler's data was taken: call proceed */
    bool ex_done;      /* the exchange is over for the handler (logged) */
    /* data_read gave the handler's last bytes by reference: after send_data took them, the
       exchange is done (FINAL) or the handler may send more (proceed) */
    bool done_after_send, proceed_after_send;
    bool closed; /* nghttp2 closed the stream */
    bool reset;  /* we submitted RST_STREAM */
    /* the response is complete but the request body is not: the stream stays open so that
       nghttp2 goes on checking what the client sends (§8.1.1, flow control); its DATA are
       dropped, given back to the connection window only (so at most the stream window more
       arrives), and RST_STREAM NO_ERROR asks the client to stop once that window is used up.
       Not counted in c->nstreams: it does not keep the connection out of keep-alive. */
    bool draining;
    struct iovec pend[MAX_PEND];
    int npend;
    int file_fd;
    off_t file_off;
    size_t file_left;
    size_t file_claim; /* file bytes data_read gave by reference: send_data reads them */
    /* request body */
    char *body;      /* owned (malloc), at most the stream window */
    h2_rbuf_t *held; /* the handler's slice lies in this read buffer (one reference) */
    size_t held_len;
    size_t body_cap, body_len, body_given;
    bool body_end, body_wanted, body_delivered;
    bool end_delivered; /* on_body(end=true) was called */
    size_t unconsumed;  /* bytes received but not yet given back as window */
    fy_defer_t defer;
    fy_list_t link;  /* in c->streams */
    size_t mem_held; /* what ferry_stream_memory_bytes{proto="h2"} has for it */
    _Alignas(16) char arena_first[1024];
    /* after arena_first: not cleared by stream_new. The response head's :status, date and
       content-length values, read by nghttp2 without a copy (NV_NOCOPY) when it packs the
       HEADERS frame */
    char st_val[3], date_val[29], cl_val[20];
} h2_stream_t;

struct h2_conn {
    fy_conn_node_t node;
    fy_io_t io;
    fy_transport_t sock;
    fy_transport_t *t;
    fy_http_ctx_t *ctx;
    const fy_h2_conf_t *conf;
    fy_loop_t *loop;
    struct sockaddr_storage remote;
    nghttp2_session *ng;
    fy_h2_mem_t mem; /* the session's allocator and its count (h2_mem.h) */
    size_t mem_held; /* what ferry_connection_memory_bytes has of this connection */
    fy_timer_t timer;
    bool timer_send;
    bool timer_idle; /* the keep-alive timer's first IDLE_RELEASE_MS (arm_keepalive) */
    h2_rbuf_t *rbuf;
    char *wbuf;
    size_t wcap, wlen, wsent;
    bool wblocked; /* send_data found the transport full: wait for EPOLLOUT */
    bool werr;     /* send_data failed to write: close */
    bool wfull;    /* send_data refused a frame, wbuf past WBUF_SOFT: write, then pull */
    fy_list_t streams;
    size_t nstreams;
    h2_stream_t *hstream; /* the stream whose request HEADERS are being read, or NULL */
    uint64_t glitches;
    double rst_tokens; /* rapid-reset budget */
    uint64_t rst_at;
    bool closed;
    bool in_io; /* inside a callback from the loop: flush once at the end */
    bool goaway;
    /* Client stream bookkeeping that nghttp2 does not keep (feed, frame_head): it forgets streams
       once closed and ignores frames on them, and on ids it never saw below the highest. */
    int32_t max_sid; /* highest stream id a client HEADERS used */
    struct {
        int32_t lo, hi;
    } gaps[8]; /* ids skipped (implicitly closed, §5.1.1), newest */
    unsigned ngaps;
    int32_t client_closed[16]; /* the latest streams whose client side is closed */
    unsigned nclosed;
    unsigned scan_magic; /* bytes of the client magic not yet scanned */
    unsigned scan_hlen;  /* bytes of the current frame header scanned */
    uint8_t scan_hdr[9];
    uint32_t scan_skip; /* payload bytes of the current frame not yet scanned */
    bool scan_split;    /* feed nghttp2 up to the end of the current frame first */
    fy_defer_t flush_defer;
    fy_defer_t free_defer;
    fy_defer_t reread; /* TLS holds decrypted bytes that epoll cannot signal */
    void *mitm_tunnel; /* fy_h2_conn_start_tunnel: every exchange's ex->tunnel */
    void (*mitm_tunnel_free)(void *);
};

/* ---- shared between the h2_server*.c files ---- */

void fy__h2_arm_keepalive(h2_conn_t *c);
void fy__h2_schedule_flush(h2_conn_t *c);
void fy__h2_stream_reset(h2_stream_t *s, uint32_t code);
void fy__h2_malformed(h2_stream_t *s);
void fy__h2_drain_check(h2_stream_t *s);
void fy__h2_stream_done(h2_stream_t *s);
void fy__h2_wbuf_free(h2_conn_t *c);
void fy__h2_wbuf_put(h2_conn_t *c, const void *p, size_t n);
int fy__h2_send_data(nghttp2_session *ng, nghttp2_frame *f, const uint8_t *hd, size_t length,
                     nghttp2_data_source *src, void *ud);
void fy__h2_deliver_body(h2_stream_t *s);
fy_pool_t *fy__h2_stream_pool(void);
void fy__h2_rbuf_release(h2_rbuf_t *b);
void fy__h2_stream_free(h2_stream_t *s);
h2_stream_t *fy__h2_stream_new(h2_conn_t *c, int32_t id);
int fy__h2_on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *ud);
fy_str_t fy__h2_hdup(h2_stream_t *s, const uint8_t *p, size_t n);
int fy__h2_on_header(nghttp2_session *ng, const nghttp2_frame *f, nghttp2_rcbuf *name,
                     nghttp2_rcbuf *value, uint8_t flags, void *ud);
void fy__h2_dispatch(h2_stream_t *s, bool end_stream);
void fy__h2_client_closed(h2_conn_t *c, int32_t id);
int fy__h2_on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *ud);
int fy__h2_on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud);
int fy__h2_on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud);
int fy__h2_feed_ng(h2_conn_t *c, const char *data, size_t len);
int fy__h2_feed(h2_conn_t *c, const char *data, size_t len);

#endif
