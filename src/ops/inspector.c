/* The inspector: start/stop, the capture filter and layer, and the completion observer. */
#include "ops/inspector_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "ops/inspector_ws.h"

static fy_inspector_t *the;

fy_inspector_t *fy_inspector_get(void)
{
    return the;
}

fy_inspector_t *fy_inspector_start(const fy_inspector_conf_t *c, const char *data_dir,
                                   const struct sockaddr *proxy, socklen_t proxylen)
{
    if (the) {
        if (strcmp(the->listen, c->address) != 0)
            fy_log(FY_LOG_NOTICE, "inspector: changes to `inspector:` apply after a restart");
        return the;
    }
    char dir[4096];
    if (c->dir)
        snprintf(dir, sizeof dir, "%s", c->dir);
    else
        snprintf(dir, sizeof dir, "%s/inspector", data_dir ? data_dir : ".");
    fy_inspector_t *ins = fy_xcalloc(1, sizeof *ins);
    ins->lfd = -1;
    ins->wake[0] = ins->wake[1] = -1;
    ins->body_cap = c->body_cap;
    ins->token = c->token ? fy_xstrdup(c->token) : NULL;
    ins->listen = fy_xstrdup(c->address);
    ins->max_clients = (int)c->max_clients;
    ins->replay_timeout_ms = c->replay_timeout_ms;
    ins->bp_timeout_ms = c->breakpoint_timeout_ms;
    pthread_mutex_init(&ins->bp_lock, NULL);
    if (proxy && proxylen <= sizeof ins->proxy) {
        memcpy(&ins->proxy, proxy, proxylen);
        ins->proxylen = proxylen;
    }
    int fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (const struct sockaddr *)&c->addr, c->addrlen) < 0 ||
        listen(fd, 64) < 0 || pipe2(ins->wake, O_CLOEXEC) < 0) {
        fy_log(FY_LOG_EMERG, "inspector.address: %s: %s", c->address, strerror(errno));
        if (fd >= 0) close(fd);
        free(ins->token);
        free(ins->listen);
        free(ins);
        return NULL;
    }
    ins->lfd = fd;
    const char **rh = fy_xcalloc(c->redact_headers.n + 1, sizeof *rh);
    for (size_t i = 0; i < c->redact_headers.n; i++) rh[i] = c->redact_headers.v[i];
    const char **rj = fy_xcalloc(c->redact_json.n + 1, sizeof *rj);
    for (size_t i = 0; i < c->redact_json.n; i++) rj[i] = c->redact_json.v[i];
    fy_cs_conf_t sc = {.dir = dir,
                       .max_size = c->max_size,
                       .max_age_ms = c->max_age_ms,
                       .segment_size = c->segment_size,
                       .body_cap = c->body_cap,
                       .redact = c->redact,
                       .redact_headers = rh,
                       .redact_json = rj,
                       .max_queue = (size_t)c->queue,
                       .max_queue_bytes = c->queue_bytes};
    ins->store = fy_cs_open(&sc);
    free(rh);
    free(rj);
    /* started before main blocks the signals it waits for: this thread (and the connection
       threads it starts) must not take a SIGTERM, whose default would end the process */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    int rc = ins->store ? pthread_create(&ins->thread, NULL, fy__insp_http_main, ins) : -1;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        fy_log(FY_LOG_EMERG, "inspector: cannot start its threads");
        fy_cs_close(ins->store);
        close(fd);
        close(ins->wake[0]);
        close(ins->wake[1]);
        free(ins->token);
        free(ins->listen);
        free(ins);
        return NULL;
    }
    fy_log(FY_LOG_NOTICE, "inspector: UI on http://%s/, store %s", c->address, dir);
    the = ins;
    return ins;
}

void fy_inspector_shutdown(void)
{
    fy_inspector_t *ins = the;
    if (!ins) return;
    the = NULL;
    atomic_store(&ins->stopping, true);
    if (write(ins->wake[1], "x", 1) < 0) { /* the accept loop also polls `stopping` */
    }
    pthread_join(ins->thread, NULL);
    /* connection threads notice `stopping` within their poll interval */
    for (int i = 0; i < 200 && atomic_load(&ins->clients) > 0; i++) usleep(10000);
    close(ins->lfd);
    close(ins->wake[0]);
    close(ins->wake[1]);
    fy_cs_close(ins->store);
    fy__insp_break_free(ins);
    free(ins->token);
    free(ins->listen);
    if (atomic_load(&ins->clients) == 0) free(ins); /* else a thread still holds it */
}

/* ---- the capture filter and its layer ---- */

typedef struct cap_filter {
    fy_filter_t base;
    fy_inspector_t *ins;
    bool route;      /* a route's `capture:` (else: an intercepting listener) */
    int sample;      /* percent sampled at random */
    int status_min;  /* 0: unset */
    uint64_t slower; /* ms, 0: unset */
    char *header;    /* owned, lowercase, or NULL */
    bool bodies;
} cap_filter_t;

typedef struct cap_layer {
    fy_sink_layer_t l;
    cap_filter_t *f;
    bool sampled;   /* stored whatever the conditions say */
    bool head_seen; /* the first send went by (a response breakpoint looks at it) */
    size_t max;
    char *req, *res; /* arena, grown by doubling up to max bytes each */
    size_t req_len, res_len, req_cap, res_cap;
    uint64_t req_seen, res_seen;
    void (*saved_on_body)(fy_exchange_t *ex, const char *p, size_t n, bool end);
    fy_insp_ws_t *ws; /* a WebSocket tunnel: its bytes are messages, not bodies */
    bool small_used;  /* `small` is req's or res's first buffer */
    char small[64];   /* the first body buffer: a small body needs no arena allocation */
} cap_layer_t;

/* Room for `want` more bytes in *buf (at most max in all): the buffer doubles (from 64 bytes)
   in the exchange's arena, so a small body never costs a body-cap allocation (nor, starting
   small, an arena block of its own: 4 KiB was a malloc per flow). Bytes available. */
static size_t reserve(cap_layer_t *c, fy_exchange_t *ex, char **buf, size_t len, size_t *cap,
                      size_t want)
{
    size_t room = c->max - len, k = want < room ? want : room;
    if (len + k > *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        while (nc < len + k) nc *= 2;
        if (nc > c->max) nc = c->max;
        char *nb;
        if (!*cap && nc <= sizeof c->small && !c->small_used) {
            nb = c->small;
            c->small_used = true;
        } else {
            nb = fy_arena_alloc(ex->arena, nc);
        }
        if (len) memcpy(nb, *buf, len);
        *buf = nb;
        *cap = nc;
    }
    return k;
}

static void keep(cap_layer_t *c, fy_exchange_t *ex, char **buf, size_t *len, size_t *cap,
                 uint64_t *seen, const char *p, size_t n)
{
    *seen += n;
    if (!c->max || n == 0 || *len >= c->max) return;
    size_t k = reserve(c, ex, buf, *len, cap, n);
    memcpy(*buf + *len, p, k);
    *len += k;
}

static void pass(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                 int state)
{
    cap_layer_t *c = (cap_layer_t *)l;
    for (size_t i = 0; i < n && state != FY_SEND_ERROR; i++) {
        if (c->ws)
            fy_insp_ws_feed(c->ws, false, bufs[i].iov_base, bufs[i].iov_len);
        else
            keep(c, ex, &c->res, &c->res_len, &c->res_cap, &c->res_seen, bufs[i].iov_base,
                 bufs[i].iov_len);
    }
    fy_layer_next_send(l, ex, bufs, n, state);
}

/* The first send carries the response head: a response breakpoint may hold it there. */
static bool held_at_head(cap_layer_t *c, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                         int state, fy__insp_pass_fn fn)
{
    if (c->head_seen) return false;
    c->head_seen = true;
    if (c->ws) return false; /* a 101 is not held: the tunnel's bytes follow it at once */
    return fy__insp_break_response(c->f->ins, ex, &c->l, bufs, n, state, fn);
}

static void layer_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                       int state)
{
    if (!held_at_head((cap_layer_t *)l, ex, bufs, n, state, pass)) pass(l, ex, bufs, n, state);
}

static void layer_send_nobody(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs,
                              size_t n, int state)
{
    if (!held_at_head((cap_layer_t *)l, ex, bufs, n, state, fy_layer_next_send))
        fy_layer_next_send(l, ex, bufs, n, state);
}

static void layer_send_file(fy_sink_layer_t *l, fy_exchange_t *ex, int fd, off_t off, size_t len,
                            int state)
{
    cap_layer_t *c = (cap_layer_t *)l;
    c->head_seen = true; /* files are not held (their bytes are not the handler's to lend) */
    if (c->max && c->res_len < c->max && len) {
        size_t want = reserve(c, ex, &c->res, c->res_len, &c->res_cap, len);
        ssize_t got = pread(fd, c->res + c->res_len, want, off);
        if (got > 0) c->res_len += (size_t)got;
    }
    c->res_seen += len;
    fy_layer_next_send_file(l, ex, fd, off, len, state);
}

static const fy_layer_ops_t layer_ops;

static void layer_on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    cap_layer_t *c = (cap_layer_t *)fy_exchange_find_layer(ex, &layer_ops);
    if (c->ws)
        fy_insp_ws_feed(c->ws, true, p, n);
    else
        keep(c, ex, &c->req, &c->req_len, &c->req_cap, &c->req_seen, p, n);
    ex->on_body = c->saved_on_body;
    c->saved_on_body(ex, p, n, end);
}

static void layer_read_body(fy_sink_layer_t *l, fy_exchange_t *ex)
{
    cap_layer_t *c = (cap_layer_t *)l;
    if (ex->on_body != layer_on_body) {
        c->saved_on_body = ex->on_body;
        ex->on_body = layer_on_body;
    }
    fy_layer_next_read_body(l, ex);
}

static const fy_layer_ops_t layer_ops = {
    .name = "inspector",
    .send = layer_send,
    .send_file = layer_send_file,
    .read_body = layer_read_body,
};

static const fy_layer_ops_t layer_ops_nobody = {.name = "inspector-nobody",
                                                .send = layer_send_nobody};

static uint64_t rnd(void)
{
    static _Thread_local uint64_t s;
    if (!s) {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        s = ((uint64_t)tv.tv_usec << 20) ^ (uint64_t)(uintptr_t)&s ^ (uint64_t)tv.tv_sec;
        s |= 1;
    }
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

static fy_filter_verdict_t on_request(fy_filter_t *base, fy_exchange_t *ex)
{
    cap_filter_t *f = (cap_filter_t *)base;
    /* WebSocket (h1 Upgrade, h2/h3 extended CONNECT) is a flow with messages; other tunnels
       (CONNECT, WebTransport) are not flows */
    bool ws = ex->req.protocol.len == 9 && fy_str_ieq(ex->req.protocol, "websocket", 9);
    if (!ws && (ex->req.method_id == FY_M_CONNECT || ex->req.protocol.len)) return FY_FILTER_NEXT;
    bool sampled =
        !f->route || f->sample >= 100 || (f->sample > 0 && (int)(rnd() % 100) < f->sample);
    bool cond = f->status_min || f->slower || f->header;
    if (!sampled && !cond) {
        atomic_fetch_add_explicit(&f->ins->sampled_out, 1, memory_order_relaxed);
        return FY_FILTER_NEXT;
    }
    cap_layer_t *c = fy_arena_alloc(ex->arena, sizeof *c);
    memset(c, 0, offsetof(cap_layer_t, small)); /* `small` is scratch */
    c->f = f;
    c->sampled = sampled;
    c->max = f->bodies ? f->ins->body_cap : 0;
    if (ws && f->bodies) {
        c->ws = fy_arena_alloc(ex->arena, sizeof *c->ws);
        fy_insp_ws_init(c->ws, ex->arena, f->ins->body_cap);
    }
    fy_exchange_push_layer(ex, &c->l, f->bodies ? &layer_ops : &layer_ops_nobody, FY_STAGE_CAPTURE);
    ex->timing.want = true; /* the origin side's timings go into the record */
    return fy__insp_break(f->ins, ex) ? FY_FILTER_WAIT : FY_FILTER_NEXT;
}

static void destroy(fy_filter_t *base)
{
    cap_filter_t *f = (cap_filter_t *)base;
    free(f->header);
    free(f);
}

static const fy_filter_ops_t filter_ops = {
    .name = "inspector",
    .stage = FY_STAGE_CAPTURE,
    .on_request = on_request,
    .destroy = destroy,
};

fy_filter_t *fy_inspector_filter_new(fy_inspector_t *ins, const fy_capture_route_conf_t *rc)
{
    cap_filter_t *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->base.ops = &filter_ops;
    f->ins = ins;
    f->bodies = true;
    if (rc) {
        f->route = true;
        f->status_min = (int)rc->status_min;
        f->slower = rc->slower_than_ms;
        if (rc->header) {
            f->header = strdup(rc->header);
            for (char *p = f->header; p && *p; p++) *p = fy_lower(*p);
        }
        bool cond = f->status_min || f->slower || f->header;
        f->sample = rc->sample_percent >= 0 ? (int)rc->sample_percent : cond ? 0 : 100;
        f->bodies = rc->bodies;
    }
    return &f->base;
}

/* ---- the observer ---- */

/* The exchange's headers are the store's as they are (no copy): the same two strings. */
_Static_assert(sizeof(fy_header_t) == sizeof(fy_cs_header_t) &&
                   offsetof(fy_header_t, name) == offsetof(fy_cs_header_t, name) &&
                   offsetof(fy_header_t, value) == offsetof(fy_cs_header_t, value),
               "fy_header_t and fy_cs_header_t differ");

static const fy_cs_header_t *conv(const fy_headers_t *hs)
{
    static const fy_cs_header_t none;
    return hs->n ? (const fy_cs_header_t *)hs->v : &none;
}

void fy_inspector_exchange(fy_exchange_t *ex, void *arg)
{
    fy_inspector_t *ins = arg;
    if (!ex->layers || !ins) return;
    cap_layer_t *c = (cap_layer_t *)fy_exchange_find_layer(ex, &layer_ops);
    if (!c) c = (cap_layer_t *)fy_exchange_find_layer(ex, &layer_ops_nobody);
    if (!c || !ex->res.status) return;
    uint64_t total = ex->ctx->loop->now_ms - ex->start_ms;
    if (!c->sampled) {
        const cap_filter_t *f = c->f;
        bool keep =
            (f->status_min && ex->res.status >= f->status_min) || (f->slower && total > f->slower);
        if (!keep && f->header) {
            size_t hl = strlen(f->header);
            keep = fy_headers_find(&ex->req.headers, f->header, hl) ||
                   fy_headers_find(&ex->res.headers, f->header, hl);
        }
        if (!keep) {
            atomic_fetch_add_explicit(&ins->sampled_out, 1, memory_order_relaxed);
            return;
        }
    }
    struct timeval now;
    gettimeofday(&now, NULL);
    fy_cs_flow_t f; /* every field set below (zeroing it first was ~30 instructions) */
    f.id = 0;
    f.start_us = (int64_t)now.tv_sec * 1000000 + now.tv_usec - (int64_t)total * 1000;
    f.duration_ms = (uint32_t)total;
    f.ttfb_ms = ex->head_ms >= ex->start_ms ? (uint32_t)(ex->head_ms - ex->start_ms) : 0;
    f.status = ex->res.status;
    f.version = ex->req.version;
    f.flags = !c->f->route ? FY_CS_INTERCEPTED : 0; /* the intercepting listener's filter */
    f.method = ex->req.method;
    f.scheme = ex->req.scheme;
    f.authority = ex->req.authority;
    f.target = ex->req.target;
    f.error = ex->error ? fy_str(ex->error, strlen(ex->error)) : FY_STR_NULL;
    f.req_headers = conv(&ex->req.headers);
    f.n_req_headers = ex->req.headers.n;
    f.res_headers = conv(&ex->res.headers);
    f.n_res_headers = ex->res.headers.n;
    f.req_body = fy_str(c->req ? c->req : "", c->req_len);
    f.res_body = fy_str(c->res ? c->res : "", c->res_len);
    f.req_size = ex->body_received > c->req_seen ? ex->body_received : c->req_seen;
    f.res_size = ex->bytes_sent > c->res_seen ? ex->bytes_sent : c->res_seen;
    if (c->max && !c->ws && f.req_size > c->req_len) f.flags |= FY_CS_REQ_TRUNCATED;
    if (c->max && !c->ws && f.res_size > c->res_len) f.flags |= FY_CS_RES_TRUNCATED;
    f.stream_id = ex->stream_id;
    size_t nws = c->ws ? c->ws->n + 1 : 0;
    /* the store encodes the flow before fy_cs_submit returns: the meta may be on the stack,
       which keeps the exchange's arena in its first block (a malloc per flow, else) */
    fy_cs_header_t local[FY__INSP_MAX_META];
    size_t mmax = FY__INSP_MAX_META;
    fy_cs_header_t *meta = nws ? fy_arena_alloc(ex->arena, (mmax + nws) * sizeof *meta) : local;
    f.meta = meta;
    /* the timings as numbers: the store writes their digits into the record */
    f.t_set = (ex->timing.dns_set ? 1u : 0u) | (ex->timing.set ? 6u : 0u) |
              (ex->timing.wait_us > 0 ? 8u : 0u);
    f.t_us[0] = ex->timing.dns_us;
    f.t_us[1] = ex->timing.connect_us;
    f.t_us[2] = ex->timing.tls_us;
    f.t_us[3] = ex->timing.wait_us;
    f.n_meta = ex->tunnel ? fy__insp_meta(ex, meta, mmax) : 0;
    if (c->ws) f.n_meta += fy__insp_ws_meta(ex, c->ws, meta + f.n_meta);
    fy_cs_submit(ins->store, &f);
}
