/* ferry-load over HTTP/3: each worker thread runs ferry's own event loop and HTTP/3 client
 * codec (src/h3/h3_client.c on src/quic: ngtcp2 + GnuTLS) instead of worker.c's epoll loop,
 * because QUIC owns its UDP socket and timers. Accounting goes through the same fl_finish /
 * fl_count_error, so the report is the same as for h1/h2. Closed loop: -c connections, each
 * with -m requests in flight. Open loop (--rate): the worker's share of the rate on a fixed
 * schedule (a 1 ms loop tick issues what is due), each request on the next connection with a
 * free stream, its latency counted from its scheduled time; when no stream is free the
 * schedule falls behind and the backlog's latency grows, as in worker.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/loop.h"
#include "fl.h"
#include "h3/h3_client.h"

typedef struct h3_req {
    struct h3_lconn *lc;
    fy_h3_client_stream_t *s;
    fy_arena_t arena;
    uint64_t t_start;
    uint64_t body;
    size_t body_off;
    int status;
    bool busy;
} h3_req_t;

typedef struct h3_lconn {
    fl_conn_t *fc; /* accounting */
    fy_h3_client_t *cli;
    h3_req_t *reqs; /* fl_cfg.streams */
    bool ready;
    uint32_t url_rr;
    fy_timer_t retry;
} h3_lconn_t;

typedef struct h3_worker {
    fl_worker_t *w;
    fy_loop_t loop;
    fy_quic_conf_t conf;
    h3_lconn_t *lcs;
    fy_timer_t tick;
    fy_timer_t hold; /* --hold: the idle connections' time */
} h3_worker_t;

static __thread h3_worker_t *hw;

static void lconn_start(h3_lconn_t *lc);
static void issue_all(h3_lconn_t *lc);
static void pump(void);

static bool stopping(void)
{
    fl_worker_t *w = hw->w;
    return w->stopping || w->now >= w->end || (w->budget && w->finished >= w->budget);
}

static void req_done(h3_req_t *r, int err)
{
    h3_lconn_t *lc = r->lc;
    r->busy = false;
    fy_h3_client_release(r->s);
    r->s = NULL;
    fl_finish(lc->fc, r->t_start, r->status, r->body, err);
    if (stopping()) return;
    if (fl_cfg.rate > 0)
        pump();
    else
        issue_all(lc);
}

static void on_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    h3_req_t *r = ud;
    if (status >= 200) r->status = status;
}

static void on_data(void *ud, const char *p, size_t n)
{
    h3_req_t *r = ud;
    r->body += n;
    r->lc->fc->w->st.bytes += n;
    fy_h3_client_consume(r->s, n);
}

static void on_end(void *ud, fy_headers_t *trailers)
{
    req_done(ud, -1);
}

static void on_error(void *ud, int kind, uint64_t code, const char *why)
{
    req_done(ud, kind == FY_CLIENT_PROTOCOL ? FL_ERR_PARSE : FL_ERR_RESET);
}

static ssize_t read_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers)
{
    h3_req_t *r = ud;
    size_t n = fl_cfg.body_len - r->body_off < len ? fl_cfg.body_len - r->body_off : len;
    memcpy(buf, fl_cfg.body + r->body_off, n);
    r->body_off += n;
    *trailers = NULL;
    return (ssize_t)n;
}

static const fy_client_stream_ops_t sops = {on_head, on_data, on_end, on_error, read_body, NULL};

/* Submit one request on `r` (free) of `lc`; false when the server's stream credit is used up
 * (on_credit comes back). */
static bool issue_one(h3_lconn_t *lc, h3_req_t *r, uint64_t t_start)
{
    fl_worker_t *w = hw->w;
    fy_arena_reset(&r->arena);
    fy_headers_t hs = {0};
    const fl_url_t *u = &fl_cfg.urls[lc->url_rr++ % (uint32_t)fl_cfg.nurls];
    FY_HDR_ADD(&r->arena, &hs, ":method", fl_cfg.method, strlen(fl_cfg.method));
    FY_HDR_ADD(&r->arena, &hs, ":scheme", "https", 5);
    FY_HDR_ADD(&r->arena, &hs, ":authority", fl_cfg.authority, strlen(fl_cfg.authority));
    FY_HDR_ADD(&r->arena, &hs, ":path", u->path, strlen(u->path));
    for (int k = 0; k < fl_cfg.nheaders; k++)
        fy_headers_add(&r->arena, &hs, fl_cfg.headers[k].name, strlen(fl_cfg.headers[k].name),
                       fl_cfg.headers[k].value, strlen(fl_cfg.headers[k].value));
    r->lc = lc;
    r->status = 0;
    r->body = 0;
    r->body_off = 0;
    r->t_start = t_start;
    r->s = fy_h3_client_submit(lc->cli, &hs, fl_cfg.body != NULL, &r->arena, &sops, r);
    if (!r->s) return false;
    r->busy = true;
    lc->fc->inflight++;
    w->issued++;
    return true;
}

static void issue_all(h3_lconn_t *lc)
{
    fl_worker_t *w = hw->w;
    if (!lc->ready || fl_cfg.rate > 0) return;
    for (int i = 0; i < fl_cfg.streams && !stopping(); i++) {
        h3_req_t *r = &lc->reqs[i];
        if (r->busy) continue;
        if (w->budget && w->issued >= w->budget) return;
        if (!issue_one(lc, r, fl_now_ns())) return;
    }
}

/* Open loop: issue every request whose scheduled time has come, round robin over the
 * connections with a free stream. */
static void pump(void)
{
    fl_worker_t *w = hw->w;
    w->now = fl_now_ns();
    while (!stopping() && w->next_sched <= w->now && !(w->budget && w->issued >= w->budget)) {
        h3_req_t *r = NULL;
        h3_lconn_t *lc = NULL;
        for (int k = 0; k < w->nconns && !r; k++) {
            h3_lconn_t *x = &hw->lcs[(w->rr + k) % w->nconns];
            if (!x->ready) continue;
            for (int i = 0; i < fl_cfg.streams; i++)
                if (!x->reqs[i].busy) {
                    r = &x->reqs[i];
                    lc = x;
                    w->rr = (w->rr + k + 1) % w->nconns;
                    break;
                }
        }
        if (!r) return; /* backlog: stays due; its latency keeps growing from next_sched */
        if (!issue_one(lc, r, w->next_sched)) return;
        w->next_sched += w->interval_ns;
    }
}

static void on_ready(void *ud)
{
    h3_lconn_t *lc = ud;
    lc->ready = true;
    lc->fc->w->st.connects++;
    if (fl_cfg.rate > 0)
        pump();
    else
        issue_all(lc);
}

static void on_credit(void *ud)
{
    if (fl_cfg.rate > 0)
        pump();
    else
        issue_all(ud);
}

static void on_goaway(void *ud)
{
    h3_lconn_t *lc = ud;
    lc->ready = false; /* the in-flight ones finish; a new connection follows on close */
}

static void on_retry(fy_timer_t *t)
{
    lconn_start(t->data);
}

static void on_close(void *ud, const char *why)
{
    h3_lconn_t *lc = ud;
    lc->cli = NULL;
    lc->ready = false;
    if (!lc->fc->ever_ready) fl_count_error(lc->fc, FL_ERR_TLS, 1);
    if (!stopping()) fy_timer_start(&hw->loop, &lc->retry, 100);
}

static const fy_h3_client_conn_ops_t cops = {on_ready, on_credit, on_goaway, on_close};

static void lconn_start(h3_lconn_t *lc)
{
    if (stopping()) return;
    fy_quic_client_opts_t o = {
        .conf = &hw->conf, .sni = fl_cfg.host, .insecure = fl_cfg.insecure, .name = "ferry-load"};
    lc->cli = fy_h3_client_connect(&hw->loop, (struct sockaddr *)&fl_cfg.addr, fl_cfg.addrlen, &o,
                                   &cops, lc);
    if (!lc->cli) {
        fl_count_error(lc->fc, FL_ERR_CONNECT, 1);
        fy_timer_start(&hw->loop, &lc->retry, 100);
    }
}

static void on_tick(fy_timer_t *t)
{
    fl_worker_t *w = hw->w;
    w->now = fl_now_ns();
    if (stopping()) {
        fy_loop_stop(&hw->loop);
        return;
    }
    if (fl_cfg.rate > 0) pump();
    fy_timer_start(&hw->loop, t, fl_cfg.rate > 0 ? 1 : 10);
}

static void on_hold_end(fy_timer_t *t)
{
    (void)t;
    fy_loop_stop(&hw->loop);
}

void *fl_h3_worker_run(fl_worker_t *w)
{
    h3_worker_t self = {.w = w};
    hw = &self;
    self.conf = (fy_quic_conf_t){.cc = FY_QUIC_CC_CUBIC,
                                 .idle_timeout_ms = 30000,
                                 .handshake_timeout_ms = (uint64_t)(fl_cfg.timeout * 1000),
                                 .max_streams = 100,
                                 .stream_window = 1 << 20,
                                 .connection_window = 16 << 20,
                                 .send_buffer = 256 * 1024,
                                 .max_datagram_size = 0,
                                 .max_connections = 1};
    if (self.conf.handshake_timeout_ms == 0) self.conf.handshake_timeout_ms = 10000;
    if (fy_loop_init(&self.loop) < 0) return NULL;
    self.lcs = calloc((size_t)w->nconns, sizeof *self.lcs);
    for (int i = 0; i < w->nconns; i++) {
        h3_lconn_t *lc = &self.lcs[i];
        lc->fc = &w->conns[i];
        lc->fc->w = w;
        lc->fc->fd = -1;
        lc->reqs = calloc((size_t)fl_cfg.streams, sizeof *lc->reqs);
        for (int k = 0; k < fl_cfg.streams; k++) fy_arena_init(&lc->reqs[k].arena, NULL, 0, 2048);
        fy_timer_init(&lc->retry, on_retry, lc);
    }
    while ((w->now = fl_now_ns()) < w->t0) {
        struct timespec ts = {0, (long)(w->t0 - w->now)};
        nanosleep(&ts, NULL);
    }
    fy_loop_update_time(&self.loop);
    w->next_sched = w->t0 + (w->interval_ns * (uint64_t)w->id) / (uint64_t)fl_cfg.threads;
    for (int i = 0; i < w->nconns; i++) lconn_start(&self.lcs[i]);
    fy_timer_init(&self.tick, on_tick, NULL);
    fy_timer_start(&self.loop, &self.tick, 10);
    fy_loop_run(&self.loop);
    w->now = fl_now_ns();
    w->finish_ns = w->now < w->end ? w->now : w->end;
    w->stopping = true;
    fy_timer_stop(&self.loop, &self.tick);
    if (fl_cfg.hold > 0) {
        /* the connections stay open and serviced (ACKs, keep-alive), with nothing issued */
        fprintf(stderr, "holding\n");
        fy_timer_init(&self.hold, on_hold_end, NULL);
        fy_timer_start(&self.loop, &self.hold, (uint64_t)(fl_cfg.hold * 1000));
        fy_loop_run(&self.loop);
    }
    for (int i = 0; i < w->nconns; i++) {
        h3_lconn_t *lc = &self.lcs[i];
        fy_timer_stop(&self.loop, &lc->retry);
        for (int k = 0; k < fl_cfg.streams; k++)
            if (lc->reqs[k].busy) {
                lc->reqs[k].busy = false;
                fy_h3_client_release(lc->reqs[k].s);
            }
        if (lc->cli) fy_h3_client_close(lc->cli);
    }
    fy_defer_t *d; /* the closes' deferred frees */
    while ((d = self.loop.defer_head)) {
        self.loop.defer_head = d->next;
        if (!self.loop.defer_head) self.loop.defer_tail = &self.loop.defer_head;
        d->queued = false;
        d->cb(d);
    }
    for (int i = 0; i < w->nconns; i++) {
        for (int k = 0; k < fl_cfg.streams; k++) fy_arena_free(&self.lcs[i].reqs[k].arena);
        free(self.lcs[i].reqs);
    }
    free(self.lcs);
    fy_loop_destroy(&self.loop);
    return NULL;
}
