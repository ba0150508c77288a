/* The protocol stage (http/protocol.h). */
#include "http/protocol.h"

/* Classic CONNECT (RFC 9110 §9.3.6) belongs to a forward proxy, and only where the codec can
 * carry a tunnel: h1 hands the handler its connection (not possible inside an intercepted
 * tunnel, whose transport is TLS over the tunnel), h2 bridges a stream; h3 carries none. */
static bool connect_served(const fy_exchange_t *ex)
{
    if (!ex->ctx->forward_proxy) return false;
    switch (ex->req.version) {
    case 20:
        return true;
    case 30:
        return false;
    default:
        return !ex->tunnel;
    }
}

bool fy__http_protocol_stage(fy_exchange_t *ex)
{
    const fy_request_t *q = &ex->req;
    if (q->method_id == FY_M_CONNECT && q->protocol.len == 0) {
        if (connect_served(ex)) return false; /* the handler's; no body limit on a tunnel */
        fy_exchange_refuse(ex, 405, FY_HTTP_E_CONNECT);
        return true;
    }
    if (fy_request_is_asterisk(q)) {
        /* a question about the server, not about a resource: no route answers it */
        FY_HDR_ADD(ex->arena, &ex->res.headers, "allow", "GET, HEAD, POST, OPTIONS", 24);
        fy_exchange_respond(ex, 204, NULL, NULL, 0);
        return true;
    }
    const fy_http_limits_t *l = ex->ctx->limits;
    if (q->content_length > 0 && l && (uint64_t)q->content_length > l->max_body) {
        fy_exchange_refuse(ex, 413, "content-length over limits.body-size");
        return true;
    }
    return false;
}

void fy_http_body_too_large(fy_exchange_t *ex)
{
    fy_exchange_refuse(ex, 413, FY_HTTP_E_BODY_SIZE);
}
