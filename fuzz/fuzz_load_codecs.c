/* libFuzzer entry for ferry-load's parsers of server bytes (tools/load): the HTTP/1.1
 * response parser (h1.c: Content-Length, chunked, close-delimited, 1xx, pipelined responses)
 * and the WebSocket echo codec (echo.c: the 101 Upgrade answer, then server frames), and the
 * TCP echo checker. The codecs are compiled into this file with stubs for the worker's
 * accounting, so no socket is involved.
 *
 * data[0] picks the codec (and HEAD for h1), data[1] the split point of the input into two
 * reads (the codec must keep an incomplete tail), data[2] the echo message size; the rest is
 * what the server sent. The stubs trap if the in-flight count ever goes negative or a codec
 * finishes more requests than were issued. Prints nothing. */
#include "../tools/load/echo.c"
#include "../tools/load/h1.c"

#include <stdint.h>

fl_config_t fl_cfg;

static uint64_t finished;

void fl_finish(fl_conn_t *c, uint64_t t_start, int status, uint64_t body, int err)
{
    (void)t_start, (void)status, (void)body, (void)err;
    if (c->inflight == 0) abort();
    c->inflight--;
    finished++;
}

void fl_count_error(fl_conn_t *c, int err, uint64_t n)
{
    (void)c, (void)n;
    if (err < 0 || err >= FL_ERR_MAX) abort();
}

void fl_conn_want_flush(fl_conn_t *c)
{
    (void)c;
}

void fl_unissue(fl_conn_t *c)
{
    if (c->inflight == 0) abort();
    c->inflight--;
}

static uint8_t ibuf[FL_IBUF_SIZE], obuf[FL_OBUF_SIZE];

/* Feeds data as the socket would (appending, then letting the codec consume, then
 * compacting); returns -1 once the codec gives up on the connection. */
static int feed(fl_conn_t *c, const uint8_t *p, size_t n)
{
    while (n) {
        if (c->ipos == c->ilen) c->ipos = c->ilen = 0;
        if (c->ilen == FL_IBUF_SIZE) {
            if (c->ipos == 0) return -1;
            memmove(c->ibuf, c->ibuf + c->ipos, c->ilen - c->ipos);
            c->ilen -= c->ipos;
            c->ipos = 0;
        }
        size_t take = FL_IBUF_SIZE - c->ilen < n ? FL_IBUF_SIZE - c->ilen : n;
        memcpy(c->ibuf + c->ilen, p, take);
        c->ilen += take;
        p += take;
        n -= take;
        if (c->ops->on_data(c) < 0) return -1;
        if (c->ipos > c->ilen) abort();
        /* the closed loop issues again as responses complete */
        while (c->ops->can_issue(c)) {
            c->inflight++;
            if (c->ops->issue(c, 0) < 0) abort();
            c->oend = c->ostart = 0;
            c->ops->fill_obuf(c);
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool init;
    static char path[] = "/x";
    if (size < 3) return 0;
    int mode = data[0] % 4; /* 0 h1 GET, 1 h1 HEAD, 2 ws, 3 tcp echo */
    if (!init) {
        fl_cfg.urls[0].path = path;
        fl_cfg.nurls = 1;
        fl_cfg.pipeline = 4;
        fl_cfg.streams = 4;
        fl_cfg.expect_bytes = -1;
        fl_cfg.method = "GET";
        snprintf(fl_cfg.authority, sizeof(fl_cfg.authority), "h:1");
        fl_cfg.echo_size = 300;
        if (fl_h1_build_templates() < 0 || fl_echo_init() < 0) abort();
        init = true;
    }
    fl_cfg.head = mode == 1;
    fl_cfg.proto = mode < 2 ? FL_H1 : mode == 2 ? FL_WS_ECHO : FL_TCP_ECHO;
    /* message sizes from 1 to 300 (the pattern was built for the largest) */
    fl_cfg.echo_size = 1 + data[2] % 300;

    fl_worker_t w = {0};
    fl_conn_t c = {0};
    c.w = &w;
    c.ibuf = ibuf;
    c.obuf = obuf;
    c.ops = mode < 2 ? &fl_h1_ops : mode == 2 ? &fl_ws_echo_ops : &fl_tcp_echo_ops;
    c.state = FL_CONN_READY;
    if (c.ops->on_ready(&c) < 0) abort();
    c.ops->fill_obuf(&c); /* ws: the Upgrade request */
    c.oend = 0;
    while (c.ops->can_issue(&c)) {
        c.inflight++;
        if (c.ops->issue(&c, 0) < 0) abort();
    }
    c.ops->fill_obuf(&c);
    c.oend = 0;

    const uint8_t *p = data + 3;
    size_t n = size - 3;
    size_t split = n ? data[1] % (n + 1) : 0;
    if (feed(&c, p, split) == 0 && feed(&c, p + split, n - split) == 0 && c.ops->on_eof)
        c.ops->on_eof(&c);
    c.ops->reset(&c);
    return 0;
}
