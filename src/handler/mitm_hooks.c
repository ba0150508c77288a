/* C hooks on intercepted flows. */
#include "handler/mitm_hooks.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/filter.h"

struct ferry_flow {
    fy_exchange_t *ex;
    bool response_side; /* on_response ran: the response head may be read and edited */
    bool *responded;    /* on_request only: set by ferry_flow_respond */
    char *method, *host, *path;
};

typedef struct hk {
    fy_sink_layer_t l; /* first */
    const ferry_hooks_t *h;
    ferry_flow_t flow;
    bool head_done;
    void (*saved_on_body)(fy_exchange_t *ex, const char *p, size_t n, bool end);
    char *joined; /* several iovecs joined for one chunk (owned) */
    size_t jcap;
    struct iovec iov;
    fy_defer_t defer;
} hk_t;

/* ---- flow accessors ---- */

static char *dup_str(fy_exchange_t *ex, fy_str_t s)
{
    char *p = fy_arena_alloc(ex->arena, s.len + 1);
    memcpy(p, s.p, s.len);
    p[s.len] = '\0';
    return p;
}

const char *ferry_flow_method(ferry_flow_t *f)
{
    if (!f->method) f->method = dup_str(f->ex, f->ex->req.method);
    return f->method;
}

const char *ferry_flow_host(ferry_flow_t *f)
{
    if (!f->host) f->host = dup_str(f->ex, f->ex->req.authority);
    return f->host;
}

const char *ferry_flow_path(ferry_flow_t *f)
{
    if (!f->path) f->path = dup_str(f->ex, f->ex->req.target);
    return f->path;
}

const char *ferry_flow_scheme(ferry_flow_t *f)
{
    return fy_str_eq(f->ex->req.scheme, "https", 5) ? "https" : "http";
}

int ferry_flow_intercepted(ferry_flow_t *f)
{
    return f->ex->tunnel != NULL;
}

static fy_headers_t *side_headers(ferry_flow_t *f, int side)
{
    if (side == FERRY_REQUEST) return &f->ex->req.headers;
    return f->response_side ? &f->ex->res.headers : NULL;
}

const char *ferry_flow_header(ferry_flow_t *f, int side, const char *name)
{
    fy_headers_t *hs = side_headers(f, side);
    if (!hs) return NULL;
    size_t nl = strlen(name);
    for (size_t i = 0; i < hs->n; i++)
        if (fy_str_ieq(hs->v[i].name, name, nl)) return dup_str(f->ex, hs->v[i].value);
    return NULL;
}

int ferry_flow_remove_header(ferry_flow_t *f, int side, const char *name)
{
    fy_headers_t *hs = side_headers(f, side);
    if (!hs) return -EINVAL;
    fy_headers_t out = {0};
    size_t nl = strlen(name);
    for (size_t i = 0; i < hs->n; i++)
        if (!fy_str_ieq(hs->v[i].name, name, nl))
            fy_headers_add(f->ex->arena, &out, hs->v[i].name.p, hs->v[i].name.len, hs->v[i].value.p,
                           hs->v[i].value.len);
    *hs = out; /* a fresh arena copy: the codec's own array is never written */
    return 0;
}

int ferry_flow_add_header(ferry_flow_t *f, int side, const char *name, const char *value)
{
    fy_headers_t *hs = side_headers(f, side);
    if (!hs || !name[0]) return -EINVAL;
    /* copy first: request fields may live in the codec's fixed-size array */
    if (ferry_flow_remove_header(f, side, "") < 0) return -EINVAL;
    fy_arena_t *a = f->ex->arena;
    size_t nl = strlen(name), vl = strlen(value);
    fy_headers_add(a, hs, fy_arena_strndup(a, name, nl), nl, fy_arena_strndup(a, value, vl), vl);
    return 0;
}

int ferry_flow_set_header(ferry_flow_t *f, int side, const char *name, const char *value)
{
    int r = ferry_flow_remove_header(f, side, name);
    return r < 0 ? r : ferry_flow_add_header(f, side, name, value);
}

void *ferry_flow_alloc(ferry_flow_t *f, size_t n)
{
    return fy_arena_alloc(f->ex->arena, n ? n : 1);
}

int ferry_flow_status(ferry_flow_t *f)
{
    return f->response_side ? f->ex->res.status : 0;
}

int ferry_flow_set_status(ferry_flow_t *f, int status)
{
    if (!f->response_side || status < 100 || status > 999) return -EINVAL;
    f->ex->res.status = status;
    return 0;
}

int ferry_flow_respond(ferry_flow_t *f, int status, const char *content_type, const char *body,
                       size_t len)
{
    if (!f->responded || *f->responded || status < 100 || status > 999) return -EINVAL;
    *f->responded = true;
    f->ex->error = "answered by a hook";
    fy_exchange_respond(f->ex, status, content_type, body, len);
    return 0;
}

/* ---- the filter ---- */

static void hk_proceed(fy_defer_t *d)
{
    hk_t *k = d->data;
    if (k->flow.ex->producer && k->flow.ex->producer->proceed)
        k->flow.ex->producer->proceed(k->flow.ex);
}

static void hk_cleanup(void *arg)
{
    hk_t *k = arg;
    fy_defer_cancel(k->flow.ex->ctx->loop, &k->defer);
    free(k->joined);
    k->joined = NULL;
}

static const fy_layer_ops_t hk_ops;

static void hk_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                    int state)
{
    hk_t *k = (hk_t *)l;
    if (!k->head_done) {
        k->head_done = true;
        k->flow.response_side = true;
        if (k->h->on_response && state != FY_SEND_ERROR) k->h->on_response(&k->flow, k->h->ud);
        if (k->h->on_response_body && ex->res.content_length != 0) ex->res.content_length = -1;
    }
    if (!k->h->on_response_body || state == FY_SEND_ERROR) {
        fy_layer_next_send(l, ex, bufs, n, state);
        return;
    }
    /* copied: the producer's bytes may be read-only (static error pages), and the hook may
       edit in place */
    ferry_chunk_t c = {NULL, 0, state == FY_SEND_FINAL};
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += bufs[i].iov_len;
    if (total > k->jcap || !k->joined) {
        k->joined = realloc(k->joined, total ? total : 1);
        if (!k->joined) abort();
        k->jcap = total;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(k->joined + c.len, bufs[i].iov_base, bufs[i].iov_len);
        c.len += bufs[i].iov_len;
    }
    c.data = k->joined;
    k->h->on_response_body(&k->flow, &c, k->h->ud);
    if (c.len == 0 && state == FY_SEND_MORE) {
        fy_defer(ex->ctx->loop, &k->defer); /* dropped: ask for the next piece */
        return;
    }
    k->iov.iov_base = (void *)c.data;
    k->iov.iov_len = c.len;
    fy_layer_next_send(l, ex, &k->iov, c.len ? 1 : 0, state);
}

static void hk_on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    hk_t *k = (hk_t *)fy_exchange_find_layer(ex, &hk_ops);
    /* the codec's slice is only read by the next handler: the hook may edit it in place */
    ferry_chunk_t c = {(char *)p, n, end};
    k->h->on_request_body(&k->flow, &c, k->h->ud);
    ex->on_body = k->saved_on_body;
    k->saved_on_body(ex, c.data, c.len, end);
}

static void hk_read_body(fy_sink_layer_t *l, fy_exchange_t *ex)
{
    hk_t *k = (hk_t *)l;
    if (k->h->on_request_body && ex->on_body != hk_on_body) {
        k->saved_on_body = ex->on_body;
        ex->on_body = hk_on_body;
    }
    fy_layer_next_read_body(l, ex);
}

/* a FY_STAGE_REWRITE layer; send_file, send_informational and detach pass through (NULL) */
static const fy_layer_ops_t hk_ops = {
    .name = "mitm-hooks", .send = hk_send, .read_body = hk_read_body};

bool fy__mitm_hooks_begin(const ferry_hooks_t *h, fy_exchange_t *ex)
{
    if (h->on_request) {
        bool responded = false;
        ferry_flow_t f = {.ex = ex, .responded = &responded};
        h->on_request(&f, h->ud);
        if (responded) return true;
    }
    if (!h->on_response && !h->on_response_body && !h->on_request_body) return false;
    hk_t *k = fy_arena_calloc(ex->arena, sizeof *k);
    k->h = h;
    k->flow.ex = ex;
    k->defer.cb = hk_proceed;
    k->defer.data = k;
    if (h->on_request_body && ex->req.content_length > 0) ex->req.content_length = -1;
    fy_exchange_push_layer(ex, &k->l, &hk_ops, FY_STAGE_REWRITE);
    fy_arena_on_reset(ex->arena, hk_cleanup, k);
    return false;
}
