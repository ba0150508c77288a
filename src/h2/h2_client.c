/* HTTP/2 client codec on nghttp2 (see h2_client.h). */
#include "h2/h2_client.h"

#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

#include "core/list.h"
#include "core/log.h"

struct fy_h2_client_stream {
    fy_list_t link; /* in c->streams while the owner holds it or nghttp2 knows it */
    fy_h2_client_t *c;
    int32_t id;
    const fy_client_stream_ops_t *ops;
    void *ud;          /* NULL once finished (end/error): no more callbacks */
    fy_arena_t *arena; /* borrowed: the owner's */
    fy_headers_t hs;   /* the head being received */
    fy_headers_t trailers;
    int status;
    bool got_final;
    bool released;     /* the owner let go */
    bool ng_closed;    /* nghttp2 closed the stream */
    bool in_close;     /* inside on_stream_close: the owner may release, we free after */
    bool ended;        /* END_STREAM received (the response is complete) */
    size_t unconsumed; /* delivered to the owner, not consumed yet */
};

struct fy_h2_client {
    nghttp2_session *ng;
    const fy_h2_client_conn_ops_t *ops;
    void *ud;
    fy_list_t streams;
    size_t nopen; /* streams nghttp2 still has open */
    bool got_settings;
    bool goaway;            /* the origin sent GOAWAY */
    int32_t goaway_last_id; /* streams above it were not processed */
    bool dead;
    bool in_recv;
    fy_h2_client_stream_t *hstream; /* the stream whose HEADERS are being read, or NULL */
};

static void stream_free_maybe(fy_h2_client_stream_t *s)
{
    if (!s->released || !s->ng_closed) return;
    if (s->c->hstream == s) s->c->hstream = NULL;
    fy_list_remove(&s->link);
    free(s);
}

static void stream_error(fy_h2_client_stream_t *s, int kind, uint64_t code, const char *why)
{
    void *ud = s->ud;
    if (!ud) return;
    s->ud = NULL;
    s->ops->on_error(ud, kind, code, why);
}

static fy_str_t adup(fy_arena_t *a, const uint8_t *p, size_t n)
{
    char *d = fy_arena_alloc(a, n + 1);
    memcpy(d, p, n);
    d[n] = '\0';
    return fy_str(d, n);
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    fy_h2_client_t *c = ud;
    fy_h2_client_stream_t *s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    c->hstream = s;
    if (!s) return 0;
    if (!s->got_final) {
        s->hs = (fy_headers_t){0};
        s->status = 0;
    }
    return 0;
}

/* Names of HPACK's static table (and values such as 200 or text/html) are nghttp2's static
 * storage, which outlives every stream: pointed at, not copied. */
static fy_str_t keep(fy_arena_t *a, nghttp2_rcbuf *rb)
{
    nghttp2_vec v = nghttp2_rcbuf_get_buf(rb);
    if (nghttp2_rcbuf_is_static(rb)) return fy_str((const char *)v.base, v.len);
    return adup(a, v.base, v.len);
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, nghttp2_rcbuf *namebuf,
                     nghttp2_rcbuf *valuebuf, uint8_t flags, void *ud)
{
    (void)flags;
    fy_h2_client_t *c = ud;
    fy_h2_client_stream_t *s = c->hstream && c->hstream->id == f->hd.stream_id
                                   ? c->hstream
                                   : nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (!s || !s->ud) return 0;
    nghttp2_vec nm = nghttp2_rcbuf_get_buf(namebuf), val = nghttp2_rcbuf_get_buf(valuebuf);
    const uint8_t *name = nm.base, *value = val.base;
    size_t namelen = nm.len, valuelen = val.len;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
        int st = 0;
        for (size_t i = 0; i < valuelen && i < 3; i++) st = st * 10 + (value[i] - '0');
        s->status = valuelen == 3 ? st : -1;
        return 0;
    }
    if (namelen && name[0] == ':') return 0; /* nghttp2 rejects others already */
    fy_str_t n = keep(s->arena, namebuf), v = keep(s->arena, valuebuf);
    fy_headers_add(s->arena, s->got_final ? &s->trailers : &s->hs, n.p, n.len, v.p, v.len);
    return 0;
}

/* The response ended (END_STREAM seen): hand it over; an unfinished upload is stopped. */
static void stream_end(fy_h2_client_t *c, fy_h2_client_stream_t *s)
{
    void *ud = s->ud;
    s->ended = true;
    if (!ud) return;
    s->ud = NULL;
    /* an upload still going: stop it (RFC 9113 §8.1: early response, RST NO_ERROR) */
    if (!s->ng_closed && !nghttp2_session_get_stream_local_close(c->ng, s->id))
        nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
    s->ops->on_end(ud, &s->trailers);
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    fy_h2_client_t *c = ud;
    if (f->hd.type == NGHTTP2_SETTINGS && !(f->hd.flags & NGHTTP2_FLAG_ACK)) {
        if (!c->got_settings) {
            c->got_settings = true;
            c->ops->on_settings(c->ud);
        }
        return 0;
    }
    if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK)) {
        if (c->ops->on_ping_ack) c->ops->on_ping_ack(c->ud);
        return 0;
    }
    if (f->hd.type == NGHTTP2_GOAWAY) {
        c->goaway = true;
        c->goaway_last_id = f->goaway.last_stream_id;
        c->ops->on_goaway(c->ud);
        return 0;
    }
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
    fy_h2_client_stream_t *s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (!s || !s->ud) return 0;
    bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if (f->hd.type == NGHTTP2_HEADERS && !s->got_final) {
        if (s->status < 100 || s->status > 599) {
            nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_PROTOCOL_ERROR);
            stream_error(s, FY_CLIENT_PROTOCOL, NGHTTP2_PROTOCOL_ERROR,
                         "invalid :status from the origin");
            return 0;
        }
        if (s->status < 200) {
            if (end) {
                nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_PROTOCOL_ERROR);
                stream_error(s, FY_CLIENT_PROTOCOL, NGHTTP2_PROTOCOL_ERROR,
                             "origin ended the stream on an interim response");
                return 0;
            }
            s->ops->on_head(s->ud, s->status, &s->hs, false);
            return 0;
        }
        s->got_final = true;
        s->ops->on_head(s->ud, s->status, &s->hs, end);
    }
    if (end && s->ud) stream_end(c, s);
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    (void)flags;
    (void)ud;
    fy_h2_client_stream_t *s = nghttp2_session_get_stream_user_data(ng, id);
    if (!s || !s->ud || !s->got_final) {
        nghttp2_session_consume(ng, id, len); /* nobody takes them: keep the windows open */
        return 0;
    }
    s->unconsumed += len;
    s->ops->on_data(s->ud, (const char *)data, len);
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud)
{
    fy_h2_client_t *c = ud;
    fy_h2_client_stream_t *s = nghttp2_session_get_stream_user_data(ng, id);
    if (!s) return 0;
    c->nopen--;
    s->in_close = true;
    if (s->ud) {
        if (code == NGHTTP2_REFUSED_STREAM)
            stream_error(s, FY_CLIENT_REFUSED, code, "origin refused the stream");
        else if (code == NGHTTP2_NO_ERROR)
            stream_error(s, FY_CLIENT_RESET, code, "origin closed the stream before its end");
        else
            stream_error(s, FY_CLIENT_RESET, code, "origin reset the stream");
    }
    s->in_close = false;
    s->ng_closed = true;
    stream_free_maybe(s);
    return 0;
}

static ssize_t read_body(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    (void)ud;
    fy_h2_client_stream_t *s = src->ptr;
    if (!s->ud || s->released) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    }
    const fy_headers_t *tr = NULL;
    ssize_t n = s->ops->read_body(s->ud, (char *)buf, len, &tr);
    if (n == FY_CLIENT_DEFER) return NGHTTP2_ERR_DEFERRED;
    if (n < 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
    if (n > 0) return n;
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (tr && tr->n) {
        nghttp2_nv *nv = malloc(tr->n * sizeof *nv);
        if (nv) {
            for (size_t i = 0; i < tr->n; i++)
                nv[i] = (nghttp2_nv){(uint8_t *)tr->v[i].name.p, (uint8_t *)tr->v[i].value.p,
                                     tr->v[i].name.len, tr->v[i].value.len, NGHTTP2_NV_FLAG_NONE};
            if (nghttp2_submit_trailer(ng, id, nv, tr->n) == 0)
                *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            free(nv);
        }
    }
    return 0;
}

static __thread nghttp2_session_callbacks *cbs;
static __thread nghttp2_option *opt;

void fy_h2_client_thread_cleanup(void)
{
    if (cbs) nghttp2_session_callbacks_del(cbs);
    if (opt) nghttp2_option_del(opt);
    cbs = NULL;
    opt = NULL;
}

fy_h2_client_t *fy_h2_client_new(const fy_h2_client_conn_ops_t *ops, void *ud,
                                 uint32_t max_header_list)
{
    if (!cbs) {
        if (nghttp2_session_callbacks_new(&cbs) != 0) return NULL;
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback2(cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
        if (nghttp2_option_new(&opt) != 0) return NULL;
        nghttp2_option_set_no_auto_window_update(opt, 1);
        nghttp2_option_set_peer_max_concurrent_streams(opt, FY_H2C_MAX_STREAMS);
        nghttp2_option_set_max_settings(opt, 32);
    }
    fy_h2_client_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ops = ops;
    c->ud = ud;
    fy_list_init(&c->streams);
    if (nghttp2_session_client_new2(&c->ng, cbs, c, opt) != 0) {
        free(c);
        return NULL;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 0}, /* the origin opens none */
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, FY_H2C_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, max_header_list},
    };
    nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
    nghttp2_session_set_local_window_size(c->ng, NGHTTP2_FLAG_NONE, 0, (int32_t)FY_H2C_CONN_WINDOW);
    return c;
}

void fy_h2_client_fail_all(fy_h2_client_t *c, const char *why)
{
    c->dead = true;
    /* callbacks may release streams (even this one): walk a snapshot of the pending ones */
    for (;;) {
        fy_h2_client_stream_t *hit = NULL;
        fy_list_t *it;
        for (it = c->streams.next; it != &c->streams; it = it->next) {
            fy_h2_client_stream_t *s = fy_container_of(it, fy_h2_client_stream_t, link);
            if (s->ud) {
                hit = s;
                break;
            }
        }
        if (!hit) break;
        if (c->goaway && hit->id > c->goaway_last_id)
            stream_error(hit, FY_CLIENT_REFUSED, NGHTTP2_REFUSED_STREAM,
                         "origin went away before the stream (GOAWAY)");
        else
            stream_error(hit, FY_CLIENT_CONN, NGHTTP2_INTERNAL_ERROR, why);
    }
}

void fy_h2_client_free(fy_h2_client_t *c, const char *why)
{
    if (!c) return;
    fy_h2_client_fail_all(c, why);
    while (!fy_list_empty(&c->streams)) {
        fy_h2_client_stream_t *s = fy_container_of(c->streams.next, fy_h2_client_stream_t, link);
        fy_list_remove(&s->link);
        free(s);
    }
    nghttp2_session_del(c->ng);
    free(c);
}

int fy_h2_client_recv(fy_h2_client_t *c, const char *p, size_t n)
{
    if (c->dead) return -1;
    c->in_recv = true;
    ssize_t r = nghttp2_session_mem_recv(c->ng, (const uint8_t *)p, n);
    c->in_recv = false;
    if (r < 0) {
        fy_info("h2 origin: %s", nghttp2_strerror((int)r));
        return -1;
    }
    return 0;
}

ssize_t fy_h2_client_send(fy_h2_client_t *c, const uint8_t **data)
{
    if (c->dead) return 0;
    ssize_t n = nghttp2_session_mem_send(c->ng, data);
    if (n < 0) fy_info("h2 origin: %s", nghttp2_strerror((int)n));
    return n;
}

bool fy_h2_client_alive(const fy_h2_client_t *c)
{
    return !c->dead && (nghttp2_session_want_read(c->ng) || nghttp2_session_want_write(c->ng));
}

fy_h2_client_stream_t *fy_h2_client_submit(fy_h2_client_t *c, const fy_headers_t *hs, bool has_body,
                                           fy_arena_t *arena, const fy_client_stream_ops_t *ops,
                                           void *ud)
{
    if (c->dead) return NULL;
    fy_h2_client_stream_t *s = calloc(1, sizeof *s);
    /* nghttp2 copies the list during submit: a usual head needs no allocation for it */
    nghttp2_nv nv_stack[32];
    nghttp2_nv *nv = hs->n <= 32 ? nv_stack : malloc(hs->n * sizeof *nv);
    if (!s || !nv) {
        free(s);
        if (nv != nv_stack) free(nv);
        return NULL;
    }
    for (size_t i = 0; i < hs->n; i++)
        nv[i] = (nghttp2_nv){(uint8_t *)hs->v[i].name.p, (uint8_t *)hs->v[i].value.p,
                             hs->v[i].name.len, hs->v[i].value.len, NGHTTP2_NV_FLAG_NONE};
    s->c = c;
    s->ops = ops;
    s->ud = ud;
    s->arena = arena;
    nghttp2_data_provider dp = {.source.ptr = s, .read_callback = read_body};
    int32_t id = nghttp2_submit_request(c->ng, NULL, nv, hs->n, has_body ? &dp : NULL, s);
    if (nv != nv_stack) free(nv);
    if (id < 0) {
        fy_info("h2 origin: cannot open a stream: %s", nghttp2_strerror(id));
        free(s);
        return NULL;
    }
    s->id = id;
    c->nopen++;
    fy_list_insert_tail(&c->streams, &s->link);
    if (!c->in_recv) c->ops->want_send(c->ud);
    return s;
}

void fy_h2_client_consume(fy_h2_client_stream_t *s, size_t n)
{
    fy_h2_client_t *c = s->c;
    if (n > s->unconsumed) n = s->unconsumed;
    s->unconsumed -= n;
    if (c->dead || !n) return;
    if (s->ng_closed || s->in_close)
        nghttp2_session_consume_connection(c->ng, n);
    else
        nghttp2_session_consume(c->ng, s->id, n);
    if (!c->in_recv) c->ops->want_send(c->ud);
}

void fy_h2_client_resume(fy_h2_client_stream_t *s)
{
    fy_h2_client_t *c = s->c;
    if (c->dead || s->ng_closed) return;
    nghttp2_session_resume_data(c->ng, s->id);
    if (!c->in_recv) c->ops->want_send(c->ud);
}

void fy_h2_client_release(fy_h2_client_stream_t *s)
{
    fy_h2_client_t *c = s->c;
    s->ud = NULL;
    s->released = true;
    if (!c->dead) {
        if (s->unconsumed) nghttp2_session_consume_connection(c->ng, s->unconsumed);
        s->unconsumed = 0;
        /* nghttp2 may still read this stream's user data until it is closed */
        if (!s->ng_closed && !s->in_close && !s->ended)
            nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
        if (!c->in_recv) c->ops->want_send(c->ud);
    }
    stream_free_maybe(s);
}

size_t fy_h2_client_nstreams(const fy_h2_client_t *c)
{
    return c->nopen;
}

size_t fy_h2_client_max_streams(const fy_h2_client_t *c)
{
    uint32_t m =
        nghttp2_session_get_remote_settings(c->ng, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
    return m < FY_H2C_MAX_STREAMS ? m : FY_H2C_MAX_STREAMS;
}

bool fy_h2_client_can_connect_protocol(const fy_h2_client_t *c)
{
    return nghttp2_session_get_remote_settings(c->ng, NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL) ==
           1;
}

void fy_h2_client_ping(fy_h2_client_t *c)
{
    if (c->dead) return;
    if (nghttp2_submit_ping(c->ng, NGHTTP2_FLAG_NONE, NULL) == 0 && !c->in_recv)
        c->ops->want_send(c->ud);
}

void fy_h2_client_goaway(fy_h2_client_t *c)
{
    if (c->dead) return;
    nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
}
