/* Intercepting proxy HAR body capture: a sink filter keeping what the client saw, up to a cap.
 * Thread rules: per exchange, on its worker; buffers in the exchange arena. */
#include "handler/mitm_int.h"

#include <string.h>

/* ---- body capture (HAR): the innermost filter, so it sees what the client saw ---- */

typedef struct cap {
    fy_sink_ops_t ops; /* first, then the sink below: the layout every mitm filter shares */
    const fy_sink_ops_t *inner;
    fy_exchange_t *ex;
    size_t max;
    char *req, *res; /* arena */
    size_t req_len, res_len;
    bool cut;
    void (*saved_on_body)(fy_exchange_t *ex, const char *p, size_t n, bool end);
} cap_t;

static const char cap_name[] = "mitm-capture";

static void cap_keep(cap_t *c, char **buf, size_t *len, const char *p, size_t n)
{
    if (!*buf) *buf = fy_arena_alloc(c->ex->arena, c->max);
    size_t room = c->max - *len;
    if (n > room) c->cut = true;
    if (n == 0) return; /* a body's end may come with no bytes and no pointer */
    memcpy(*buf + *len, p, n < room ? n : room);
    *len += n < room ? n : room;
}

static void cap_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state)
{
    cap_t *c = (cap_t *)ex->sink;
    for (size_t i = 0; i < n && state != FY_SEND_ERROR; i++)
        cap_keep(c, &c->res, &c->res_len, bufs[i].iov_base, bufs[i].iov_len);
    c->inner->send(ex, bufs, n, state);
}

static void cap_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state)
{
    cap_t *c = (cap_t *)ex->sink;
    c->inner->send_file(ex, fd, off, len, state);
}

static void cap_send_informational(fy_exchange_t *ex, int status, const fy_headers_t *hs)
{
    cap_t *c = (cap_t *)ex->sink;
    if (c->inner->send_informational) c->inner->send_informational(ex, status, hs);
}

static void cap_on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    cap_t *c = (cap_t *)ex->sink;
    cap_keep(c, &c->req, &c->req_len, p, n);
    ex->on_body = c->saved_on_body;
    c->saved_on_body(ex, p, n, end);
}

static void cap_read_body(fy_exchange_t *ex)
{
    cap_t *c = (cap_t *)ex->sink;
    if (ex->on_body != cap_on_body) {
        c->saved_on_body = ex->on_body;
        ex->on_body = cap_on_body;
    }
    c->inner->read_body(ex);
}

static int cap_detach(fy_exchange_t *ex, int *fd, char *buf, size_t capn, size_t *len)
{
    cap_t *c = (cap_t *)ex->sink;
    return c->inner->detach ? c->inner->detach(ex, fd, buf, capn, len) : -1;
}

void fy__mitm_capture_begin(fy__mitm_t *m, fy_exchange_t *ex)
{
    if (!m->conf->capture.har || !m->conf->capture.body_cap) return;
    cap_t *c = fy_arena_calloc(ex->arena, sizeof *c);
    c->ops = (fy_sink_ops_t){.name = cap_name,
                             .send = cap_send,
                             .send_file = cap_send_file,
                             .read_body = cap_read_body,
                             .send_informational = cap_send_informational,
                             .detach = cap_detach};
    c->inner = ex->sink;
    c->ex = ex;
    c->max = m->conf->capture.body_cap;
    ex->sink = &c->ops;
}

bool fy_mitm_captured(const fy_exchange_t *ex, fy_str_t *req, fy_str_t *res, bool *cut)
{
    /* every mitm filter starts with its ops and then the sink below it */
    typedef struct {
        fy_sink_ops_t ops;
        const fy_sink_ops_t *inner;
    } layer_t;
    const fy_sink_ops_t *s = ex->sink;
    while (s && s->name && strncmp(s->name, "mitm-", 5) == 0) {
        if (s->name == cap_name) {
            const cap_t *c = (const cap_t *)s;
            *req = fy_str(c->req ? c->req : "", c->req_len);
            *res = fy_str(c->res ? c->res : "", c->res_len);
            *cut = c->cut;
            return true;
        }
        s = ((const layer_t *)s)->inner;
    }
    return false;
}
