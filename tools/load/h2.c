/* HTTP/2 client codec over nghttp2's session API, driven with mem_recv/mem_send from the
 * worker's own loop. Streams use a per-connection slot array (no allocation of ours per
 * request). */
#include "fl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nghttp2/nghttp2.h>

#define WINDOW ((1 << 30) - 1)

static nghttp2_nv nva_base[FL_MAX_URLS][4 + FL_MAX_HEADERS + 1];
static size_t nva_len;
static char clen_buf[24];
static nghttp2_session_callbacks *callbacks;

#define NV(n, v, vl)                                                                               \
    (nghttp2_nv)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), strlen(n), (vl),                                           \
            NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE                           \
    }

static fl_h2_slot_t *slot_of(nghttp2_session *s, int32_t id)
{
    return nghttp2_session_get_stream_user_data(s, id);
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    if (f->hd.type != NGHTTP2_HEADERS || namelen != 7 || memcmp(name, ":status", 7) != 0) return 0;
    fl_h2_slot_t *sl = slot_of(s, f->hd.stream_id);
    if (!sl || valuelen != 3) return 0;
    sl->status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    fl_h2_slot_t *sl = slot_of(s, id);
    if (sl) sl->body += len;
    return 0;
}

static void slot_free(fl_conn_t *c, fl_h2_slot_t *sl)
{
    sl->next_free = c->u.h2.free_head;
    sl->stream_id = 0;
    c->u.h2.free_head = (int)(sl - c->u.h2.slots);
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
    fl_conn_t *c = ud;
    fl_h2_slot_t *sl = slot_of(s, id);
    if (!sl) return 0;
    if (code == NGHTTP2_NO_ERROR) {
        fl_finish(c, sl->t_start, sl->status, sl->body, sl->status ? -1 : FL_ERR_PARSE);
    } else if (code == NGHTTP2_REFUSED_STREAM) {
        fl_unissue(c); /* never processed (RFC 9113 8.7): given back, sent again */
    } else {
        fl_count_error(c, FL_ERR_RESET, 1);
        c->inflight--;
        c->w->finished++;
    }
    slot_free(c, sl);
    return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    fl_conn_t *c = ud;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        c->u.h2.goaway = true;
        c->u.h2.goaway_last = f->goaway.last_stream_id;
        c->draining = true;
        if (f->goaway.error_code != NGHTTP2_NO_ERROR) fl_count_error(c, FL_ERR_RESET, 1);
    }
    return 0;
}

/* A request that never left (GOAWAY arrived first): given back, not failed. */
static int on_frame_not_send(nghttp2_session *s, const nghttp2_frame *f, int lib_error, void *ud)
{
    fl_conn_t *c = ud;
    /* if nghttp2 opened the stream, it closes it with REFUSED_STREAM: on_stream_close */
    if (f->hd.type != NGHTTP2_HEADERS || nghttp2_session_find_stream(s, f->hd.stream_id)) return 0;
    for (int i = 0; i < fl_cfg.streams; i++) {
        fl_h2_slot_t *sl = &c->u.h2.slots[i];
        if (sl->stream_id == f->hd.stream_id) {
            if (lib_error == NGHTTP2_ERR_START_STREAM_NOT_ALLOWED) {
                fl_unissue(c);
            } else {
                fl_count_error(c, FL_ERR_RESET, 1);
                c->inflight--;
                c->w->finished++;
            }
            slot_free(c, sl);
            break;
        }
    }
    return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    fl_h2_slot_t *sl = src->ptr;
    size_t left = fl_cfg.body_len - sl->body_off;
    if (len > left) len = left;
    memcpy(buf, fl_cfg.body + sl->body_off, len);
    sl->body_off += len;
    if (sl->body_off == fl_cfg.body_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)len;
}

/* Called once at start-up (single-threaded): header blocks per URL and the callback table. */
static void h2_init(void)
{
    static const char *const skip[] = {"host",    "connection",        "keep-alive",
                                       "upgrade", "transfer-encoding", "proxy-connection"};
    const char *authority = fl_cfg.authority;
    for (int i = 0; i < fl_cfg.nheaders; i++)
        if (!strcmp(fl_cfg.headers[i].name, "host")) authority = fl_cfg.headers[i].value;
    for (int u = 0; u < fl_cfg.nurls; u++) {
        nghttp2_nv *nv = nva_base[u];
        size_t n = 0;
        nv[n++] = NV(":method", fl_cfg.method, strlen(fl_cfg.method));
        nv[n++] = NV(":scheme", fl_cfg.tls ? "https" : "http", fl_cfg.tls ? 5u : 4u);
        nv[n++] = NV(":authority", authority, strlen(authority));
        nv[n++] = NV(":path", fl_cfg.urls[u].path, strlen(fl_cfg.urls[u].path));
        for (int i = 0; i < fl_cfg.nheaders; i++) {
            bool drop = false;
            for (size_t k = 0; k < sizeof(skip) / sizeof(skip[0]); k++)
                drop |= !strcmp(fl_cfg.headers[i].name, skip[k]);
            if (!drop)
                nv[n++] = NV(fl_cfg.headers[i].name, fl_cfg.headers[i].value,
                             strlen(fl_cfg.headers[i].value));
        }
        if (fl_cfg.body) {
            int l = snprintf(clen_buf, sizeof(clen_buf), "%zu", fl_cfg.body_len);
            nv[n++] = NV("content-length", clen_buf, (size_t)l);
        }
        nva_len = n;
    }
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks, on_frame_not_send);
}

static int h2_on_ready(fl_conn_t *c)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, h2_init);
    if (!c->u.h2.slots) {
        c->u.h2.slots = calloc((size_t)fl_cfg.streams, sizeof(fl_h2_slot_t));
        if (!c->u.h2.slots) return -1;
    }
    for (int i = 0; i < fl_cfg.streams; i++) {
        c->u.h2.slots[i].next_free = i + 1;
        c->u.h2.slots[i].stream_id = 0;
    }
    c->u.h2.slots[fl_cfg.streams - 1].next_free = -1;
    c->u.h2.free_head = 0;
    c->u.h2.pend = NULL;
    c->u.h2.pend_len = 0;
    c->u.h2.goaway = false;
    c->u.h2.url_rr = (uint32_t)c->idx % (uint32_t)fl_cfg.nurls;
    nghttp2_session *s;
    if (nghttp2_session_client_new(&s, callbacks, c) != 0) return -1;
    c->u.h2.session = s;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, WINDOW},
    };
    if (nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, iv, 3) != 0) return -1;
    if (nghttp2_session_set_local_window_size(s, NGHTTP2_FLAG_NONE, 0, WINDOW) != 0) return -1;
    fl_conn_want_flush(c);
    return 0;
}

static bool h2_can_issue(fl_conn_t *c)
{
    return c->u.h2.free_head >= 0 && !c->u.h2.goaway;
}

static int h2_issue(fl_conn_t *c, uint64_t t)
{
    fl_h2_slot_t *sl = &c->u.h2.slots[c->u.h2.free_head];
    c->u.h2.free_head = sl->next_free;
    sl->t_start = t;
    sl->status = 0;
    sl->body = 0;
    sl->body_off = 0;
    uint32_t u = c->u.h2.url_rr;
    if (++c->u.h2.url_rr == (uint32_t)fl_cfg.nurls) c->u.h2.url_rr = 0;
    nghttp2_data_provider prd = {.source.ptr = sl, .read_callback = read_body};
    int32_t id = nghttp2_submit_request(c->u.h2.session, NULL, nva_base[u], nva_len,
                                        fl_cfg.body ? &prd : NULL, sl);
    if (id < 0) {
        slot_free(c, sl);
        return -1;
    }
    sl->stream_id = id;
    fl_conn_want_flush(c);
    return 0;
}

static int h2_on_data(fl_conn_t *c)
{
    ssize_t r = nghttp2_session_mem_recv(c->u.h2.session, c->ibuf + c->ipos, c->ilen - c->ipos);
    c->ipos = c->ilen = 0;
    if (r < 0) {
        fl_count_error(c, FL_ERR_PARSE, 1);
        return -1;
    }
    if (!nghttp2_session_want_read(c->u.h2.session) && !nghttp2_session_want_write(c->u.h2.session))
        c->draining = true;
    fl_conn_want_flush(c);
    return 0;
}

static int h2_fill_obuf(fl_conn_t *c)
{
    for (;;) {
        if (c->u.h2.pend_len) {
            size_t take = FL_OBUF_SIZE - c->oend;
            if (take > c->u.h2.pend_len) take = c->u.h2.pend_len;
            memcpy(c->obuf + c->oend, c->u.h2.pend, take);
            c->oend += take;
            c->u.h2.pend += take;
            c->u.h2.pend_len -= take;
            if (c->u.h2.pend_len) return 0;
        }
        /* a frame is at most ~16 KiB: stop early rather than leave a frame half-copied */
        if (FL_OBUF_SIZE - c->oend < 20 * 1024) return 0;
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->u.h2.session, &data);
        if (n < 0) return -1;
        if (n == 0) return 0;
        c->u.h2.pend = data;
        c->u.h2.pend_len = (size_t)n;
    }
}

static void h2_reset(fl_conn_t *c)
{
    /* after GOAWAY, streams above its last id (or never sent) were not processed */
    if (c->u.h2.goaway)
        for (int i = 0; i < fl_cfg.streams; i++) {
            fl_h2_slot_t *sl = &c->u.h2.slots[i];
            if (sl->stream_id > c->u.h2.goaway_last && c->inflight) {
                fl_unissue(c);
                slot_free(c, sl);
            }
        }
    if (c->u.h2.session) nghttp2_session_del(c->u.h2.session);
    c->u.h2.session = NULL;
    c->u.h2.pend_len = 0;
}

const struct fl_proto_ops fl_h2_ops = {
    .name = "h2",
    .on_ready = h2_on_ready,
    .issue = h2_issue,
    .on_data = h2_on_data,
    .fill_obuf = h2_fill_obuf,
    .can_issue = h2_can_issue,
    .on_eof = NULL,
    .reset = h2_reset,
};
