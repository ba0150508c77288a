#include "handler/proxy.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/alloc.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/pool.h"
#include <openssl/evp.h>

#include "h1/h1_resp.h"
#include "h2/h2_client.h"
#include "h3/h3_client.h"
#include "http/exchange.h"
#include "net/sock.h"

typedef struct proxy_handler {
    fy_handler_t h;
    const fy_proxy_conf_t *conf;
    fy_upstream_t *up;
} proxy_handler_t;

enum { R_HEAD = 0, R_BODY, R_DONE };
enum { T_FIRST_BYTE = 1, T_IDLE };

typedef struct proxy_req {
    fy_exchange_t *ex;
    proxy_handler_t *ph;
    fy_origin_conn_t *oc;
    fy_loop_t *loop;
    int worker;
    int server;
    uint64_t tried;
    int attempts;
    bool reused_conn;
    int sticky_hit;   /* the server the sticky cookie/header named, or -1 */
    uint64_t sent_us; /* request head handed to the origin (least-time) */
    fy_timer_t timer;
    int timer_kind;
    /* to the origin */
    char *head;
    size_t head_len;
    struct iovec out[4];
    int nout;
    char pre[24], post[8];
    bool req_chunked;
    bool req_body_done;
    bool req_body_waiting; /* asked the client codec for body, not given yet */
    bool sent_any;         /* request bytes reached the origin: no more retry */
    bool inflight;
    /* from the origin */
    char *ibuf; /* a pool chunk */
    size_t ilen, ipos;
    fy_h1_resp_t resp;
    fy_h1_header_t *hdrs;
    int rstate;
    int body_kind;
    uint64_t body_left;
    fy_h1_chunked_t chunked;
    size_t dec_out;     /* chunked: end of the decoded bytes compacted at ipos */
    size_t sending_len; /* bytes handed to the client codec, waiting for proceed */
    bool res_sending;
    bool origin_eof;
    bool finished;
    bool stopped;
    bool tunnel;      /* Upgrade / extended CONNECT: raw bytes both ways after 101 */
    bool tunnel_open; /* the origin said 101 */
    bool shut_origin; /* the client's side ended: FIN sent to the origin */
    /* HTTP/2 origin (h2c://, h2://): a stream on a shared session */
    bool h2;
    fy_origin_h2_t *hs;         /* held session */
    fy_h2_client_stream_t *st;  /* our stream (released in drop_origin) */
    fy_origin_h2_waiter_t wait; /* while the session connects */
    /* h3:// origins reuse the h2 path (same stream contract) with these instead */
    bool h3;
    fy_origin_h3_t *hs3;
    fy_h3_client_stream_t *st3;
    fy_origin_h3_waiter_t wait3;
    char *rb;      /* ring of response bytes: a pool chunk, or malloc */
    size_t rb_cap; /* the content length when smaller, else the stream window */
    size_t rb_head, rb_count;
    bool rb_pooled;
    bool h2_end;    /* the origin's END_STREAM arrived */
    bool h2_head;   /* the final head arrived */
    const char *qp; /* client body slice not yet taken by the codec */
    size_t qn;
    bool q_end;
    bool in_read_body;
    int refusals; /* streams the origin refused (not processed): retried apart from `retries` */
} proxy_req_t;

/* Refused streams (REFUSED_STREAM, past a GOAWAY) were not processed, so they are retried
 * this many times more than `retries`: an origin rotating connections (nginx after
 * keepalive_requests) refuses whole batches, and under load one request can be caught by
 * several GOAWAYs in a row (3 was not enough with 40 requests in flight and 20 per
 * connection; 8 failed about one run in five under a loaded machine, because the order in
 * which a GOAWAY's refused streams come back is arbitrary). So a refused request also waits
 * ahead of the others for the next connection (waiter priority = refusals), which takes the
 * lowest stream ids there. Bounded, so an origin that refuses everything still gets a 502. */
#define FY_PROXY_REFUSED_EXTRA 16

static void attempt(proxy_req_t *pr);
static void do_write(proxy_req_t *pr);
static void do_read(proxy_req_t *pr);
static bool deliver(proxy_req_t *pr);

/* ---- helpers ---- */

/* Microseconds, finer than the loop's cached clock: time to first byte on loopback is well
 * under the coarse clock's tick. */
static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static bool is_hop_by_hop(fy_str_t n)
{
    return fy_str_ieq(n, "connection", 10) || fy_str_ieq(n, "keep-alive", 10) ||
           fy_str_ieq(n, "proxy-connection", 16) || fy_str_ieq(n, "te", 2) ||
           fy_str_ieq(n, "trailer", 7) || fy_str_ieq(n, "transfer-encoding", 17) ||
           fy_str_ieq(n, "upgrade", 7) || fy_str_ieq(n, "http2-settings", 14) ||
           fy_str_ieq(n, "proxy-authorization", 19) || fy_str_ieq(n, "proxy-authenticate", 18);
}

/* Is `n` named in a Connection header of `hs` (those are hop-by-hop too)? */
static bool named_in_connection(const fy_headers_t *hs, fy_str_t n)
{
    char low[64];
    if (n.len >= sizeof low) return false;
    for (size_t i = 0; i < n.len; i++) low[i] = fy_lower(n.p[i]);
    for (size_t i = 0; i < hs->n; i++)
        if (fy_str_ieq(hs->v[i].name, "connection", 10) &&
            fy_str_list_has(hs->v[i].value, low, n.len))
            return true;
    return false;
}

static bool in_list(const fy_conf_strlist_t *l, fy_str_t n)
{
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->v[i]) == n.len && strncasecmp(l->v[i], n.p, n.len) == 0) return true;
    return false;
}

static bool in_map(const fy_conf_strmap_t *m, fy_str_t n)
{
    for (size_t i = 0; i < m->n; i++)
        if (strlen(m->keys[i]) == n.len && strncasecmp(m->keys[i], n.p, n.len) == 0) return true;
    return false;
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
    fy_arena_t *a;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap * 2;
        while (cap < b->len + n) cap *= 2;
        char *p = fy_arena_alloc(b->a, cap);
        memcpy(p, b->p, b->len);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}
#define SB_LIT(b, lit) sb_put((b), (lit), sizeof(lit) - 1)
static void sb_str(sbuf_t *b, fy_str_t s)
{
    sb_put(b, s.p, s.len);
}
static void sb_cstr(sbuf_t *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

/* The origin-form target for the origin: the route's prefix stripped and/or added. */
static void put_path(proxy_req_t *pr, sbuf_t *b)
{
    const fy_proxy_conf_t *pc = pr->ph->conf;
    fy_str_t path = pr->ex->req.target;
    if (pc->strip_prefix) {
        size_t sl = strlen(pc->strip_prefix);
        if (sl > 1 && pc->strip_prefix[sl - 1] == '/') sl--; /* "/api/" strips "/api" */
        if (path.len >= sl && memcmp(path.p, pc->strip_prefix, sl) == 0 &&
            (path.len == sl || path.p[sl] == '/' || path.p[sl] == '?')) {
            path.p += sl;
            path.len -= sl;
        }
    }
    if (pc->add_prefix) {
        size_t al = strlen(pc->add_prefix);
        if (al && pc->add_prefix[al - 1] == '/' && path.len && path.p[0] == '/') al--;
        sb_put(b, pc->add_prefix, al);
    }
    if (path.len == 0 || path.p[0] == '?') SB_LIT(b, "/");
    sb_str(b, path);
}

static void build_head(proxy_req_t *pr)
{
    fy_exchange_t *ex = pr->ex;
    const fy_proxy_conf_t *pc = pr->ph->conf;
    const fy_request_t *q = &ex->req;
    sbuf_t b = {fy_arena_alloc(ex->arena, 1024), 0, 1024, ex->arena};
    if (pr->tunnel && q->method_id == FY_M_CONNECT)
        SB_LIT(&b, "GET"); /* extended CONNECT (h2) becomes an HTTP/1.1 Upgrade */
    else
        sb_str(&b, q->method);
    SB_LIT(&b, " ");
    put_path(pr, &b);
    SB_LIT(&b, " HTTP/1.1\r\nHost: ");
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(pr->ph->up)->servers.v)[pr->server];
    if (pc->preserve_host && q->authority.len)
        sb_str(&b, q->authority);
    else
        sb_cstr(&b, sv->authority);
    SB_LIT(&b, "\r\n");
    bool any_xff = false, cookies_done = false;
    for (size_t i = 0; i < q->headers.n; i++) {
        const fy_header_t *h = &q->headers.v[i];
        if (fy_str_ieq(h->name, "cookie", 6) && !in_list(&pc->remove_headers, h->name) &&
            !in_map(&pc->set_headers, h->name)) {
            /* h2 clients split cookies into crumbs; HTTP/1.1 wants one field (RFC 9113
               §8.2.3), joined with "; " */
            if (cookies_done) continue;
            cookies_done = true;
            SB_LIT(&b, "Cookie: ");
            bool first = true;
            for (size_t k = i; k < q->headers.n; k++) {
                if (!fy_str_ieq(q->headers.v[k].name, "cookie", 6)) continue;
                if (!first) SB_LIT(&b, "; ");
                sb_str(&b, q->headers.v[k].value);
                first = false;
            }
            SB_LIT(&b, "\r\n");
            continue;
        }
        if (fy_str_ieq(h->name, "host", 4) || fy_str_ieq(h->name, "content-length", 14) ||
            is_hop_by_hop(h->name) || named_in_connection(&q->headers, h->name) ||
            in_list(&pc->remove_headers, h->name) || in_map(&pc->set_headers, h->name))
            continue;
        if (pc->forwarded && fy_str_ieq(h->name, "x-forwarded-for", 15)) {
            any_xff = true; /* every one of them is kept, in order, below */
            continue;
        }
        if (pc->forwarded && (fy_str_ieq(h->name, "x-forwarded-proto", 17) ||
                              fy_str_ieq(h->name, "x-forwarded-host", 16)))
            continue; /* ours replace what the client claims */
        sb_str(&b, h->name);
        SB_LIT(&b, ": ");
        sb_str(&b, h->value);
        SB_LIT(&b, "\r\n");
    }
    for (size_t i = 0; i < pc->set_headers.n; i++) {
        sb_cstr(&b, pc->set_headers.keys[i]);
        SB_LIT(&b, ": ");
        sb_cstr(&b, pc->set_headers.values[i]);
        SB_LIT(&b, "\r\n");
    }
    if (pc->forwarded) {
        char ip[64];
        fy_sock_host_str(ex->remote, ip, sizeof ip);
        SB_LIT(&b, "X-Forwarded-For: ");
        for (size_t i = 0; any_xff && i < q->headers.n; i++)
            if (fy_str_ieq(q->headers.v[i].name, "x-forwarded-for", 15)) {
                sb_str(&b, q->headers.v[i].value);
                SB_LIT(&b, ", ");
            }
        sb_cstr(&b, ip);
        SB_LIT(&b, "\r\nX-Forwarded-Proto: ");
        sb_str(&b, q->scheme);
        if (q->authority.len) {
            SB_LIT(&b, "\r\nX-Forwarded-Host: ");
            sb_str(&b, q->authority);
        }
        SB_LIT(&b, "\r\n");
    }
    if (pc->via) SB_LIT(&b, "Via: 1.1 ferry\r\n");
    if (pr->tunnel) {
        SB_LIT(&b, "Connection: Upgrade\r\nUpgrade: ");
        sb_str(&b, q->protocol);
        SB_LIT(&b, "\r\n");
        if (fy_str_ieq(q->protocol, "websocket", 9) &&
            !FY_HDR_FIND(&q->headers, "sec-websocket-key")) {
            /* RFC 8441 clients send no key; an HTTP/1.1 origin needs one */
            unsigned char raw[16];
            char key[32];
            uint64_t x = now_us() ^ (uint64_t)(uintptr_t)pr;
            for (int i = 0; i < 16; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                raw[i] = (unsigned char)x;
            }
            static const char b64[] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            size_t o = 0;
            for (int i = 0; i < 16; i += 3) {
                unsigned v = (unsigned)raw[i] << 16 | (i + 1 < 16 ? raw[i + 1] << 8 : 0) |
                             (i + 2 < 16 ? raw[i + 2] : 0);
                key[o++] = b64[v >> 18 & 63];
                key[o++] = b64[v >> 12 & 63];
                key[o++] = i + 1 < 16 ? b64[v >> 6 & 63] : '=';
                key[o++] = i + 2 < 16 ? b64[v & 63] : '=';
            }
            SB_LIT(&b, "Sec-WebSocket-Key: ");
            sb_put(&b, key, o);
            SB_LIT(&b, "\r\n");
            if (!FY_HDR_FIND(&q->headers, "sec-websocket-version"))
                SB_LIT(&b, "Sec-WebSocket-Version: 13\r\n");
        }
    } else if (q->content_length > 0) {
        char cl[32];
        int n = snprintf(cl, sizeof cl, "Content-Length: %lld\r\n", (long long)q->content_length);
        sb_put(&b, cl, (size_t)n);
    } else if (q->content_length < 0) {
        SB_LIT(&b, "Transfer-Encoding: chunked\r\n");
        pr->req_chunked = true;
    }
    SB_LIT(&b, "\r\n");
    pr->head = b.p;
    pr->head_len = b.len;
}

static void set_timer(proxy_req_t *pr, int kind)
{
    const fy_upstream_conf_t *uc = fy_upstream_conf(pr->ph->up);
    pr->timer_kind = kind;
    fy_timer_start(pr->loop, &pr->timer,
                   kind == T_FIRST_BYTE ? uc->first_byte_timeout_ms : uc->idle_timeout_ms);
}

static void drop_origin(proxy_req_t *pr, bool reusable)
{
    if (pr->h2) {
        if (pr->h3) {
            fy_origin_h3_cancel_wait(&pr->wait3);
            if (pr->st3) fy_h3_client_release(pr->st3);
            pr->st3 = NULL;
        } else {
            fy_origin_h2_cancel_wait(&pr->wait);
            if (pr->st) fy_h2_client_release(pr->st);
            pr->st = NULL;
        }
        if (pr->inflight) {
            fy_upstream_inflight(pr->ph->up, pr->worker, pr->server, -1);
            pr->inflight = false;
        }
        if (pr->hs) fy_origin_h2_release(pr->hs);
        pr->hs = NULL;
        if (pr->hs3) fy_origin_h3_release(pr->hs3);
        pr->hs3 = NULL;
        return;
    }
    if (!pr->oc) return;
    if (pr->inflight) {
        fy_upstream_inflight(pr->ph->up, pr->worker, pr->server, -1);
        pr->inflight = false;
    }
    fy_origin_release(pr->oc, reusable);
    pr->oc = NULL;
}

static void cleanup(void *arg)
{
    proxy_req_t *pr = arg;
    fy_timer_stop(pr->loop, &pr->timer);
    drop_origin(pr, false);
    if (pr->ibuf) fy_pool_put(fy_chunk_pool(), pr->ibuf);
    pr->ibuf = NULL;
    if (pr->rb_pooled)
        fy_pool_put(fy_chunk_pool(), pr->rb);
    else
        free(pr->rb);
    pr->rb = NULL;
}

static bool retryable(const proxy_req_t *pr)
{
    const fy_request_t *q = &pr->ex->req;
    bool idempotent = q->method_id == FY_M_GET || q->method_id == FY_M_HEAD ||
                      q->method_id == FY_M_OPTIONS || q->method_id == FY_M_PUT ||
                      q->method_id == FY_M_DELETE || q->method_id == FY_M_TRACE;
    return idempotent && q->content_length == 0 && pr->rstate == R_HEAD && pr->ilen == 0 &&
           !pr->ex->response_started && pr->attempts <= fy_upstream_conf(pr->ph->up)->retries;
}

/* The origin failed us. Before any response byte: another attempt, or 502/504. After: the
 * client sees an aborted response (h1: closed connection; h2: RST_STREAM), never a short 200. */
static void origin_failed(proxy_req_t *pr, int status, const char *why, bool count_fail)
{
    char a[64];
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(pr->ph->up)->servers.v)[pr->server];
    fy_warn("upstream %s: %s: %s", fy_upstream_conf(pr->ph->up)->name,
            fy_sock_addr_str((const struct sockaddr *)&sv->addr, a, sizeof a), why);
    if (count_fail) fy_upstream_report(pr->ph->up, pr->worker, pr->server, false, pr->loop->now_ms);
    bool stale = pr->reused_conn && pr->rstate == R_HEAD && pr->ilen == 0;
    drop_origin(pr, false);
    fy_timer_stop(pr->loop, &pr->timer);
    /* a pooled connection the origin had already closed: try again on a fresh one */
    if (stale && pr->ex->req.content_length == 0 && !pr->ex->response_started) {
        pr->tried &= ~(1ull << pr->server);
        attempt(pr);
        return;
    }
    if (retryable(pr)) {
        attempt(pr);
        return;
    }
    pr->finished = true;
    fy_exchange_fail(pr->ex, status, why);
}

static void on_timer(fy_timer_t *t)
{
    proxy_req_t *pr = t->data;
    if (pr->timer_kind == T_FIRST_BYTE)
        origin_failed(pr, 504, "origin first-byte timeout", true);
    else
        origin_failed(pr, 504, "origin idle timeout", false);
}

static void update_interest(proxy_req_t *pr)
{
    if (!pr->oc) return;
    uint32_t ev = 0;
    if (pr->nout) ev |= EPOLLOUT;
    if (pr->rstate != R_DONE && !pr->res_sending) ev |= EPOLLIN;
    if (fy_origin_want(pr->oc, ev) < 0) origin_failed(pr, 502, "origin socket error", false);
}

/* ---- request body: client -> origin ---- */

static void on_req_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    proxy_req_t *pr = ex->handler_data;
    pr->req_body_waiting = false;
    if (pr->stopped || pr->finished || !pr->oc) return;
    pr->nout = 0;
    if (pr->req_chunked) {
        if (n) {
            int l = snprintf(pr->pre, sizeof pr->pre, "%zx\r\n", n);
            pr->out[pr->nout++] = (struct iovec){pr->pre, (size_t)l};
            pr->out[pr->nout++] = (struct iovec){(void *)p, n};
            pr->out[pr->nout++] = (struct iovec){(void *)"\r\n", 2};
        }
        if (end) {
            /* the client's trailers go on to the origin */
            sbuf_t b = {fy_arena_alloc(ex->arena, 256), 0, 256, ex->arena};
            SB_LIT(&b, "0\r\n");
            for (size_t i = 0; i < ex->req_trailers.n; i++) {
                sb_str(&b, ex->req_trailers.v[i].name);
                SB_LIT(&b, ": ");
                sb_str(&b, ex->req_trailers.v[i].value);
                SB_LIT(&b, "\r\n");
            }
            SB_LIT(&b, "\r\n");
            pr->out[pr->nout++] = (struct iovec){b.p, b.len};
        }
    } else if (n) {
        pr->out[pr->nout++] = (struct iovec){(void *)p, n};
    }
    if (end) pr->req_body_done = true;
    if (pr->nout)
        do_write(pr);
    else if (!end) {
        pr->req_body_waiting = true;
        fy_exchange_read_body(ex, on_req_body);
    }
}

static void do_write(proxy_req_t *pr)
{
    while (pr->nout && pr->oc) {
        ssize_t w = pr->oc->t->ops->writev(pr->oc->t, pr->out, pr->nout);
        if (w == 0) break;
        if (w < 0) {
            origin_failed(pr, 502, "writing to the origin failed", false);
            return;
        }
        pr->sent_any = true;
        size_t left = (size_t)w;
        int i = 0;
        while (i < pr->nout && left >= pr->out[i].iov_len) left -= pr->out[i++].iov_len;
        memmove(pr->out, pr->out + i, (size_t)(pr->nout - i) * sizeof pr->out[0]);
        pr->nout -= i;
        if (pr->nout && left) {
            pr->out[0].iov_base = (char *)pr->out[0].iov_base + left;
            pr->out[0].iov_len -= left;
        }
    }
    if (!pr->oc) return;
    if (pr->nout == 0 && pr->tunnel && pr->req_body_done && !pr->shut_origin && pr->tunnel_open) {
        /* the client ended its side of the tunnel: pass the FIN on, keep reading */
        pr->shut_origin = true;
        pr->oc->t->ops->shutdown(pr->oc->t);
    }
    if (pr->nout == 0 && !pr->req_body_done && !pr->req_body_waiting && !pr->finished &&
        (!pr->tunnel || pr->tunnel_open)) {
        /* everything so far is with the origin: pull more of the client's body */
        pr->req_body_waiting = true;
        fy_exchange_read_body(pr->ex, on_req_body);
        if (!pr->oc) return;
    }
    update_interest(pr);
}

/* ---- response: origin -> client ---- */

static void proceed(fy_exchange_t *ex);
static void stop(fy_exchange_t *ex);
static const fy_producer_ops_t proxy_producer = {proceed, stop};

static void on_chunk(void *ud, const char *p, size_t n)
{
    proxy_req_t *pr = ud;
    if (pr->ibuf + pr->dec_out != p) memmove(pr->ibuf + pr->dec_out, p, n);
    pr->dec_out += n;
}

static void on_trailer(void *ud, fy_h1_str_t name, fy_h1_str_t value)
{
    proxy_req_t *pr = ud;
    fy_arena_t *a = pr->ex->arena;
    fy_headers_add(a, &pr->ex->res_trailers, fy_arena_strndup(a, name.p, name.len), name.len,
                   fy_arena_strndup(a, value.p, value.len), value.len);
}

/* What the route adds to every response head: set headers, Via, the sticky cookie. */
static void add_response_extras(proxy_req_t *pr)
{
    fy_exchange_t *ex = pr->ex;
    const fy_proxy_conf_t *pc = pr->ph->conf;
    for (size_t i = 0; i < pc->response_set_headers.n; i++)
        fy_headers_add(ex->arena, &ex->res.headers, pc->response_set_headers.keys[i],
                       strlen(pc->response_set_headers.keys[i]), pc->response_set_headers.values[i],
                       strlen(pc->response_set_headers.values[i]));
    if (pc->via) FY_HDR_ADD(ex->arena, &ex->res.headers, "via", "1.1 ferry", 9);
    const fy_sticky_conf_t *sc = fy_upstream_conf(pr->ph->up)->sticky;
    if (sc && sc->cookie && pr->sticky_hit != pr->server) {
        /* pin this client to the server that answered */
        size_t n = strlen(sc->cookie) + 16 + 32;
        char *v = fy_arena_alloc(ex->arena, n);
        int l = snprintf(v, n, "%s=%s; Path=/; HttpOnly", sc->cookie,
                         fy_upstream_server_id(pr->ph->up, pr->server));
        FY_HDR_ADD(ex->arena, &ex->res.headers, "set-cookie", v, (size_t)l);
    }
}

static void start_response(proxy_req_t *pr, int headlen)
{
    fy_exchange_t *ex = pr->ex;
    const fy_proxy_conf_t *pc = pr->ph->conf;
    fy_h1_resp_t *r = &pr->resp;
    for (size_t i = 0; i < r->nheaders; i++) {
        fy_str_t n = fy_str(r->headers[i].name.p, r->headers[i].name.len);
        fy_str_t v = fy_str(r->headers[i].value.p, r->headers[i].value.len);
        if (is_hop_by_hop(n) || fy_str_ieq(n, "content-length", 14) || fy_str_ieq(n, "date", 4) ||
            fy_str_ieq(n, "server", 6) || in_list(&pc->response_remove_headers, n) ||
            in_map(&pc->response_set_headers, n))
            continue;
        bool listed = false;
        for (size_t k = 0; k < r->nheaders && !listed; k++)
            if (fy_h1_str_eq_lit(r->headers[k].name, "connection")) {
                char low[64];
                if (n.len < sizeof low) {
                    for (size_t j = 0; j < n.len; j++) low[j] = fy_lower(n.p[j]);
                    listed = fy_str_list_has(fy_str(r->headers[k].value.p, r->headers[k].value.len),
                                             low, n.len);
                }
            }
        if (listed) continue;
        /* copied: the input buffer is reused for the body */
        fy_headers_add(ex->arena, &ex->res.headers, fy_arena_strndup(ex->arena, n.p, n.len), n.len,
                       fy_arena_strndup(ex->arena, v.p, v.len), v.len);
    }
    add_response_extras(pr);
    ex->res.status = r->status;
    pr->body_kind = r->body_kind;
    if (pr->tunnel && r->status == 101) {
        /* the tunnel is open: h1 clients get 101, h2 clients 200 (RFC 8441) */
        pr->tunnel_open = true;
        ex->res.status = ex->req.version >= 20 ? 200 : 101;
        pr->body_kind = FY_H1_RESP_CLOSE;
        ex->res.content_length = -1;
        if (ex->req.version >= 20) {
            size_t k = 0; /* no handshake proof for a client that sent no key */
            for (size_t i = 0; i < ex->res.headers.n; i++)
                if (!fy_str_ieq(ex->res.headers.v[i].name, "sec-websocket-accept", 20))
                    ex->res.headers.v[k++] = ex->res.headers.v[i];
            ex->res.headers.n = k;
        }
        pr->ipos = (size_t)headlen;
        pr->rstate = R_BODY;
        fy_upstream_report(pr->ph->up, pr->worker, pr->server, true, pr->loop->now_ms);
        fy_exchange_start_response(ex, &proxy_producer);
        /* the 101/200 goes out now, before any tunnel byte; proceed then reads on */
        pr->res_sending = true;
        pr->sending_len = 0;
        fy_exchange_send(ex, NULL, 0, FY_SEND_MORE);
        if (pr->oc) do_write(pr); /* and the client's bytes may flow to the origin */
        return;
    }
    if (r->body_kind == FY_H1_RESP_LENGTH) {
        ex->res.content_length = (int64_t)r->content_length;
        pr->body_left = r->content_length;
    } else if (r->body_kind == FY_H1_RESP_NONE) {
        /* HEAD / 204 / 304: pass the origin's length through for HEAD */
        ex->res.content_length = -1;
        for (size_t i = 0; i < r->nheaders; i++)
            if (fy_h1_str_eq_lit(r->headers[i].name, "content-length")) {
                int64_t cl = 0;
                for (size_t j = 0; j < r->headers[i].value.len; j++)
                    cl = cl * 10 + (r->headers[i].value.p[j] - '0');
                ex->res.content_length = cl;
            }
        if (r->status == 204 || r->status == 304) ex->res.content_length = -1;
        if (ex->req.method_id != FY_M_HEAD && r->status != 204 && r->status != 304)
            ex->res.content_length = 0;
    } else {
        ex->res.content_length = -1;
        if (r->body_kind == FY_H1_RESP_CHUNKED) fy_h1_chunked_init(&pr->chunked);
    }
    pr->ipos = (size_t)headlen;
    pr->rstate = r->body_kind == FY_H1_RESP_NONE ? R_DONE : R_BODY;
    fy_upstream_report(pr->ph->up, pr->worker, pr->server, r->status < 500, pr->loop->now_ms);
    if (fy_upstream_conf(pr->ph->up)->balance == FY_BALANCE_LEAST_TIME)
        fy_upstream_report_ttfb(pr->ph->up, pr->worker, pr->server, now_us() - pr->sent_us);
    fy_exchange_start_response(ex, &proxy_producer);
}

/* The response is complete: give the origin connection back (or close it) first, then the
 * last send (which may end the exchange at once). */
static void finish(proxy_req_t *pr, const char *p, size_t n)
{
    pr->finished = true;
    fy_timer_stop(pr->loop, &pr->timer);
    /* reusable only if both messages are complete and the origin sent nothing extra */
    bool reusable = pr->req_body_done && pr->nout == 0 && !pr->resp.conn_close &&
                    pr->body_kind != FY_H1_RESP_CLOSE && pr->ipos >= pr->ilen &&
                    pr->resp.status != 101;
    if (pr->oc) pr->oc->requests++;
    drop_origin(pr, reusable);
    struct iovec iov = {(void *)p, n};
    fy_exchange_send(pr->ex, &iov, n ? 1 : 0, FY_SEND_FINAL);
}

/* Returns true when the response was finished: the exchange (and pr, in its arena) may be
 * gone. */
static bool deliver(proxy_req_t *pr)
{
    if (pr->res_sending || pr->finished || pr->stopped) return false;
    if (pr->rstate == R_DONE) {
        finish(pr, NULL, 0);
        return true;
    }
    size_t avail = pr->ilen - pr->ipos;
    const char *p = pr->ibuf + pr->ipos;
    size_t take = 0;
    bool end = false;
    if (pr->body_kind == FY_H1_RESP_LENGTH) {
        take = avail < pr->body_left ? avail : (size_t)pr->body_left;
        pr->body_left -= take;
        end = pr->body_left == 0;
        pr->sending_len = take;
    } else if (pr->body_kind == FY_H1_RESP_CHUNKED) {
        size_t consumed = 0;
        pr->dec_out = pr->ipos;
        int r =
            fy_h1_chunked_decode(&pr->chunked, pr->ibuf + pr->ipos, avail, &consumed,
                                 pr->ex->ctx->limits->max_header_bytes, on_chunk, on_trailer, pr);
        if (r < 0) {
            origin_failed(pr, 502, "invalid chunked body from the origin", true);
            return true;
        }
        take = pr->dec_out - pr->ipos;
        /* the decoded bytes sit at ipos; the undecoded rest starts at ipos + consumed */
        pr->sending_len = consumed;
        end = r == 1;
    } else { /* until close */
        take = avail;
        pr->sending_len = take;
        end = pr->origin_eof;
    }
    if (end) {
        pr->rstate = R_DONE;
        pr->ipos += pr->sending_len;
        finish(pr, p, take);
        return true;
    }
    if (take == 0) {
        /* need more from the origin; keep a partial chunk line, drop what is consumed */
        if (pr->body_kind == FY_H1_RESP_CHUNKED) pr->ipos += pr->sending_len;
        if (pr->ipos > 0 && pr->ipos < pr->ilen) {
            memmove(pr->ibuf, pr->ibuf + pr->ipos, pr->ilen - pr->ipos);
            pr->ilen -= pr->ipos;
            pr->ipos = 0;
        } else if (pr->ipos >= pr->ilen) {
            pr->ipos = pr->ilen = 0;
        }
        update_interest(pr);
        return false;
    }
    pr->res_sending = true;
    update_interest(pr); /* no reading while the client holds our buffer */
    struct iovec iov = {(void *)p, take};
    fy_exchange_send(pr->ex, &iov, 1, FY_SEND_MORE);
    return false;
}

static void h2_proceed(proxy_req_t *pr);

static void proceed(fy_exchange_t *ex)
{
    proxy_req_t *pr = ex->handler_data;
    if (!pr->res_sending) return;
    if (pr->h2) {
        h2_proceed(pr);
        return;
    }
    pr->res_sending = false;
    pr->ipos += pr->sending_len;
    pr->sending_len = 0;
    if (pr->ipos >= pr->ilen) pr->ipos = pr->ilen = 0;
    set_timer(pr, T_IDLE);
    if (deliver(pr)) return; /* pr may be gone */
    if (!pr->res_sending && pr->oc) do_read(pr);
}

static void stop(fy_exchange_t *ex)
{
    proxy_req_t *pr = ex->handler_data;
    pr->stopped = true;
    fy_timer_stop(pr->loop, &pr->timer);
    drop_origin(pr, false); /* the client went away mid-response */
}

static void do_read(proxy_req_t *pr)
{
    while (pr->oc && !pr->res_sending && !pr->finished) {
        if (!pr->ibuf) {
            pr->ibuf = fy_pool_get(fy_chunk_pool());
            pr->ilen = pr->ipos = 0;
        }
        if (pr->ilen == FY_CHUNK_SIZE) {
            if (pr->rstate == R_HEAD) {
                origin_failed(pr, 502, "response head from the origin too large", true);
                return;
            }
            if (pr->ipos == 0) {
                origin_failed(pr, 502, "chunk framing line from the origin too long", true);
                return;
            }
            memmove(pr->ibuf, pr->ibuf + pr->ipos, pr->ilen - pr->ipos);
            pr->ilen -= pr->ipos;
            pr->ipos = 0;
        }
        ssize_t n = pr->oc->t->ops->read(pr->oc->t, pr->ibuf + pr->ilen, FY_CHUNK_SIZE - pr->ilen);
        if (n == 0) break;
        if (n < 0) {
            if (n == FY_EEOF && pr->rstate == R_BODY && pr->body_kind == FY_H1_RESP_CLOSE) {
                pr->origin_eof = true;
                deliver(pr);
                return;
            }
            origin_failed(pr, 502,
                          pr->rstate == R_HEAD ? "origin closed the connection before responding"
                                               : "origin closed the connection mid-response",
                          pr->rstate == R_HEAD);
            return;
        }
        pr->ilen += (size_t)n;
        if (pr->rstate == R_HEAD) {
            for (;;) {
                fy_h1_limits_t lim = {pr->ex->ctx->limits->max_request_line,
                                      pr->ex->ctx->limits->max_header_bytes,
                                      (size_t)pr->ex->ctx->limits->max_headers};
                fy_h1_resp_init(&pr->resp, pr->hdrs);
                int r = fy_h1_parse_response(&pr->resp, pr->ibuf + pr->ipos, pr->ilen - pr->ipos,
                                             pr->ex->req.method_id == FY_M_HEAD, &lim);
                if (r == FY_H1_INCOMPLETE) break;
                if (r < 0) {
                    origin_failed(pr, 502, "invalid response head from the origin", true);
                    return;
                }
                if (pr->resp.status >= 100 && pr->resp.status < 200 && pr->resp.status != 101) {
                    /* interim: 100 is ours to give (the client codec answers Expect); 103
                       Early Hints and others go on to the client */
                    if (pr->resp.status != 100) {
                        fy_headers_t hs = {0};
                        for (size_t i = 0; i < pr->resp.nheaders; i++) {
                            fy_h1_header_t *h = &pr->resp.headers[i];
                            fy_str_t hn = fy_str(h->name.p, h->name.len);
                            if (is_hop_by_hop(hn)) continue;
                            fy_headers_add(pr->ex->arena, &hs, hn.p, hn.len, h->value.p,
                                           h->value.len);
                        }
                        fy_exchange_send_informational(pr->ex, pr->resp.status, &hs);
                    }
                    pr->ipos += (size_t)r;
                    continue;
                }
                int headlen = (int)pr->ipos + r;
                set_timer(pr, T_IDLE);
                start_response(pr, headlen);
                break;
            }
            if (pr->rstate == R_HEAD) {
                if (pr->ipos == pr->ilen) pr->ipos = pr->ilen = 0;
                continue;
            }
        }
        set_timer(pr, T_IDLE);
        if (deliver(pr)) return; /* finished: the exchange and pr may be gone */
    }
    update_interest(pr);
}

/* ---- origin connection events ---- */

static void origin_event(fy_origin_conn_t *oc, unsigned ev, void *ud)
{
    proxy_req_t *pr = ud;
    if (ev & FY_ORIGIN_ERROR) {
        pr->oc = NULL;
        if (pr->inflight) {
            fy_upstream_inflight(pr->ph->up, pr->worker, pr->server, -1);
            pr->inflight = false;
        }
        origin_failed(pr, 502, oc->error ? oc->error : "origin connect failed", true);
        return;
    }
    if (ev & FY_ORIGIN_READY) {
        set_timer(pr, T_FIRST_BYTE);
        pr->sent_us = now_us();
        pr->out[0] = (struct iovec){pr->head, pr->head_len};
        pr->nout = 1;
        do_write(pr);
        return;
    }
    if ((ev & EPOLLOUT) && pr->nout) do_write(pr);
    if (!pr->oc) return;
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) do_read(pr);
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

/* ---- HTTP/2 origins: one stream on a shared session (upstream_h2.c, h2/h2_client.c) ---- */

static void attempt_h2(proxy_req_t *pr);

static void h2_add(fy_arena_t *a, fy_headers_t *hs, const char *n, size_t nl, const char *v,
                   size_t vl)
{
    fy_headers_add(a, hs, n, nl, v, vl);
}

/* Lowercase copy of a field name (HTTP/2 wants lowercase; h1 clients send any case). */
static void h2_add_lower(fy_arena_t *a, fy_headers_t *hs, fy_str_t n, fy_str_t v)
{
    char *l = fy_arena_alloc(a, n.len + 1);
    for (size_t i = 0; i < n.len; i++) l[i] = fy_lower(n.p[i]);
    l[n.len] = '\0';
    h2_add(a, hs, l, n.len, v.p, v.len);
}

static void build_h2_head(proxy_req_t *pr, fy_headers_t *hs)
{
    fy_exchange_t *ex = pr->ex;
    fy_arena_t *a = ex->arena;
    const fy_proxy_conf_t *pc = pr->ph->conf;
    const fy_request_t *q = &ex->req;
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(pr->ph->up)->servers.v)[pr->server];
    *hs = (fy_headers_t){0};
    if (pr->tunnel)
        h2_add(a, hs, ":method", 7, "CONNECT", 7); /* extended CONNECT (RFC 8441) */
    else
        h2_add(a, hs, ":method", 7, q->method.p, q->method.len);
    h2_add(a, hs, ":scheme", 7, sv->tls ? "https" : "http", sv->tls ? 5 : 4);
    if (pc->preserve_host && q->authority.len)
        h2_add(a, hs, ":authority", 10, q->authority.p, q->authority.len);
    else
        h2_add(a, hs, ":authority", 10, sv->authority, strlen(sv->authority));
    sbuf_t b = {fy_arena_alloc(a, 256), 0, 256, a};
    put_path(pr, &b);
    h2_add(a, hs, ":path", 5, b.p, b.len);
    if (pr->tunnel) {
        char *pl = fy_arena_alloc(a, q->protocol.len + 1);
        for (size_t i = 0; i < q->protocol.len; i++) pl[i] = fy_lower(q->protocol.p[i]);
        h2_add(a, hs, ":protocol", 9, pl, q->protocol.len);
    }
    bool any_xff = false;
    for (size_t i = 0; i < q->headers.n; i++) {
        const fy_header_t *h = &q->headers.v[i];
        if (fy_str_ieq(h->name, "te", 2) && fy_str_list_has(h->value, "trailers", 8) &&
            !pr->tunnel) {
            h2_add(a, hs, "te", 2, "trailers", 8); /* the only TE HTTP/2 carries */
            continue;
        }
        if (fy_str_ieq(h->name, "host", 4) || fy_str_ieq(h->name, "content-length", 14) ||
            is_hop_by_hop(h->name) || named_in_connection(&q->headers, h->name) ||
            in_list(&pc->remove_headers, h->name) || in_map(&pc->set_headers, h->name))
            continue;
        if (pr->tunnel && fy_str_ieq(h->name, "sec-websocket-key", 17))
            continue; /* RFC 8441 §5: no key over HTTP/2 */
        if (pc->forwarded && fy_str_ieq(h->name, "x-forwarded-for", 15)) {
            any_xff = true;
            continue;
        }
        if (pc->forwarded && (fy_str_ieq(h->name, "x-forwarded-proto", 17) ||
                              fy_str_ieq(h->name, "x-forwarded-host", 16)))
            continue;
        h2_add_lower(a, hs, h->name, h->value);
    }
    for (size_t i = 0; i < pc->set_headers.n; i++)
        h2_add_lower(a, hs, fy_str(pc->set_headers.keys[i], strlen(pc->set_headers.keys[i])),
                     fy_str(pc->set_headers.values[i], strlen(pc->set_headers.values[i])));
    if (pc->forwarded) {
        char ip[64];
        fy_sock_host_str(ex->remote, ip, sizeof ip);
        sbuf_t x = {fy_arena_alloc(a, 128), 0, 128, a};
        for (size_t i = 0; any_xff && i < q->headers.n; i++)
            if (fy_str_ieq(q->headers.v[i].name, "x-forwarded-for", 15)) {
                sb_str(&x, q->headers.v[i].value);
                SB_LIT(&x, ", ");
            }
        sb_cstr(&x, ip);
        h2_add(a, hs, "x-forwarded-for", 15, x.p, x.len);
        h2_add(a, hs, "x-forwarded-proto", 17, q->scheme.p, q->scheme.len);
        if (q->authority.len)
            h2_add(a, hs, "x-forwarded-host", 16, q->authority.p, q->authority.len);
    }
    if (pc->via) h2_add(a, hs, "via", 3, "1.1 ferry", 9);
    if (!pr->tunnel && q->content_length > 0) {
        char *cl = fy_arena_alloc(a, 24);
        int n = snprintf(cl, 24, "%lld", (long long)q->content_length);
        h2_add(a, hs, "content-length", 14, cl, (size_t)n);
    }
}

/* Sec-WebSocket-Accept for an HTTP/1.1 client's key (RFC 6455 §4.2.2): the HTTP/2 origin
 * (RFC 8441) never saw the key, so the proof is ours to give. */
static bool ws_accept(fy_str_t key, char out[32])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char buf[128];
    if (key.len + sizeof guid > sizeof buf) return false;
    memcpy(buf, key.p, key.len);
    memcpy(buf + key.len, guid, sizeof guid - 1);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    if (EVP_Digest(buf, key.len + sizeof guid - 1, md, &mdlen, EVP_sha1(), NULL) != 1) return false;
    EVP_EncodeBlock((unsigned char *)out, md, (int)mdlen); /* 20 bytes -> 28 chars + NUL */
    return true;
}

static void h2_finish(proxy_req_t *pr, const struct iovec *iov, int n)
{
    pr->finished = true;
    fy_timer_stop(pr->loop, &pr->timer);
    drop_origin(pr, true);
    fy_exchange_send(pr->ex, iov, (size_t)n, FY_SEND_FINAL);
}

static void h2_deliver(proxy_req_t *pr)
{
    if (pr->res_sending || pr->finished || pr->stopped || !pr->h2_head) return;
    if (pr->rb_count == 0) {
        if (pr->h2_end) h2_finish(pr, NULL, 0);
        return;
    }
    struct iovec iov[2];
    int n = 0;
    size_t first = pr->rb_cap - pr->rb_head;
    if (first > pr->rb_count) first = pr->rb_count;
    iov[n++] = (struct iovec){pr->rb + pr->rb_head, first};
    if (pr->rb_count > first) iov[n++] = (struct iovec){pr->rb, pr->rb_count - first};
    if (pr->h2_end) {
        /* the ring stays allocated until the exchange is done (cleanup) */
        h2_finish(pr, iov, n);
        return;
    }
    pr->res_sending = true;
    pr->sending_len = pr->rb_count;
    fy_exchange_send(pr->ex, iov, (size_t)n, FY_SEND_MORE);
}

static void h2_proceed(proxy_req_t *pr)
{
    pr->res_sending = false;
    size_t n = pr->sending_len;
    pr->sending_len = 0;
    if (n) {
        pr->rb_head = (pr->rb_head + n) % pr->rb_cap;
        pr->rb_count -= n;
        if (pr->rb_count == 0) pr->rb_head = 0;
        if (pr->st) fy_h2_client_consume(pr->st, n); /* the origin may send as much again */
        if (pr->st3) fy_h3_client_consume(pr->st3, n);
    }
    if (!pr->h2_end) set_timer(pr, T_IDLE);
    h2_deliver(pr);
}

static void h2_on_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    proxy_req_t *pr = ud;
    fy_exchange_t *ex = pr->ex;
    const fy_proxy_conf_t *pc = pr->ph->conf;
    if (status < 200) {
        if (status != 100) fy_exchange_send_informational(ex, status, hs); /* 103 & co */
        return;
    }
    set_timer(pr, T_IDLE);
    int64_t cl = -1;
    for (size_t i = 0; i < hs->n; i++) {
        fy_str_t n = hs->v[i].name, v = hs->v[i].value;
        if (fy_str_ieq(n, "content-length", 14)) {
            cl = 0;
            for (size_t j = 0; j < v.len && v.p[j] >= '0' && v.p[j] <= '9'; j++)
                cl = cl * 10 + (v.p[j] - '0');
            continue;
        }
        if (is_hop_by_hop(n) || fy_str_ieq(n, "date", 4) || fy_str_ieq(n, "server", 6) ||
            in_list(&pc->response_remove_headers, n) || in_map(&pc->response_set_headers, n))
            continue;
        if (pr->tunnel && ex->req.version < 20 && fy_str_ieq(n, "sec-websocket-accept", 20))
            continue;
        fy_headers_add(ex->arena, &ex->res.headers, n.p, n.len, v.p, v.len);
    }
    add_response_extras(pr);
    pr->h2_head = true;
    ex->res.status = status;
    bool ok = status < 500;
    if (pr->tunnel && status >= 200 && status < 300) {
        /* the tunnel is open: h1 clients get 101 (with our Sec-WebSocket-Accept), h2 200 */
        pr->tunnel_open = true;
        ex->res.content_length = -1;
        if (ex->req.version < 20) {
            ex->res.status = 101;
            const fy_header_t *k = FY_HDR_FIND(&ex->req.headers, "sec-websocket-key");
            char acc[32];
            if (k && ws_accept(k->value, acc)) {
                char *v = fy_arena_strndup(ex->arena, acc, 28);
                FY_HDR_ADD(ex->arena, &ex->res.headers, "sec-websocket-accept", v, 28);
            }
        }
        pr->rstate = R_BODY;
        fy_upstream_report(pr->ph->up, pr->worker, pr->server, true, pr->loop->now_ms);
        fy_exchange_start_response(ex, &proxy_producer);
        pr->res_sending = true; /* the 101/200 goes out now, before any tunnel byte */
        pr->sending_len = 0;
        fy_exchange_send(ex, NULL, 0, FY_SEND_MORE);
        if (pr->st) fy_h2_client_resume(pr->st); /* the client's bytes may flow now */
        if (pr->st3) fy_h3_client_resume(pr->st3);
        return;
    }
    if (pr->tunnel) {
        /* refused upgrade: an ordinary response; nothing of the client's goes on */
        pr->q_end = true;
        if (pr->st) fy_h2_client_resume(pr->st);
        if (pr->st3) fy_h3_client_resume(pr->st3);
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
    pr->rstate = end ? R_DONE : R_BODY;
    fy_upstream_report(pr->ph->up, pr->worker, pr->server, ok, pr->loop->now_ms);
    if (fy_upstream_conf(pr->ph->up)->balance == FY_BALANCE_LEAST_TIME)
        fy_upstream_report_ttfb(pr->ph->up, pr->worker, pr->server, now_us() - pr->sent_us);
    fy_exchange_start_response(ex, &proxy_producer);
}

static void h2_on_data(void *ud, const char *p, size_t n)
{
    proxy_req_t *pr = ud;
    if (!pr->rb) {
        /* unconsumed bytes never exceed the stream window, nor (nghttp2 checks it) the
           announced content length: a tiny response gets a tiny ring */
        int64_t cl = pr->ex->res.content_length;
        pr->rb_cap =
            cl > 0 && (uint64_t)cl < FY_H2C_STREAM_WINDOW ? (size_t)cl : FY_H2C_STREAM_WINDOW;
        pr->rb_pooled = pr->rb_cap <= FY_CHUNK_SIZE;
        if (pr->rb_pooled) {
            pr->rb = fy_pool_get(fy_chunk_pool());
            pr->rb_cap = FY_CHUNK_SIZE;
        } else {
            pr->rb = fy_xmalloc(pr->rb_cap);
        }
    }
    if (pr->rb_count + n > pr->rb_cap) { /* the window (or content length) bounds it */
        if (pr->st) fy_h2_client_release(pr->st);
        pr->st = NULL;
        if (pr->st3) fy_h3_client_release(pr->st3);
        pr->st3 = NULL;
        drop_origin(pr, false);
        pr->finished = true;
        fy_exchange_fail(pr->ex, 502, "origin overran the stream window");
        return;
    }
    size_t tail = (pr->rb_head + pr->rb_count) % pr->rb_cap;
    size_t first = pr->rb_cap - tail;
    if (first > n) first = n;
    memcpy(pr->rb + tail, p, first);
    if (n > first) memcpy(pr->rb, p + first, n - first);
    pr->rb_count += n;
    set_timer(pr, T_IDLE);
    h2_deliver(pr);
}

static void h2_on_end(void *ud, fy_headers_t *trailers)
{
    proxy_req_t *pr = ud;
    pr->h2_end = true;
    pr->rstate = R_DONE;
    if (trailers->n) pr->ex->res_trailers = *trailers;
    if (pr->tunnel_open) pr->q_end = true; /* the origin ended the tunnel */
    h2_deliver(pr);
}

static void h2_on_error(void *ud, int kind, uint32_t code, const char *why)
{
    proxy_req_t *pr = ud;
    (void)code;
    if (!pr->h2_head) {
        if (kind == FY_H2C_REFUSED && !pr->sent_any &&
            ++pr->refusals <= fy_upstream_conf(pr->ph->up)->retries + FY_PROXY_REFUSED_EXTRA) {
            /* not processed (RST REFUSED_STREAM or past GOAWAY's last stream): try again */
            fy_debug("upstream %s: %s; retrying", fy_upstream_conf(pr->ph->up)->name, why);
            fy_timer_stop(pr->loop, &pr->timer);
            drop_origin(pr, false);
            attempt(pr);
            return;
        }
        origin_failed(pr, 502, why, kind != FY_H2C_REFUSED);
        return;
    }
    /* after the head: the client sees the abort (h1: closed connection; h2: RST_STREAM) */
    char a[64];
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(pr->ph->up)->servers.v)[pr->server];
    fy_warn("upstream %s: %s: %s", fy_upstream_conf(pr->ph->up)->name,
            fy_sock_addr_str((const struct sockaddr *)&sv->addr, a, sizeof a), why);
    fy_timer_stop(pr->loop, &pr->timer);
    drop_origin(pr, false);
    if (pr->finished || pr->stopped) return;
    pr->finished = true;
    fy_exchange_fail(pr->ex, 502, why);
}

static void on_req_body_h2(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    proxy_req_t *pr = ex->handler_data;
    pr->req_body_waiting = false;
    if (pr->stopped || pr->finished) return;
    pr->qp = p;
    pr->qn = n;
    pr->q_end = end;
    if (!pr->in_read_body && pr->st) fy_h2_client_resume(pr->st);
    if (!pr->in_read_body && pr->st3) fy_h3_client_resume(pr->st3);
}

static ssize_t h2_read_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers)
{
    proxy_req_t *pr = ud;
    if (pr->tunnel && !pr->tunnel_open && !pr->q_end) return FY_H2C_DEFER;
    for (int guard = 0; guard < 64; guard++) {
        if (pr->qn) {
            size_t n = pr->qn < len ? pr->qn : len;
            memcpy(buf, pr->qp, n);
            pr->qp += n;
            pr->qn -= n;
            pr->sent_any = true;
            return (ssize_t)n;
        }
        if (pr->q_end) {
            pr->req_body_done = true;
            *trailers = pr->tunnel ? NULL : &pr->ex->req_trailers;
            return 0;
        }
        if (pr->req_body_waiting || pr->stopped || pr->finished) return FY_H2C_DEFER;
        pr->req_body_waiting = true;
        pr->in_read_body = true;
        fy_exchange_read_body(pr->ex, on_req_body_h2);
        pr->in_read_body = false;
        if (pr->req_body_waiting) return FY_H2C_DEFER;
    }
    return FY_H2C_DEFER;
}

static const fy_h2_client_stream_ops_t h2_stream_ops = {h2_on_head, h2_on_data, h2_on_end,
                                                        h2_on_error, h2_read_body};

static void h2_start(proxy_req_t *pr, fy_origin_h2_t *s)
{
    pr->hs = s;
    fy_h2_client_t *c = fy_origin_h2_client(s);
    if (pr->tunnel && !fy_h2_client_can_connect_protocol(c)) {
        drop_origin(pr, true);
        pr->finished = true;
        fy_warn("upstream %s: origin does not allow extended CONNECT (RFC 8441): no WebSocket",
                fy_upstream_conf(pr->ph->up)->name);
        fy_exchange_fail(pr->ex, 502,
                         "HTTP/2 origin without SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441)");
        return;
    }
    fy_headers_t hs;
    build_h2_head(pr, &hs);
    bool has_body = pr->tunnel || pr->ex->req.content_length != 0;
    pr->st = fy_h2_client_submit(c, &hs, has_body, pr->ex->arena, &h2_stream_ops, pr);
    if (!pr->st) {
        origin_failed(pr, 502, "cannot open a stream to the origin", false);
        return;
    }
    pr->sent_us = now_us();
    set_timer(pr, T_FIRST_BYTE);
}

static void h2_session_ready(fy_origin_h2_waiter_t *wt, fy_origin_h2_t *s, const char *err)
{
    proxy_req_t *pr = fy_container_of(wt, proxy_req_t, wait);
    if (!s) {
        origin_failed(pr, 502, err ? err : "origin connect failed", true);
        return;
    }
    h2_start(pr, s);
}

/* ---- HTTP/3 origins: the h2 path above on an h3 client stream (upstream_h3.c) ---- */

static void h3_on_error(void *ud, int kind, uint64_t code, const char *why)
{
    /* FY_H3C_* and FY_H2C_* kinds have the same values */
    h2_on_error(ud, kind, (uint32_t)code, why);
}

static const fy_h3_client_stream_ops_t h3_stream_ops = {h2_on_head, h2_on_data, h2_on_end,
                                                        h3_on_error, h2_read_body};

static void h3_start(proxy_req_t *pr, fy_origin_h3_t *s)
{
    pr->hs3 = s;
    fy_headers_t hs;
    build_h2_head(pr, &hs); /* the same fields: pseudo-headers first, lowercase names */
    bool has_body = pr->tunnel || pr->ex->req.content_length != 0;
    pr->st3 = fy_h3_client_submit(fy_origin_h3_client(s), &hs, has_body, pr->ex->arena,
                                  &h3_stream_ops, pr);
    if (!pr->st3) {
        origin_failed(pr, 502, "cannot open a stream to the origin", false);
        return;
    }
    pr->sent_us = now_us();
    set_timer(pr, T_FIRST_BYTE);
}

static void h3_conn_ready(fy_origin_h3_waiter_t *wt, fy_origin_h3_t *s, const char *err)
{
    proxy_req_t *pr = fy_container_of(wt, proxy_req_t, wait3);
    if (!s) {
        origin_failed(pr, 502, err ? err : "origin connect failed", true);
        return;
    }
    h3_start(pr, s);
}

static void attempt_h3(proxy_req_t *pr)
{
    fy_upstream_t *up = pr->ph->up;
    pr->h2 = pr->h3 = true;
    pr->reused_conn = false;
    pr->h2_head = pr->h2_end = false;
    pr->rb_head = pr->rb_count = 0;
    pr->wait3.cb = h3_conn_ready;
    fy_upstream_inflight(up, pr->worker, pr->server, 1);
    pr->inflight = true;
    bool ready = false;
    const char *err = "origin connect failed";
    fy_origin_h3_t *s =
        fy_origin_h3_acquire(up, pr->worker, pr->server, pr->loop, &pr->wait3, &ready, &err);
    if (ready) {
        h3_start(pr, s);
        return;
    }
    if (!pr->wait3.s) { /* not even a socket */
        fy_upstream_inflight(up, pr->worker, pr->server, -1);
        pr->inflight = false;
        fy_upstream_report(up, pr->worker, pr->server, false, pr->loop->now_ms);
        if (retryable(pr)) {
            attempt(pr);
            return;
        }
        pr->finished = true;
        fy_exchange_fail(pr->ex, 502, err);
    }
}

static void attempt_h2(proxy_req_t *pr)
{
    fy_upstream_t *up = pr->ph->up;
    pr->h2 = true;
    pr->reused_conn = false;
    pr->h2_head = pr->h2_end = false;
    pr->rb_head = pr->rb_count = 0;
    pr->wait.cb = h2_session_ready;
    pr->wait.priority = pr->refusals; /* refused before: first in line on the next connection */
    fy_upstream_inflight(up, pr->worker, pr->server, 1);
    pr->inflight = true;
    bool ready = false;
    const char *err = "origin connect failed";
    fy_origin_h2_t *s =
        fy_origin_h2_acquire(up, pr->worker, pr->server, pr->loop, &pr->wait, &ready, &err);
    if (ready) {
        h2_start(pr, s);
        return;
    }
    if (!pr->wait.s) { /* not even a socket */
        fy_upstream_inflight(up, pr->worker, pr->server, -1);
        pr->inflight = false;
        fy_upstream_report(up, pr->worker, pr->server, false, pr->loop->now_ms);
        if (retryable(pr)) {
            attempt(pr);
            return;
        }
        pr->finished = true;
        fy_exchange_fail(pr->ex, 502, err);
    }
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
    pr->tried |= 1ull << (pr->server & 63);
    pr->sent_any = false;
    if (((const fy_upstream_server_conf_t *)fy_upstream_conf(up)->servers.v)[pr->server].h3) {
        attempt_h3(pr);
        return;
    }
    if (((const fy_upstream_server_conf_t *)fy_upstream_conf(up)->servers.v)[pr->server].h2) {
        pr->h3 = false;
        attempt_h2(pr);
        return;
    }
    pr->h2 = pr->h3 = false;
    pr->req_chunked = false;
    pr->rstate = R_HEAD;
    pr->ilen = pr->ipos = 0;
    pr->nout = 0;
    build_head(pr); /* Host may depend on the server */
    const char *err = "origin connect failed";
    bool ready = false;
    pr->oc =
        fy_origin_acquire(up, pr->worker, pr->server, pr->loop, origin_event, pr, &ready, &err);
    if (!pr->oc) {
        fy_upstream_report(up, pr->worker, pr->server, false, pr->loop->now_ms);
        if (retryable(pr)) {
            attempt(pr);
            return;
        }
        pr->finished = true;
        fy_exchange_fail(pr->ex, 502, err);
        return;
    }
    fy_upstream_inflight(up, pr->worker, pr->server, 1);
    pr->inflight = true;
    pr->reused_conn = ready;
    if (ready) origin_event(pr->oc, FY_ORIGIN_READY, pr);
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
    pr->hdrs =
        fy_arena_alloc(ex->arena, sizeof(fy_h1_header_t) * (size_t)ex->ctx->limits->max_headers);
    pr->tunnel = ex->req.protocol.len > 0;
    pr->req_body_done = ex->req.content_length == 0 && !pr->tunnel; /* a tunnel's bytes are
                                                                        its body */
    pr->sticky_hit = -1;
    fy_timer_init(&pr->timer, on_timer, pr);
    ex->handler_data = pr;
    fy_arena_on_reset(ex->arena, cleanup, pr);
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
    return &ph->h;
}
