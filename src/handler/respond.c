#include "handler/respond.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "http/exchange.h"

typedef struct respond_handler {
    fy_handler_t h;
    const fy_respond_conf_t *conf;
    fy_header_t *headers; /* prebuilt from the config (owned array, borrowed strings) */
    size_t nheaders;
} respond_handler_t;

static const fy_producer_ops_t no_producer = {NULL, NULL};

static void on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    respond_handler_t *r = (respond_handler_t *)h;
    ex->res.status = (int)r->conf->status;
    /* cap == n: anyone adding a header reallocates instead of writing into our array */
    ex->res.headers.v = r->headers;
    ex->res.headers.n = ex->res.headers.cap = r->nheaders;
    ex->res.content_length = (int64_t)r->conf->body_len;
    fy_exchange_start_response(ex, &no_producer);
    struct iovec iov = {(void *)r->conf->body, r->conf->body_len};
    fy_exchange_send(ex, &iov, r->conf->body_len ? 1 : 0, FY_SEND_FINAL);
}

static void destroy(fy_handler_t *h)
{
    respond_handler_t *r = (respond_handler_t *)h;
    free(r->headers);
    free(r);
}

static const fy_handler_ops_t respond_ops = {"respond", on_request, destroy};

fy_handler_t *fy_respond_handler_new(const fy_respond_conf_t *conf)
{
    respond_handler_t *r = fy_xcalloc(1, sizeof *r);
    r->h.ops = &respond_ops;
    r->conf = conf;
    r->nheaders = conf->headers.n;
    r->headers = fy_xcalloc(r->nheaders ? r->nheaders : 1, sizeof *r->headers);
    for (size_t i = 0; i < conf->headers.n; i++) {
        r->headers[i].name = fy_str(conf->headers.keys[i], strlen(conf->headers.keys[i]));
        r->headers[i].value = fy_str(conf->headers.values[i], strlen(conf->headers.values[i]));
    }
    return &r->h;
}
