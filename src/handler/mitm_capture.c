/* Intercepting proxy HAR body capture: a sink layer (http/filter.h) keeping what the client
 * saw, up to a cap; the HAR observer (ops/har.c) finds it with fy_exchange_find_layer.
 * Thread rules: per exchange, on its worker; buffers in the exchange arena. */
#include "handler/mitm_int.h"

#include <string.h>

#include "http/filter.h"

/* ---- body capture (HAR): a FY_STAGE_CAPTURE layer, nearest the codec, so it sees what the
 * client saw ---- */

typedef struct cap {
    fy_sink_layer_t l; /* first */
    fy_exchange_t *ex;
    size_t max;
    char *req, *res; /* arena */
    size_t req_len, res_len;
    bool cut;
    void (*saved_on_body)(fy_exchange_t *ex, const char *p, size_t n, bool end);
} cap_t;

static const fy_layer_ops_t cap_ops;

static void cap_keep(cap_t *c, char **buf, size_t *len, const char *p, size_t n)
{
    if (!*buf) *buf = fy_arena_alloc(c->ex->arena, c->max);
    size_t room = c->max - *len;
    if (n > room) c->cut = true;
    if (n == 0) return; /* a body's end may come with no bytes and no pointer */
    memcpy(*buf + *len, p, n < room ? n : room);
    *len += n < room ? n : room;
}

static void cap_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                     int state)
{
    cap_t *c = (cap_t *)l;
    for (size_t i = 0; i < n && state != FY_SEND_ERROR; i++)
        cap_keep(c, &c->res, &c->res_len, bufs[i].iov_base, bufs[i].iov_len);
    fy_layer_next_send(l, ex, bufs, n, state);
}

static void cap_on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    cap_t *c = (cap_t *)fy_exchange_find_layer(ex, &cap_ops);
    cap_keep(c, &c->req, &c->req_len, p, n);
    ex->on_body = c->saved_on_body;
    c->saved_on_body(ex, p, n, end);
}

static void cap_read_body(fy_sink_layer_t *l, fy_exchange_t *ex)
{
    cap_t *c = (cap_t *)l;
    if (ex->on_body != cap_on_body) {
        c->saved_on_body = ex->on_body;
        ex->on_body = cap_on_body;
    }
    fy_layer_next_read_body(l, ex);
}

/* send_file, send_informational and detach pass through (NULL) */
static const fy_layer_ops_t cap_ops = {
    .name = "mitm-capture", .send = cap_send, .read_body = cap_read_body};

void fy__mitm_capture_begin(fy__mitm_t *m, fy_exchange_t *ex)
{
    if (!m->conf->capture.har || !m->conf->capture.body_cap) return;
    cap_t *c = fy_arena_calloc(ex->arena, sizeof *c);
    c->ex = ex;
    c->max = m->conf->capture.body_cap;
    fy_exchange_push_layer(ex, &c->l, &cap_ops, FY_STAGE_CAPTURE);
}

bool fy_mitm_captured(const fy_exchange_t *ex, fy_str_t *req, fy_str_t *res, bool *cut)
{
    const cap_t *c = (const cap_t *)fy_exchange_find_layer(ex, &cap_ops);
    if (!c) return false;
    *req = fy_str(c->req ? c->req : "", c->req_len);
    *res = fy_str(c->res ? c->res : "", c->res_len);
    *cut = c->cut;
    return true;
}
