/* The origin's response to the client: its head (interim responses, header rules, tunnels
 * opened by 101/2xx), its body lent by the origin stream and sent on with backpressure
 * (proceed), the early-response trail of the request body, and the finish that gives the
 * origin connection back. Worker's thread only (see proxy_int.h). */
#include "handler/proxy_int.h"

#include <string.h>

#include "core/alloc.h"

/* ---- response: origin -> client ---- */

static void proceed(fy_exchange_t *ex);
static void stop(fy_exchange_t *ex);
static const fy_producer_ops_t proxy_producer = {proceed, stop};

static void stop(fy_exchange_t *ex)
{
    proxy_req_t *pr = ex->handler_data;
    pr->stopped = true;
    fy_timer_stop(pr->loop, &pr->timer);
    fy__proxy_drop_origin(pr, false); /* the client went away mid-response */
}

/* ---- the origin stream, whatever the codec: response to the client ---- */

/* The response is complete: give the origin connection back (or close it) first, then the
 * last send (which may end the exchange at once). */
static void finish(proxy_req_t *pr, const struct iovec *iov, int n)
{
    pr->finished = true;
    fy_timer_stop(pr->loop, &pr->timer);
    bool reusable = fy_origin_stream_finish(pr->os);
    fy__proxy_drop_origin(pr, reusable);
    fy_exchange_send(pr->ex, iov, (size_t)n, FY_SEND_FINAL);
}

/* Is this complete response one to finish after the rest of the request body (above)? */
static bool trail_body(proxy_req_t *pr)
{
    const fy_exchange_t *ex = pr->ex;
    if (pr->tunnel || !fy_origin_stream_sending(pr->os)) return false;
    if (ex->req.content_length <= 0 || ex->body_received > (uint64_t)ex->req.content_length)
        return false;
    /* HTTP/1.1 clients only, and only a response complete by its Content-Length: a chunked
       one, or END_STREAM on h2/h3, would come only after the upload, and clients wait for
       that end before they send more (curl 7.88 stalls an h2 upload after the response) */
    if (ex->req.version >= 20 || (ex->res.content_length < 0 && ex->req.method_id != FY_M_HEAD))
        return false;
    return (uint64_t)ex->req.content_length - ex->body_received <= FY_PROXY_TRAIL_MAX;
}

void fy__proxy_deliver(proxy_req_t *pr)
{
    if (pr->res_sending || pr->finished || pr->stopped || !pr->o_head || pr->in_codec ||
        fy_origin_stream_busy(pr->os))
        return;
    if (pr->ws_closing) { /* WebSocket going away: our Close first, then nothing of the origin */
        if (!pr->ws_down_sent && fy__proxy_ws_at_boundary(&pr->ws_down)) {
            fy__proxy_ws_close_down(pr);
            return;
        }
        if (pr->ws_down_sent) {
            fy__proxy_ws_drop_down(pr);
            if (pr->o_end && !pr->finished && !pr->stopped) finish(pr, NULL, 0);
            return;
        }
    }
    if (pr->trail) {
        /* the response is out; finish once the body's end reached the origin */
        if (!pr->trail_abort && fy_origin_stream_sending(pr->os)) return;
        finish(pr, NULL, 0);
        return;
    }
    struct iovec iov[1];
    int n = 0;
    size_t len = pr->zn;
    if (pr->zn) iov[n++] = (struct iovec){(void *)pr->zp, pr->zn};
    if (pr->o_end && trail_body(pr)) {
        pr->trail = true;
        if (!len) return;
    } else if (pr->o_end) {
        /* the lent bytes stay until the exchange is done */
        finish(pr, iov, n);
        return;
    }
    if (!len) return;
    pr->res_sending = true;
    pr->sending_len = len;
    if (pr->ws)
        for (int i = 0; i < n; i++)
            fy__proxy_ws_feed(&pr->ws_down, iov[i].iov_base, iov[i].iov_len);
    fy_exchange_send(pr->ex, iov, (size_t)n, FY_SEND_MORE);
}

static void proceed(fy_exchange_t *ex)
{
    proxy_req_t *pr = ex->handler_data;
    if (!pr->res_sending) return;
    pr->res_sending = false;
    size_t n = pr->sending_len;
    pr->sending_len = 0;
    if (n && fy_origin_stream_is_open(pr->os)) {
        pr->zn = 0;
        pr->in_codec++;
        fy_origin_stream_consume(pr->os, n); /* the origin may send as much again */
        pr->in_codec--;
    }
    if (!pr->o_end && !pr->finished) fy__proxy_set_timer(pr, T_IDLE);
    fy__proxy_deliver(pr);
}

/* More of the client's body (or tunnel bytes) may go to the origin. */
void fy__proxy_resume_body(proxy_req_t *pr)
{
    if (!fy_origin_stream_is_open(pr->os)) return;
    pr->in_codec++;
    fy_origin_stream_resume(pr->os);
    pr->in_codec--;
    fy__proxy_deliver(pr);
}

void fy__proxy_o_on_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    proxy_req_t *pr = ud;
    fy_exchange_t *ex = pr->ex;
    const fy_proxy_conf_t *pc = pr->ph->conf;
    bool upgrade = fy_origin_stream_framing(pr->os).upgrade; /* 101 opens tunnels */
    if (status < 200 && !(status == 101 && upgrade)) {
        /* a bound on them, or an origin trickling 1xx holds the exchange forever */
        int64_t max = ex->ctx->limits->max_informational;
        if (++pr->interim > max) {
            pr->no_retry = true;
            fy__proxy_origin_failed(pr, 502,
                                    "origin sent more interim (1xx) responses than "
                                    "limits.informational-responses allows",
                                    false);
            return;
        }
        /* 100 is ours to give (the client codec answers Expect); 103 Early Hints and others
           go on, without hop-by-hop fields (an HTTP/1.1 origin may send some) */
        if (status == 100) return;
        size_t k = 0;
        for (size_t i = 0; i < hs->n; i++) {
            int fc = fy__proxy_field_class(hs->v[i].name);
            if (fc != F_HOP && fc != F_TE) hs->v[k++] = hs->v[i];
        }
        hs->n = k;
        fy_exchange_send_informational(ex, status, hs);
        return;
    }
    fy__proxy_set_timer(pr, T_IDLE);
    int64_t cl = -1;
    fy_headers_t *rh = &ex->res.headers;
    size_t need = rh->n + hs->n + pc->response_set_headers.n + 3;
    if (rh->cap < need) { /* sized once */
        fy_header_t *v = fy_arena_alloc(ex->arena, need * sizeof *v);
        if (rh->n) memcpy(v, rh->v, rh->n * sizeof *v);
        rh->v = v;
        rh->cap = need;
    }
    for (size_t i = 0; i < hs->n; i++) {
        fy_str_t n = hs->v[i].name, v = hs->v[i].value;
        switch (fy__proxy_field_class(n)) {
        case F_CL:
            cl = 0;
            for (size_t j = 0; j < v.len && v.p[j] >= '0' && v.p[j] <= '9'; j++)
                cl = cl * 10 + (v.p[j] - '0');
            continue;
        case F_HOP:
        case F_TE:
        case F_DATE:
            continue;
        case F_WSACC:
            /* the origin's handshake proof goes on only between two HTTP/1.1 ends (h2
               clients get none, h1 clients of an h2/h3 origin get ours) */
            if (pr->tunnel && (ex->req.version >= 20 || !upgrade)) continue;
            break;
        default:
            break;
        }
        if ((pc->response_remove_headers.n && fy__proxy_in_list(&pc->response_remove_headers, n)) ||
            (pc->response_set_headers.n && fy__proxy_in_map(&pc->response_set_headers, n)))
            continue;
        rh->v[rh->n++] = (fy_header_t){n, v};
    }
    fy__proxy_add_response_extras(pr);
    pr->o_head = true;
    ex->res.status = status;
    if (pr->tunnel && (upgrade ? status == 101 : status >= 200 && status < 300)) {
        /* the tunnel is open: h1 clients get 101 (with our Sec-WebSocket-Accept), h2 200 */
        pr->tunnel_open = true;
        if (ex->req.protocol.len == 9 && fy_str_ieq(ex->req.protocol, "websocket", 9)) {
            if (!fy__proxy_open_ws_init) {
                fy_list_init(&fy__proxy_open_ws);
                fy__proxy_open_ws_init = true;
            }
            pr->ws = true;
            fy_list_insert_tail(&fy__proxy_open_ws, &pr->ws_node);
        }
        fy__proxy_set_timer(pr, T_IDLE); /* from now on `limits.tunnel-timeout` */
        ex->res.content_length = -1;
        ex->res.status = ex->req.version < 20 ? 101 : 200;
        if (ex->req.version < 20 && !upgrade) {
            const fy_header_t *k = FY_HDR_FIND(&ex->req.headers, "sec-websocket-key");
            char acc[32];
            if (k && fy__proxy_ws_accept(k->value, acc)) {
                char *v = fy_arena_strndup(ex->arena, acc, 28);
                FY_HDR_ADD(ex->arena, &ex->res.headers, "sec-websocket-accept", v, 28);
            }
        }
        fy_upstream_report(pr->ph->up, pr->worker, pr->server, true, pr->loop->now_ms);
        fy_exchange_start_response(ex, &proxy_producer);
        pr->res_sending = true; /* the 101/200 goes out now, before any tunnel byte */
        pr->sending_len = 0;
        fy_exchange_send(ex, NULL, 0, FY_SEND_MORE);
        fy__proxy_resume_body(pr); /* the client's bytes may flow now */
        return;
    }
    if (pr->tunnel) {
        /* refused upgrade: an ordinary response; nothing of the client's goes on */
        pr->q_end = true;
        fy__proxy_resume_body(pr);
    }
    if (ex->req.method_id == FY_M_HEAD)
        ex->res.content_length = cl;
    else if (status == 204 || status == 304)
        ex->res.content_length = -1;
    else if (end)
        ex->res.content_length = 0;
    else
        ex->res.content_length = cl;
    if (status == 204 || status == 304) ex->res.content_length = -1;
    fy_origin_stream_expect(pr->os, ex->res.content_length);
    fy_upstream_report_status(pr->ph->up, pr->worker, pr->server, status, pr->loop->now_ms);
    if (fy_upstream_conf(pr->ph->up)->balance == FY_BALANCE_LEAST_TIME)
        fy_upstream_report_ttfb(pr->ph->up, pr->worker, pr->server,
                                fy__proxy_now_us() - pr->sent_us);
    if (__builtin_expect(ex->timing.want, 0)) /* a capture wants it (ops/inspector.c) */
        ex->timing.wait_us = (int32_t)(fy__proxy_now_us() - pr->sent_us);
    fy_exchange_start_response(ex, &proxy_producer);
}

void fy__proxy_o_on_data(void *ud, const char *p, size_t n)
{
    proxy_req_t *pr = ud;
    /* lent by the origin stream until consumed: no copy here */
    pr->zp = p;
    pr->zn = n;
    fy__proxy_set_timer(pr, T_IDLE);
    fy__proxy_deliver(pr);
}

void fy__proxy_o_on_end(void *ud, fy_headers_t *trailers)
{
    proxy_req_t *pr = ud;
    pr->o_end = true;
    if (trailers->n) pr->ex->res_trailers = *trailers;
    if (pr->tunnel_open) pr->q_end = true; /* the origin ended the tunnel */
    fy__proxy_deliver(pr);
}
