/* The WebTransport echo handler. */
#include "handler/wt_echo.h"

#include <stdlib.h>

#include "core/alloc.h"
#include "core/log.h"
#include "h3/h3_wt.h"
#include "http/exchange.h"

/* A peer stream's bytes go out on `out`: itself (bidi) or the uni stream we opened for it. */
static fy_wt_stream_t *out_of(fy_wt_stream_t *st)
{
    return fy_wt_stream_is_uni(st) ? fy_wt_stream_ud(st) : st;
}

static void on_stream(void *ud, fy_wt_stream_t *st)
{
    (void)ud;
    if (!fy_wt_stream_is_uni(st)) return;
    fy_wt_session_t *ss = fy_wt_stream_session(st);
    fy_wt_stream_t *out = fy_wt_open_uni(ss);
    if (!out) { /* no stream credit left for our answer */
        fy_wt_stream_reset(st, 0);
        return;
    }
    fy_wt_stream_set_ud(st, out);
    fy_wt_stream_set_ud(out, st);
}

static size_t on_data(void *ud, fy_wt_stream_t *st, const uint8_t *p, size_t n, bool fin)
{
    (void)ud;
    fy_wt_stream_t *out = out_of(st);
    if (!out) return n; /* the answer stream is gone: drop */
    size_t cap = fy_wt_send_buffer(out), q = fy_wt_stream_buffered(out);
    size_t room = q < cap ? cap - q : 0;
    size_t take = n < room ? n : room;
    if (take && fy_wt_stream_write(out, p, take) < 0) return n;
    if (take == n && fin) fy_wt_stream_finish(out);
    return take;
}

static void on_writable(void *ud, fy_wt_stream_t *st)
{
    (void)ud;
    /* st is the stream we write on: its source is itself (bidi) or the paired peer uni */
    fy_wt_stream_t *src = fy_wt_stream_is_uni(st) ? fy_wt_stream_ud(st) : st;
    if (src) fy_wt_stream_resume(src);
}

/* A peer's RESET_STREAM is echoed with its code: the echo of the stream ends the same way. */
static void on_reset(void *ud, fy_wt_stream_t *st, int64_t code)
{
    (void)ud;
    fy_info("webtransport echo: a stream was reset by the peer (RESET_STREAM), code %lld",
            (long long)code);
    fy_wt_stream_t *out = out_of(st);
    if (out) fy_wt_stream_reset(out, code < 0 ? 0 : (uint32_t)code);
}

/* The peer's STOP_SENDING: its echo can go nowhere, the stream ends whole. */
static void on_stop(void *ud, fy_wt_stream_t *st, int64_t code)
{
    (void)ud;
    (void)code;
    fy_info("webtransport echo: the peer asked to stop sending (STOP_SENDING)");
    fy_wt_stream_reset(st, 0);
}

static void on_drain(void *ud, fy_wt_session_t *ss)
{
    (void)ud;
    (void)ss;
    fy_info("webtransport echo: the client drains the session (DRAIN_WEBTRANSPORT_SESSION)");
}

static void on_gone(void *ud, fy_wt_stream_t *st)
{
    (void)ud;
    if (!fy_wt_stream_is_uni(st)) return;
    fy_wt_stream_t *peer = fy_wt_stream_ud(st);
    if (peer) fy_wt_stream_set_ud(peer, NULL);
}

static void on_datagram(void *ud, fy_wt_session_t *ss, const uint8_t *p, size_t n)
{
    (void)ud;
    fy_wt_send_datagram(ss, p, n); /* a full queue drops it: datagrams may be lost */
}

static void on_close(void *ud, uint32_t code, const char *reason, size_t rlen)
{
    (void)ud;
    fy_info("webtransport echo: session closed by the client: code %u, reason \"%.*s\"",
            (unsigned)code, (int)(rlen > 200 ? 200 : rlen), reason);
}

static const fy_wt_ops_t echo_ops = {
    .stream = on_stream,
    .data = on_data,
    .writable = on_writable,
    .reset = on_reset,
    .stop = on_stop,
    .drain = on_drain,
    .stream_gone = on_gone,
    .datagram = on_datagram,
    .close = on_close,
};

static void on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    (void)h;
    if (!fy_str_eq(ex->req.protocol, "webtransport", 12)) {
        fy_exchange_fail(ex, 400, "this route serves WebTransport sessions only");
        return;
    }
    fy_wt_accept(ex, &echo_ops, NULL);
}

static void destroy(fy_handler_t *h)
{
    free(h);
}

static const fy_handler_ops_t wt_ops = {"webtransport", on_request, destroy};

fy_handler_t *fy_wt_handler_new(const fy_wt_conf_t *conf)
{
    (void)conf;
    fy_handler_t *h = fy_xcalloc(1, sizeof *h);
    h->ops = &wt_ops;
    return h;
}
