/* Internals shared by the h3 server codec's files (h3_server.c: the QUIC application
 * callbacks, control and QPACK streams, stream life; h3_server_req.c: request streams;
 * h3_server_resp.c: the response side). Not for use outside src/h3/.
 *
 * Thread rules: a connection (h3_conn_t) and its streams belong to the worker whose QUIC
 * endpoint owns the connection; every function here runs on that worker's loop thread. The
 * stream pool is per thread. */
#ifndef FY_H3_H3_SERVER_INT_H
#define FY_H3_H3_SERVER_INT_H

#include "h3/h3_server.h"
#include <errno.h>
#include <nghttp3/nghttp3.h>
#include <stddef.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/counters.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/pool.h"
#include "h3/h3_frame.h"
#include "h3/h3_qpack.h"
#include "h3/h3_wt.h"
#include "http/protocol.h"
#include "net/sock.h"

#define CTRL_FRAME_MAX 4096 /* SETTINGS/GOAWAY/... payloads we buffer on the control stream */

typedef struct h3_conn h3_conn_t;

typedef struct h3_stream {
    fy_exchange_t ex;
    fy_arena_t arena;
    h3_conn_t *c;
    fy_quic_stream_t *qs; /* NULL once QUIC closed it */
    fy_h3_frame_rd_t rd;
    int phase; /* 0: want HEADERS, 1: body (DATA, trailers), 2: after trailers */
    uint8_t *hbuf;
    size_t hlen, hoff, hcap; /* HEADERS payload being collected / decoded */
    bool skip_headers;       /* that payload is over the limit: skipped, then 431 */
    nghttp3_qpack_stream_context *sctx;
    bool blocked; /* waiting for the QPACK encoder stream */
    uint8_t *pend;
    size_t pend_len, pend_cap; /* bytes received while blocked */
    bool pend_fin;
    fy_list_t blink;
    size_t hdr_bytes;
    bool hdr_too_large, saw_regular;
    const char *malformed; /* why the field section is malformed (RFC 9114 §4.1.2), or NULL */
    unsigned pseudo_seen;  /* PSEUDO_* bits */
    fy_str_t host;         /* the Host field's value (host_seen) */
    bool host_seen;
    bool dispatched, fin_recv, peer_gone;
    /* response */
    bool head_written, final, ex_done, want_proceed, finished;
    int file_fd;
    off_t file_off;
    size_t file_left;
    /* request body */
    char *body;
    size_t body_cap, body_len, body_given;
    bool body_end, body_wanted, end_delivered;
    fy_defer_t defer;
    fy_list_t link;
    _Alignas(16) char arena_first[1024];
} h3_stream_t;

typedef struct h3_uni {
    int64_t type; /* -1 until read */
    uint8_t tb[8];
    size_t tn;
    fy_h3_frame_rd_t rd;
    uint8_t fb[CTRL_FRAME_MAX];
    size_t fn;
    bool ignore;
} h3_uni_t;

struct h3_conn {
    fy_conn_node_t node;
    fy_quic_conn_t *qc;
    fy_http_ctx_t *ctx;
    const fy_quic_conf_t *conf;
    struct sockaddr_storage remote;
    nghttp3_qpack_encoder *enc;
    nghttp3_qpack_decoder *dec;
    fy_quic_stream_t *ctrl, *qenc, *qdec;
    bool peer_ctrl, peer_enc, peer_dec, got_settings;
    bool closing, goaway;
    int64_t max_bidi; /* highest request stream id seen */
    fy_list_t streams;
    size_t nstreams;
    fy_list_t blocked;
    size_t nblocked;        /* streams on `blocked`: at most quic.qpack-blocked-streams */
    nghttp3_buf pb, rb, eb; /* QPACK encoder output, reused for every field section */
    fy_h3_wt_t *wt;         /* WebTransport sessions and streams (h3_wt.c) */
};

enum {
    PSEUDO_METHOD = 1,
    PSEUDO_SCHEME = 2,
    PSEUDO_AUTHORITY = 4,
    PSEUDO_PATH = 8,
    PSEUDO_PROTOCOL = 16,
};

/* ---- shared between the h3_server*.c files ---- */

void fy__h3_conn_error(h3_conn_t *c, uint64_t code, const char *why);
int fy__h3_qwrite(h3_conn_t *c, fy_quic_stream_t *s, const void *p, size_t n);
void fy__h3_write_frame_hdr(h3_conn_t *c, fy_quic_stream_t *s, uint64_t type, uint64_t len);
void fy__h3_flush_decoder(h3_conn_t *c);
void fy__h3_stream_done(h3_stream_t *s);
bool fy__h3_is_conn_specific(fy_str_t n);
void fy__h3_abort_stream(h3_stream_t *s, uint64_t code);
void fy__h3_progress(h3_stream_t *s);
void fy__h3_deliver_body(h3_stream_t *s);
extern const fy_sink_ops_t fy__h3_sink;
void fy__h3_stream_free(h3_stream_t *s);
void fy__h3_request_recv(h3_stream_t *s, const uint8_t *p, size_t n, bool fin);
void fy__h3_unblock_streams(h3_conn_t *c);

#endif
