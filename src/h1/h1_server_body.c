/* HTTP/1.1 server codec: request bodies. Content-Length and chunked bodies handed to the
 * handler as it asks for them (backpressure: nothing is read until it does), trailers, the
 * body-size limit while a body streams. Thread rules: h1_server_int.h. */
#include "h1/h1_server_int.h"

/* ---- request body ---- */

static void on_chunk_data(void *ud, const char *p, size_t n)
{
    h1_conn_t *c = ud;
    /* compact decoded data in place, in front of the undecoded bytes */
    if (c->rbuf + c->b->body_out != p) memmove(c->rbuf + c->b->body_out, p, n);
    c->b->body_out += n;
}

static void on_trailer(void *ud, fy_h1_str_t name, fy_h1_str_t value)
{
    h1_conn_t *c = ud;
    fy_arena_t *a = &c->b->arena;
    if (c->discarding) return;
    fy_headers_add(a, &c->b->ex.req_trailers, "", 0, "", 0);
    fy_header_t *h = &c->b->ex.req_trailers.v[c->b->ex.req_trailers.n - 1];
    h->name = fy_str(fy_arena_strndup(a, name.p, name.len), name.len);
    h->value = fy_str(fy_arena_strndup(a, value.p, value.len), value.len);
}

/* A body larger than the read buffer's room is read in slices of BODY_BUF: a proxied 64 KiB
 * upload takes one read and one write to the origin instead of five of each. The request's
 * head (which the exchange's fields point into) stays in the old chunk until the buffers are
 * given back. */
#define BODY_BUF (64 * 1024)

static void grow_for_body(h1_conn_t *c)
{
    char *nb = malloc(BODY_BUF);
    if (!nb) return; /* the chunk still works */
    memcpy(nb, c->rbuf, c->rlen);
    c->rbuf_prev = c->rbuf;
    c->rbuf = nb;
    c->rbuf_heap = true;
    c->rcap = BODY_BUF;
    c->mem_dirty = true;
}

/* Hand the next slice of body to the handler, or read more. */
void fy__h1_deliver_body(h1_conn_t *c)
{
    fy_exchange_t *ex = &c->b->ex;
    for (;;) {
        if (c->closed || !c->body_wanted) return;
        size_t avail = c->rlen - c->b->body_pos;
        size_t take = 0;
        bool end = false;
        size_t data_at = c->b->body_pos;
        if (c->body_mode == B_LENGTH) {
            take = avail < c->b->body_left ? avail : (size_t)c->b->body_left;
            c->b->body_left -= take;
            c->b->body_pos += take;
            c->b->body_out = c->b->body_pos;
            end = c->b->body_left == 0;
        } else if (c->body_mode == B_TUNNEL) {
            take = avail;
            c->b->body_pos += take;
            c->b->body_out = c->b->body_pos;
            end = c->peer_eof && c->b->body_pos == c->rlen;
        } else if (c->body_mode == B_CHUNKED) {
            size_t consumed = 0;
            c->b->body_out = c->b->body_pos;
            int r = fy_h1_chunked_decode(&c->b->chunked, c->rbuf + c->b->body_pos, avail, &consumed,
                                         c->ctx->limits->max_header_bytes, on_chunk_data,
                                         on_trailer, c);
            if (r < 0) {
                c->body_mode = B_NONE;
                if (!c->head_written && !c->discarding) {
                    c->b->ex.response_started = false;
                    fy__h1_reject(c, 400, fy_h1_err_str(r));
                } else {
                    fy__h1_fail_conn(c, fy_h1_err_str(r));
                }
                return;
            }
            take = c->b->body_out - c->b->body_pos;
            c->b->body_pos += consumed;
            end = r == 1;
        } else {
            end = true;
        }
        ex->body_received += take;
        if (c->body_mode != B_TUNNEL && ex->body_received > c->ctx->limits->max_body) {
            c->body_mode = B_NONE;
            if (!c->head_written && !c->discarding) {
                c->b->ex.response_started = false;
                fy_http_body_too_large(&c->b->ex);
            } else {
                fy__h1_fail_conn(c, FY_HTTP_E_BODY_SIZE);
            }
            return;
        }
        if (end) {
            c->body_mode = B_NONE;
            /* bytes after the body belong to the next request: keep them at rstart */
            c->rstart = c->b->body_pos;
        }
        if (take || end) {
            if (c->discarding) {
                if (end) {
                    c->discarding = false;
                    c->body_wanted = false;
                    c->rstart = c->b->body_pos;
                    if (!c->in_read) {
                        c->defer.cb = fy__h1_proceed_cb;
                        c->defer.data = c;
                        fy_defer(c->loop, &c->defer);
                    }
                    return;
                }
                continue;
            }
            c->body_wanted = false;
            c->body_delivered = true;
            c->read_paused = true;
            /* the handler holds the data now: its pace is not the client's idleness */
            if (c->timer_kind == T_BODY) fy_timer_stop(c->loop, &c->timer);
            ex->on_body(ex, c->rbuf + data_at, take, end);
            return;
        }
        /* need more bytes from the socket: reuse the space of consumed body bytes */
        if (c->b->body_pos > c->rstart) {
            memmove(c->rbuf + c->rstart, c->rbuf + c->b->body_pos, c->rlen - c->b->body_pos);
            c->rlen -= c->b->body_pos - c->rstart;
            c->b->body_pos = c->b->body_out = c->rstart;
        }
        if (!c->rbuf_heap && !c->discarding && c->body_mode != B_TUNNEL &&
            (c->body_mode == B_CHUNKED || c->b->body_left > c->rcap - c->rlen))
            grow_for_body(c);
        if (c->rlen == c->rcap) {
            /* a chunk-size line or trailer longer than the buffer's free space */
            fy__h1_fail_conn(c, "chunked framing line too long");
            return;
        }
        c->read_paused = false;
        if (c->body_mode != B_TUNNEL) fy__h1_set_timer(c, T_BODY); /* tunnels idle as they like */
        /* inside the read loop, its end sets the interest once, after it tried to write what
           is queued (here, an early response would ask for EPOLLOUT it never needs) */
        if (!c->in_read) fy__h1_update_events(c);
        return;
    }
}

void fy__h1_read_body(fy_exchange_t *ex)
{
    h1_conn_t *c = ex->codec;
    if (c->closed) return;
    if (c->body_mode == B_NONE) {
        if (!c->body_delivered || c->body_wanted) {
            /* no body at all, or it ended: report the end once */
            if (c->body_delivered) return;
            c->body_delivered = true;
            ex->on_body(ex, NULL, 0, true);
        }
        return;
    }
    c->body_delivered = false;
    c->body_wanted = true;
    if (ex->req.expect_continue && !c->continue_sent && !c->head_written) {
        c->continue_sent = true;
        fy__h1_wbuf_get(c);
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (c->rlen == c->b->body_pos && fy__h1_wfree(c) >= sizeof cont) {
            fy__h1_wbuf_compact(c);
            memcpy(c->wbuf + c->wlen, cont, sizeof cont - 1);
            c->wlen += sizeof cont - 1;
            if (!c->in_read) fy__h1_flush(c);
            if (c->closed) return;
        }
    }
    fy__h1_deliver_body(c);
}
