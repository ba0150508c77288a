/* HTTP/2 server codec: streams and the response side. A stream's life (new, done, reset,
 * the drain of a body still coming after the response), the sink (h2_sink): heads submitted
 * to nghttp2, bodies lent to it without a copy (data_read / send_data), interim responses,
 * and request bodies handed to the handler as it asks. Thread rules: h2_server_int.h. */
#include "h2/h2_server_int.h"

/* ---- sink ---- */

void fy__h2_stream_reset(h2_stream_t *s, uint32_t code)
{
    s->reset = true;
    nghttp2_submit_rst_stream(s->c->ng, NGHTTP2_FLAG_NONE, s->id, code);
}

/* A draining stream whose window the client has used up: ask it to stop (RFC 9113 §8.1). */
void fy__h2_drain_check(h2_stream_t *s)
{
    if (s->closed || s->reset || s->c->closed) return;
    if (nghttp2_session_get_stream_local_window_size(s->c->ng, s->id) > 0) return;
    fy__h2_stream_reset(s, NGHTTP2_NO_ERROR);
    fy__h2_schedule_flush(s->c);
}

void fy__h2_stream_done(h2_stream_t *s)
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
        if (--c->nstreams == 0) fy__h2_arm_keepalive(c);
        fy__h2_drain_check(s);
        return;
    }
    if (s->unconsumed && !c->closed) {
        nghttp2_session_consume(c->ng, s->id, s->unconsumed);
        s->unconsumed = 0;
    }
    if (s->closed) fy__h2_stream_free(s);
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
    } else if (s->file_left > COPY_MAX) {
        /* by reference: send_data moves the bytes from the file to the socket (sendfile) or
           to the write buffer, without nghttp2's frame buffer in between */
        n = s->file_left < length ? s->file_left : length;
        s->file_claim = n;
        *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
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
    if (more == 0 && s->file_left == s->file_claim) {
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
                fy__h2_stream_done(s);
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

void fy__h2_wbuf_free(h2_conn_t *c)
{
    if (c->wcap == FY_CHUNK_SIZE)
        fy_pool_put(fy_chunk_pool(), c->wbuf);
    else
        free(c->wbuf);
    c->wbuf = NULL;
    c->wcap = c->wlen = c->wsent = 0;
}

/* Append bytes to the write buffer. */
void fy__h2_wbuf_put(h2_conn_t *c, const void *p, size_t n)
{
    if (c->wsent == c->wlen) c->wlen = c->wsent = 0;
    if (c->wlen + n > c->wcap) wbuf_grow(c, n);
    memcpy(c->wbuf + c->wlen, p, n);
    c->wlen += n;
}

static void after_send(h2_stream_t *s)
{
    if (s->proceed_after_send) {
        s->proceed_after_send = false;
        schedule_proceed(s);
    }
    if (s->done_after_send) {
        s->done_after_send = false;
        fy__h2_stream_done(s);
    }
}

/* Read `len` bytes of the stream's file at `off` to the end of wbuf. */
static int file_to_wbuf(h2_conn_t *c, h2_stream_t *s, off_t off, size_t len)
{
    if (c->wsent == c->wlen) c->wlen = c->wsent = 0;
    if (c->wlen + len > c->wcap) wbuf_grow(c, len);
    while (len) {
        ssize_t r = pread(s->file_fd, c->wbuf + c->wlen, len, off);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            fy_error("h2: read file: %s", r < 0 ? strerror(errno) : "file shrank");
            return -1; /* the frame header is out: only the connection can end */
        }
        c->wlen += (size_t)r;
        off += r;
        len -= (size_t)r;
    }
    return 0;
}

/* A DATA frame of `len` file bytes (s->file_claim). On a plain socket with nothing else in
 * the way, the queued bytes and the 9-byte header go with MSG_MORE and the payload with
 * sendfile: no copy in user space. Whatever the socket does not take, and everything over TLS
 * (OpenSSL encrypts from memory), is read from the file straight into wbuf after the header,
 * one copy instead of two (nghttp2's frame buffer, then wbuf). */
static int send_file_frame(h2_conn_t *c, h2_stream_t *s, const uint8_t *hd, size_t len)
{
    size_t done = 0; /* payload bytes the socket took */
    bool hd_out = false;
    if (c->t == &c->sock) {
        size_t queued = c->wlen - c->wsent;
        struct iovec iov[2];
        int n = 0;
        if (queued) iov[n++] = (struct iovec){c->wbuf + c->wsent, queued};
        iov[n++] = (struct iovec){(void *)hd, 9};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->sock.fd, &m, MSG_MORE | MSG_NOSIGNAL);
        if (w < 0) {
            if (errno != EAGAIN && errno != EINTR) {
                c->werr = true;
                return -1;
            }
            w = 0;
        }
        size_t took = (size_t)w;
        if (took < queued) {
            c->wsent += took;
            c->wblocked = true;
            fy__h2_wbuf_put(c, hd, 9);
        } else {
            c->wlen = c->wsent = 0;
            if (took - queued < 9) {
                c->wblocked = true;
                fy__h2_wbuf_put(c, hd + (took - queued), 9 - (took - queued));
            } else {
                hd_out = true;
            }
        }
        if (hd_out) {
            off_t off = s->file_off;
            ssize_t r = c->t->ops->sendfile(c->t, s->file_fd, &off, len);
            if (r < 0) {
                fy_error("h2: sendfile: %s", strerror((int)-r));
                c->werr = true;
                return -1;
            }
            done = (size_t)r;
            if (done < len) c->wblocked = true; /* short: the socket is full */
        }
    } else {
        fy__h2_wbuf_put(c, hd, 9);
    }
    if (done < len && file_to_wbuf(c, s, s->file_off + (off_t)done, len - done) < 0) return -1;
    s->file_off += (off_t)len;
    s->file_left -= len;
    s->file_claim = 0;
    return 0;
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
int fy__h2_send_data(nghttp2_session *ng, nghttp2_frame *f, const uint8_t *hd, size_t length,
                     nghttp2_data_source *src, void *ud)
{
    h2_conn_t *c = ud;
    h2_stream_t *s = src->ptr;
    if (c->wblocked) return NGHTTP2_ERR_WOULDBLOCK;
    /* nghttp2 goes on to the next frame within the same mem_send: past WBUF_SOFT, stop it
       (it offers the frame again) so that wbuf is written first instead of growing by the
       whole flow-control window */
    if (c->wlen - c->wsent >= WBUF_SOFT) {
        c->wfull = true;
        return NGHTTP2_ERR_WOULDBLOCK;
    }
    if (s->file_claim) {
        if (send_file_frame(c, s, hd, length) < 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
        after_send(s);
        return 0;
    }
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
        fy__h2_wbuf_put(c, (char *)iov[i].iov_base + skip, iov[i].iov_len - skip);
        skip = 0;
    }
    after_send(s);
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

/* Has p[0..n) an ASCII capital? Eight bytes at a time: a byte's low seven bits plus 0x3f
 * carry into its top bit when >= 'A', plus 0x25 when > 'Z' (never into the next byte); bytes
 * >= 0x80 are excluded. Response names are nearly always lower case already. */
static bool has_upper(const char *p, size_t n)
{
    const uint64_t hi = 0x8080808080808080u, low7 = 0x7f7f7f7f7f7f7f7fu;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        uint64_t h7 = x & low7;
        if (((h7 + 0x3f3f3f3f3f3f3f3fu) & ~(h7 + 0x2525252525252525u) & ~x & hi) != 0) return true;
    }
    for (; i < n; i++)
        if (p[i] >= 'A' && p[i] <= 'Z') return true;
    return false;
}

static void submit_head(h2_stream_t *s, bool no_body)
{
    fy_exchange_t *ex = &s->ex;
    fy_response_t *res = &ex->res;
    size_t n = res->headers.n + 4;
    nghttp2_nv *nv = fy_arena_alloc(&s->arena, n * sizeof *nv);
    size_t k = 0;
    char *st = s->st_val;
    int status = res->status;
    st[0] = (char)('0' + status / 100 % 10);
    st[1] = (char)('0' + status / 10 % 10);
    st[2] = (char)('0' + status % 10);
    nv[k++] = NV_LIT(":status", st, 3);
    nv[k++] = NV_LIT("server", "ferry", 5);
    memcpy(s->date_val, fy_http_date(s->c->loop->now_sec), 29);
    nv[k++] = NV_LIT("date", s->date_val, 29);
    if (res->content_length >= 0 && status != 204 && status != 304) {
        char *end = s->cl_val + sizeof s->cl_val, *cl = end;
        uint64_t v = (uint64_t)res->content_length;
        do {
            *--cl = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        nv[k++] = NV_LIT("content-length", cl, (size_t)(end - cl));
    }
    for (size_t i = 0; i < res->headers.n; i++) {
        const fy_header_t *h = &res->headers.v[i];
        if (is_conn_specific(h->name)) continue;
        uint8_t *name = (uint8_t *)h->name.p;
        if (has_upper(h->name.p, h->name.len)) {
            char *lc = fy_arena_strndup(&s->arena, h->name.p, h->name.len);
            for (size_t q = 0; q < h->name.len; q++) lc[q] = fy_lower(lc[q]);
            name = (uint8_t *)lc;
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
        if (state != FY_SEND_MORE) fy__h2_stream_done(s);
        return;
    }
    s->want_proceed = false;
    if (state == FY_SEND_ERROR) {
        fy__h2_stream_reset(s, NGHTTP2_INTERNAL_ERROR);
        fy__h2_stream_done(s);
        fy__h2_schedule_flush(c);
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
            fy__h2_stream_reset(s, NGHTTP2_INTERNAL_ERROR);
            fy__h2_stream_done(s);
            fy__h2_schedule_flush(c);
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
            fy__h2_stream_done(s);
        }
    } else if (s->deferred) {
        s->deferred = false;
        nghttp2_session_resume_data(c->ng, s->id);
    }
    if (state == FY_SEND_MORE && total == 0 && s->npend == 0 && s->file_left == 0 && !s->closed) {
        /* nothing to copy (a head-only send that opens a tunnel): proceed at once */
        schedule_proceed(s);
    }
    fy__h2_schedule_flush(c);
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

void fy__h2_deliver_body(h2_stream_t *s)
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
        fy__h2_rbuf_release(s->held);
        s->held = NULL;
        s->held_len = 0;
        if (s->unconsumed >= given) {
            nghttp2_session_consume(c->ng, s->id, given);
            s->unconsumed -= given;
            fy__h2_schedule_flush(c);
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
            fy__h2_schedule_flush(c);
        }
    }
    if (s->end_delivered) return; /* the end was given already */
    s->body_delivered = false;
    s->body_wanted = true;
    fy__h2_deliver_body(s);
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
    fy__h2_schedule_flush(s->c);
}

static const fy_sink_ops_t h2_sink = {
    .name = "h2",
    .send = h2_send,
    .send_file = h2_send_file,
    .read_body = h2_read_body,
    .send_informational = h2_send_informational,
};

/* ---- streams ---- */

fy_pool_t *fy__h2_stream_pool(void)
{
    static __thread fy_pool_t pool;
    if (!pool.size) fy_pool_init(&pool, sizeof(h2_stream_t), 256);
    return &pool;
}

void fy__h2_stream_free(h2_stream_t *s)
{
    h2_conn_t *c = s->c;
    if (s->held) fy__h2_rbuf_release(s->held);
    fy_defer_cancel(c->loop, &s->defer);
    fy_list_remove(&s->link);
    if (!s->draining) c->nstreams--; /* a draining one was uncounted already */
    if (c->hstream == s) c->hstream = NULL;
    fy_gauge_add(fy_cid_streams_active[FY_CPROTO_H2], -1);
    fy_counters_stream_mem(FY_CPROTO_H2, &s->mem_held, 0);
    fy_arena_free(&s->arena);
    free(s->body);
    fy_pool_put(fy__h2_stream_pool(), s);
    if (c->nstreams == 0 && !c->closed) fy__h2_arm_keepalive(c);
}

h2_stream_t *fy__h2_stream_new(h2_conn_t *c, int32_t id)
{
    h2_stream_t *s = fy_pool_get(fy__h2_stream_pool());
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
    ex->stream_id = (uint32_t)id;
    ex->req.scheme = c->ctx->is_tls || c->t->is_tls ? FY_STR_LIT("https") : FY_STR_LIT("http");
    ex->tunnel = c->mitm_tunnel;
    fy_list_insert_tail(&c->streams, &s->link);
    c->nstreams++;
    fy_gauge_add(fy_cid_streams_active[FY_CPROTO_H2], 1);
    /* the keep-alive timer is left to run: on_timer ignores it while streams are open, and
       the next arm_keepalive only moves its deadline (fy_timer_start is lazy), instead of a
       heap removal and insertion per request */
    nghttp2_session_set_stream_user_data(c->ng, id, s);
    return s;
}
