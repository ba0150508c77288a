/* The WebTransport reverse proxy: client session (h3/h3_wt.h) <-> origin session
 * (h3/h3_wt_client.h). */
#include "handler/wt_proxy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/list.h"
#include "core/log.h"
#include "h3/h3_wt.h"
#include "h3/h3_wt_client.h"
#include "http/exchange.h"

/* The origin side's QUIC settings: datagrams on, stream windows as h3 origins; the handshake
 * timeout is the upstream's connect-timeout (fy_wt_proxy_handler_new). */
static const fy_quic_conf_t origin_quic = {
    .cc = FY_QUIC_CC_CUBIC,
    .idle_timeout_ms = 60000,
    .handshake_timeout_ms = 10000,
    .max_streams = 256,
    .stream_window = 1 << 20,
    .connection_window = 16 << 20,
    .send_buffer = 256 * 1024,
    .max_datagram_size = 1500,
    .max_connections = 1,
};

typedef struct wtp_handler {
    fy_handler_t h;
    const fy_wt_conf_t *conf;
    fy_upstream_t *up;
    fy_quic_conf_t quic; /* origin_quic with the upstream's connect-timeout */
} wtp_handler_t;

enum { P_CONNECTING, P_OPEN, P_DONE };

typedef struct wtp {
    wtp_handler_t *ph;
    fy_exchange_t *ex; /* NULL once the exchange is gone */
    fy_loop_t *loop;
    int worker, server;
    int attempts;   /* servers tried for this session */
    uint64_t tried; /* their bits (fy_upstream_pick's exclude) */
    int state;
    fy_wt_session_t *ss; /* the client's session (NULL before the origin's 200, and after) */
    fy_wtc_t *oc;        /* the origin's session (NULL once closed) */
    fy_list_t pairs;     /* owned: twin streams */
    uint64_t dg_c2o_dropped, dg_o2c_dropped;
} wtp_t;

typedef struct pair {
    fy_list_t link;
    fy_wt_stream_t *cs;  /* client side (NULL once gone) */
    fy_wtc_stream_t *os; /* origin side (NULL once gone) */
} pair_t;

static pair_t *pair_new(wtp_t *p, fy_wt_stream_t *cs, fy_wtc_stream_t *os)
{
    pair_t *pr = fy_xcalloc(1, sizeof *pr);
    pr->cs = cs;
    pr->os = os;
    fy_list_insert_tail(&p->pairs, &pr->link);
    fy_wt_stream_set_ud(cs, pr);
    fy_wtc_stream_set_ud(os, pr);
    return pr;
}

static void pair_maybe_free(pair_t *pr)
{
    if (pr->cs || pr->os) return;
    fy_list_remove(&pr->link);
    free(pr);
}

/* Close the origin session (no callback after). */
static void drop_origin(wtp_t *p, uint32_t code, const char *reason, size_t rlen)
{
    fy_wtc_t *oc = p->oc;
    if (!oc) return;
    p->oc = NULL;
    for (fy_list_t *l = p->pairs.next; l != &p->pairs; l = l->next)
        fy_container_of(l, pair_t, link)->os = NULL;
    fy_wtc_close(oc, code, reason, rlen);
}

/* How many of n bytes fit below a stream's send-buffer bound. */
static size_t room(size_t cap, size_t queued, size_t n)
{
    size_t r = queued < cap ? cap - queued : 0;
    return n < r ? n : r;
}

/* ---- the client's session ---- */

static void c_stream(void *ud, fy_wt_stream_t *cs)
{
    wtp_t *p = ud;
    fy_wtc_stream_t *os = p->oc ? fy_wtc_open(p->oc, fy_wt_stream_is_uni(cs)) : NULL;
    if (!os) { /* the origin gives no stream credit now: refuse it */
        fy_wt_stream_reset(cs, 0);
        return;
    }
    pair_new(p, cs, os);
}

static size_t c_data(void *ud, fy_wt_stream_t *cs, const uint8_t *b, size_t n, bool fin)
{
    (void)ud;
    pair_t *pr = fy_wt_stream_ud(cs);
    if (!pr || !pr->os) return n; /* the twin is gone: drop */
    fy_wtc_stream_t *os = pr->os;
    size_t take = room(fy_wtc_send_buffer(os), fy_wtc_stream_buffered(os), n);
    if (take && fy_wtc_stream_write(os, b, take) < 0) return n;
    if (take == n && fin) fy_wtc_stream_finish(os);
    return take;
}

static void c_writable(void *ud, fy_wt_stream_t *cs)
{
    (void)ud;
    pair_t *pr = fy_wt_stream_ud(cs);
    if (pr && pr->os) fy_wtc_stream_resume(pr->os);
}

/* Stream signals are relayed one direction at a time: a peer's RESET_STREAM (it aborted its
 * sending side) becomes RESET_STREAM of the twin's sending side with the same WebTransport
 * code, so the other peer sees that code while the opposite direction carries on; a peer's
 * STOP_SENDING becomes STOP_SENDING of the twin (the QUIC library does not tell its code: the
 * twin gets WebTransport code 0; the peer itself gets its own code back in the RESET_STREAM
 * QUIC sends for it). A signal whose twin is gone resets the stream whole. */
static uint32_t relay_code(int64_t code)
{
    return code < 0 ? 0 : (uint32_t)code;
}

static void c_reset(void *ud, fy_wt_stream_t *cs, int64_t code)
{
    (void)ud;
    pair_t *pr = fy_wt_stream_ud(cs);
    if (pr && pr->os)
        fy_wtc_stream_reset_send(pr->os, relay_code(code));
    else
        fy_wt_stream_reset(cs, relay_code(code));
}

static void c_stop(void *ud, fy_wt_stream_t *cs, int64_t code)
{
    (void)ud;
    pair_t *pr = fy_wt_stream_ud(cs);
    if (pr && pr->os)
        fy_wtc_stream_stop(pr->os, relay_code(code));
    else
        fy_wt_stream_reset(cs, relay_code(code));
}

static void c_gone(void *ud, fy_wt_stream_t *cs)
{
    (void)ud;
    pair_t *pr = fy_wt_stream_ud(cs);
    if (!pr) return;
    pr->cs = NULL;
    pair_maybe_free(pr);
}

/* DRAIN_WEBTRANSPORT_SESSION is relayed both ways: the session will end soon, and the peer
 * behind the proxy is the one that should know. */
static void c_drain(void *ud, fy_wt_session_t *ss)
{
    (void)ss;
    wtp_t *p = ud;
    if (p->oc) fy_wtc_drain(p->oc);
}

static void c_datagram(void *ud, fy_wt_session_t *ss, const uint8_t *b, size_t n)
{
    (void)ss;
    wtp_t *p = ud;
    if (p->oc && fy_wtc_send_datagram(p->oc, b, n) == -EAGAIN) p->dg_c2o_dropped++;
}

static void c_close(void *ud, uint32_t code, const char *reason, size_t rlen)
{
    wtp_t *p = ud;
    p->ss = NULL;
    p->state = P_DONE;
    drop_origin(p, code, reason, rlen);
}

static const fy_wt_ops_t client_ops = {
    .stream = c_stream,
    .data = c_data,
    .writable = c_writable,
    .reset = c_reset,
    .stop = c_stop,
    .drain = c_drain,
    .stream_gone = c_gone,
    .datagram = c_datagram,
    .close = c_close,
};

/* ---- the origin's session ---- */

static bool connect_origin(wtp_t *p);

static void o_ready(void *ud, int status)
{
    wtp_t *p = ud;
    fy_upstream_t *up = p->ph->up;
    /* passive health: a server that answered (even with a refusal) is up */
    fy_upstream_report(up, p->worker, p->server, status != 0, p->loop->now_ms);
    if (status != 200) {
        drop_origin(p, 0, NULL, 0);
        p->state = P_DONE;
        if (!p->ex) return;
        /* not reached at all: another server, as the upstream's `retries` allow */
        if (status == 0 && p->attempts <= fy_upstream_conf(up)->retries &&
            (size_t)p->attempts < fy_upstream_nservers(up)) {
            fy_upstream_count_retry(up, p->server);
            p->state = P_CONNECTING;
            connect_origin(p);
            return;
        }
        int st = status >= 400 && status < 600 ? status : 502;
        fy_info("webtransport proxy: upstream %s: %s", fy_upstream_conf(up)->name,
                status ? "the origin refused the session" : "origin unreachable");
        fy_exchange_fail(p->ex, st,
                         status ? "the origin refused the WebTransport session"
                                : "WebTransport origin unreachable");
        return;
    }
    if (!p->ex) {
        drop_origin(p, 0, NULL, 0);
        return;
    }
    p->state = P_OPEN;
    p->ss = fy_wt_accept(p->ex, &client_ops, p);
    if (!p->ss) { /* refused (and the exchange failed) */
        p->state = P_DONE;
        drop_origin(p, 0, "client refused", 14);
    }
}

static void o_stream(void *ud, fy_wtc_stream_t *os)
{
    wtp_t *p = ud;
    fy_wt_stream_t *cs = NULL;
    if (p->ss) cs = fy_wtc_stream_is_uni(os) ? fy_wt_open_uni(p->ss) : fy_wt_open_bidi(p->ss);
    if (!cs) {
        fy_wtc_stream_reset(os, 0);
        return;
    }
    pair_new(p, cs, os);
}

static size_t o_data(void *ud, fy_wtc_stream_t *os, const uint8_t *b, size_t n, bool fin)
{
    (void)ud;
    pair_t *pr = fy_wtc_stream_ud(os);
    if (!pr || !pr->cs) return n;
    fy_wt_stream_t *cs = pr->cs;
    size_t take = room(fy_wt_send_buffer(cs), fy_wt_stream_buffered(cs), n);
    if (take && fy_wt_stream_write(cs, b, take) < 0) return n;
    if (take == n && fin) fy_wt_stream_finish(cs);
    return take;
}

static void o_writable(void *ud, fy_wtc_stream_t *os)
{
    (void)ud;
    pair_t *pr = fy_wtc_stream_ud(os);
    if (pr && pr->cs) fy_wt_stream_resume(pr->cs);
}

static void o_reset(void *ud, fy_wtc_stream_t *os, int64_t code)
{
    (void)ud;
    pair_t *pr = fy_wtc_stream_ud(os);
    if (pr && pr->cs)
        fy_wt_stream_reset_send(pr->cs, relay_code(code));
    else
        fy_wtc_stream_reset(os, relay_code(code));
}

static void o_stop(void *ud, fy_wtc_stream_t *os, int64_t code)
{
    (void)ud;
    pair_t *pr = fy_wtc_stream_ud(os);
    if (pr && pr->cs)
        fy_wt_stream_stop(pr->cs, relay_code(code));
    else
        fy_wtc_stream_reset(os, relay_code(code));
}

static void o_gone(void *ud, fy_wtc_stream_t *os)
{
    (void)ud;
    pair_t *pr = fy_wtc_stream_ud(os);
    if (!pr) return;
    pr->os = NULL;
    pair_maybe_free(pr);
}

static void o_drain(void *ud)
{
    wtp_t *p = ud;
    fy_info("webtransport proxy: upstream %s drains the session (DRAIN_WEBTRANSPORT_SESSION): "
            "relayed to the client",
            fy_upstream_conf(p->ph->up)->name);
    if (p->ss) fy_wt_session_drain(p->ss);
}

static void o_datagram(void *ud, const uint8_t *b, size_t n)
{
    wtp_t *p = ud;
    if (p->ss && fy_wt_send_datagram(p->ss, b, n) == -EAGAIN) p->dg_o2c_dropped++;
}

static void o_close(void *ud, uint32_t code, const char *reason, size_t rlen)
{
    wtp_t *p = ud;
    fy_info("webtransport proxy: upstream %s ended the session: code %u, reason \"%.*s\"",
            fy_upstream_conf(p->ph->up)->name, (unsigned)code, (int)(rlen > 200 ? 200 : rlen),
            reason);
    drop_origin(p, 0, NULL, 0);
    p->state = P_DONE;
    fy_wt_session_t *ss = p->ss;
    p->ss = NULL;
    if (ss) fy_wt_session_close(ss, code, reason, rlen);
}

static const fy_wtc_ops_t origin_ops = {
    .ready = o_ready,
    .stream = o_stream,
    .data = o_data,
    .writable = o_writable,
    .reset = o_reset,
    .stop = o_stop,
    .drain = o_drain,
    .stream_gone = o_gone,
    .datagram = o_datagram,
    .close = o_close,
};

/* ---- the exchange ---- */

static void cleanup(void *arg)
{
    wtp_t *p = arg;
    p->ex = NULL;
    drop_origin(p, 0, "gone", 4);
    if (p->dg_c2o_dropped || p->dg_o2c_dropped)
        fy_info("webtransport proxy: datagrams dropped by full send queues: %llu to the origin, "
                "%llu to the client",
                (unsigned long long)p->dg_c2o_dropped, (unsigned long long)p->dg_o2c_dropped);
    while (!fy_list_empty(&p->pairs)) {
        pair_t *pr = fy_container_of(p->pairs.next, pair_t, link);
        fy_list_remove(&pr->link);
        free(pr);
    }
    free(p);
}

/* Pick a server (not one already tried when another is usable) and start the origin's
 * session. False after failing the exchange. */
static bool connect_origin(wtp_t *p)
{
    fy_exchange_t *ex = p->ex;
    fy_upstream_t *up = p->ph->up;
    const fy_upstream_conf_t *uc = fy_upstream_conf(up);
    p->attempts++;
    p->server = fy_upstream_pick(up, p->worker, p->tried, p->loop->now_ms);
    p->tried |= 1ull << (p->server & 63);
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)uc->servers.v)[p->server];
    ex->upstream = up, ex->upstream_server = p->server;
    if (!sv->h3) {
        p->state = P_DONE;
        fy_exchange_fail(ex, 502, "WebTransport proxies only to h3:// servers");
        return false;
    }
    fy_quic_client_opts_t o = {.conf = &p->ph->quic,
                               .sni = uc->sni ? uc->sni : sv->host,
                               .ca_file = uc->ca,
                               .insecure = uc->insecure,
                               .cert_file = uc->cert,
                               .key_file = uc->key,
                               .name = uc->name};
    char path[2048];
    size_t pl = ex->req.target.len < sizeof path - 1 ? ex->req.target.len : sizeof path - 1;
    memcpy(path, ex->req.target.p, pl);
    path[pl] = 0;
    if (!pl) memcpy(path, "/", 2);
    char origin[512];
    const fy_header_t *oh = FY_HDR_FIND(&ex->req.headers, "origin");
    if (oh) {
        size_t ol = oh->value.len < sizeof origin - 1 ? oh->value.len : sizeof origin - 1;
        memcpy(origin, oh->value.p, ol);
        origin[ol] = 0;
    }
    p->oc = fy_wtc_connect(p->loop, (const struct sockaddr *)&sv->addr, sv->addrlen, &o,
                           sv->authority, path, oh ? origin : NULL, &origin_ops, p);
    if (!p->oc) {
        p->state = P_DONE;
        fy_upstream_report(up, p->worker, p->server, false, p->loop->now_ms);
        fy_exchange_fail(ex, 502, "cannot start a QUIC connection to the WebTransport origin");
        return false;
    }
    return true;
}

static void on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    wtp_handler_t *ph = (wtp_handler_t *)h;
    if (!fy_str_eq(ex->req.protocol, "webtransport", 12)) {
        fy_exchange_fail(ex, 400, "this route serves WebTransport sessions only");
        return;
    }
    int64_t sid;
    if (!fy_h3_exchange_wt(ex, &sid)) {
        fy_exchange_fail(ex, 400, "WebTransport needs an extended CONNECT over HTTP/3");
        return;
    }
    wtp_t *p = fy_xcalloc(1, sizeof *p);
    p->ph = ph;
    p->ex = ex;
    p->loop = ex->ctx->loop;
    p->worker = ex->ctx->worker_id;
    fy_list_init(&p->pairs);
    fy_arena_on_reset(ex->arena, cleanup, p);
    connect_origin(p);
}

static void destroy(fy_handler_t *h)
{
    free(h);
}

/* named "webtransport": the h3 codec lets extended CONNECTs reach only such handlers */
static const fy_handler_ops_t wtp_ops = {"webtransport", on_request, destroy};

fy_handler_t *fy_wt_proxy_handler_new(const fy_wt_conf_t *conf, fy_upstream_t *up)
{
    wtp_handler_t *ph = fy_xcalloc(1, sizeof *ph);
    ph->h.ops = &wtp_ops;
    ph->conf = conf;
    ph->up = up;
    ph->quic = origin_quic;
    uint64_t ct = fy_upstream_conf(up)->connect_timeout_ms;
    if (ct) ph->quic.handshake_timeout_ms = ct;
    return &ph->h;
}
