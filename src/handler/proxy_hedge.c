/* Hedged requests (`hedge:` on the upstream): a GET or HEAD without a body whose first attempt
 * has no response head after `hedge.delay` goes to a second server as well. Both run on the
 * exchange's worker; the first response head wins: the other attempt is cancelled (h1: its
 * connection closed; h2/h3: its stream reset) and its server's in-flight count given back.
 * When the current attempt fails before any head while the hedge runs, the hedge becomes the
 * current attempt (no retry is spent). One hedge per request. Worker's thread only. */
#include "handler/proxy_int.h"

#include "core/log.h"
#include "net/sock.h"

static const char *addr_of(proxy_req_t *pr, int server, char *buf, size_t len)
{
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(pr->ph->up)->servers.v)[server];
    return fy_sock_addr_str((const struct sockaddr *)&sv->addr, buf, len);
}

void fy__proxy_hedge_drop(proxy_req_t *pr, bool count_fail)
{
    proxy_hedge_t *hg = pr->hg;
    if (!hg || !hg->side) return;
    hg->side = false;
    fy_upstream_inflight(pr->ph->up, pr->worker, hg->server, -1);
    if (count_fail) fy_upstream_report(pr->ph->up, pr->worker, hg->server, false, pr->loop->now_ms);
    fy_origin_stream_close(&hg->os, false);
}

void fy__proxy_hedge_free(proxy_req_t *pr)
{
    fy_timer_stop(pr->loop, &pr->hg->timer);
    if (pr->hg->used) fy_origin_stream_free(&pr->hg->os);
}

/* The stream that is not the current one (the hedge's while it runs). */
static fy_origin_stream_t *other(proxy_req_t *pr)
{
    return pr->os == &pr->os_a ? &pr->hg->os : &pr->os_a;
}

/* The hedge becomes the current attempt; the old one is cancelled. */
static void promote(proxy_req_t *pr)
{
    proxy_hedge_t *hg = pr->hg;
    fy_origin_stream_t *old = pr->os;
    int old_server = pr->server;
    pr->os = other(pr);
    pr->server = hg->server;
    pr->sent_us = hg->sent_us;
    hg->side = false;
    pr->ex->upstream_server = pr->server;
    fy_upstream_inflight(pr->ph->up, pr->worker, old_server, -1);
    fy_origin_stream_close(old, false);
}

bool fy__proxy_hedge_take_over(proxy_req_t *pr, bool count_fail, const char *why)
{
    if (!pr->hg->side || pr->o_head) return false;
    char a[64], b[64];
    fy_warn("upstream %s: %s: %s; the hedge to %s goes on", fy_upstream_conf(pr->ph->up)->name,
            addr_of(pr, pr->server, a, sizeof a), why, addr_of(pr, pr->hg->server, b, sizeof b));
    if (count_fail) fy_upstream_report(pr->ph->up, pr->worker, pr->server, false, pr->loop->now_ms);
    promote(pr);
    fy__proxy_set_timer(pr, T_FIRST_BYTE); /* the hedge's own wait for its head */
    return true;
}

static void side_start(proxy_req_t *pr)
{
    /* the fields as for the hedge's server and protocol */
    proxy_hedge_t *hg = pr->hg;
    fy_origin_stream_t *cur = pr->os, *side = other(pr);
    int cur_server = pr->server;
    pr->os = side;
    pr->server = hg->server;
    const fy_http_limits_t *l = pr->ex->ctx->limits;
    fy_h1_limits_t lim = {l->max_request_line, l->max_header_bytes, (size_t)l->max_headers};
    fy_headers_t hs;
    fy__proxy_build_fields(pr, &hs);
    pr->os = cur;
    pr->server = cur_server;
    fy_origin_request_t rq = {&hs,          0, false, pr->ex->req.method_id == FY_M_HEAD, &lim,
                              pr->ex->arena};
    hg->sent_us = fy__proxy_now_us();
    if (fy_origin_stream_submit(side, &rq) < 0) fy__proxy_hedge_drop(pr, false);
}

static void on_hedge_timer(fy_timer_t *t)
{
    proxy_req_t *pr = t->data;
    proxy_hedge_t *hg = pr->hg;
    if (pr->o_head || pr->finished || pr->stopped || hg->side) return;
    fy_upstream_t *up = pr->ph->up;
    uint64_t now = pr->loop->now_ms;
    int s = fy_upstream_pick(up, pr->worker, pr->tried, now);
    if (((pr->tried >> (s & 63)) & 1) || !fy_upstream_admit(up, pr->worker, s, now))
        return; /* no other server to ask */
    pr->tried |= 1ull << (s & 63);
    fy_origin_stream_t *os = other(pr);
    char a[64], b[64];
    fy_info("upstream %s: no response head from %s within %llu ms: hedged to %s",
            fy_upstream_conf(up)->name, addr_of(pr, pr->server, a, sizeof a),
            (unsigned long long)fy_upstream_conf(up)->hedge->delay_ms, addr_of(pr, s, b, sizeof b));
    fy_upstream_count_hedge(up, false);
    const char *err = "origin connect failed";
    hg->used = true;
    int rc = fy_origin_stream_open(os, up, pr->worker, s, pr->loop, 0, &err);
    if (rc < 0) {
        fy_upstream_report(up, pr->worker, s, false, now);
        return;
    }
    hg->side = true;
    hg->server = s;
    fy_upstream_inflight(up, pr->worker, s, 1);
    if (rc == 1) side_start(pr);
}

void fy__proxy_hedge_arm(proxy_req_t *pr)
{
    const fy_request_t *q = &pr->ex->req;
    if (pr->attempts != 1 || pr->tunnel || q->content_length != 0 ||
        (q->method_id != FY_M_GET && q->method_id != FY_M_HEAD) ||
        fy_upstream_nservers(pr->ph->up) < 2)
        return;
    if (!pr->hg) {
        pr->hg = fy_arena_calloc(pr->ex->arena, sizeof *pr->hg);
        fy_timer_init(&pr->hg->timer, on_hedge_timer, pr);
        fy_origin_stream_init(&pr->hg->os, &fy__proxy_stream_ops[1], pr);
    }
    fy_timer_start(pr->loop, &pr->hg->timer, fy_upstream_conf(pr->ph->up)->hedge->delay_ms);
}

/* ---- the streams' callbacks: the current one's go to the o_* functions ---- */

/* stream k: 0 is os_a, 1 the hedge's (which exists when its callbacks come) */
#define SELF(pr, k) ((k) ? &(pr)->hg->os : &(pr)->os_a)
#define IS_SIDE(pr, k) ((pr)->hg && (pr)->hg->side && (pr)->os != SELF(pr, k))

static void head_k(proxy_req_t *pr, int k, int status, fy_headers_t *hs, bool end)
{
    if (pr->os == SELF(pr, k)) {
        if (pr->hg) {
            fy_timer_stop(pr->loop, &pr->hg->timer);
            fy__proxy_hedge_drop(pr, false); /* the first attempt won */
        }
        fy__proxy_o_on_head(pr, status, hs, end);
        return;
    }
    if (!IS_SIDE(pr, k)) return;
    /* the hedge answered first */
    fy_upstream_count_hedge(pr->ph->up, true);
    promote(pr);
    fy__proxy_o_on_head(pr, status, hs, end);
}

static void error_k(proxy_req_t *pr, int k, int kind, uint64_t code, const char *why)
{
    if (pr->os == SELF(pr, k)) {
        fy__proxy_o_on_error(pr, kind, code, why);
        return;
    }
    if (!IS_SIDE(pr, k)) return;
    char a[64];
    fy_warn("upstream %s: %s: %s (the hedge; the first attempt goes on)",
            fy_upstream_conf(pr->ph->up)->name, addr_of(pr, pr->hg->server, a, sizeof a), why);
    fy__proxy_hedge_drop(pr, fy_origin_stream_blames(SELF(pr, k), kind, code, false));
}

static void open_k(proxy_req_t *pr, int k, const char *err)
{
    if (pr->os == SELF(pr, k)) {
        fy__proxy_o_on_open(pr, err);
        return;
    }
    if (!IS_SIDE(pr, k)) return;
    if (err) {
        fy__proxy_hedge_drop(pr, true);
        return;
    }
    side_start(pr);
}

#define STREAM_OPS(k)                                                                              \
    static void on_head_##k(void *ud, int status, fy_headers_t *hs, bool end)                      \
    {                                                                                              \
        head_k(ud, k, status, hs, end);                                                            \
    }                                                                                              \
    static void on_data_##k(void *ud, const char *p, size_t n)                                     \
    {                                                                                              \
        proxy_req_t *pr = ud;                                                                      \
        if (pr->os == SELF(pr, k)) fy__proxy_o_on_data(pr, p, n);                                  \
    }                                                                                              \
    static void on_end_##k(void *ud, fy_headers_t *trailers)                                       \
    {                                                                                              \
        proxy_req_t *pr = ud;                                                                      \
        if (pr->os == SELF(pr, k)) fy__proxy_o_on_end(pr, trailers);                               \
    }                                                                                              \
    static void on_error_##k(void *ud, int kind, uint64_t code, const char *why)                   \
    {                                                                                              \
        error_k(ud, k, kind, code, why);                                                           \
    }                                                                                              \
    static ssize_t read_body_##k(void *ud, char *buf, size_t len, const fy_headers_t **tr)         \
    {                                                                                              \
        proxy_req_t *pr = ud;                                                                      \
        if (pr->os == SELF(pr, k)) return fy__proxy_o_read_body(pr, buf, len, tr);                 \
        *tr = NULL; /* a hedge carries no body */                                                  \
        return 0;                                                                                  \
    }                                                                                              \
    static ssize_t ref_body_##k(void *ud, const char **p, size_t len, const fy_headers_t **tr)     \
    {                                                                                              \
        proxy_req_t *pr = ud;                                                                      \
        if (pr->os == SELF(pr, k)) return fy__proxy_take_body(pr, p, len, tr);                     \
        *tr = NULL;                                                                                \
        return 0;                                                                                  \
    }                                                                                              \
    static void on_open_##k(void *ud, const char *err)                                             \
    {                                                                                              \
        open_k(ud, k, err);                                                                        \
    }                                                                                              \
    static void after_io_##k(void *ud)                                                             \
    {                                                                                              \
        proxy_req_t *pr = ud;                                                                      \
        if (pr->os == SELF(pr, k)) fy__proxy_o_after_io(pr);                                       \
    }

STREAM_OPS(0)
STREAM_OPS(1)

const fy_origin_stream_ops_t fy__proxy_stream_ops[2] = {
    {{on_head_0, on_data_0, on_end_0, on_error_0, read_body_0, ref_body_0}, on_open_0, after_io_0},
    {{on_head_1, on_data_1, on_end_1, on_error_1, read_body_1, ref_body_1}, on_open_1, after_io_1},
};
