/* HTTP/3 server codec: request streams. HEADERS decoded (QPACK, blocked streams), the
 * request checked (RFC 9114 §4.3.1) and dispatched, DATA into the exchange's body, the end
 * of the request. Thread rules: h3_server_int.h. */
#include "h3/h3_server_int.h"

static fy_str_t hdup(h3_stream_t *s, const uint8_t *p, size_t n)
{
    return fy_str(fy_arena_strndup(&s->arena, (const char *)p, n), n);
}

/* Record the first reason a request's field section is malformed. */
static void bad(h3_stream_t *s, const char *why)
{
    if (!s->malformed) s->malformed = why;
}

static void on_field(h3_stream_t *s, nghttp3_vec name, nghttp3_vec value)
{
    s->hdr_bytes += name.len + value.len + 32;
    if ((uint64_t)s->hdr_bytes > (uint64_t)s->c->ctx->limits->max_header_bytes) {
        s->hdr_too_large = true;
        return;
    }
    fy_request_t *q = &s->ex.req;
    for (size_t i = 0; i < name.len; i++)
        if (name.base[i] >= 'A' && name.base[i] <= 'Z') bad(s, "upper-case field name");
    if (s->phase == 1) { /* trailers: no pseudo-headers */
        if (name.len && name.base[0] == ':') {
            bad(s, "pseudo-header field in trailers");
            return;
        }
        fy_str_t n = hdup(s, name.base, name.len), v = hdup(s, value.base, value.len);
        fy_headers_add(&s->arena, &s->ex.req_trailers, n.p, n.len, v.p, v.len);
        return;
    }
    if (name.len && name.base[0] == ':') {
        if (s->saw_regular) bad(s, "pseudo-header field after a regular field");
        fy_str_t v = hdup(s, value.base, value.len);
        fy_str_t *dst = NULL;
        unsigned bit;
        if (name.len == 7 && !memcmp(name.base, ":method", 7)) {
            dst = &q->method;
            bit = PSEUDO_METHOD;
        } else if (name.len == 5 && !memcmp(name.base, ":path", 5)) {
            dst = &q->target;
            bit = PSEUDO_PATH;
        } else if (name.len == 10 && !memcmp(name.base, ":authority", 10)) {
            dst = &q->authority;
            bit = PSEUDO_AUTHORITY;
        } else if (name.len == 7 && !memcmp(name.base, ":scheme", 7)) {
            dst = &q->scheme;
            bit = PSEUDO_SCHEME;
            if (!fy_str_eq(v, "https", 5) && !fy_str_eq(v, "http", 4))
                bad(s, ":scheme other than http or https");
        } else if (name.len == 9 && !memcmp(name.base, ":protocol", 9)) {
            dst = &q->protocol;
            bit = PSEUDO_PROTOCOL;
        } else {
            bad(s, "unknown or response pseudo-header field");
            return;
        }
        if (s->pseudo_seen & bit) bad(s, "duplicated pseudo-header field");
        s->pseudo_seen |= bit;
        *dst = v;
        if (dst == &q->method) q->method_id = fy_http_method_id(v);
        return;
    }
    s->saw_regular = true;
    if ((int64_t)q->headers.n >= s->c->ctx->limits->max_headers) {
        s->hdr_too_large = true;
        return;
    }
    fy_str_t n = hdup(s, name.base, name.len), v = hdup(s, value.base, value.len);
    if (fy__h3_is_conn_specific(n) || (fy_str_ieq(n, "te", 2) && !fy_str_eq(v, "trailers", 8)))
        bad(s, "connection-specific field");
    if (fy_str_ieq(n, "host", 4)) {
        if (s->host_seen) bad(s, "more than one Host field");
        s->host_seen = true;
        s->host = v;
    }
    if (fy_str_ieq(n, "content-length", 14)) {
        int64_t cl = 0;
        if (v.len == 0 || v.len > 18) bad(s, "bad content-length");
        for (size_t i = 0; i < v.len; i++) {
            if (v.p[i] < '0' || v.p[i] > '9') bad(s, "bad content-length");
            cl = cl * 10 + (v.p[i] - '0');
        }
        if (q->content_length >= 0 && q->content_length != cl)
            bad(s, "content-length fields that differ");
        q->content_length = cl;
    }
    fy_headers_add(&s->arena, &q->headers, n.p, n.len, v.p, v.len);
}

static void on_field_cb(void *ud, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
    on_field(ud, (nghttp3_vec){(uint8_t *)n, nl}, (nghttp3_vec){(uint8_t *)v, vl});
}

static void dispatch(h3_stream_t *s)
{
    fy_exchange_t *ex = &s->ex;
    fy_request_t *q = &ex->req;
    h3_conn_t *c = s->c;
    s->dispatched = true;
    s->phase = 1;
    if (s->hdr_too_large) {
        fy_exchange_fail(ex, 431, "request header section over limits");
        return;
    }
    bool connect = q->method_id == FY_M_CONNECT;
    unsigned ps = s->pseudo_seen;
    /* RFC 9114 §4.3.1 (and RFC 9220 for :protocol) */
    if (!(ps & PSEUDO_METHOD) || q->method.len == 0)
        bad(s, "no :method");
    else if (!connect && !(ps & PSEUDO_SCHEME))
        bad(s, "no :scheme");
    else if (!connect && (!(ps & PSEUDO_PATH) || q->target.len == 0))
        bad(s, "no :path");
    else if (connect && !(ps & PSEUDO_PROTOCOL) && (ps & (PSEUDO_SCHEME | PSEUDO_PATH)))
        bad(s, "CONNECT with :scheme or :path");
    else if ((ps & PSEUDO_PROTOCOL) && !connect)
        bad(s, ":protocol without CONNECT");
    else if ((ps & PSEUDO_AUTHORITY) && q->authority.len == 0)
        bad(s, "empty :authority");
    else if (s->host_seen && s->host.len == 0)
        bad(s, "empty Host");
    else if ((ps & PSEUDO_AUTHORITY) && s->host_seen &&
             !fy_str_eq(q->authority, s->host.p, s->host.len))
        bad(s, ":authority and Host differ");
    else if (connect && !(ps & PSEUDO_AUTHORITY))
        bad(s, "CONNECT without :authority");
    else if (!(ps & PSEUDO_AUTHORITY) && !s->host_seen)
        bad(s, "neither :authority nor Host");
    if (s->malformed) {
        /* RFC 9114 §4.1.2: a malformed request is a stream error H3_MESSAGE_ERROR */
        char a[64];
        fy_info("client %s: h3 stream %lld: malformed request (%s): H3_MESSAGE_ERROR",
                fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), (long long)s->qs->id,
                s->malformed);
        if (!s->fin_recv && !s->peer_gone)
            fy_quic_stream_stop_reading(c->qc, s->qs, FY_H3_MESSAGE_ERROR);
        fy__h3_abort_stream(s, FY_H3_MESSAGE_ERROR);
        return;
    }
    if (!(ps & PSEUDO_AUTHORITY)) q->authority = s->host;
    if (connect) {
        if (q->protocol.len == 0) {
            fy_exchange_dispatch(ex); /* the protocol stage refuses it: 405 */
            return;
        }
        /* extended CONNECT (RFC 9220): a tunnel exchange; the handler answers 2xx and the
           DATA frames both ways are the tunnel */
        if (q->scheme.len == 0 || q->target.len == 0 || q->authority.len == 0) {
            fy_exchange_fail(ex, 400, "extended CONNECT without :scheme, :path or :authority");
            return;
        }
        q->content_length = -1;
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
    if (!connect && s->fin_recv && s->rd.hn == 0 && !s->rd.have_hdr && q->content_length < 0)
        q->content_length = 0;
    /* `OPTIONS *`, CONNECT 405 and content-length over limits.body-size: the protocol stage */
    if (connect && fy_h3_wt_refuse(ex)) return; /* :protocol webtransport, route without it */
    fy_exchange_dispatch(ex);
}

/* Decode the collected HEADERS payload. Returns 0 done, 1 blocked, -1 connection error. */
static int decode_headers(h3_stream_t *s)
{
    h3_conn_t *c = s->c;
    if (!s->sctx &&
        nghttp3_qpack_stream_context_new(&s->sctx, s->qs->id, nghttp3_mem_default()) != 0) {
        fy__h3_conn_error(c, FY_H3_INTERNAL_ERROR, "out of memory");
        return -1;
    }
    size_t used = 0;
    const char *err = NULL;
    int r = fy_h3_qpack_decode(c->dec, s->sctx, s->hbuf + s->hoff, s->hlen - s->hoff, &used,
                               on_field_cb, s, &err);
    s->hoff += used;
    if (r == FY_H3_QPACK_ERROR) {
        fy__h3_conn_error(c, FY_H3_QPACK_DECOMPRESSION_FAILED, err);
        return -1;
    }
    if (r == FY_H3_QPACK_BLOCKED) {
        if (!s->blocked) {
            /* RFC 9204 §2.1.2: more blocked streams than we allowed is a connection error */
            if (c->nblocked >= (size_t)c->conf->qpack_blocked_streams) {
                fy__h3_conn_error(c, FY_H3_QPACK_DECOMPRESSION_FAILED,
                                  "more streams blocked on the QPACK encoder stream than "
                                  "quic.qpack-blocked-streams");
                return -1;
            }
            c->nblocked++;
            s->blocked = true;
            fy_list_insert_tail(&c->blocked, &s->blink);
        }
        return 1;
    }
    fy__h3_flush_decoder(c);
    s->hbuf = NULL; /* arena memory */
    s->hlen = s->hoff = s->hcap = 0;
    return 0;
}

/* A complete HEADERS frame: the request head or trailers. Returns -1 if the connection or
 * stream is gone. */
static int headers_done(h3_stream_t *s)
{
    if (s->skip_headers) {
        s->skip_headers = false;
        nghttp3_qpack_decoder_cancel_stream(s->c->dec, s->qs->id);
        if (s->phase == 0) {
            s->hdr_too_large = true;
            dispatch(s);
        } else {
            fy__h3_abort_stream(s, FY_H3_EXCESSIVE_LOAD);
        }
        return 0;
    }
    int r = decode_headers(s);
    if (r != 0) return r;
    if (s->phase == 0) {
        dispatch(s);
    } else {
        s->phase = 2; /* trailers end the body */
        if (s->malformed && !s->ex_done) fy__h3_abort_stream(s, FY_H3_MESSAGE_ERROR);
    }
    return 0;
}

static void body_data(h3_stream_t *s, const uint8_t *p, size_t n)
{
    h3_conn_t *c = s->c;
    s->ex.body_received += n;
    if (s->ex_done) {
        fy_quic_stream_consumed(c->qc, s->qs, n);
        return;
    }
    if (s->ex.req.content_length >= 0 && s->ex.body_received > (uint64_t)s->ex.req.content_length) {
        fy_quic_stream_consumed(c->qc, s->qs, n);
        if (!s->ex.response_started)
            fy_exchange_fail(&s->ex, 400, "DATA beyond content-length");
        else
            fy__h3_abort_stream(s, FY_H3_MESSAGE_ERROR);
        return;
    }
    if (s->ex.body_received > c->ctx->limits->max_body) {
        fy_quic_stream_consumed(c->qc, s->qs, n);
        if (!s->ex.response_started)
            fy_http_body_too_large(&s->ex);
        else
            fy__h3_abort_stream(s, FY_H3_REQUEST_CANCELLED);
        return;
    }
    if (!s->body) {
        /* at most one stream window is ever unconsumed (the peer cannot send more) */
        s->body_cap = c->conf->stream_window;
        s->body = fy_xmalloc(s->body_cap);
    }
    if (s->body_len + n > s->body_cap) { /* the peer broke flow control: ngtcp2 stops that */
        fy__h3_abort_stream(s, FY_H3_INTERNAL_ERROR);
        return;
    }
    memcpy(s->body + s->body_len, p, n);
    s->body_len += n;
    fy__h3_deliver_body(s);
}

static void request_end(h3_stream_t *s)
{
    if (s->rd.have_hdr || s->rd.hn) {
        fy__h3_conn_error(s->c, FY_H3_FRAME_ERROR, "request stream ended inside a frame");
        return;
    }
    if (!s->dispatched) {
        fy__h3_abort_stream(s, FY_H3_REQUEST_INCOMPLETE);
        return;
    }
    if (s->ex.req.content_length >= 0 &&
        s->ex.body_received != (uint64_t)s->ex.req.content_length && !s->ex_done) {
        if (!s->ex.response_started)
            fy_exchange_fail(&s->ex, 400, "request body shorter than content-length");
        else
            fy__h3_abort_stream(s, FY_H3_MESSAGE_ERROR);
        return;
    }
    s->body_end = true;
    fy__h3_deliver_body(s);
}

static void stash(h3_stream_t *s, const uint8_t *p, size_t n, bool fin)
{
    if (s->pend_len + n > s->pend_cap) {
        size_t cap = s->pend_cap ? s->pend_cap * 2 : 4096;
        while (cap < s->pend_len + n) cap *= 2;
        s->pend = fy_xrealloc(s->pend, cap);
        s->pend_cap = cap;
    }
    if (n) memcpy(s->pend + s->pend_len, p, n); /* n == 0: only a FIN (pend may be NULL) */
    s->pend_len += n;
    s->pend_fin |= fin;
}

/* Request stream bytes, in order. Flow-control credit: frame headers and HEADERS payloads at
 * once, DATA payloads when the handler consumed them. */
void fy__h3_request_recv(h3_stream_t *s, const uint8_t *p, size_t n, bool fin)
{
    h3_conn_t *c = s->c;
    if (s->blocked) {
        stash(s, p, n, fin);
        return;
    }
    while (n && s->qs && !c->closing) {
        if (!s->rd.have_hdr) {
            size_t k = fy_h3_frame_hdr_feed(&s->rd, p, n);
            fy_quic_stream_consumed(c->qc, s->qs, k);
            p += k;
            n -= k;
            if (!s->rd.have_hdr) break;
            uint64_t t = s->rd.type;
            if (t == FY_WT_STREAM_BIDI && s->phase == 0 && !s->dispatched) {
                /* WebTransport bidi stream: 0x41 + session id (read as a frame header) */
                fy_quic_stream_t *qs = s->qs;
                uint64_t sid = s->rd.len;
                s->qs = NULL;
                s->ex_done = true;
                fy__h3_stream_free(s);
                fy_h3_wt_bidi(c->wt, qs, sid, p, n, fin);
                return;
            }
            if (t == FY_H3_HEADERS) {
                if (s->phase == 2) {
                    fy__h3_conn_error(c, FY_H3_FRAME_UNEXPECTED, "HEADERS after trailers");
                    return;
                }
                if (s->rd.len > (uint64_t)c->ctx->limits->max_header_bytes) {
                    s->skip_headers = true;
                } else {
                    s->hcap = s->rd.len ? s->rd.len : 1;
                    s->hbuf = fy_arena_alloc(&s->arena, s->hcap); /* <= header-bytes */
                    s->hlen = s->hoff = 0;
                }
            } else if (t == FY_H3_DATA) {
                if (s->phase != 1) {
                    fy__h3_conn_error(c, FY_H3_FRAME_UNEXPECTED,
                                      s->phase == 0 ? "DATA before HEADERS"
                                                    : "DATA after trailers");
                    return;
                }
            } else if (t == FY_H3_SETTINGS || t == FY_H3_GOAWAY || t == FY_H3_MAX_PUSH_ID ||
                       t == FY_H3_CANCEL_PUSH || t == FY_H3_PUSH_PROMISE ||
                       fy_h3_frame_is_h2_reserved(t)) {
                fy__h3_conn_error(c, FY_H3_FRAME_UNEXPECTED, "control frame on a request stream");
                return;
            }
        } else {
            size_t take = n < s->rd.left ? n : (size_t)s->rd.left;
            if (s->rd.type == FY_H3_DATA) {
                body_data(s, p, take);
            } else {
                if (s->rd.type == FY_H3_HEADERS && !s->skip_headers) {
                    memcpy(s->hbuf + s->hlen, p, take);
                    s->hlen += take;
                }
                fy_quic_stream_consumed(c->qc, s->qs, take);
            }
            p += take;
            n -= take;
            s->rd.left -= take;
        }
        if (s->rd.have_hdr && s->rd.left == 0) {
            s->rd.have_hdr = false;
            if (s->rd.type == FY_H3_HEADERS) {
                if (n == 0 && fin) s->fin_recv = true; /* dispatch knows there is no body */
                int r = headers_done(s);
                if (r < 0) return;
                if (r == 1) {
                    stash(s, p, n, fin);
                    return;
                }
            }
        }
    }
    if (fin && s->qs && !c->closing) {
        s->fin_recv = true;
        request_end(s);
    }
}

void fy__h3_unblock_streams(h3_conn_t *c)
{
    uint64_t icnt = nghttp3_qpack_decoder_get_icnt(c->dec);
    fy_list_t *l = c->blocked.next;
    while (l != &c->blocked && !c->closing) {
        h3_stream_t *s = fy_container_of(l, h3_stream_t, blink);
        l = l->next;
        if (nghttp3_qpack_stream_context_get_ricnt(s->sctx) > icnt) continue;
        fy_list_remove(&s->blink);
        s->blocked = false;
        c->nblocked--;
        int r = decode_headers(s);
        if (r < 0) return;
        if (r == 1) continue;
        if (s->phase == 0) {
            if (!s->pend_len && s->pend_fin) s->fin_recv = true;
            dispatch(s);
        } else {
            s->phase = 2;
        }
        uint8_t *p = s->pend;
        size_t n = s->pend_len;
        bool fin = s->pend_fin;
        s->pend = NULL;
        s->pend_len = s->pend_cap = 0;
        s->pend_fin = false;
        if (s->qs && (n || fin)) fy__h3_request_recv(s, p, n, fin);
        free(p);
    }
}
