/* FY_STAGE_PROTOCOL (http/filter.h): what every server refuses or answers itself, whatever the
 * route and whatever the codec (h1, h2, h3), decided once here instead of three times in the
 * codecs. Run by fy_exchange_dispatch before the route is matched; also the one answer to a
 * request body that grows past limits.body-size while a codec reads it. Threads: the exchange's
 * worker only; no state of its own. */
#ifndef FY_HTTP_PROTOCOL_H
#define FY_HTTP_PROTOCOL_H

#include <stdbool.h>

#include "http/exchange.h"

/* The reasons in the access log / info log (tests and operators grep them). */
#define FY_HTTP_E_CONNECT "CONNECT is not served on this listener"
#define FY_HTTP_E_BODY_SIZE "request body over limits.body-size"

/* asterisk-form (RFC 9112 §3.2.4): `OPTIONS *`; codecs let it through their origin-form check
 * and the protocol stage answers it. */
static inline bool fy_request_is_asterisk(const fy_request_t *q)
{
    return q->method_id == FY_M_OPTIONS && q->target.len == 1 && q->target.p[0] == '*';
}

/* Could the protocol stage have something to say about ex? (the cheap test on the hot path) */
static inline bool fy__http_protocol_suspect(const fy_exchange_t *ex)
{
    const fy_request_t *q = &ex->req;
    const fy_http_limits_t *l = ex->ctx->limits;
    return q->method_id == FY_M_CONNECT || q->path.len == 0 || q->path.p[0] != '/' ||
           (q->content_length > 0 && l && (uint64_t)q->content_length > l->max_body);
}

/* The stage itself, in this order: a classic CONNECT is refused with 405 except on a
 * forward-proxy listener (where the handler takes it); `OPTIONS *` is answered 204 with Allow;
 * a Content-Length over limits.body-size is refused with 413. Returns true when it answered
 * the exchange (the route is not matched then). */
bool fy__http_protocol_stage(fy_exchange_t *ex);

/* A request body grew past limits.body-size while the codec read it and no response head has
   left: 413, through fy_exchange_refuse. */
void fy_http_body_too_large(fy_exchange_t *ex);

#endif
