/* HTTP/2 server codec.
 *
 * nghttp2 owns framing, HPACK, flow control and most protocol validation (pseudo-headers,
 * connection-specific headers, content-length vs DATA, stream states); we feed it with
 * nghttp2_session_mem_recv and drain it with nghttp2_session_mem_send into one write buffer,
 * so a burst of responses leaves in one write.
 *
 * A stream is an exchange. Response bodies: the handler's buffers are referenced, not copied
 * by nghttp2 (NGHTTP2_DATA_FLAG_NO_COPY): on plain TCP send_data writes the 9-byte frame
 * header and a large payload from the handler's memory straight to the socket together with
 * the frames queued before it; over TLS (and for small payloads) the frame is copied once into
 * the write buffer. Only what the socket did not take is copied, so no reference outlives the
 * callback. Then `proceed` is called. Files are pread straight into the frame. Request bodies:
 * DATA the handler is waiting for are lent to it where they lie in the read buffer (which is
 * refcounted; reading goes on into a fresh one); others are copied into a per-stream buffer no
 * larger than the stream window. WINDOW_UPDATE is sent only as the handler consumes them
 * (automatic window updates are off): a slow handler stalls only its own stream.
 *
 * Protocol errors get their answer whatever the timing: a request body still coming after the
 * response is complete is drained within the stream window (h2_stream_t.draining), not reset
 * at once, so nghttp2 goes on checking it; and feed() scans frame headers on their way to
 * nghttp2 for what it does not check on streams it has closed or never saw (frame_head).
 */
#include "h2/h2_server.h"
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
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define WBUF_SOFT (32 * 1024) /* stop pulling frames from nghttp2 past this */

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
    /* request body */
    char *body;      /* owned (malloc), at most the stream window */
    h2_rbuf_t *held; /* the handler's slice lies in this read buffer (one reference) */
    size_t held_len;
    size_t body_cap, body_len, body_given;
    bool body_end, body_wanted, body_delivered;
    bool end_delivered; /* on_body(end=true) was called */
    size_t unconsumed;  /* bytes received but not yet given back as window */
    fy_defer_t defer;
    fy_list_t link; /* in c->streams */
    _Alignas(16) char arena_first[1024];
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
    fy_timer_t timer;
    bool timer_send;
    bool timer_idle; /* the keep-alive timer's first IDLE_RELEASE_MS (arm_keepalive) */
    h2_rbuf_t *rbuf;
    char *wbuf;
    size_t wcap, wlen, wsent;
    bool wblocked; /* send_data found the transport full: wait for EPOLLOUT */
    bool werr;     /* send_data failed to write: close */
    fy_list_t streams;
    size_t nstreams;
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

static void conn_close(h2_conn_t *c);
static void conn_flush(h2_conn_t *c);
static void reread_cb(fy_defer_t *d);
static void stream_free(h2_stream_t *s);
static void rbuf_release(h2_rbuf_t *b);

/* No stream open: the keep-alive timeout starts. Its first IDLE_RELEASE_MS end in
 * on_timer's release of the TLS record buffers (issue 19), not at every stream's end: a busy
 * connection would take them again at once, for ~400 instructions per request. */
#define IDLE_RELEASE_MS 10
static void arm_keepalive(h2_conn_t *c)
{
    uint64_t ka = c->ctx->limits->keepalive_timeout_ms;
    c->timer_idle = true;
    fy_timer_start(c->loop, &c->timer, ka < IDLE_RELEASE_MS ? ka : IDLE_RELEASE_MS);
}

static void schedule_flush(h2_conn_t *c)
{
    if (!c->in_io && !c->closed) fy_defer(c->loop, &c->flush_defer);
}

static void flush_cb(fy_defer_t *d)
{
    h2_conn_t *c = d->data;
    if (!c->closed) conn_flush(c);
}

/* ---- sink ---- */

static void stream_reset(h2_stream_t *s, uint32_t code)
{
    s->reset = true;
    nghttp2_submit_rst_stream(s->c->ng, NGHTTP2_FLAG_NONE, s->id, code);
}

/* A draining stream whose window the client has used up: ask it to stop (RFC 9113 §8.1). */
static void drain_check(h2_stream_t *s)
{
    if (s->closed || s->reset || s->c->closed) return;
    if (nghttp2_session_get_stream_local_window_size(s->c->ng, s->id) > 0) return;
    stream_reset(s, NGHTTP2_NO_ERROR);
    schedule_flush(s->c);
}

static void stream_done(h2_stream_t *s)
{
    if (s->ex_done) return;
    s->ex_done = true;
    h2_conn_t *c = s->c;
    if (s->ex.res.status) fy_exchange_done(&s->ex);
    if (!s->closed && !s->body_end && !s->reset && !c->closed) {
        /* a body nobody will read: drained, not reset at once (h2_stream_t.draining) */
        s->draining = true;
        if (s->unconsumed) nghttp2_session_consume_connection(c->ng, s->unconsumed);
        s->unconsumed = 0;
        if (--c->nstreams == 0) arm_keepalive(c);
        drain_check(s);
        return;
    }
    if (s->unconsumed && !c->closed) {
        nghttp2_session_consume(c->ng, s->id, s->unconsumed);
        s->unconsumed = 0;
    }
    if (s->closed) stream_free(s);
}

static void proceed_cb(fy_defer_t *d)
{
    h2_stream_t *s = d->data;
    if (s->closed || s->ex_done || !s->want_proceed) return;
    s->want_proceed = false;
    if (s->ex.producer && s->ex.producer->proceed) s->ex.producer->proceed(&s->ex);
}

/* Response bodies up to this size are copied (into nghttp2's frame, then the write buffer:
 * cheaper than the send_data round for a few bytes, and they leave with the frames around
 * them in one write); larger ones are given to nghttp2 by reference (send_data). */
#define COPY_MAX 4096

static void schedule_proceed(h2_stream_t *s)
{
    s->want_proceed = true;
    s->defer.cb = proceed_cb;
    s->defer.data = s;
    fy_defer(s->c->loop, &s->defer);
}

static ssize_t data_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    h2_stream_t *s = src->ptr;
    size_t n = 0, more = 0;
    if (s->npend) {
        size_t avail = 0;
        for (int i = 0; i < s->npend; i++) avail += s->pend[i].iov_len;
        if (avail > COPY_MAX) {
            /* by reference: send_data takes the bytes from s->pend in this same mem_send */
            n = avail < length ? avail : length;
            *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
        } else {
            /* a small body: copied into the frame here, cheaper than the send_data round */
            while (n < length && s->npend) {
                struct iovec *v = &s->pend[0];
                size_t k = v->iov_len < length - n ? v->iov_len : length - n;
                memcpy(buf + n, v->iov_base, k);
                n += k;
                v->iov_base = (char *)v->iov_base + k;
                v->iov_len -= k;
                if (v->iov_len == 0) {
                    memmove(s->pend, s->pend + 1, (size_t)(s->npend - 1) * sizeof s->pend[0]);
                    s->npend--;
                }
            }
        }
        more = avail - n;
    } else if (s->file_left) {
        size_t k = s->file_left < length ? s->file_left : length;
        ssize_t r = pread(s->file_fd, buf, k, s->file_off);
        if (r <= 0) {
            fy_error("h2: read file: %s", r < 0 ? strerror(errno) : "file shrank");
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM INTERNAL_ERROR */
        }
        n = (size_t)r;
        s->file_off += r;
        s->file_left -= (size_t)r;
    }
    if (more == 0 && s->file_left == 0) {
        if (s->final) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            if (s->ex.res_trailers.n) {
                *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
                size_t nt = s->ex.res_trailers.n;
                nghttp2_nv *nv = fy_arena_alloc(&s->arena, nt * sizeof *nv);
                for (size_t i = 0; i < nt; i++) {
                    const fy_header_t *h = &s->ex.res_trailers.v[i];
                    char *name = fy_arena_strndup(&s->arena, h->name.p, h->name.len);
                    for (char *p = name; *p; p++) *p = fy_lower(*p);
                    nv[i] = (nghttp2_nv){(uint8_t *)name, (uint8_t *)h->value.p, h->name.len,
                                         h->value.len, NGHTTP2_NV_FLAG_NONE};
                }
                nghttp2_submit_trailer(ng, id, nv, nt);
            }
            /* the handler's last buffers must outlive send_data: done after it */
            if (*flags & NGHTTP2_DATA_FLAG_NO_COPY)
                s->done_after_send = true;
            else
                stream_done(s);
        } else if (n == 0) {
            s->deferred = true;
            return NGHTTP2_ERR_DEFERRED;
        } else if (*flags & NGHTTP2_DATA_FLAG_NO_COPY) {
            s->proceed_after_send = true; /* send_data may refuse it for now (WOULDBLOCK) */
        } else {
            /* everything the handler gave is copied: it may send more */
            schedule_proceed(s);
        }
    }
    return (ssize_t)n;
}

/* wbuf is a chunk of the worker's pool while it is one chunk, malloc'd once it grew; an
 * idle connection holds none (wbuf_release). */
static void wbuf_grow(h2_conn_t *c, size_t n)
{
    if (!c->wbuf) {
        c->wbuf = fy_pool_get(fy_chunk_pool());
        c->wcap = FY_CHUNK_SIZE;
        if (c->wlen + n <= c->wcap) return;
    }
    size_t cap = c->wcap;
    while (cap < c->wlen + n) cap *= 2;
    c->wbuf = fy_xrealloc(c->wbuf, cap);
    c->wcap = cap;
}

static void wbuf_free(h2_conn_t *c)
{
    if (c->wcap == FY_CHUNK_SIZE)
        fy_pool_put(fy_chunk_pool(), c->wbuf);
    else
        free(c->wbuf);
    c->wbuf = NULL;
    c->wcap = c->wlen = c->wsent = 0;
}

/* Append bytes to the write buffer. */
static inline void wbuf_put(h2_conn_t *c, const void *p, size_t n)
{
    if (c->wsent == c->wlen) c->wlen = c->wsent = 0;
    if (c->wlen + n > c->wcap) wbuf_grow(c, n);
    memcpy(c->wbuf + c->wlen, p, n);
    c->wlen += n;
}

/* nghttp2's send_data_callback for a DATA frame given by reference (data_read): the frame
 * header `hd` and `length` payload bytes taken from s->pend (never padded: there is no
 * select_padding callback). On plain TCP a large payload goes to the socket at once with
 * writev, after the bytes already queued in wbuf; whatever the socket does not take is copied
 * into wbuf, so the handler's memory is not referenced after this returns. Over TLS the frame
 * is copied into wbuf once: OpenSSL encrypts a record from contiguous plaintext, so the header
 * and the payload must be assembled somewhere, and wbuf (written with one SSL_write per full
 * record) is that place, instead of nghttp2's frame buffer and then wbuf. With the socket known
 * full, the frame is refused (WOULDBLOCK: nghttp2 offers it again later) rather than copied. */
static int send_data(nghttp2_session *ng, nghttp2_frame *f, const uint8_t *hd, size_t length,
                     nghttp2_data_source *src, void *ud)
{
    h2_conn_t *c = ud;
    h2_stream_t *s = src->ptr;
    if (c->wblocked) return NGHTTP2_ERR_WOULDBLOCK;
    struct iovec iov[MAX_PEND + 2];
    int n = 0;
    size_t queued = c->wlen - c->wsent;
    if (queued) iov[n++] = (struct iovec){c->wbuf + c->wsent, queued};
    int first = n;
    iov[n++] = (struct iovec){(void *)hd, 9};
    size_t left = length;
    int k = 0;
    while (left) {
        if (k == s->npend) return NGHTTP2_ERR_CALLBACK_FAILURE; /* not possible */
        struct iovec *v = &s->pend[k];
        size_t l = v->iov_len < left ? v->iov_len : left;
        iov[n++] = (struct iovec){v->iov_base, l};
        left -= l;
        if (l == v->iov_len) {
            k++;
        } else {
            v->iov_base = (char *)v->iov_base + l;
            v->iov_len -= l;
        }
    }
    if (k) {
        memmove(s->pend, s->pend + k, (size_t)(s->npend - k) * sizeof s->pend[0]);
        s->npend -= k;
    }
    size_t done = 0;
    if (length > COPY_MAX && !c->t->is_tls) {
        ssize_t w = c->t->ops->writev(c->t, iov, n);
        if (w < 0) {
            c->werr = true;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        done = (size_t)w;
        if (done < queued + 9 + length) c->wblocked = true; /* short: the socket is full */
    }
    /* the rest of the sequence [queued, hd, payload] after `done` bytes */
    size_t skip;
    if (done < queued) {
        c->wsent += done;
        skip = 0;
    } else {
        c->wlen = c->wsent = 0;
        skip = done - queued;
    }
    for (int i = first; i < n; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        wbuf_put(c, (char *)iov[i].iov_base + skip, iov[i].iov_len - skip);
        skip = 0;
    }
    if (s->proceed_after_send) {
        s->proceed_after_send = false;
        schedule_proceed(s);
    }
    if (s->done_after_send) {
        s->done_after_send = false;
        stream_done(s);
    }
    return 0;
}

static bool is_conn_specific(fy_str_t n)
{
    return fy_str_ieq(n, "connection", 10) || fy_str_ieq(n, "keep-alive", 10) ||
           fy_str_ieq(n, "transfer-encoding", 17) || fy_str_ieq(n, "upgrade", 7) ||
           fy_str_ieq(n, "proxy-connection", 16);
}

/* Names and values live in the stream's arena, the config or static storage, all of which
 * outlive the HEADERS frame (the arena goes only after nghttp2 closes the stream), so
 * nghttp2 need not copy them. */
#define NV_NOCOPY (NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE)
#define NV_LIT(n, v, vl)                                                                           \
    ((nghttp2_nv){(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NV_NOCOPY})

static void submit_head(h2_stream_t *s, bool no_body)
{
    fy_exchange_t *ex = &s->ex;
    fy_response_t *res = &ex->res;
    size_t n = res->headers.n + 5;
    nghttp2_nv *nv = fy_arena_alloc(&s->arena, n * sizeof *nv);
    size_t k = 0;
    char *st = fy_arena_alloc(&s->arena, 4);
    int status = res->status;
    st[0] = (char)('0' + status / 100 % 10);
    st[1] = (char)('0' + status / 10 % 10);
    st[2] = (char)('0' + status % 10);
    nv[k++] = NV_LIT(":status", st, 3);
    nv[k++] = NV_LIT("server", "ferry", 5);
    char *date = fy_arena_alloc(&s->arena, 32);
    memcpy(date, fy_http_date(s->c->loop->now_sec), 29);
    nv[k++] = NV_LIT("date", date, 29);
    if (res->content_length >= 0 && status != 204 && status != 304) {
        char tmp[24], *cl = fy_arena_alloc(&s->arena, 24);
        uint64_t v = (uint64_t)res->content_length;
        size_t l = 0, d = 0;
        do {
            tmp[d++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        while (d) cl[l++] = tmp[--d];
        nv[k++] = NV_LIT("content-length", cl, l);
    }
    for (size_t i = 0; i < res->headers.n; i++) {
        const fy_header_t *h = &res->headers.v[i];
        if (is_conn_specific(h->name)) continue;
        uint8_t *name = (uint8_t *)h->name.p;
        for (size_t j = 0; j < h->name.len; j++)
            if (h->name.p[j] >= 'A' && h->name.p[j] <= 'Z') {
                char *lc = fy_arena_strndup(&s->arena, h->name.p, h->name.len);
                for (size_t q = 0; q < h->name.len; q++) lc[q] = fy_lower(lc[q]);
                name = (uint8_t *)lc;
                break;
            }
        nv[k++] = (nghttp2_nv){name, (uint8_t *)h->value.p, h->name.len, h->value.len, NV_NOCOPY};
    }
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = data_read};
    int r = nghttp2_submit_response(s->c->ng, s->id, nv, k, no_body ? NULL : &prd);
    if (r != 0) fy_error("h2: submit response: %s", nghttp2_strerror(r));
    s->head_submitted = true;
    ex->head_sent = true;
}

static void h2_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state)
{
    h2_stream_t *s = ex->codec;
    h2_conn_t *c = s->c;
    if (s->ex_done || s->final) return;
    if (s->closed) {
        if (state != FY_SEND_MORE) stream_done(s);
        return;
    }
    s->want_proceed = false;
    if (state == FY_SEND_ERROR) {
        stream_reset(s, NGHTTP2_INTERNAL_ERROR);
        stream_done(s);
        schedule_flush(c);
        return;
    }
    bool head_only =
        ex->req.method_id == FY_M_HEAD || ex->res.status == 204 || ex->res.status == 304;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += bufs[i].iov_len;
        if (head_only || bufs[i].iov_len == 0) continue;
        if (s->npend == MAX_PEND) {
            fy_error("h2: too many buffers in one send");
            stream_reset(s, NGHTTP2_INTERNAL_ERROR);
            stream_done(s);
            schedule_flush(c);
            return;
        }
        s->pend[s->npend++] = bufs[i];
    }
    ex->bytes_sent += total;
    if (state == FY_SEND_FINAL) s->final = true;
    if (!s->head_submitted) {
        bool no_body =
            head_only || (s->final && total == 0 && s->file_left == 0 && ex->res_trailers.n == 0);
        submit_head(s, no_body);
        if (no_body) {
            /* HEAD, 204, 304 or an empty final body: the HEADERS frame ends the stream */
            s->npend = 0;
            s->final = true;
            stream_done(s);
        }
    } else if (s->deferred) {
        s->deferred = false;
        nghttp2_session_resume_data(c->ng, s->id);
    }
    if (state == FY_SEND_MORE && total == 0 && s->npend == 0 && s->file_left == 0 && !s->closed) {
        /* nothing to copy (a head-only send that opens a tunnel): proceed at once */
        schedule_proceed(s);
    }
    schedule_flush(c);
}

static void h2_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state)
{
    h2_stream_t *s = ex->codec;
    if (s->ex_done || s->final) return;
    if (ex->req.method_id == FY_M_HEAD || len == 0) {
        h2_send(ex, NULL, 0, state);
        return;
    }
    s->file_fd = fd;
    s->file_off = off;
    s->file_left = len;
    ex->bytes_sent += len;
    h2_send(ex, NULL, 0, state); /* submits the head or resumes the data provider */
}

static void deliver_body(h2_stream_t *s)
{
    if (!s->body_wanted || s->closed) return;
    size_t avail = s->body_len - s->body_given;
    if (avail == 0 && !s->body_end) return;
    s->body_wanted = false;
    s->body_delivered = true;
    size_t at = s->body_given;
    s->body_given = s->body_len;
    if (s->body_end) s->end_delivered = true;
    s->ex.on_body(&s->ex, s->body ? s->body + at : NULL, avail, s->body_end);
}

static void h2_read_body(fy_exchange_t *ex)
{
    h2_stream_t *s = ex->codec;
    h2_conn_t *c = s->c;
    if (s->closed) return;
    if (s->held) {
        /* the slice given from the read buffer is consumed: let the buffer go, reopen */
        size_t given = s->held_len;
        rbuf_release(s->held);
        s->held = NULL;
        s->held_len = 0;
        if (s->unconsumed >= given) {
            nghttp2_session_consume(c->ng, s->id, given);
            s->unconsumed -= given;
            schedule_flush(c);
        }
    }
    /* what the handler had is consumed: drop it and reopen the window by that much */
    if (s->body_given) {
        size_t given = s->body_given;
        memmove(s->body, s->body + given, s->body_len - given);
        s->body_len -= given;
        s->body_given = 0;
        if (s->unconsumed >= given) {
            nghttp2_session_consume(c->ng, s->id, given);
            s->unconsumed -= given;
            schedule_flush(c);
        }
    }
    if (s->end_delivered) return; /* the end was given already */
    s->body_delivered = false;
    s->body_wanted = true;
    deliver_body(s);
}

static void h2_send_informational(fy_exchange_t *ex, int status, const fy_headers_t *hs)
{
    h2_stream_t *s = ex->codec;
    if (s->closed || s->ex_done || s->head_submitted || status < 102 || status > 199) return;
    nghttp2_nv *nv = fy_arena_alloc(&s->arena, (hs->n + 1) * sizeof *nv);
    char *st = fy_arena_alloc(&s->arena, 4);
    st[0] = (char)('0' + status / 100);
    st[1] = (char)('0' + status / 10 % 10);
    st[2] = (char)('0' + status % 10);
    size_t k = 0;
    nv[k++] = NV_LIT(":status", st, 3);
    for (size_t i = 0; i < hs->n; i++) {
        if (is_conn_specific(hs->v[i].name)) continue;
        char *name = fy_arena_strndup(&s->arena, hs->v[i].name.p, hs->v[i].name.len);
        for (char *q = name; *q; q++) *q = fy_lower(*q);
        /* the caller's strings may not outlive this call (the proxy reuses its buffer) */
        char *value = fy_arena_strndup(&s->arena, hs->v[i].value.p, hs->v[i].value.len);
        nv[k++] = (nghttp2_nv){(uint8_t *)name, (uint8_t *)value, hs->v[i].name.len,
                               hs->v[i].value.len, NV_NOCOPY};
    }
    nghttp2_submit_headers(s->c->ng, NGHTTP2_FLAG_NONE, s->id, NULL, nv, k, NULL);
    schedule_flush(s->c);
}

static const fy_sink_ops_t h2_sink = {
    .name = "h2",
    .send = h2_send,
    .send_file = h2_send_file,
    .read_body = h2_read_body,
    .send_informational = h2_send_informational,
};

/* ---- streams ---- */

static fy_pool_t *stream_pool(void)
{
    static __thread fy_pool_t pool;
    if (!pool.size) fy_pool_init(&pool, sizeof(h2_stream_t), 256);
    return &pool;
}

static fy_pool_t *rbuf_pool(void)
{
    static __thread fy_pool_t pool;
    if (!pool.size) fy_pool_init(&pool, sizeof(h2_rbuf_t), 16);
    return &pool;
}

static h2_rbuf_t *rbuf_get(void)
{
    h2_rbuf_t *b = fy_pool_get(rbuf_pool());
    b->refs = 1;
    return b;
}

static void rbuf_release(h2_rbuf_t *b)
{
    if (--b->refs == 0) fy_pool_put(rbuf_pool(), b);
}

static void stream_free(h2_stream_t *s)
{
    h2_conn_t *c = s->c;
    if (s->held) rbuf_release(s->held);
    fy_defer_cancel(c->loop, &s->defer);
    fy_list_remove(&s->link);
    if (!s->draining) c->nstreams--; /* a draining one was uncounted already */
    fy_gauge_add(fy_cid_streams_active[FY_CPROTO_H2], -1);
    fy_arena_free(&s->arena);
    free(s->body);
    fy_pool_put(stream_pool(), s);
    if (c->nstreams == 0 && !c->closed) arm_keepalive(c);
}

static h2_stream_t *stream_new(h2_conn_t *c, int32_t id)
{
    h2_stream_t *s = fy_pool_get(stream_pool());
    memset(s, 0, offsetof(h2_stream_t, arena_first)); /* the inline arena block needs none */
    s->c = c;
    s->id = id;
    s->file_fd = -1;
    fy_arena_init(&s->arena, s->arena_first, sizeof s->arena_first, 4096);
    fy_exchange_t *ex = &s->ex;
    ex->arena = &s->arena;
    ex->ctx = c->ctx;
    ex->codec = s;
    ex->sink = &h2_sink;
    ex->remote = (struct sockaddr *)&c->remote;
    ex->start_ms = c->loop->now_ms;
    ex->req.version = 20;
    ex->req.scheme = c->ctx->is_tls || c->t->is_tls ? FY_STR_LIT("https") : FY_STR_LIT("http");
    ex->tunnel = c->mitm_tunnel;
    fy_list_insert_tail(&c->streams, &s->link);
    c->nstreams++;
    fy_gauge_add(fy_cid_streams_active[FY_CPROTO_H2], 1);
    fy_timer_stop(c->loop, &c->timer);
    nghttp2_session_set_stream_user_data(c->ng, id, s);
    return s;
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    h2_conn_t *c = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    stream_new(c, f->hd.stream_id);
    return 0;
}

static fy_str_t hdup(h2_stream_t *s, const uint8_t *p, size_t n)
{
    return fy_str(fy_arena_strndup(&s->arena, (const char *)p, n), n);
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    h2_conn_t *c = ud;
    h2_stream_t *s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (!s || s->closed) return 0;
    /* HPACK bombs: the decoded size counts, as in SETTINGS_MAX_HEADER_LIST_SIZE (+32 each) */
    s->hdr_bytes += namelen + valuelen + 32;
    if (s->hdr_bytes > c->ctx->limits->max_header_bytes) {
        s->hdr_too_large = true;
        return 0;
    }
    fy_request_t *q = &s->ex.req;
    if (f->headers.cat == NGHTTP2_HCAT_HEADERS) { /* trailers */
        fy_str_t n = hdup(s, name, namelen), v = hdup(s, value, valuelen);
        fy_headers_add(&s->arena, &s->ex.req_trailers, n.p, n.len, v.p, v.len);
        return 0;
    }
    if (namelen && name[0] == ':') {
        fy_str_t v = hdup(s, value, valuelen);
        if (namelen == 7 && memcmp(name, ":method", 7) == 0) {
            q->method = v;
            q->method_id = fy_http_method_id(v);
        } else if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
            q->target = v;
        } else if (namelen == 10 && memcmp(name, ":authority", 10) == 0) {
            q->authority = v;
        } else if (namelen == 7 && memcmp(name, ":scheme", 7) == 0) {
            q->scheme = v;
        } else if (namelen == 9 && memcmp(name, ":protocol", 9) == 0) {
            q->protocol = v;
        }
        return 0;
    }
    if ((int64_t)q->headers.n >= c->ctx->limits->max_headers) {
        s->hdr_too_large = true;
        return 0;
    }
    fy_str_t n = hdup(s, name, namelen), v = hdup(s, value, valuelen);
    if (namelen == 4 && memcmp(name, "host", 4) == 0 && q->authority.len == 0) q->authority = v;
    if (namelen == 14 && memcmp(name, "content-length", 14) == 0) {
        /* nghttp2 has validated it against the DATA it will see */
        int64_t cl = 0;
        for (size_t i = 0; i < valuelen; i++) cl = cl * 10 + (value[i] - '0');
        q->content_length = cl;
    }
    fy_headers_add(&s->arena, &q->headers, n.p, n.len, v.p, v.len);
    return 0;
}

static void dispatch(h2_stream_t *s, bool end_stream)
{
    fy_exchange_t *ex = &s->ex;
    fy_request_t *q = &ex->req;
    if (end_stream) {
        s->body_end = true;
        q->content_length = 0;
    } else if (!FY_HDR_FIND(&q->headers, "content-length")) {
        q->content_length = -1;
    }
    if (s->hdr_too_large) {
        fy_exchange_fail(ex, 431, "request header list over limits");
        return;
    }
    if (q->method_id == FY_M_CONNECT) {
        /* classic CONNECT (RFC 9113 §8.5: :authority, no :path) or extended (nghttp2 checked
           :protocol, :path, :scheme): a tunnel exchange; the handler answers 2xx and the DATA
           both ways are the tunnel. The protocol stage refuses a classic one (405) except on
           a forward proxy. */
        q->content_length = -1;
        if (q->protocol.len == 0) {
            fy_exchange_dispatch(ex);
            return;
        }
    }
    const char *qm = memchr(q->target.p, '?', q->target.len);
    if (qm) {
        q->path = fy_str(q->target.p, (size_t)(qm - q->target.p));
        q->query = fy_str(qm + 1, q->target.len - q->path.len - 1);
    } else {
        q->path = q->target;
    }
    if ((q->path.len == 0 || q->path.p[0] != '/') && !fy_request_is_asterisk(q)) {
        fy_exchange_fail(ex, 400, "bad :path");
        return;
    }
    /* `OPTIONS *`, CONNECT 405 and content-length over limits.body-size: the protocol stage */
    fy_exchange_dispatch(ex);
}

static void glitch(h2_conn_t *c, const char *what)
{
    if (++c->glitches <= (uint64_t)c->conf->max_glitches || c->goaway) return;
    char a[64];
    fy_warn("client %s: h2 %s flood: GOAWAY ENHANCE_YOUR_CALM",
            fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), what);
    nghttp2_session_terminate_session(c->ng, NGHTTP2_ENHANCE_YOUR_CALM);
    c->goaway = true;
}

/* The client closed its side of stream `id` (END_STREAM or RST_STREAM): frames it sends on
 * it from now on are its error (frame_head). */
static void client_closed(h2_conn_t *c, int32_t id)
{
    c->client_closed[c->nclosed++ % NELEM(c->client_closed)] = id;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    h2_conn_t *c = ud;
    h2_stream_t *s =
        f->hd.stream_id ? nghttp2_session_get_stream_user_data(ng, f->hd.stream_id) : NULL;
    bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
    switch (f->hd.type) {
    case NGHTTP2_HEADERS:
        if (!s) return 0;
        if (f->headers.cat == NGHTTP2_HCAT_REQUEST) {
            dispatch(s, end);
        } else if (end) {
            s->body_end = true; /* trailers end the body */
            deliver_body(s);
        }
        break;
    case NGHTTP2_DATA:
        /* nothing but padding (which nghttp2 gives back as window by itself) counts too */
        if (f->hd.length == f->data.padlen && !end) glitch(c, "empty DATA");
        if (!s) return 0;
        if (s->draining && !end) drain_check(s);
        if (end) {
            s->body_end = true;
            deliver_body(s);
        }
        break;
    case NGHTTP2_RST_STREAM: {
        if (s && !s->body_end) client_closed(c, f->hd.stream_id);
        /* rapid reset (CVE-2023-44487): a token bucket of reset-burst tokens regained at
           reset-rate per second; nghttp2's own limit stays behind it as a backstop */
        uint64_t now = c->loop->now_ms;
        double tokens =
            c->rst_tokens + (double)(now - c->rst_at) * (double)c->conf->reset_rate / 1000.0;
        if (tokens > (double)c->conf->reset_burst) tokens = (double)c->conf->reset_burst;
        c->rst_at = now;
        c->rst_tokens = tokens - 1;
        if (c->rst_tokens < 0 && !c->goaway) {
            char a[64];
            fy_warn("client %s: h2 rapid reset (more than %lld RST_STREAM): GOAWAY "
                    "ENHANCE_YOUR_CALM",
                    fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a),
                    (long long)c->conf->reset_burst);
            nghttp2_session_terminate_session(c->ng, NGHTTP2_ENHANCE_YOUR_CALM);
            c->goaway = true;
        }
        break;
    }
    case NGHTTP2_PING:
        if (!(f->hd.flags & NGHTTP2_FLAG_ACK)) glitch(c, "PING");
        break;
    case NGHTTP2_SETTINGS:
        if (!(f->hd.flags & NGHTTP2_FLAG_ACK)) glitch(c, "SETTINGS");
        break;
    default:
        break;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    h2_conn_t *c = ud;
    h2_stream_t *s = nghttp2_session_get_stream_user_data(ng, id);
    if (s && s->draining && !s->closed) {
        /* dropped; the stream window is not reopened (drain_check) */
        nghttp2_session_consume_connection(ng, len);
        return 0;
    }
    if (!s || s->ex_done || s->closed) {
        /* nobody will read it: give the window back at once */
        nghttp2_session_consume(ng, id, len);
        return 0;
    }
    s->ex.body_received += len;
    /* a CONNECT tunnel's DATA are not a request body: no body-size limit */
    if (s->ex.body_received > c->ctx->limits->max_body && s->ex.req.method_id != FY_M_CONNECT) {
        if (!s->ex.response_started)
            fy_http_body_too_large(&s->ex);
        else
            stream_reset(s, NGHTTP2_CANCEL);
        nghttp2_session_consume(ng, id, len);
        return 0;
    }
    if (s->body_wanted && s->body_len == 0 && !s->held && c->rbuf &&
        (const char *)data >= c->rbuf->data &&
        (const char *)data + len <= c->rbuf->data + FY_CHUNK_SIZE) {
        /* the handler waits and nothing is buffered: give it the bytes where they are */
        s->held = c->rbuf;
        s->held->refs++;
        s->held_len = len;
        s->unconsumed += len;
        s->body_wanted = false;
        s->body_delivered = true;
        s->ex.on_body(&s->ex, (const char *)data, len, false);
        return 0;
    }
    if (!s->body) {
        /* never reallocated: the handler may hold slices of it (echo sends them back). The
           peer cannot send more than the stream window before we consume, so this is enough:
           our window, or the protocol default before the client has seen our SETTINGS. */
        s->body_cap = c->conf->initial_window_size > 65535 ? c->conf->initial_window_size : 65535;
        s->body = malloc(s->body_cap);
        if (!s->body) return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (s->body_len + len > s->body_cap) return NGHTTP2_ERR_CALLBACK_FAILURE; /* not possible */
    memcpy(s->body + s->body_len, data, len);
    s->body_len += len;
    s->unconsumed += len;
    deliver_body(s);
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud)
{
    h2_stream_t *s = nghttp2_session_get_stream_user_data(ng, id);
    if (!s) return 0;
    if (s->body_end) client_closed(s->c, id);
    s->closed = true;
    nghttp2_session_set_stream_user_data(ng, id, NULL);
    if (!s->ex_done) {
        if (!s->ex.error) s->ex.error = code ? "stream reset by client" : "stream closed";
        if (s->ex.producer && s->ex.producer->stop && s->ex.response_started)
            s->ex.producer->stop(&s->ex);
        stream_done(s); /* frees */
    } else {
        stream_free(s);
    }
    return 0;
}

/* ---- connection ---- */

static void on_timer(fy_timer_t *t)
{
    h2_conn_t *c = t->data;
    if (c->timer_idle && !c->timer_send) {
        /* idle for IDLE_RELEASE_MS: OpenSSL's record buffers go (wbuf went at the last flush,
           rbuf after each read), then the rest of the keep-alive timeout */
        uint64_t ka = c->ctx->limits->keepalive_timeout_ms;
        c->timer_idle = false;
        if (c->nstreams == 0 && c->wlen == c->wsent) fy_tls_transport_idle(c->t);
        fy_timer_start(c->loop, &c->timer, ka > IDLE_RELEASE_MS ? ka - IDLE_RELEASE_MS : 0);
        return;
    }
    char a[64];
    fy_info("client %s: h2 %s timeout, closing connection",
            fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a),
            c->timer_send ? "send" : "keep-alive idle");
    if (!c->timer_send && !c->goaway) {
        /* idle: say goodbye properly, then close */
        nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->ng), NGHTTP2_NO_ERROR,
                              NULL, 0);
        c->goaway = true;
        conn_flush(c);
        if (!c->closed) conn_close(c);
        return;
    }
    conn_close(c);
}

static void free_conn(fy_defer_t *d)
{
    h2_conn_t *c = d->data;
    fy_http_ctx_t *ctx = c->ctx;
    if (c->mitm_tunnel_free) c->mitm_tunnel_free(c->mitm_tunnel);
    free(c);
    if (ctx->on_conn_closed) ctx->on_conn_closed(ctx);
}

static void conn_close(h2_conn_t *c)
{
    if (c->closed) return;
    c->closed = true;
    /* streams still running: their handlers stop; memory goes with the session */
    while (!fy_list_empty(&c->streams)) {
        h2_stream_t *s = fy_container_of(c->streams.next, h2_stream_t, link);
        s->closed = true;
        if (!s->ex_done) {
            if (!s->ex.error) s->ex.error = "connection closed";
            if (s->ex.producer && s->ex.producer->stop && s->ex.response_started)
                s->ex.producer->stop(&s->ex);
            s->ex_done = true;
            if (s->ex.res.status) fy_exchange_done(&s->ex);
        }
        stream_free(s);
    }
    nghttp2_session_del(c->ng);
    c->ng = NULL;
    fy_timer_stop(c->loop, &c->timer);
    fy_io_set(c->loop, &c->io, 0);
    if (c->t != &c->sock) c->t->ops->destroy(c->t);
    close(c->sock.fd);
    if (c->rbuf) rbuf_release(c->rbuf);
    if (c->wbuf) wbuf_free(c);
    fy_list_remove(&c->node.link);
    c->ctx->nconns--;
    fy_counters_conn_close(FY_CPROTO_H2);
    fy_defer_cancel(c->loop, &c->flush_defer);
    fy_defer_cancel(c->loop, &c->reread);
    c->free_defer.cb = free_conn;
    c->free_defer.data = c;
    fy_defer(c->loop, &c->free_defer);
}

static void update_events(h2_conn_t *c)
{
    uint32_t ev = EPOLLIN;
    if (c->wlen > c->wsent || (c->t->want & FY_WANT_WRITE)) ev |= EPOLLOUT;
    if (fy_io_set(c->loop, &c->io, ev) < 0) conn_close(c);
}

/* Pull frames from nghttp2 into wbuf and write them; stops when the socket is full. */
static void conn_flush(h2_conn_t *c)
{
    bool drained = false;
    c->wblocked = false;
    for (;;) {
        while (c->wlen > c->wsent) {
            struct iovec iov = {c->wbuf + c->wsent, c->wlen - c->wsent};
            /* send_data just found the transport full: no write that would only fail */
            ssize_t w = c->wblocked ? 0 : c->t->ops->writev(c->t, &iov, 1);
            if (w == 0) {
                c->timer_send = true;
                c->timer_idle = false;
                fy_timer_start(c->loop, &c->timer, c->ctx->limits->send_timeout_ms);
                update_events(c);
                return;
            }
            if (w < 0) {
                conn_close(c);
                return;
            }
            c->wsent += (size_t)w;
        }
        c->wlen = c->wsent = 0;
        if (c->timer_send) {
            c->timer_send = false;
            if (c->nstreams)
                fy_timer_stop(c->loop, &c->timer);
            else
                arm_keepalive(c);
        }
        if (drained) break; /* nghttp2 had nothing more last time: no empty round */
        /* large DATA frames are written by send_data during mem_send; the rest is copied */
        while (c->wlen - c->wsent < WBUF_SOFT && !c->wblocked) {
            const uint8_t *d;
            ssize_t n = nghttp2_session_mem_send(c->ng, &d);
            if (n < 0) {
                if (!c->werr) fy_info("h2: %s", nghttp2_strerror((int)n));
                conn_close(c);
                return;
            }
            if (n == 0) {
                drained = !c->wblocked;
                break;
            }
            wbuf_put(c, d, (size_t)n);
        }
        if (c->wlen == c->wsent) break;
    }
    /* all written and no stream open: an idle connection holds no write buffer */
    if (c->wbuf && c->nstreams == 0) wbuf_free(c);
    if (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng)) {
        conn_close(c);
        return;
    }
    if (c->ctx->draining && c->nstreams == 0 && c->goaway) {
        conn_close(c);
        return;
    }
    update_events(c);
}

static int feed_ng(h2_conn_t *c, const char *data, size_t len)
{
    if (len == 0) return 0;
    ssize_t r = nghttp2_session_mem_recv(c->ng, (const uint8_t *)data, len);
    if (r < 0) {
        char a[64];
        fy_info("client %s: h2: %s", fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a),
                nghttp2_strerror((int)r));
        /* a GOAWAY naming the error, unless nghttp2 queued one (then this does nothing):
           an invalid preface is a connection error PROTOCOL_ERROR (RFC 9113 §3.4) */
        uint32_t code = r == NGHTTP2_ERR_BAD_CLIENT_MAGIC ? NGHTTP2_PROTOCOL_ERROR
                        : r == NGHTTP2_ERR_FLOODED        ? NGHTTP2_ENHANCE_YOUR_CALM
                                                          : NGHTTP2_INTERNAL_ERROR;
        nghttp2_session_terminate_session(c->ng, code);
        c->goaway = true;
        return -1;
    }
    return 0;
}

static bool in_gap(const h2_conn_t *c, int32_t id)
{
    unsigned n = c->ngaps < NELEM(c->gaps) ? c->ngaps : NELEM(c->gaps);
    for (unsigned i = 0; i < n; i++)
        if (id >= c->gaps[i].lo && id <= c->gaps[i].hi) return true;
    return false;
}

static bool is_client_closed(const h2_conn_t *c, int32_t id)
{
    unsigned n = c->nclosed < NELEM(c->client_closed) ? c->nclosed : NELEM(c->client_closed);
    for (unsigned i = 0; i < n; i++)
        if (c->client_closed[i] == id) return true;
    return false;
}

/* The header of a client frame that nghttp2 may let pass unanswered, after nghttp2 has read
 * every frame before it. nghttp2 answers DATA and HEADERS on a stream the client had closed
 * (END_STREAM or RST_STREAM) with GOAWAY STREAM_CLOSED (RFC 9113 §5.1 closed, §6.1; a stream
 * error made a connection error, §5.4) only while it keeps the closed stream, which is never
 * when the client has max-concurrent-streams open; and it ignores a HEADERS on an id skipped
 * below one already used. */
static void frame_head(h2_conn_t *c, uint8_t type, int32_t id)
{
    char a[64];
    if (is_client_closed(c, id)) {
        if (nghttp2_session_find_stream(c->ng, id)) return; /* kept: nghttp2 answers */
        fy_info("client %s: h2 frame on stream %d after its END_STREAM or RST_STREAM: GOAWAY "
                "STREAM_CLOSED",
                fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), (int)id);
        nghttp2_session_terminate_session(c->ng, NGHTTP2_STREAM_CLOSED);
        c->goaway = true;
        return;
    }
    if (type == NGHTTP2_HEADERS && in_gap(c, id)) {
        /* §5.1.1: a new stream's id must exceed all the client used; connection error */
        fy_info("client %s: h2 HEADERS opens stream %d after stream %d: GOAWAY PROTOCOL_ERROR",
                fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), (int)id,
                (int)c->max_sid);
        nghttp2_session_terminate_session(c->ng, NGHTTP2_PROTOCOL_ERROR);
        c->goaway = true;
    }
}

/* Feed the client's bytes to nghttp2, scanning frame headers on the way for what nghttp2
 * does not check on streams it has closed or never saw (frame_head). nghttp2 reads the bytes
 * before such a header first, so that the answer follows every earlier frame, and reads each
 * RST_STREAM before anything after it is scanned (on_frame_recv notes the stream). */
static int feed(h2_conn_t *c, const char *data, size_t len)
{
    size_t i = 0, fed = 0;
    while (i < len) {
        if (c->scan_magic) {
            size_t k = len - i < c->scan_magic ? len - i : c->scan_magic;
            i += k;
            c->scan_magic -= (unsigned)k;
            continue;
        }
        if (c->scan_skip) {
            size_t k = len - i < c->scan_skip ? len - i : c->scan_skip;
            i += k;
            c->scan_skip -= (uint32_t)k;
            if (c->scan_skip == 0 && c->scan_split) {
                c->scan_split = false;
                if (feed_ng(c, data + fed, i - fed) < 0) return -1;
                fed = i;
            }
            continue;
        }
        c->scan_hdr[c->scan_hlen++] = (uint8_t)data[i++];
        if (c->scan_hlen < 9) continue;
        c->scan_hlen = 0;
        const uint8_t *h = c->scan_hdr;
        uint8_t type = h[3];
        int32_t id = (int32_t)((uint32_t)(h[5] & 0x7f) << 24 | (uint32_t)h[6] << 16 |
                               (uint32_t)h[7] << 8 | h[8]);
        c->scan_skip = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
        c->scan_split = type == NGHTTP2_RST_STREAM && c->scan_skip;
        if ((type != NGHTTP2_HEADERS && type != NGHTTP2_DATA) || !(id & 1)) continue;
        if (id > c->max_sid) {
            if (type == NGHTTP2_HEADERS) {
                /* a new stream (or an error nghttp2 answers): ids it skips are closed */
                int32_t next = c->max_sid ? c->max_sid + 2 : 1;
                if (id > next) {
                    unsigned g = c->ngaps++ % NELEM(c->gaps);
                    c->gaps[g].lo = next;
                    c->gaps[g].hi = id - 2;
                }
                c->max_sid = id;
            }
            continue;
        }
        if (!is_client_closed(c, id) && !(type == NGHTTP2_HEADERS && in_gap(c, id))) continue;
        size_t start = i >= 9 ? i - 9 : 0; /* the header may have begun in the last read */
        if (start > fed) {
            if (feed_ng(c, data + fed, start - fed) < 0) return -1;
            fed = start;
        }
        frame_head(c, type, id);
    }
    return feed_ng(c, data + fed, len - fed);
}

static void on_io(fy_io_t *io, uint32_t ev)
{
    h2_conn_t *c = io->data;
    if (c->closed) return;
    c->in_io = true;
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        for (int i = 0; i < 8; i++) {
            if (!c->rbuf) c->rbuf = rbuf_get();
            ssize_t n = c->t->ops->read(c->t, c->rbuf->data, FY_CHUNK_SIZE);
            if (n == 0) break;
            if (n < 0) {
                c->in_io = false;
                conn_close(c);
                return;
            }
            c->t->want = 0;
            if (feed(c, c->rbuf->data, (size_t)n) < 0) {
                /* a GOAWAY is queued (feed_ng): send it, then close. What the socket does not
                   take now goes on EPOLLOUT: conn_flush closes once it is out (nghttp2 wants
                   neither to read nor to write then, and ignores what still arrives), and
                   the send timeout bounds the wait */
                c->in_io = false;
                conn_flush(c);
                if (!c->closed && c->wlen == c->wsent) conn_close(c);
                return;
            }
            if (c->closed) return;
            if (c->rbuf->refs > 1) {
                /* a handler holds a slice of it: the next read goes to another buffer */
                rbuf_release(c->rbuf);
                c->rbuf = NULL;
            }
            if ((size_t)n < FY_CHUNK_SIZE && !c->t->ops->pending(c->t)) break;
        }
        if (c->rbuf) {
            rbuf_release(c->rbuf);
            c->rbuf = NULL;
        }
        if (c->t->ops->pending(c->t)) fy_defer(c->loop, &c->reread);
    }
    c->in_io = false;
    if (!c->closed) conn_flush(c);
}

static void reread_cb(fy_defer_t *d)
{
    h2_conn_t *c = d->data;
    if (!c->closed) on_io(&c->io, EPOLLIN);
}

static void node_drain(fy_conn_node_t *n)
{
    h2_conn_t *c = fy_container_of(n, h2_conn_t, node);
    if (c->closed) return;
    if (!c->goaway) {
        nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->ng), NGHTTP2_NO_ERROR,
                              NULL, 0);
        c->goaway = true;
    }
    conn_flush(c);
}

static void node_close(fy_conn_node_t *n)
{
    conn_close(fy_container_of(n, h2_conn_t, node));
}

/* nghttp2 callbacks and options, made once per worker thread */
static __thread nghttp2_session_callbacks *cbs;
static __thread nghttp2_option *opt;

void fy_h2_thread_cleanup(void)
{
    if (cbs) nghttp2_session_callbacks_del(cbs);
    if (opt) nghttp2_option_del(opt);
    cbs = NULL;
    opt = NULL;
    fy_pool_drain(stream_pool());
    fy_pool_drain(rbuf_pool());
    fy_h2_client_thread_cleanup();
}

/* h2c upgrade: 101 first, then the HTTP/1.1 request is stream 1 (half-closed remote). */
static int start_upgraded(h2_conn_t *c, const fy_h2_upgrade_t *up)
{
    const fy_request_t *q = up->req;
    int r = nghttp2_session_upgrade2(c->ng, up->settings, up->settings_len,
                                     q->method_id == FY_M_HEAD, NULL);
    if (r != 0) {
        fy_info("h2c upgrade refused: %s", nghttp2_strerror(r));
        return -1;
    }
    static const char sw[] = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                             "Upgrade: h2c\r\n\r\n";
    wbuf_put(c, sw, sizeof sw - 1);
    h2_stream_t *s = stream_new(c, 1);
    c->max_sid = 1;
    fy_request_t *d = &s->ex.req;
    d->method = hdup(s, (const uint8_t *)q->method.p, q->method.len);
    d->method_id = q->method_id;
    d->target = hdup(s, (const uint8_t *)q->target.p, q->target.len);
    d->authority = hdup(s, (const uint8_t *)q->authority.p, q->authority.len);
    for (size_t i = 0; i < q->headers.n; i++) {
        fy_str_t n = q->headers.v[i].name;
        /* the upgrade's own hop-by-hop fields stay behind */
        if (fy_str_ieq(n, "connection", 10) || fy_str_ieq(n, "upgrade", 7) ||
            fy_str_ieq(n, "http2-settings", 14) || fy_str_ieq(n, "keep-alive", 10))
            continue;
        fy_str_t nn = hdup(s, (const uint8_t *)n.p, n.len);
        fy_str_t v = hdup(s, (const uint8_t *)q->headers.v[i].value.p, q->headers.v[i].value.len);
        fy_headers_add(&s->arena, &d->headers, nn.p, nn.len, v.p, v.len);
    }
    c->in_io = true;
    dispatch(s, true);
    c->in_io = false;
    return 0;
}

/* nghttp2 allocates through the C allocator; sanitizer builds see every block either way. */

int fy_h2_conn_start(fy_http_ctx_t *ctx, int fd, fy_transport_t *tls, const struct sockaddr *sa,
                     socklen_t salen, const char *data, size_t len, const fy_h2_upgrade_t *upgrade)
{
    const fy_h2_conf_t *conf = ctx->h2conf;
    if (!cbs) {
        nghttp2_session_callbacks_new(&cbs);
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
        nghttp2_session_callbacks_set_send_data_callback(cbs, send_data);
        nghttp2_option_new(&opt);
        nghttp2_option_set_no_auto_window_update(opt, 1);
        /* backstop only: our own budget (on_frame_recv) answers ENHANCE_YOUR_CALM first */
        nghttp2_option_set_stream_reset_rate_limit(opt, (uint64_t)conf->reset_burst * 2 + 16,
                                                   (uint64_t)conf->reset_rate * 2 + 16);
        nghttp2_option_set_max_continuations(opt, (size_t)conf->max_continuations);
        nghttp2_option_set_max_outbound_ack(opt, (size_t)conf->max_glitches);
        nghttp2_option_set_max_settings(opt, 32);
    }
    h2_conn_t *c = calloc(1, sizeof *c);
    if (!c) goto fail;
    c->ctx = ctx;
    c->conf = conf;
    c->loop = ctx->loop;
    memcpy(&c->remote, sa, salen < sizeof c->remote ? salen : sizeof c->remote);
    fy_sock_transport_init(&c->sock, fd);
    c->t = tls ? tls : &c->sock;
    fy_list_init(&c->streams);
    fy_timer_init(&c->timer, on_timer, c);
    c->flush_defer.cb = flush_cb;
    c->flush_defer.data = c;
    c->io.fd = fd;
    c->io.cb = on_io;
    c->io.data = c;
    c->node.drain = node_drain;
    c->node.close = node_close;
    c->rst_tokens = (double)conf->reset_burst;
    c->rst_at = ctx->loop->now_ms;
    c->reread.cb = reread_cb;
    c->reread.data = c;
    c->scan_magic = 24; /* the client magic comes first, also after an h2c upgrade */
    if (nghttp2_session_server_new2(&c->ng, cbs, c, opt) != 0) {
        free(c);
        c = NULL;
        goto fail;
    }
    fy_list_insert_tail(&ctx->conns, &c->node.link);
    ctx->nconns++;
    fy_counters_conn_open(FY_CPROTO_H2);
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)conf->max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)conf->initial_window_size},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, (uint32_t)conf->max_frame_size},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)ctx->limits->max_header_bytes},
        {NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1},
    };
    nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
    nghttp2_session_set_local_window_size(c->ng, NGHTTP2_FLAG_NONE, 0,
                                          (int32_t)conf->connection_window_size);
    arm_keepalive(c);
    if (upgrade && start_upgraded(c, upgrade) < 0) {
        conn_close(c);
        return -EPROTO;
    }
    if (fy_io_set(c->loop, &c->io, EPOLLIN) < 0) {
        conn_close(c);
        return -EIO;
    }
    if (ctx->draining) node_drain(&c->node);
    if (c->closed) return 0;
    c->in_io = true;
    if (len && feed(c, data, len) < 0) {
        c->in_io = false;
        conn_flush(c); /* as in on_io */
        if (!c->closed && c->wlen == c->wsent) conn_close(c);
        return 0;
    }
    c->in_io = false;
    if (!c->closed) conn_flush(c);
    return 0;
fail:
    if (tls) tls->ops->destroy(tls);
    close(fd);
    return -ENOMEM;
}

int fy_h2_conn_start_tunnel(fy_http_ctx_t *ctx, int fd, fy_transport_t *tls,
                            const struct sockaddr *sa, socklen_t salen, void *tunnel,
                            void (*tunnel_free)(void *))
{
    fy_list_t *tail = ctx->conns.prev;
    int r = fy_h2_conn_start(ctx, fd, tls, sa, salen, NULL, 0, NULL);
    if (r < 0 || ctx->conns.prev == tail) {
        /* not started, or already closed again: nothing will free the tunnel but us */
        if (tunnel_free) tunnel_free(tunnel);
        return r < 0 ? r : -EPROTO;
    }
    h2_conn_t *c = fy_container_of(ctx->conns.prev, h2_conn_t, node.link);
    c->mitm_tunnel = tunnel;
    c->mitm_tunnel_free = tunnel_free;
    return 0;
}
