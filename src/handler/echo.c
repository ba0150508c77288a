#include "handler/echo.h"

#include <stdlib.h>

#include "core/alloc.h"
#include "http/exchange.h"

typedef struct echo_state {
    bool end; /* the last body slice was sent */
    bool stopped;
} echo_state_t;

static void on_body(fy_exchange_t *ex, const char *p, size_t n, bool end);

static void proceed(fy_exchange_t *ex)
{
    /* the previous slice is on the wire: its buffer may be reused, ask for more */
    echo_state_t *st = ex->handler_data;
    if (!st->end) fy_exchange_read_body(ex, on_body);
}

static void stop(fy_exchange_t *ex)
{
    echo_state_t *st = ex->handler_data;
    st->stopped = true;
}

static const fy_producer_ops_t echo_producer = {proceed, stop};

static void on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    echo_state_t *st = ex->handler_data;
    if (st->stopped) return;
    st->end = end;
    if (end) {
        /* the client's trailers come back as ours */
        for (size_t i = 0; i < ex->req_trailers.n; i++)
            fy_headers_add(ex->arena, &ex->res_trailers, ex->req_trailers.v[i].name.p,
                           ex->req_trailers.v[i].name.len, ex->req_trailers.v[i].value.p,
                           ex->req_trailers.v[i].value.len);
    }
    struct iovec iov = {(void *)p, n};
    fy_exchange_send(ex, &iov, n ? 1 : 0, end ? FY_SEND_FINAL : FY_SEND_MORE);
}

static void on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    echo_state_t *st = fy_arena_calloc(ex->arena, sizeof *st);
    ex->handler_data = st;
    ex->res.status = 200;
    ex->res.content_length = ex->req.content_length; /* -1 (chunked in) -> chunked out */
    const fy_header_t *ct = FY_HDR_FIND(&ex->req.headers, "content-type");
    if (ct)
        FY_HDR_ADD(ex->arena, &ex->res.headers, "content-type", ct->value.p, ct->value.len);
    else
        FY_HDR_ADD(ex->arena, &ex->res.headers, "content-type", "application/octet-stream", 24);
    fy_exchange_start_response(ex, &echo_producer);
    if (ex->req.protocol.len) {
        /* a tunnel (extended CONNECT): the 2xx opens it before any byte flows */
        fy_exchange_send(ex, NULL, 0, FY_SEND_MORE);
    }
    fy_exchange_read_body(ex, on_body);
}

static void destroy(fy_handler_t *h)
{
    free(h);
}

static const fy_handler_ops_t echo_ops = {"echo", on_request, destroy};

fy_handler_t *fy_echo_handler_new(void)
{
    fy_handler_t *h = fy_xcalloc(1, sizeof *h);
    h->ops = &echo_ops;
    return h;
}
