/* HTTP/2 server codec: nghttp2's session callbacks. Request headers into the exchange, the
 * dispatch of a complete head, DATA into the stream's body, stream close, and the glitch
 * counter for floods. Thread rules: h2_server_int.h. */
#include "h2/h2_server_int.h"

/* Stream `id`'s: the one whose request HEADERS were read last (nearly always the one asked
 * for), else nghttp2's lookup. */
static h2_stream_t *stream_of(h2_conn_t *c, nghttp2_session *ng, int32_t id)
{
    if (c->hstream && c->hstream->id == id) return c->hstream;
    return nghttp2_session_get_stream_user_data(ng, id);
}

int fy__h2_on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    h2_conn_t *c = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    c->hstream = fy__h2_stream_new(c, f->hd.stream_id);
    return 0;
}

fy_str_t fy__h2_hdup(h2_stream_t *s, const uint8_t *p, size_t n)
{
    return fy_str(fy_arena_strndup(&s->arena, (const char *)p, n), n);
}

/* A header field's bytes as the exchange keeps them: those of HPACK's static table (most
 * names, and values such as GET, https or /) are nghttp2's static storage, which outlives
 * every stream, so they are pointed at (fy__h2_on_header); the others are copied into the
 * stream's arena. */

/* A malformed request (RFC 9113 §8.1.1): a stream error PROTOCOL_ERROR, as nghttp2 answered
 * it while its HTTP messaging was on. Its frames from now on are dropped (s->reset). */
void fy__h2_malformed(h2_stream_t *s)
{
    if (s->reset) return;
    fy__h2_stream_reset(s, NGHTTP2_PROTOCOL_ERROR);
    fy__h2_schedule_flush(s->c);
}

int fy__h2_on_header(nghttp2_session *ng, const nghttp2_frame *f, nghttp2_rcbuf *namebuf,
                     nghttp2_rcbuf *valuebuf, uint8_t flags, void *ud)
{
    (void)flags;
    h2_conn_t *c = ud;
    /* the stream whose request HEADERS are being read (on_begin_headers), else a lookup */
    h2_stream_t *s = c->hstream && c->hstream->id == f->hd.stream_id
                         ? c->hstream
                         : nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (!s || s->closed || s->reset) return 0;
    nghttp2_vec nm = nghttp2_rcbuf_get_buf(namebuf), val = nghttp2_rcbuf_get_buf(valuebuf);
    const uint8_t *name = nm.base, *value = val.base;
    size_t namelen = nm.len, valuelen = val.len;
    bool nstatic = nghttp2_rcbuf_is_static(namebuf), vstatic = nghttp2_rcbuf_is_static(valuebuf);
    bool trailer = f->headers.cat == NGHTTP2_HCAT_HEADERS;
    if (fy__h2_check_field(&s->chk, name, namelen, nstatic, value, valuelen, vstatic, trailer) <
        0) {
        /* the rest of the block is decoded (HPACK state) without callbacks; no on_frame_recv */
        fy__h2_malformed(s);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    /* HPACK bombs: the decoded size counts, as in SETTINGS_MAX_HEADER_LIST_SIZE (+32 each) */
    s->hdr_bytes += namelen + valuelen + 32;
    if (s->hdr_bytes > c->ctx->limits->max_header_bytes) {
        s->hdr_too_large = true;
        return 0;
    }
    fy_request_t *q = &s->ex.req;
    if (trailer) {
        fy_str_t n = nstatic ? fy_str((const char *)name, namelen) : fy__h2_hdup(s, name, namelen),
                 v = vstatic ? fy_str((const char *)value, valuelen)
                             : fy__h2_hdup(s, value, valuelen);
        fy_headers_add(&s->arena, &s->ex.req_trailers, n.p, n.len, v.p, v.len);
        return 0;
    }
    fy_str_t v = vstatic ? fy_str((const char *)value, valuelen) : fy__h2_hdup(s, value, valuelen);
    if (name[0] == ':') { /* checked: one of the five, once each */
        switch (namelen) {
        case 5:
            q->target = v;
            break;
        case 7:
            if (name[1] == 'm') {
                q->method = v;
                q->method_id = fy_http_method_id(v);
            } else {
                q->scheme = v;
            }
            break;
        case 10:
            q->authority = v;
            break;
        default:
            q->protocol = v;
            break;
        }
        return 0;
    }
    if ((int64_t)q->headers.n >= c->ctx->limits->max_headers) {
        s->hdr_too_large = true;
        return 0;
    }
    fy_str_t n = nstatic ? fy_str((const char *)name, namelen) : fy__h2_hdup(s, name, namelen);
    if (namelen == 4 && memcmp(name, "host", 4) == 0 && q->authority.len == 0) q->authority = v;
    if (namelen == 14 && memcmp(name, "content-length", 14) == 0) q->content_length = s->chk.cl;
    fy_headers_add(&s->arena, &q->headers, n.p, n.len, v.p, v.len);
    return 0;
}

void fy__h2_dispatch(h2_stream_t *s, bool end_stream)
{
    fy_exchange_t *ex = &s->ex;
    fy_request_t *q = &ex->req;
    if (end_stream) {
        s->body_end = true;
        q->content_length = 0;
    } else if (!(s->chk.flags & FY_H2K_CL)) {
        q->content_length = -1;
    }
    if (s->hdr_too_large) {
        fy_exchange_fail(ex, 431, "request header list over limits");
        return;
    }
    if (q->method_id == FY_M_CONNECT) {
        /* classic CONNECT (RFC 9113 §8.5: :authority, no :path) or extended (checked:
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
void fy__h2_client_closed(h2_conn_t *c, int32_t id)
{
    c->client_closed[c->nclosed++ % NELEM(c->client_closed)] = id;
}

int fy__h2_on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    h2_conn_t *c = ud;
    h2_stream_t *s = !f->hd.stream_id ? NULL
                     : c->hstream && c->hstream->id == f->hd.stream_id
                         ? c->hstream
                         : nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
    switch (f->hd.type) {
    case NGHTTP2_HEADERS:
        if (!s || s->reset) return 0;
        if (f->headers.cat == NGHTTP2_HCAT_REQUEST) {
            /* §8.3.1 required pseudo-headers; §8.1.1 content-length and END_STREAM */
            if (!fy__h2_check_head(&s->chk)) {
                fy__h2_malformed(s);
                return 0;
            }
            if ((s->chk.flags & (FY_H2K_CONNECT | FY_H2K_PROTOCOL)) == FY_H2K_CONNECT)
                s->chk.flags &= (uint16_t)~FY_H2K_CL; /* a tunnel: no body length */
            if (end && !fy__h2_check_end(&s->chk)) {
                fy__h2_malformed(s);
                return 0;
            }
            fy__h2_dispatch(s, end);
        } else if (!end || !fy__h2_check_end(&s->chk)) {
            fy__h2_malformed(s); /* §8.1: trailers end the stream; §8.1.1 */
        } else {
            s->body_end = true; /* trailers end the body */
            fy__h2_deliver_body(s);
        }
        break;
    case NGHTTP2_DATA:
        /* nothing but padding (which nghttp2 gives back as window by itself) counts too */
        if (f->hd.length == f->data.padlen && !end) glitch(c, "empty DATA");
        if (!s || s->reset) return 0;
        if (end && !fy__h2_check_end(&s->chk)) {
            fy__h2_malformed(s);
            return 0;
        }
        if (s->draining && !end) fy__h2_drain_check(s);
        if (end) {
            s->body_end = true;
            fy__h2_deliver_body(s);
        }
        break;
    case NGHTTP2_RST_STREAM: {
        if (s && !s->body_end) fy__h2_client_closed(c, f->hd.stream_id);
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

int fy__h2_on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    h2_conn_t *c = ud;
    h2_stream_t *s = stream_of(c, ng, id);
    if (s && !s->closed && !s->reset && !fy__h2_check_data(&s->chk, len))
        fy__h2_malformed(s); /* past content-length (§8.1.1) */
    if (s && s->reset && !s->closed) {
        /* a malformed or reset stream: dropped, its window given back */
        nghttp2_session_consume(ng, id, len);
        return 0;
    }
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
            fy__h2_stream_reset(s, NGHTTP2_CANCEL);
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
    fy__h2_deliver_body(s);
    return 0;
}

int fy__h2_on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud)
{
    h2_stream_t *s = stream_of(ud, ng, id);
    if (!s) return 0;
    if (s->body_end) fy__h2_client_closed(s->c, id);
    s->closed = true;
    nghttp2_session_set_stream_user_data(ng, id, NULL);
    if (!s->ex_done) {
        if (!s->ex.error) s->ex.error = code ? "stream reset by client" : "stream closed";
        if (s->ex.producer && s->ex.producer->stop && s->ex.response_started)
            s->ex.producer->stop(&s->ex);
        fy__h2_stream_done(s); /* frees */
    } else {
        fy__h2_stream_free(s);
    }
    return 0;
}
