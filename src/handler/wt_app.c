/* include/ferry/webtransport.h over h3/h3_wt.h. The public types are the codec's, renamed:
 * ferry_wt_session_t is fy_wt_session_t and ferry_wt_stream_t is fy_wt_stream_t. */
#include "handler/wt_app.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "h3/h3_wt.h"
#include "http/exchange.h"

typedef struct wt_app {
    fy_handler_t h;
    ferry_wt_ops_t ops;
    bool set;
} wt_app_t;

/* One session's state, in its exchange's arena. */
typedef struct app_sess {
    wt_app_t *a;
    void *sud;
} app_sess_t;

#define SS(s) ((ferry_wt_session_t *)(s))
#define ST(s) ((ferry_wt_stream_t *)(s))
#define FS(s) ((fy_wt_session_t *)(s))
#define FT(s) ((fy_wt_stream_t *)(s))

static void on_stream(void *ud, fy_wt_stream_t *st)
{
    app_sess_t *as = ud;
    if (as->a->ops.stream) as->a->ops.stream(SS(fy_wt_stream_session(st)), ST(st), as->sud);
}

static size_t on_data(void *ud, fy_wt_stream_t *st, const uint8_t *p, size_t n, bool fin)
{
    app_sess_t *as = ud;
    return as->a->ops.data ? as->a->ops.data(ST(st), p, n, fin, as->sud) : n;
}

static void on_writable(void *ud, fy_wt_stream_t *st)
{
    app_sess_t *as = ud;
    if (as->a->ops.writable) as->a->ops.writable(ST(st), as->sud);
}

static void on_reset(void *ud, fy_wt_stream_t *st, int64_t code)
{
    app_sess_t *as = ud;
    if (as->a->ops.reset) as->a->ops.reset(ST(st), code, as->sud);
}

static void on_gone(void *ud, fy_wt_stream_t *st)
{
    app_sess_t *as = ud;
    if (as->a->ops.stream_gone) as->a->ops.stream_gone(ST(st), as->sud);
}

static void on_datagram(void *ud, fy_wt_session_t *ss, const uint8_t *p, size_t n)
{
    app_sess_t *as = ud;
    if (as->a->ops.datagram) as->a->ops.datagram(SS(ss), p, n, as->sud);
}

static void on_close(void *ud, uint32_t code, const char *reason, size_t rlen)
{
    app_sess_t *as = ud;
    if (as->a->ops.close) as->a->ops.close(code, reason, rlen, as->sud);
}

static const fy_wt_ops_t app_ops = {
    .stream = on_stream,
    .data = on_data,
    .writable = on_writable,
    .reset = on_reset,
    .stream_gone = on_gone,
    .datagram = on_datagram,
    .close = on_close,
};

static void on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    wt_app_t *a = (wt_app_t *)h;
    if (!fy_str_eq(ex->req.protocol, "webtransport", 12)) {
        fy_exchange_fail(ex, 400, "this route serves WebTransport sessions only");
        return;
    }
    if (!a->set) {
        fy_exchange_fail(ex, 503, "no WebTransport application is registered");
        return;
    }
    app_sess_t *as = fy_arena_calloc(ex->arena, sizeof *as);
    as->a = a;
    char *path = fy_arena_strndup(ex->arena, ex->req.target.p, ex->req.target.len);
    fy_wt_session_t *ss = fy_wt_accept(ex, &app_ops, as);
    if (ss && a->ops.session) as->sud = a->ops.session(SS(ss), path, a->ops.ud);
}

static void destroy(fy_handler_t *h)
{
    free(h);
}

static const fy_handler_ops_t wt_app_ops = {"webtransport", on_request, destroy};

fy_handler_t *fy_wt_app_handler_new(const fy_wt_conf_t *conf)
{
    (void)conf;
    wt_app_t *a = fy_xcalloc(1, sizeof *a);
    a->h.ops = &wt_app_ops;
    return &a->h;
}

bool fy_wt_app_is(const fy_handler_t *h)
{
    return h && h->ops == &wt_app_ops;
}

void fy_wt_app_set(fy_handler_t *h, const ferry_wt_ops_t *ops)
{
    wt_app_t *a = (wt_app_t *)h;
    a->ops = *ops;
    a->set = true;
}

/* ---- include/ferry/webtransport.h ---- */

void ferry_wt_session_close(ferry_wt_session_t *s, uint32_t code, const char *reason, size_t rlen)
{
    fy_wt_session_close(FS(s), code, reason, reason ? rlen : 0);
}

int ferry_wt_send_datagram(ferry_wt_session_t *s, const void *p, size_t n)
{
    return fy_wt_send_datagram(FS(s), p, n);
}

ferry_wt_stream_t *ferry_wt_open_stream(ferry_wt_session_t *s, int uni)
{
    return ST(uni ? fy_wt_open_uni(FS(s)) : fy_wt_open_bidi(FS(s)));
}

int ferry_wt_stream_write(ferry_wt_stream_t *st, const void *p, size_t n)
{
    return fy_wt_stream_write(FT(st), p, n);
}

void ferry_wt_stream_finish(ferry_wt_stream_t *st)
{
    fy_wt_stream_finish(FT(st));
}

size_t ferry_wt_stream_buffered(const ferry_wt_stream_t *st)
{
    return fy_wt_stream_buffered((const fy_wt_stream_t *)st);
}

size_t ferry_wt_send_buffer(const ferry_wt_stream_t *st)
{
    return fy_wt_send_buffer((const fy_wt_stream_t *)st);
}

void ferry_wt_stream_resume(ferry_wt_stream_t *st)
{
    fy_wt_stream_resume(FT(st));
}

void ferry_wt_stream_reset(ferry_wt_stream_t *st, uint32_t code)
{
    fy_wt_stream_reset(FT(st), code);
}

int ferry_wt_stream_is_uni(const ferry_wt_stream_t *st)
{
    return fy_wt_stream_is_uni((const fy_wt_stream_t *)st);
}

ferry_wt_session_t *ferry_wt_stream_session(const ferry_wt_stream_t *st)
{
    return SS(fy_wt_stream_session((const fy_wt_stream_t *)st));
}

void ferry_wt_stream_set_ud(ferry_wt_stream_t *st, void *ud)
{
    fy_wt_stream_set_ud(FT(st), ud);
}

void *ferry_wt_stream_ud(const ferry_wt_stream_t *st)
{
    return fy_wt_stream_ud((const fy_wt_stream_t *)st);
}
