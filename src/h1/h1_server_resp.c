/* HTTP/1.1 server codec: the response side. The sink's sends (h1_sink): the head written
 * into the write buffer, bodies copied or referenced (writev, sendfile), chunked framing,
 * interim responses, and flush, which writes what is queued and asks the producer for more.
 * Thread rules: h1_server_int.h. */
#include "h1/h1_server_int.h"

#define DISCARD_MAX (1u << 20) /* unread body we drain to keep the connection; more: close */
static void h1_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state);
static void h1_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state);

static void h1_send_informational(fy_exchange_t *ex, int status, const fy_headers_t *hs);

const fy_sink_ops_t fy__h1_sink = {
    .name = "h1",
    .send = h1_send,
    .send_file = h1_send_file,
    .read_body = fy__h1_read_body,
    .send_informational = h1_send_informational,
    .detach = fy__h1_detach,
};

/* ---- response serialization ---- */

static char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}
#define PUT_LIT(p, lit) put((p), (lit), sizeof(lit) - 1)

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int i = 0;
    do {
        tmp[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (i) *p++ = tmp[--i];
    return p;
}

static char *put_hex(char *p, uint64_t v)
{
    static const char hx[] = "0123456789abcdef";
    char tmp[20];
    int i = 0;
    do {
        tmp[i++] = hx[v & 15];
        v >>= 4;
    } while (v);
    while (i) *p++ = tmp[--i];
    return p;
}

/* Compact the write buffer when the already-sent prefix is in the way. */
void fy__h1_wbuf_compact(h1_conn_t *c)
{
    if (c->wsent == 0) return;
    memmove(c->wbuf, c->wbuf + c->wsent, c->wlen - c->wsent);
    c->wlen -= c->wsent;
    c->wsent = 0;
}

/* Heads over the write buffer's size are not something a handler should produce: bounded. */
static bool write_head(h1_conn_t *c)
{
    fy_exchange_t *ex = &c->b->ex;
    fy_response_t *res = &ex->res;
    int status = res->status;
    size_t need = 160;
    for (size_t i = 0; i < res->headers.n; i++)
        need += res->headers.v[i].name.len + res->headers.v[i].value.len + 4;
    fy__h1_wbuf_compact(c);
    if (need > fy__h1_wfree(c)) {
        if (c->wlen == 0) return false; /* the head alone is too big */
        return false;
    }
    if (c->requests + 1 >= (unsigned)c->ctx->limits->keepalive_requests || c->ctx->draining)
        c->keepalive = false;
    if (__builtin_expect(ex->refused, 0)) fy__h1_refused(c);
    /* 101 to an Upgrade request: the connection becomes a tunnel for this exchange */
    bool tunnel = status == 101 && ex->req.protocol.len && c->b->req.conn_upgrade;
    c->res_no_body = !tunnel && (ex->req.method_id == FY_M_HEAD || status == 204 || status == 304 ||
                                 (status >= 100 && status < 200));
    c->res_chunked = false;
    char *p = c->wbuf + c->wlen;
    p = PUT_LIT(p, "HTTP/1.1 ");
    if (status >= 100 && status <= 999) {
        *p++ = (char)('0' + status / 100);
        *p++ = (char)('0' + status / 10 % 10);
        *p++ = (char)('0' + status % 10);
    }
    *p++ = ' ';
    const char *reason = fy_http_reason(status);
    p = put(p, reason, strlen(reason));
    p = PUT_LIT(p, "\r\nServer: ferry\r\nDate: ");
    p = put(p, fy_http_date(c->loop->now_sec), 29);
    p = PUT_LIT(p, "\r\n");
    if (status == 204 || status == 304 || (status >= 100 && status < 200)) {
        /* no framing headers */
    } else if (res->content_length >= 0) {
        p = PUT_LIT(p, "Content-Length: ");
        p = put_u64(p, (uint64_t)res->content_length);
        p = PUT_LIT(p, "\r\n");
    } else if (ex->req.version >= 11) {
        if (!c->res_no_body) c->res_chunked = true;
        p = PUT_LIT(p, "Transfer-Encoding: chunked\r\n");
    } else {
        c->keepalive = false; /* HTTP/1.0 with unknown length: delimited by close */
    }
    for (size_t i = 0; i < res->headers.n; i++) {
        const fy_header_t *h = &res->headers.v[i];
        if (tunnel && (fy_str_ieq(h->name, "connection", 10) || fy_str_ieq(h->name, "upgrade", 7)))
            continue;
        /* canonical case, except for intercepted traffic, which stays as the origin sent it */
        p = ex->tunnel || c->ctx->forward_proxy ? put(p, h->name.p, h->name.len)
                                                : fy_h1_put_field_name(p, h->name.p, h->name.len);
        p = PUT_LIT(p, ": ");
        p = put(p, h->value.p, h->value.len);
        p = PUT_LIT(p, "\r\n");
    }
    if (tunnel) {
        /* hop-by-hop: ours to write, whatever the handler had */
        p = PUT_LIT(p, "Connection: Upgrade\r\nUpgrade: ");
        p = put(p, ex->req.protocol.p, ex->req.protocol.len);
        p = PUT_LIT(p, "\r\n");
        c->tunnel = true;
        c->keepalive = false;
        c->body_mode = B_TUNNEL;
    } else if (!c->keepalive)
        p = PUT_LIT(p, "Connection: close\r\n");
    else if (ex->req.version == 10)
        p = PUT_LIT(p, "Connection: keep-alive\r\n");
    p = PUT_LIT(p, "\r\n");
    c->wlen = (size_t)(p - c->wbuf);
    c->head_written = true;
    ex->head_sent = true;
    return true;
}

/* Body pieces up to this size are copied into the write buffer (so a head and a small body,
 * or many pipelined responses, leave in one write); larger ones are referenced and written
 * from the handler's buffer with writev (a proxied 64 KiB body is not copied twice). */
#define COPY_MAX 4096

/* Queue body bytes: small pieces copied while they fit in the write buffer, others referenced. */
static bool queue_data(h1_conn_t *c, const struct iovec *bufs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = bufs[i].iov_len;
        if (len == 0) continue;
        if (c->nrefs == 0 && len <= COPY_MAX && len <= fy__h1_wfree(c)) {
            memcpy(c->wbuf + c->wlen, bufs[i].iov_base, len);
            c->wlen += len;
        } else {
            if (c->nrefs == MAX_REFS) return false;
            c->b->refs[c->nrefs++] = bufs[i];
        }
    }
    return true;
}

/* small framing bytes after references must stay ordered: they become references too */
static bool queue_bytes(h1_conn_t *c, const char *s, size_t len, char *scratch)
{
    struct iovec iov = {(void *)s, len};
    if (c->nrefs == 0) return queue_data(c, &iov, 1);
    memcpy(scratch, s, len);
    iov.iov_base = scratch;
    return queue_data(c, &iov, 1);
}

/* Constant framing ("\r\n", the last chunk): copied into wbuf, or referenced where it is. */
static bool queue_const(h1_conn_t *c, const char *s, size_t len)
{
    struct iovec iov = {(void *)s, len};
    return queue_data(c, &iov, 1);
}

/* A chunk's size line: copied into wbuf when it can be; only a line that must wait behind a
 * reference takes arena memory (a long-lived chunked stream allocates nothing per chunk). */
static bool queue_chunk_size(h1_conn_t *c, fy_exchange_t *ex, size_t total)
{
    char line[24];
    char *p = put_hex(line, total);
    p = PUT_LIT(p, "\r\n");
    size_t l = (size_t)(p - line);
    if (c->nrefs == 0 && l <= fy__h1_wfree(c)) {
        memcpy(c->wbuf + c->wlen, line, l);
        c->wlen += l;
        return true;
    }
    char *s = fy_arena_alloc(ex->arena, l);
    memcpy(s, line, l);
    return queue_const(c, s, l);
}

void fy__h1_fail_conn(h1_conn_t *c, const char *why)
{
    if (c->ex_active) c->b->ex.error = why;
    fy__h1_conn_close(c);
}

static void h1_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state)
{
    h1_conn_t *c = ex->codec;
    if (c->closed || c->res_final) return;
    c->want_proceed = false;
    if (state == FY_SEND_ERROR) {
        /* the response can't be completed: the client must see a truncated message */
        c->keepalive = false;
        fy__h1_fail_conn(c, ex->error ? ex->error : "handler error");
        return;
    }
    fy__h1_wbuf_get(c);
    if (!c->head_written) {
        /* a body nobody will read decides whether the connection can be kept */
        if (c->body_mode != B_NONE && !c->body_delivered && !c->body_wanted) {
            bool nothing_read = c->b->ex.body_received == 0 && c->rlen == c->b->body_pos;
            if ((c->b->ex.req.expect_continue && !c->continue_sent && nothing_read) ||
                (c->body_mode == B_LENGTH && c->b->body_left > DISCARD_MAX))
                c->keepalive = false;
        }
        if (!write_head(c)) {
            fy_error("response head too large");
            fy__h1_fail_conn(c, "response head too large");
            return;
        }
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += bufs[i].iov_len;
    ex->bytes_sent += total;
    if (!c->res_no_body) {
        /* nothing from the arena per send: a WebSocket or tunnel relays through here for as
           long as it lives, and 32 bytes a message grew its exchange's arena without bound */
        if (c->res_chunked && total && !queue_chunk_size(c, ex, total)) goto overflow;
        if (!queue_data(c, bufs, n)) goto overflow;
        if (c->res_chunked && total && !queue_const(c, "\r\n", 2)) goto overflow;
        if (c->res_chunked && state == FY_SEND_FINAL) {
            if (ex->res_trailers.n == 0) {
                if (!queue_const(c, "0\r\n\r\n", 5)) goto overflow;
            } else {
                size_t need = 5;
                for (size_t i = 0; i < ex->res_trailers.n; i++)
                    need += ex->res_trailers.v[i].name.len + ex->res_trailers.v[i].value.len + 4;
                char *t = fy_arena_alloc(ex->arena, need), *p = t;
                p = PUT_LIT(p, "0\r\n");
                for (size_t i = 0; i < ex->res_trailers.n; i++) {
                    const fy_header_t *h = &ex->res_trailers.v[i];
                    p = put(p, h->name.p, h->name.len);
                    p = PUT_LIT(p, ": ");
                    p = put(p, h->value.p, h->value.len);
                    p = PUT_LIT(p, "\r\n");
                }
                p = PUT_LIT(p, "\r\n");
                struct iovec iov = {t, (size_t)(p - t)};
                if (c->nrefs == 0 && iov.iov_len <= fy__h1_wfree(c)) {
                    queue_data(c, &iov, 1);
                } else if (c->nrefs < MAX_REFS) {
                    c->b->refs[c->nrefs++] = iov;
                } else {
                    goto overflow;
                }
            }
        }
    }
    if (state == FY_SEND_FINAL) {
        c->res_final = true;
        if (c->in_read && c->nrefs == 0 && c->file_left == 0) {
            /* everything is copied into wbuf: the exchange can end now, and the read loop
               goes on with the next pipelined request; one write carries all responses */
            fy__h1_end_exchange(c);
            return;
        }
    } else {
        c->want_proceed = true;
    }
    if (!c->in_read) fy__h1_flush(c);
    return;
overflow:
    fy_error("h1: too many buffers in one send");
    fy__h1_fail_conn(c, "too many buffers in one send");
}

static void h1_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state)
{
    h1_conn_t *c = ex->codec;
    if (c->closed || c->res_final) return;
    if (c->res_chunked || c->res_no_body || len == 0) {
        /* chunked framing of a file, or no body: fall back through the generic path */
        if (c->res_no_body || len == 0) {
            h1_send(ex, NULL, 0, state);
            return;
        }
    }
    c->want_proceed = false;
    fy__h1_wbuf_get(c);
    if (!c->head_written && !write_head(c)) {
        fy__h1_fail_conn(c, "response head too large");
        return;
    }
    if (c->res_no_body) {
        h1_send(ex, NULL, 0, state);
        return;
    }
    if (c->res_chunked) {
        /* files are sent with a known length by our handlers; keep it simple and correct */
        char *s = fy_arena_alloc(ex->arena, 32), *p = s;
        p = put_hex(p, len);
        p = PUT_LIT(p, "\r\n");
        queue_bytes(c, s, (size_t)(p - s), s);
    }
    c->b->file_fd = fd;
    c->b->file_off = off;
    c->file_left = len;
    ex->bytes_sent += len;
    if (c->res_chunked) {
        /* the chunk's CRLF and the last chunk follow the file: sent at completion */
        fy_error("h1: chunked file bodies are not supported");
        fy__h1_fail_conn(c, "chunked file body");
        return;
    }
    if (state == FY_SEND_FINAL)
        c->res_final = true;
    else
        c->want_proceed = true;
    if (!c->in_read) fy__h1_flush(c);
}

void fy__h1_proceed_cb(fy_defer_t *d)
{
    h1_conn_t *c = d->data;
    if (c->closed || !c->b) return; /* (released: nothing in progress) */
    if (c->want_proceed && !fy__h1_output_pending(c) && c->b->ex.producer &&
        c->b->ex.producer->proceed) {
        c->want_proceed = false;
        c->b->ex.producer->proceed(&c->b->ex);
    } else if (!c->ex_active && !c->read_paused) {
        c->in_read = true; /* batch the responses of pipelined requests into one write */
        fy__h1_process(c);
        c->in_read = false;
        if (c->closed) return;
        if (fy__h1_output_pending(c))
            fy__h1_flush(c);
        else
            fy__h1_update_events(c);
    }
}

/* Write what is queued. Calls back into the exchange through deferred callbacks only. */
void fy__h1_flush(h1_conn_t *c)
{
    while (fy__h1_output_pending(c)) {
        ssize_t w;
        if (c->wlen > c->wsent || c->nrefs) {
            struct iovec iov[MAX_REFS + 1];
            int n = 0;
            if (c->wlen > c->wsent)
                iov[n++] = (struct iovec){c->wbuf + c->wsent, c->wlen - c->wsent};
            for (int i = 0; i < c->nrefs; i++) iov[n++] = c->b->refs[i];
            w = c->t->ops->writev(c->t, iov, n);
            if (w > 0) {
                size_t left = (size_t)w;
                size_t a = c->wlen - c->wsent;
                if (left >= a) {
                    left -= a;
                    c->wsent = c->wlen = 0;
                } else {
                    c->wsent += left;
                    left = 0;
                }
                int i = 0;
                while (i < c->nrefs && left >= c->b->refs[i].iov_len)
                    left -= c->b->refs[i++].iov_len;
                if (i) {
                    memmove(c->b->refs, c->b->refs + i,
                            (size_t)(c->nrefs - i) * sizeof c->b->refs[0]);
                    c->nrefs -= i;
                }
                if (c->nrefs && left) {
                    c->b->refs[0].iov_base = (char *)c->b->refs[0].iov_base + left;
                    c->b->refs[0].iov_len -= left;
                }
            }
        } else if (c->t->ops->sendfile) {
            w = c->t->ops->sendfile(c->t, c->b->file_fd, &c->b->file_off, c->file_left);
            if (w > 0) c->file_left -= (size_t)w;
        } else {
            /* TLS: read the file in chunks and write them */
            if (c->flen == c->fsent) {
                if (!c->b->fbuf) {
                    c->b->fbuf = fy_pool_get(fy_chunk_pool());
                    c->mem_dirty = true;
                }
                size_t want = c->file_left < FY_CHUNK_SIZE ? c->file_left : FY_CHUNK_SIZE;
                ssize_t r = pread(c->b->file_fd, c->b->fbuf, want, c->b->file_off);
                if (r <= 0) {
                    fy_error("read file: %s", r < 0 ? strerror(errno) : "file shrank");
                    fy__h1_fail_conn(c, "file read error");
                    return;
                }
                c->flen = (size_t)r;
                c->fsent = 0;
            }
            struct iovec iov = {c->b->fbuf + c->fsent, c->flen - c->fsent};
            w = c->t->ops->writev(c->t, &iov, 1);
            if (w > 0) {
                c->fsent += (size_t)w;
                if (c->fsent == c->flen) {
                    c->b->file_off += (off_t)c->flen;
                    c->file_left -= c->flen;
                    c->flen = c->fsent = 0;
                }
            }
        }
        if (w == 0) {
            /* blocked: wait for writability under the send timeout */
            fy__h1_set_timer(c, T_SEND);
            fy__h1_update_events(c);
            return;
        }
        if (w < 0) {
            if (w != FY_EEOF && w != -EPIPE && w != -ECONNRESET)
                fy_info("write to client failed: %s", w == FY_ETLS ? "tls" : strerror((int)-w));
            fy__h1_fail_conn(c, "client write error");
            return;
        }
    }
    c->t->want &= ~FY_WANT_WRITE;
    if (c->b->file_fd >= 0 && c->file_left == 0) c->b->file_fd = -1; /* the handler owns the fd */
    if (c->res_final && c->ex_active) {
        fy__h1_end_exchange(c);
        return;
    }
    if (c->want_proceed) {
        c->defer.cb = fy__h1_proceed_cb;
        c->defer.data = c;
        fy_defer(c->loop, &c->defer);
    }
    if (!c->ex_active && !c->discarding && !c->keepalive) {
        fy__h1_conn_linger(c);
        return;
    }
    if (__builtin_expect(c->requests == 1, 0) && c->timer_kind == T_IDLE && !c->ex_active) {
        /* a connection's first response is out and it waits: give everything back now, not
           after IDLE_RELEASE_MS. Most such connections stay idle (a client's spare pooled
           connection, a browser's parallel ones), and at a high accept rate the 10 ms hold
           made the buffers of the last ~rate/100 connections a high-water mark that the chunk
           pool keeps (issue 19). From its second request on, a connection is being reused
           and keeps them for the next. */
        fy__h1_idle_release(c);
        if (!c->b) fy__h1_set_timer(c, T_KEEPALIVE);
    }
    fy__h1_update_events(c);
}

static void h1_send_informational(fy_exchange_t *ex, int status, const fy_headers_t *hs)
{
    h1_conn_t *c = ex->codec;
    if (c->closed || c->head_written || ex->req.version < 11 || status < 102 || status > 199)
        return;
    size_t need = 64;
    for (size_t i = 0; i < hs->n; i++) need += hs->v[i].name.len + hs->v[i].value.len + 4;
    fy__h1_wbuf_get(c);
    fy__h1_wbuf_compact(c);
    if (need > fy__h1_wfree(c)) return; /* hints are optional: drop what does not fit */
    char *p = c->wbuf + c->wlen;
    p = PUT_LIT(p, "HTTP/1.1 ");
    p = put_u64(p, (uint64_t)status);
    *p++ = ' ';
    const char *reason = status == 103 ? "Early Hints" : fy_http_reason(status);
    p = put(p, reason, strlen(reason));
    p = PUT_LIT(p, "\r\n");
    for (size_t i = 0; i < hs->n; i++) {
        p = ex->tunnel || c->ctx->forward_proxy
                ? put(p, hs->v[i].name.p, hs->v[i].name.len)
                : fy_h1_put_field_name(p, hs->v[i].name.p, hs->v[i].name.len);
        p = PUT_LIT(p, ": ");
        p = put(p, hs->v[i].value.p, hs->v[i].value.len);
        p = PUT_LIT(p, "\r\n");
    }
    p = PUT_LIT(p, "\r\n");
    c->wlen = (size_t)(p - c->wbuf);
    if (!c->in_read) fy__h1_flush(c);
}
