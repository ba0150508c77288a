/* The filter chain and the sink layers (http/filter.h). */
#include "http/filter.h"

#include <stdlib.h>
#include <string.h>

#include "http/router.h"

/* two names, each with its NUL (FY_FILTER_FIELD_*) */
const char fy_filter_field_names[FY_FILTER_FIELD_NAMES_LEN] = "traceparent\0tracestate";

int fy_filter_chain_add(fy_filter_chain_t *c, fy_filter_t *f)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        fy_filter_t **v = realloc(c->v, cap * sizeof *v);
        if (!v) return -1;
        c->v = v;
        c->cap = cap;
    }
    size_t i = c->n;
    while (i > 0 && c->v[i - 1]->ops->stage > f->ops->stage) {
        c->v[i] = c->v[i - 1];
        i--;
    }
    c->v[i] = f;
    c->n++;
    c->only = c->n == 1 ? c->v[0]->ops->on_request : NULL;
    f->refs++;
    return 0;
}

void fy_filter_chain_free(fy_filter_chain_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        fy_filter_t *f = c->v[i];
        if (--f->refs == 0 && f->ops->destroy) f->ops->destroy(f);
    }
    free(c->v);
    memset(c, 0, sizeof *c);
}

/* The whole chain from wherever it stands (a listener's chain, several filters, a resume). */
static __attribute__((noinline)) void run_from(fy_exchange_t *ex)
{
    const fy_filter_chain_t *lc = ex->ctx->filters;
    const fy_route_t *r = ex->route;
    size_t nl = lc ? lc->n : 0, nr = r ? r->filters.n : 0;
    while (ex->filter_pos < nl + nr) {
        unsigned i = ex->filter_pos++;
        fy_filter_t *f = i < nl ? lc->v[i] : r->filters.v[i - nl];
        fy_filter_verdict_t v = f->ops->on_request(f, ex);
        if (v != FY_FILTER_NEXT) return; /* DONE, or WAIT: it resumes or answers later */
    }
    if (!r) {
        fy_exchange_fail(ex, 404, "no route");
        return;
    }
    r->handler->ops->on_request(r->handler, ex);
}

void fy_filter_run(fy_exchange_t *ex)
{
    /* the usual chain (e.g. tracing): one filter on the route, none on the listener, from the
       start; the filter's call and then the handler's, with nothing to keep but ex */
    const fy_route_t *r = ex->route;
    if (__builtin_expect(!ex->ctx->filters && r && r->filters.only && ex->filter_pos == 0, 1)) {
        ex->filter_pos = 1;
        if (r->filters.only(r->filters.v[0], ex) != FY_FILTER_NEXT) return;
        r = ex->route; /* reloaded: one callee-saved register less */
        r->handler->ops->on_request(r->handler, ex);
        return;
    }
    run_from(ex);
}

/* ---- layers ---- */

void fy_exchange_push_layer(fy_exchange_t *ex, fy_sink_layer_t *l, const fy_layer_ops_t *ops,
                            int stage)
{
    l->ops = ops;
    l->stage = stage;
    fy_sink_layer_t **at = &ex->layers;
    while (*at && (*at)->stage > stage) at = &(*at)->below;
    l->below = *at;
    *at = l;
}

fy_sink_layer_t *fy_exchange_find_layer(const fy_exchange_t *ex, const fy_layer_ops_t *ops)
{
    for (fy_sink_layer_t *l = ex->layers; l; l = l->below)
        if (l->ops == ops) return l;
    return NULL;
}

/* The first layer at or below l with an op of that kind, or NULL (the codec). */
#define FIND(l, op)                                                                                \
    while ((l) && !(l)->ops->op) (l) = (l)->below

static void layer_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                       int state)
{
    FIND(l, send);
    if (l)
        l->ops->send(l, ex, bufs, n, state);
    else
        ex->sink->send(ex, bufs, n, state);
}

static void layer_send_file(fy_sink_layer_t *l, fy_exchange_t *ex, int fd, off_t off, size_t len,
                            int state)
{
    FIND(l, send_file);
    if (l)
        l->ops->send_file(l, ex, fd, off, len, state);
    else
        ex->sink->send_file(ex, fd, off, len, state);
}

static void layer_read_body(fy_sink_layer_t *l, fy_exchange_t *ex)
{
    FIND(l, read_body);
    if (l)
        l->ops->read_body(l, ex);
    else
        ex->sink->read_body(ex);
}

static void layer_send_informational(fy_sink_layer_t *l, fy_exchange_t *ex, int status,
                                     const fy_headers_t *hs)
{
    FIND(l, send_informational);
    if (l)
        l->ops->send_informational(l, ex, status, hs);
    else if (ex->sink->send_informational)
        ex->sink->send_informational(ex, status, hs);
}

static int layer_detach(fy_sink_layer_t *l, fy_exchange_t *ex, int *fd, char *buf, size_t cap,
                        size_t *len)
{
    FIND(l, detach);
    if (l) return l->ops->detach(l, ex, fd, buf, cap, len);
    return ex->sink->detach ? ex->sink->detach(ex, fd, buf, cap, len) : -1;
}

void fy__layers_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state)
{
    layer_send(ex->layers, ex, bufs, n, state);
}

void fy__layers_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state)
{
    layer_send_file(ex->layers, ex, fd, off, len, state);
}

void fy__layers_send_informational(fy_exchange_t *ex, int status, const fy_headers_t *headers)
{
    layer_send_informational(ex->layers, ex, status, headers);
}

void fy__layers_read_body(fy_exchange_t *ex)
{
    layer_read_body(ex->layers, ex);
}

int fy_exchange_detach(fy_exchange_t *ex, int *fd, char *buf, size_t cap, size_t *len)
{
    return layer_detach(ex->layers, ex, fd, buf, cap, len);
}

void fy_layer_next_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                        int state)
{
    layer_send(l->below, ex, bufs, n, state);
}

void fy_layer_next_send_file(fy_sink_layer_t *l, fy_exchange_t *ex, int fd, off_t off, size_t len,
                             int state)
{
    layer_send_file(l->below, ex, fd, off, len, state);
}

void fy_layer_next_read_body(fy_sink_layer_t *l, fy_exchange_t *ex)
{
    layer_read_body(l->below, ex);
}

void fy_layer_next_send_informational(fy_sink_layer_t *l, fy_exchange_t *ex, int status,
                                      const fy_headers_t *headers)
{
    layer_send_informational(l->below, ex, status, headers);
}

int fy_layer_next_detach(fy_sink_layer_t *l, fy_exchange_t *ex, int *fd, char *buf, size_t cap,
                         size_t *len)
{
    return layer_detach(l->below, ex, fd, buf, cap, len);
}
