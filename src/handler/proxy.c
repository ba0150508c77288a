/* The reverse proxy handler: an exchange in, one origin attempt after another (the server
 * picked by sticky pin or balancer, a stream opened through the origin interface), retries and
 * their bounds, the first-byte/idle/body timers, and the client's request body pulled for the
 * origin. Worker's thread only (see proxy_int.h). */
#include "handler/proxy_int.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"
#include "net/sock.h"

static void attempt(proxy_req_t *pr);

/* ---- helpers ---- */

/* Microseconds, finer than the loop's cached clock: time to first byte on loopback is well
 * under the coarse clock's tick. */
uint64_t fy__proxy_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void fy__proxy_set_timer(proxy_req_t *pr, int kind)
{
    const fy_upstream_conf_t *uc = fy_upstream_conf(pr->ph->up);
    if (pr->ws_closing) return; /* the close handshake has its own deadline */
    pr->timer_kind = kind;
    uint64_t ms = kind == T_FIRST_BYTE ? uc->first_byte_timeout_ms : uc->idle_timeout_ms;
    if (kind == T_FIRST_BYTE && pr->attempts > 1 && uc->retry_timeout_ms) {
        /* a retry waits only until the request's total bound */
        uint64_t end = pr->start_ms + uc->retry_timeout_ms, now = pr->loop->now_ms;
        uint64_t left = end > now ? end - now : 1;
        if (left < ms) ms = left;
    }
    if (pr->tunnel_open) ms = pr->ex->ctx->limits->tunnel_timeout_ms; /* `limits.tunnel-timeout` */
    fy_timer_start(pr->loop, &pr->timer, ms);
}

/* Let go of the origin side of the current attempt. Bytes it lent stay valid while the
 * response is being finished (its last bytes go out after the connection went back). */
void fy__proxy_drop_origin(proxy_req_t *pr, bool reusable)
{
    if (pr->inflight) {
        fy_upstream_inflight(pr->ph->up, pr->worker, pr->server, -1);
        pr->inflight = false;
    }
    fy_origin_stream_close(pr->os, reusable);
    if (pr->hg && pr->hg->side) fy__proxy_hedge_drop(pr, false);
    if (!pr->finished) pr->zn = 0;
}

static void cleanup(void *arg)
{
    proxy_req_t *pr = arg;
    if (pr->ws) fy_list_remove(&pr->ws_node);
    pr->ws = false;
    fy_timer_stop(pr->loop, &pr->timer);
    fy_timer_stop(pr->loop, &pr->body_timer);
    fy__proxy_drop_origin(pr, false);
    fy_origin_stream_free(&pr->os_a);
    if (pr->hg) fy__proxy_hedge_free(pr);
}

/* `unsent`: the attempt failed before any byte of the request left (no connection): then any
 * method may go again, body or not, as long as none of the body was taken from the client. */
static bool retryable(const proxy_req_t *pr, bool unsent)
{
    const fy_request_t *q = &pr->ex->req;
    bool idempotent = q->method_id == FY_M_GET || q->method_id == FY_M_HEAD ||
                      q->method_id == FY_M_OPTIONS || q->method_id == FY_M_PUT ||
                      q->method_id == FY_M_DELETE || q->method_id == FY_M_TRACE;
    const fy_upstream_conf_t *uc = fy_upstream_conf(pr->ph->up);
    bool again = unsent ? !pr->sent_any && !pr->tunnel : idempotent && q->content_length == 0;
    if (!again || pr->o_head || pr->got_bytes || pr->no_retry || pr->ex->response_started ||
        pr->attempts > uc->retries)
        return false;
    if (uc->retry_timeout_ms && pr->loop->now_ms - pr->start_ms >= uc->retry_timeout_ms)
        return false;
    if (pr->fb_timed_out) {
        /* the origin may be working on it (or be stuck): never the same server again */
        size_t n = fy_upstream_nservers(pr->ph->up);
        for (size_t i = 0; i < n && i < 64; i++)
            if (!((pr->tried >> i) & 1)) return true;
        return false;
    }
    return true;
}

/* The origin failed us. Before any response byte: another attempt, or 502/504. After: the
 * client sees an aborted response (h1: closed connection; h2: RST_STREAM), never a short 200. */
static void origin_failed_at(proxy_req_t *pr, int status, const char *why, bool count_fail,
                             bool unsent);

void fy__proxy_origin_failed(proxy_req_t *pr, int status, const char *why, bool count_fail)
{
    origin_failed_at(pr, status, why, count_fail, false);
}

static void origin_failed_at(proxy_req_t *pr, int status, const char *why, bool count_fail,
                             bool unsent)
{
    if (pr->hg && fy__proxy_hedge_take_over(pr, count_fail, why))
        return; /* the hedge is the attempt */
    char a[64];
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(pr->ph->up)->servers.v)[pr->server];
    if (count_fail) fy_upstream_report(pr->ph->up, pr->worker, pr->server, false, pr->loop->now_ms);
    pr->got_bytes = fy_origin_stream_got_bytes(pr->os);
    /* a pooled connection the origin had already closed: try again on a fresh one (not after
       a timeout: that origin got the request and said nothing) */
    bool stale = pr->os->reused && !pr->o_head && !pr->got_bytes && !pr->fb_timed_out &&
                 !pr->no_retry && pr->ex->req.content_length == 0 && !pr->ex->response_started;
    bool retry = !stale && retryable(pr, unsent);
    bool broke = retry && !fy_upstream_retry_take(pr->ph->up, pr->worker, pr->loop->now_ms);
    retry &= !broke;
    /* one line per failure, saying what happens next */
    fy_warn("upstream %s: %s: %s%s", fy_upstream_conf(pr->ph->up)->name,
            fy_sock_addr_str((const struct sockaddr *)&sv->addr, a, sizeof a), why,
            stale   ? "; retrying on a new connection"
            : retry ? (pr->fb_timed_out ? "; retrying on another server" : "; retrying")
            : broke ? "; not retried: retry budget exhausted"
                    : "");
    fy__proxy_drop_origin(pr, false);
    fy_timer_stop(pr->loop, &pr->timer);
    if (stale) {
        pr->tried &= ~(1ull << pr->server);
        attempt(pr);
        return;
    }
    if (retry) {
        fy_upstream_count_retry(pr->ph->up, pr->server);
        attempt(pr);
        return;
    }
    if (pr->finished || pr->stopped) return;
    pr->finished = true;
    fy_exchange_fail(pr->ex, status, why);
}

static void on_timer(fy_timer_t *t)
{
    proxy_req_t *pr = t->data;
    if (pr->tunnel_open && !pr->finished && !pr->stopped) {
        if (pr->ws && !pr->ws_closing) {
            /* `limits.tunnel-timeout`: both sides hear why (1001) and close */
            fy_info("upstream %s: tunnel idle timeout: closing the WebSocket (1001)",
                    fy_upstream_conf(pr->ph->up)->name);
            fy__proxy_ws_going_away(pr);
            return;
        }
        /* another kind of tunnel, or a close handshake that did not finish: cut it */
        fy_info("upstream %s: %s", fy_upstream_conf(pr->ph->up)->name,
                pr->ws ? "WebSocket close handshake timed out" : "tunnel idle timeout");
        fy__proxy_drop_origin(pr, false);
        pr->finished = true;
        fy_exchange_fail(pr->ex, 504, pr->ws ? "WebSocket close timeout" : "tunnel idle timeout");
        return;
    }
    if (pr->trail) {
        /* the response is complete: the rest of the body is not worth failing it for */
        pr->trail_abort = true;
        fy__proxy_deliver(pr);
        return;
    }
    if (pr->timer_kind == T_FIRST_BYTE) {
        pr->fb_timed_out = true;
        /* a multiplexed connection that left a stream unanswered takes no new streams
           until it proves alive (h2: PING), and is closed once its streams end otherwise */
        bool sent = pr->ex->req.content_length == 0 || pr->q_end;
        if (sent && fy_origin_stream_is_open(pr->os)) fy_origin_stream_suspect(pr->os);
        fy__proxy_origin_failed(pr, 504, "origin first-byte timeout", true);
    } else
        fy__proxy_origin_failed(pr, 504, "origin idle timeout", false);
}

/* Session affinity: the server the client is pinned to, or -1. */
static int sticky_server(proxy_req_t *pr)
{
    fy_upstream_t *up = pr->ph->up;
    const fy_sticky_conf_t *sc = fy_upstream_conf(up)->sticky;
    const fy_headers_t *hs = &pr->ex->req.headers;
    if (sc->header) {
        const fy_header_t *h = fy_headers_find(hs, sc->header, strlen(sc->header));
        if (!h) return -1;
        uint64_t x = 1469598103934665603ull;
        for (size_t i = 0; i < h->value.len; i++)
            x = (x ^ (unsigned char)h->value.p[i]) * 1099511628211ull;
        return (int)(x % fy_upstream_nservers(up));
    }
    size_t nl = strlen(sc->cookie);
    for (size_t i = 0; i < hs->n; i++) {
        if (!fy_str_ieq(hs->v[i].name, "cookie", 6)) continue;
        /* "a=1; NAME=id; b=2" */
        const char *p = hs->v[i].value.p, *e = p + hs->v[i].value.len;
        while (p < e) {
            while (p < e && (*p == ' ' || *p == ';')) p++;
            const char *q = p;
            while (q < e && *q != ';') q++;
            if ((size_t)(q - p) > nl && memcmp(p, sc->cookie, nl) == 0 && p[nl] == '=')
                return fy_upstream_find_id(up, p + nl + 1, (size_t)(q - p - (ptrdiff_t)nl - 1));
            p = q;
        }
    }
    return -1;
}

void fy__proxy_o_on_error(void *ud, int kind, uint64_t code, const char *why)
{
    proxy_req_t *pr = ud;
    if (pr->trail || pr->o_end) {
        /* the response is complete: only the connection is lost (release says so) */
        pr->trail_abort = true;
        fy__proxy_deliver(pr);
        return;
    }
    bool count = fy_origin_stream_blames(pr->os, kind, code, pr->o_head);
    if (!pr->o_head) {
        if (kind == FY_CLIENT_REFUSED && !pr->sent_any &&
            ++pr->refusals <= fy_upstream_conf(pr->ph->up)->retries + FY_PROXY_REFUSED_EXTRA) {
            /* not processed (RST REFUSED_STREAM or past GOAWAY's last stream): try again */
            fy_debug("upstream %s: %s; retrying", fy_upstream_conf(pr->ph->up)->name, why);
            fy_timer_stop(pr->loop, &pr->timer);
            fy__proxy_drop_origin(pr, false);
            attempt(pr);
            return;
        }
        fy__proxy_origin_failed(pr, 502, why, count);
        return;
    }
    /* after the head: the client sees the abort (h1: closed connection; h2: RST_STREAM) */
    char a[64];
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(pr->ph->up)->servers.v)[pr->server];
    fy_warn("upstream %s: %s: %s", fy_upstream_conf(pr->ph->up)->name,
            fy_sock_addr_str((const struct sockaddr *)&sv->addr, a, sizeof a), why);
    if (count) fy_upstream_report(pr->ph->up, pr->worker, pr->server, false, pr->loop->now_ms);
    fy_timer_stop(pr->loop, &pr->timer);
    fy__proxy_drop_origin(pr, false);
    if (pr->finished || pr->stopped) return;
    pr->finished = true;
    fy_exchange_fail(pr->ex, 502, why);
}

static void on_req_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    proxy_req_t *pr = ex->handler_data;
    pr->req_body_waiting = false;
    if (end && pr->body_timing) { /* the whole body is here in time */
        pr->body_timing = false;
        fy_timer_stop(pr->loop, &pr->body_timer);
    }
    if (pr->stopped || pr->finished) return;
    if (pr->ws_up_sent) return; /* after our Close to the origin: the client's bytes go nowhere */
    pr->qp = p;
    pr->qn = n;
    pr->q_end = end;
    if (!pr->in_read_body) fy__proxy_resume_body(pr);
}

/* The next piece of the client's body for the origin codec, in place (*p): valid until the
 * client codec is asked for more, which happens here, once the piece is taken. */
ssize_t fy__proxy_take_body(void *ud, const char **p, size_t len, const fy_headers_t **trailers)
{
    proxy_req_t *pr = ud;
    if (pr->tunnel && !pr->tunnel_open && !pr->q_end) return FY_CLIENT_DEFER;
    for (int guard = 0; guard < 64; guard++) {
        if (pr->qn) {
            size_t n = pr->qn < len ? pr->qn : len;
            *p = pr->qp;
            pr->qp += n;
            pr->qn -= n;
            pr->sent_any = true;
            /* while the body goes, a slow client is no slow origin: no first-byte wait yet */
            if (!pr->o_head && !pr->tunnel) fy__proxy_set_timer(pr, T_IDLE);
            if (pr->ws && !pr->ws_up_sent) fy__proxy_ws_feed(&pr->ws_up, *p, n);
            if (pr->tunnel_open) fy__proxy_set_timer(pr, T_IDLE); /* tunnels idle out both ways */
            return (ssize_t)n;
        }
        if (pr->ws_closing && !pr->ws_up_sent && !pr->q_end &&
            fy__proxy_ws_at_boundary(&pr->ws_up)) {
            fy__proxy_ws_close_up(pr); /* the client's frame is through: our Close now */
            continue;
        }
        if (pr->q_end) {
            *trailers = pr->tunnel ? NULL : &pr->ex->req_trailers;
            if (!pr->o_head && !pr->tunnel) fy__proxy_set_timer(pr, T_FIRST_BYTE); /* all sent */
            return 0;
        }
        if (pr->req_body_waiting || pr->stopped || pr->finished) return FY_CLIENT_DEFER;
        pr->req_body_waiting = true;
        pr->in_read_body = true;
        fy_exchange_read_body(pr->ex, on_req_body);
        pr->in_read_body = false;
        if (pr->req_body_waiting) return FY_CLIENT_DEFER;
    }
    return FY_CLIENT_DEFER;
}

ssize_t fy__proxy_o_read_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers)
{
    const char *p = NULL;
    ssize_t n = fy__proxy_take_body(ud, &p, len, trailers);
    if (n > 0) memcpy(buf, p, (size_t)n);
    return n;
}

/* ---- one attempt: a stream on a connection of the chosen server ---- */

static void start(proxy_req_t *pr)
{
    if (pr->tunnel && !fy_origin_stream_can_tunnel(pr->os)) {
        fy__proxy_drop_origin(pr, true);
        pr->finished = true;
        fy_warn("upstream %s: origin does not allow extended CONNECT (RFC 8441): no WebSocket",
                fy_upstream_conf(pr->ph->up)->name);
        fy_exchange_fail(pr->ex, 502,
                         "HTTP/2 origin without SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441)");
        return;
    }
    const fy_http_limits_t *l = pr->ex->ctx->limits;
    fy_h1_limits_t lim = {l->max_request_line, l->max_header_bytes, (size_t)l->max_headers};
    fy_headers_t hs;
    fy__proxy_build_fields(pr, &hs); /* Host may depend on the server */
    fy_origin_request_t rq = {&hs,        pr->ex->req.content_length,
                              pr->tunnel, pr->ex->req.method_id == FY_M_HEAD,
                              &lim,       pr->ex->arena};
    fy__proxy_set_timer(pr, T_FIRST_BYTE);
    pr->sent_us = fy__proxy_now_us();
    if (__builtin_expect(pr->ex->timing.want, 0)) { /* for a capture (ops/inspector.c) */
        pr->ex->timing.set =
            fy_origin_stream_timing(pr->os, &pr->ex->timing.connect_us, &pr->ex->timing.tls_us);
    }
    pr->in_codec++;
    int rc = fy_origin_stream_submit(pr->os, &rq);
    pr->in_codec--;
    if (rc < 0) {
        fy__proxy_origin_failed(pr, 502, "cannot open a stream to the origin", false);
        return;
    }
    if (pr->ph->hedge) fy__proxy_hedge_arm(pr);
    fy__proxy_deliver(pr);
}

void fy__proxy_o_on_open(void *ud, const char *err)
{
    proxy_req_t *pr = ud;
    if (err) {
        origin_failed_at(pr, 502, err, true, true); /* no connection: nothing was sent */
        return;
    }
    start(pr);
}

void fy__proxy_o_after_io(void *ud)
{
    fy__proxy_deliver(ud);
}

static void attempt(proxy_req_t *pr)
{
    pr->attempts++;
    fy_upstream_t *up = pr->ph->up;
    int pinned = -1;
    if (pr->attempts == 1 && fy_upstream_conf(up)->sticky) {
        pinned = sticky_server(pr);
        pr->sticky_hit = pinned;
        if (pinned >= 0 && !fy_upstream_usable(up, pr->worker, pinned, pr->loop->now_ms))
            pinned = -1;
    }
    pr->server =
        pinned >= 0 ? pinned : fy_upstream_pick(up, pr->worker, pr->tried, pr->loop->now_ms);
    if (pr->attempts == 1 && pr->ph->resil)
        fy_upstream_count_request(up, pr->worker, pr->loop->now_ms);
    if (pr->ph->resil && !fy_upstream_admit(up, pr->worker, pr->server, pr->loop->now_ms)) {
        /* the balancer had nothing but open circuit breakers to offer */
        fy_warn("upstream %s: every server's circuit breaker is open: 503",
                fy_upstream_conf(up)->name);
        pr->finished = true;
        static const char body[] = "503 every server's circuit breaker is open\n";
        fy_exchange_respond(pr->ex, 503, "text/plain", body, sizeof body - 1);
        return;
    }
    pr->tried |= 1ull << (pr->server & 63);
    pr->ex->upstream = up, pr->ex->upstream_server = pr->server; /* ops/http_metrics.c */
    pr->sent_any = false;
    pr->got_bytes = false;
    pr->o_head = pr->o_end = false;
    pr->interim = 0;
    pr->zn = 0;
    const char *err = "origin connect failed";
    /* refused before: first in line on the next connection */
    int rc =
        fy_origin_stream_open(pr->os, up, pr->worker, pr->server, pr->loop, pr->refusals, &err);
    if (rc < 0) { /* not even a socket */
        fy_upstream_report(up, pr->worker, pr->server, false, pr->loop->now_ms);
        if (retryable(pr, true) && fy_upstream_retry_take(up, pr->worker, pr->loop->now_ms)) {
            fy_upstream_count_retry(up, pr->server);
            attempt(pr);
            return;
        }
        pr->finished = true;
        fy_exchange_fail(pr->ex, 502, err);
        return;
    }
    fy_upstream_inflight(up, pr->worker, pr->server, 1);
    pr->inflight = true;
    if (rc == 1) start(pr);
}

/* limits.body-total-timeout: the client's body did not all arrive in time. The origin's
 * request is aborted (h1: connection closed mid-body; h2/h3: stream reset), the client gets
 * 408, or a reset stream once the response started. */
static void on_body_timer(fy_timer_t *t)
{
    proxy_req_t *pr = t->data;
    pr->body_timing = false;
    if (pr->finished || pr->stopped) return;
    if (pr->trail) {
        /* the response is complete: the rest of the body is not worth failing it for */
        pr->trail_abort = true;
        fy__proxy_deliver(pr);
        return;
    }
    fy_warn("upstream %s: request body not complete within limits.body-total-timeout "
            "(%llu ms): aborted",
            fy_upstream_conf(pr->ph->up)->name,
            (unsigned long long)pr->ex->ctx->limits->body_total_timeout_ms);
    fy_timer_stop(pr->loop, &pr->timer);
    fy__proxy_drop_origin(pr, false);
    pr->finished = true;
    fy_exchange_fail(pr->ex, 408, "request body not complete within limits.body-total-timeout");
}

static void on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    proxy_handler_t *ph = (proxy_handler_t *)h;
    if (ex->req.method_id == FY_M_CONNECT && !ex->req.protocol.len) {
        fy_exchange_fail(ex, 405, "CONNECT is not proxied (use the intercepting proxy)");
        return;
    }
    proxy_req_t *pr = fy_arena_calloc(ex->arena, sizeof *pr);
    pr->ex = ex;
    pr->ph = ph;
    pr->loop = ex->ctx->loop;
    pr->worker = ex->ctx->worker_id;
    pr->tunnel = ex->req.protocol.len > 0;
    pr->sticky_hit = -1;
    fy_timer_init(&pr->timer, on_timer, pr);
    fy_origin_stream_init(&pr->os_a, &fy__proxy_stream_ops[0], pr);
    pr->os = &pr->os_a;
    fy_timer_init(&pr->body_timer, on_body_timer, pr);
    pr->start_ms = pr->loop->now_ms;
    ex->handler_data = pr;
    fy_arena_on_reset(ex->arena, cleanup, pr);
    uint64_t bt = ex->ctx->limits->body_total_timeout_ms;
    if (bt && !pr->tunnel && ex->req.content_length != 0 &&
        (ex->req.content_length < 0 || ex->body_received < (uint64_t)ex->req.content_length)) {
        pr->body_timing = true;
        uint64_t now = pr->loop->now_ms; /* counted from the head's arrival */
        uint64_t spent = now > ex->start_ms ? now - ex->start_ms : 0;
        fy_timer_start(pr->loop, &pr->body_timer, bt > spent ? bt - spent : 1);
    }
    attempt(pr);
}

static void destroy(fy_handler_t *h)
{
    free(h);
}

static const fy_handler_ops_t proxy_ops = {"proxy", on_request, destroy};

fy_handler_t *fy_proxy_handler_new(const fy_proxy_conf_t *conf, fy_upstream_t *up)
{
    proxy_handler_t *ph = fy_xcalloc(1, sizeof *ph);
    ph->h.ops = &proxy_ops;
    ph->conf = conf;
    ph->up = up;
    const fy_upstream_conf_t *uc = fy_upstream_conf(up);
    ph->resil = uc->breaker || uc->retry_budget;
    ph->hedge = uc->hedge != NULL;
    return &ph->h;
}
