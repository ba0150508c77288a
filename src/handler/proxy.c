#include "handler/proxy.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "core/counters.h"
#include "core/alloc.h"
#include "core/errors.h"
#include "core/list.h"
#include "core/log.h"
#include "core/pool.h"
#include <openssl/evp.h>

#include "http/exchange.h"
#include "net/sock.h"
#include "upstream/origin.h"

typedef struct proxy_handler {
    fy_handler_t h;
    const fy_proxy_conf_t *conf;
    fy_upstream_t *up;
} proxy_handler_t;

enum { T_FIRST_BYTE = 1, T_IDLE };

/* Where a WebSocket's frames (RFC 6455 §5.2) end in one direction of a tunnel: a Close frame
 * of ours may only go in between two frames. */
typedef struct ws_track {
    uint64_t left;   /* payload bytes of the current frame still to pass */
    uint8_t hdr[14]; /* a frame header being read */
    uint8_t hlen;
} ws_track_t;

typedef struct proxy_req {
    fy_exchange_t *ex;
    proxy_handler_t *ph;
    fy_loop_t *loop;
    int worker;
    int server;
    uint64_t tried;
    int attempts;
    int sticky_hit;   /* the server the sticky cookie/header named, or -1 */
    uint64_t sent_us; /* request head handed to the origin (least-time) */
    fy_timer_t timer;
    int timer_kind;
    int in_codec;          /* inside a call into the origin stream: deliver after it returns */
    bool req_body_waiting; /* asked the client codec for body, not given yet */
    bool sent_any;         /* request body bytes reached the codec: no more retry */
    bool got_bytes;        /* the failed attempt had received response bytes */
    bool inflight;
    bool res_sending; /* bytes handed to the client codec, waiting for proceed */
    size_t sending_len;
    bool finished;
    bool stopped;
    bool tunnel;       /* Upgrade / extended CONNECT: raw bytes both ways after 101 */
    bool tunnel_open;  /* the origin accepted the tunnel */
    bool o_head;       /* the final head arrived */
    bool o_end;        /* the response is complete at the origin's side */
    bool fb_timed_out; /* an attempt ran out of first-byte time: the origin may have the
                          request, so retries go only to servers not tried yet */
    bool no_retry;     /* the failure is the origin's answer itself (too many 1xx) */
    /* the origin stream of the current attempt (upstream/origin.h), whatever it speaks */
    fy_origin_stream_t os; /* (calls on it are no-ops while nothing is open) */
    const char *zp;        /* response bytes lent by the origin stream until consumed */
    size_t zn;
    const char *qp; /* client body slice not yet taken by the codec */
    size_t qn;
    bool q_end;
    bool in_read_body;
    bool trail;       /* early response: the rest of the request body still goes to the origin */
    bool trail_abort; /* ... not any more (origin error, timeout): close it instead */
    int refusals;     /* streams the origin refused (not processed): retried apart from `retries` */
    uint64_t start_ms; /* the first attempt's start (upstream `retry-timeout`) */
    int64_t interim;   /* interim (1xx) heads of this attempt (limits.informational-responses) */
    fy_timer_t body_timer; /* limits.body-total-timeout, while the request body comes */
    bool body_timing;
    /* an open WebSocket tunnel: frame boundaries both ways, and our Close frames */
    bool ws;           /* the tunnel's protocol is websocket */
    bool ws_closing;   /* going away (stop, tunnel timeout): Close 1001 to both sides */
    bool ws_down_sent; /* ours went to the client: the origin's later bytes are dropped */
    bool ws_up_sent;   /* ours went to the origin (then its end): the client's are dropped */
    ws_track_t ws_down, ws_up; /* origin -> client, client -> origin */
    uint8_t ws_up_frame[8];    /* our masked Close for the origin */
    fy_list_t ws_node;         /* in this thread's open_ws while `ws` */
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

/* An HTTP/1.1 origin that answers before the request body is all sent (nginx `return`, an
 * early 401 or 413) leaves the connection reusable only once the body's end went out. Up to
 * this many unsent bytes the body of an HTTP/1.1 client keeps flowing after the response (it
 * gets the whole response at once; only the exchange's end waits), so that the connection
 * goes back to the pool instead of costing a new one per request; more, and it is closed. */
#define FY_PROXY_TRAIL_MAX (1u << 20)

static void attempt(proxy_req_t *pr);
static void deliver(proxy_req_t *pr);
static void resume_body(proxy_req_t *pr);
static void ws_going_away(proxy_req_t *pr);

/* ---- helpers ---- */

/* Microseconds, finer than the loop's cached clock: time to first byte on loopback is well
 * under the coarse clock's tick. */
static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Fields with a rule of their own, by name (one switch on the length per field instead of a
 * chain of comparisons: this runs for every field of every request and response). */
enum {
    F_PASS = 0,
    F_HOP,   /* hop-by-hop (RFC 9110 §7.6.1), proxy authentication */
    F_TE,    /* hop-by-hop, but "te: trailers" goes on to HTTP/2 and HTTP/3 origins */
    F_CL,    /* content-length: the codecs frame bodies */
    F_HOST,  /* host: from the route or the client's authority */
    F_DATE,  /* date, server: ours in responses */
    F_XFF,   /* x-forwarded-for */
    F_XFX,   /* x-forwarded-proto, x-forwarded-host */
    F_WSKEY, /* sec-websocket-key */
    F_WSACC, /* sec-websocket-accept */
};

static int field_class(fy_str_t n)
{
    switch (n.len) {
    case 2:
        return fy_str_ieq(n, "te", 2) ? F_TE : F_PASS;
    case 4:
        if (fy_str_ieq(n, "host", 4)) return F_HOST;
        return fy_str_ieq(n, "date", 4) ? F_DATE : F_PASS;
    case 6:
        return fy_str_ieq(n, "server", 6) ? F_DATE : F_PASS;
    case 7:
        return fy_str_ieq(n, "trailer", 7) || fy_str_ieq(n, "upgrade", 7) ? F_HOP : F_PASS;
    case 10:
        return fy_str_ieq(n, "connection", 10) || fy_str_ieq(n, "keep-alive", 10) ? F_HOP : F_PASS;
    case 14:
        if (fy_str_ieq(n, "content-length", 14)) return F_CL;
        return fy_str_ieq(n, "http2-settings", 14) ? F_HOP : F_PASS;
    case 15:
        return fy_str_ieq(n, "x-forwarded-for", 15) ? F_XFF : F_PASS;
    case 16:
        if (fy_str_ieq(n, "proxy-connection", 16)) return F_HOP;
        return fy_str_ieq(n, "x-forwarded-host", 16) ? F_XFX : F_PASS;
    case 17:
        if (fy_str_ieq(n, "transfer-encoding", 17)) return F_HOP;
        if (fy_str_ieq(n, "x-forwarded-proto", 17)) return F_XFX;
        return fy_str_ieq(n, "sec-websocket-key", 17) ? F_WSKEY : F_PASS;
    case 18:
        return fy_str_ieq(n, "proxy-authenticate", 18) ? F_HOP : F_PASS;
    case 19:
        return fy_str_ieq(n, "proxy-authorization", 19) ? F_HOP : F_PASS;
    case 20:
        return fy_str_ieq(n, "sec-websocket-accept", 20) ? F_WSACC : F_PASS;
    default:
        return F_PASS;
    }
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

/* The origin-form target for the origin: the route's prefix stripped and/or added. */
static void put_path(proxy_req_t *pr, sbuf_t *b)
{
    const fy_proxy_conf_t *pc = pr->ph->conf;
    fy_str_t path = pr->ex->req.target;
    fy_str_t norm = pr->ex->req.path; /* normalised by the router; target is as received */
    if (pc->forward_path == 0 && norm.p != path.p && norm.len && norm.p[0] == '/' && path.len &&
        path.p[0] == '/') {
        const char *q = memchr(path.p, '?', path.len); /* the query goes on untouched */
        size_t ql = q ? (size_t)(path.p + path.len - q) : 0;
        char *t = fy_arena_alloc(pr->ex->arena, norm.len + ql);
        memcpy(t, norm.p, norm.len);
        if (ql) memcpy(t + norm.len, q, ql);
        path = fy_str(t, norm.len + ql);
    }
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

static void set_timer(proxy_req_t *pr, int kind)
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
static void drop_origin(proxy_req_t *pr, bool reusable)
{
    if (pr->inflight) {
        fy_upstream_inflight(pr->ph->up, pr->worker, pr->server, -1);
        pr->inflight = false;
    }
    fy_origin_stream_close(&pr->os, reusable);
    if (!pr->finished) pr->zn = 0;
}

static void cleanup(void *arg)
{
    proxy_req_t *pr = arg;
    if (pr->ws) fy_list_remove(&pr->ws_node);
    pr->ws = false;
    fy_timer_stop(pr->loop, &pr->timer);
    fy_timer_stop(pr->loop, &pr->body_timer);
    drop_origin(pr, false);
    fy_origin_stream_free(&pr->os);
}

static bool retryable(const proxy_req_t *pr)
{
    const fy_request_t *q = &pr->ex->req;
    bool idempotent = q->method_id == FY_M_GET || q->method_id == FY_M_HEAD ||
                      q->method_id == FY_M_OPTIONS || q->method_id == FY_M_PUT ||
                      q->method_id == FY_M_DELETE || q->method_id == FY_M_TRACE;
    const fy_upstream_conf_t *uc = fy_upstream_conf(pr->ph->up);
    if (!idempotent || q->content_length != 0 || pr->o_head || pr->got_bytes || pr->no_retry ||
        pr->ex->response_started || pr->attempts > uc->retries)
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
static void origin_failed(proxy_req_t *pr, int status, const char *why, bool count_fail)
{
    char a[64];
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(pr->ph->up)->servers.v)[pr->server];
    if (count_fail) fy_upstream_report(pr->ph->up, pr->worker, pr->server, false, pr->loop->now_ms);
    pr->got_bytes = fy_origin_stream_got_bytes(&pr->os);
    /* a pooled connection the origin had already closed: try again on a fresh one (not after
       a timeout: that origin got the request and said nothing) */
    bool stale = pr->os.reused && !pr->o_head && !pr->got_bytes && !pr->fb_timed_out &&
                 !pr->no_retry && pr->ex->req.content_length == 0 && !pr->ex->response_started;
    bool retry = !stale && retryable(pr);
    /* one line per failure, saying what happens next */
    fy_warn("upstream %s: %s: %s%s", fy_upstream_conf(pr->ph->up)->name,
            fy_sock_addr_str((const struct sockaddr *)&sv->addr, a, sizeof a), why,
            stale   ? "; retrying on a new connection"
            : retry ? (pr->fb_timed_out ? "; retrying on another server" : "; retrying")
                    : "");
    drop_origin(pr, false);
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
            ws_going_away(pr);
            return;
        }
        /* another kind of tunnel, or a close handshake that did not finish: cut it */
        fy_info("upstream %s: %s", fy_upstream_conf(pr->ph->up)->name,
                pr->ws ? "WebSocket close handshake timed out" : "tunnel idle timeout");
        drop_origin(pr, false);
        pr->finished = true;
        fy_exchange_fail(pr->ex, 504, pr->ws ? "WebSocket close timeout" : "tunnel idle timeout");
        return;
    }
    if (pr->trail) {
        /* the response is complete: the rest of the body is not worth failing it for */
        pr->trail_abort = true;
        deliver(pr);
        return;
    }
    if (pr->timer_kind == T_FIRST_BYTE) {
        pr->fb_timed_out = true;
        /* a multiplexed connection that left a stream unanswered takes no new streams
           until it proves alive (h2: PING), and is closed once its streams end otherwise */
        bool sent = pr->ex->req.content_length == 0 || pr->q_end;
        if (sent && fy_origin_stream_is_open(&pr->os)) fy_origin_stream_suspect(&pr->os);
        origin_failed(pr, 504, "origin first-byte timeout", true);
    } else
        origin_failed(pr, 504, "origin idle timeout", false);
}

/* ---- response: origin -> client ---- */

static void proceed(fy_exchange_t *ex);
static void stop(fy_exchange_t *ex);
static const fy_producer_ops_t proxy_producer = {proceed, stop};

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

static void stop(fy_exchange_t *ex)
{
    proxy_req_t *pr = ex->handler_data;
    pr->stopped = true;
    fy_timer_stop(pr->loop, &pr->timer);
    drop_origin(pr, false); /* the client went away mid-response */
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

/* ---- the request for the origin ---- */

static void h2_add(fy_arena_t *a, fy_headers_t *hs, const char *n, size_t nl, const char *v,
                   size_t vl)
{
    fy_headers_add(a, hs, n, nl, v, vl);
}

/* Lowercase copy of a field name (HTTP/2 and HTTP/3 want lowercase; h1 clients send any case). */
static void h2_add_lower(fy_arena_t *a, fy_headers_t *hs, fy_str_t n, fy_str_t v)
{
    char *l = fy_arena_alloc(a, n.len + 1);
    for (size_t i = 0; i < n.len; i++) l[i] = fy_lower(n.p[i]);
    l[n.len] = '\0';
    h2_add(a, hs, l, n.len, v.p, v.len);
}

/* The request's fields for the origin, pseudo-headers first, whatever codec carries them:
 * route rules (host, path prefix, set/remove), hop-by-hop removal, X-Forwarded-*, Via. */
static void build_fields(proxy_req_t *pr, fy_headers_t *hs)
{
    fy_exchange_t *ex = pr->ex;
    fy_arena_t *a = ex->arena;
    const fy_proxy_conf_t *pc = pr->ph->conf;
    const fy_request_t *q = &ex->req;
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(pr->ph->up)->servers.v)[pr->server];
    fy_origin_framing_t fr = fy_origin_stream_framing(&pr->os);
    /* sized once: 5 pseudo-headers, the client's fields, the route's, and ours (3 forwarded,
       via, te, content-length) */
    hs->cap = q->headers.n + pc->set_headers.n + 12;
    hs->v = fy_arena_alloc(a, hs->cap * sizeof *hs->v);
    hs->n = 0;
#define PUT(np, nl, vp, vl) (hs->v[hs->n++] = (fy_header_t){fy_str((np), (nl)), fy_str((vp), (vl))})
    if (pr->tunnel)
        PUT(":method", 7, "CONNECT", 7); /* extended CONNECT (RFC 8441) */
    else
        PUT(":method", 7, q->method.p, q->method.len);
    PUT(":scheme", 7, sv->tls ? "https" : "http", sv->tls ? 5 : 4);
    if (pc->preserve_host && q->authority.len)
        PUT(":authority", 10, q->authority.p, q->authority.len);
    else
        PUT(":authority", 10, sv->authority, strlen(sv->authority));
    sbuf_t b = {fy_arena_alloc(a, q->target.len + 64), 0, q->target.len + 64, a};
    put_path(pr, &b);
    PUT(":path", 5, b.p, b.len);
    if (pr->tunnel) {
        char *pl = fy_arena_alloc(a, q->protocol.len + 1);
        for (size_t i = 0; i < q->protocol.len; i++) pl[i] = fy_lower(q->protocol.p[i]);
        PUT(":protocol", 9, pl, q->protocol.len);
    }
    bool any_xff = false, conn = false;
    for (size_t i = 0; i < q->headers.n && !conn; i++)
        conn = q->headers.v[i].name.len == 10 && fy_str_ieq(q->headers.v[i].name, "connection", 10);
    for (size_t i = 0; i < q->headers.n; i++) {
        const fy_header_t *h = &q->headers.v[i];
        switch (field_class(h->name)) {
        case F_TE:
            if (fr.te_trailers && !pr->tunnel && fy_str_list_has(h->value, "trailers", 8))
                PUT("te", 2, "trailers", 8); /* the only TE HTTP/2 carries */
            continue;
        case F_HOP:
        case F_HOST:
        case F_CL:
            continue;
        case F_WSKEY:
            if (pr->tunnel && !fr.upgrade) continue; /* RFC 8441 §5: no key over HTTP/2 */
            break;
        case F_XFF:
            if (pc->forwarded) {
                any_xff = true; /* every one of them is kept, in order, below */
                continue;
            }
            break;
        case F_XFX:
            if (pc->forwarded) continue; /* ours replace what the client claims */
            break;
        default:
            break;
        }
        if ((conn && named_in_connection(&q->headers, h->name)) ||
            (pc->remove_headers.n && in_list(&pc->remove_headers, h->name)) ||
            (pc->set_headers.n && in_map(&pc->set_headers, h->name)))
            continue;
        if (!fr.lowercase) /* the h1 codec keeps the client's case */
            PUT(h->name.p, h->name.len, h->value.p, h->value.len);
        else
            h2_add_lower(a, hs, h->name, h->value);
    }
    for (size_t i = 0; i < pc->set_headers.n; i++) {
        if (!fr.lowercase)
            PUT(pc->set_headers.keys[i], strlen(pc->set_headers.keys[i]), pc->set_headers.values[i],
                strlen(pc->set_headers.values[i]));
        else
            h2_add_lower(a, hs, fy_str(pc->set_headers.keys[i], strlen(pc->set_headers.keys[i])),
                         fy_str(pc->set_headers.values[i], strlen(pc->set_headers.values[i])));
    }
    if (pc->forwarded) {
        char ip[64];
        fy_sock_host_str(ex->remote, ip, sizeof ip);
        size_t il = strlen(ip);
        const char *xff = ip;
        size_t xl = il;
        if (any_xff) {
            sbuf_t x = {fy_arena_alloc(a, 128), 0, 128, a};
            for (size_t i = 0; i < q->headers.n; i++)
                if (fy_str_ieq(q->headers.v[i].name, "x-forwarded-for", 15)) {
                    sb_str(&x, q->headers.v[i].value);
                    SB_LIT(&x, ", ");
                }
            sb_put(&x, ip, il);
            xff = x.p;
            xl = x.len;
        } else {
            xff = fy_arena_strndup(a, ip, il);
        }
        PUT("x-forwarded-for", 15, xff, xl);
        PUT("x-forwarded-proto", 17, q->scheme.p, q->scheme.len);
        if (q->authority.len) PUT("x-forwarded-host", 16, q->authority.p, q->authority.len);
    }
    if (pc->via) PUT("via", 3, "1.1 ferry", 9);
    if (!pr->tunnel && q->content_length > 0) {
        char *cl = fy_arena_alloc(a, 24);
        int n = snprintf(cl, 24, "%lld", (long long)q->content_length);
        PUT("content-length", 14, cl, (size_t)n);
    }
#undef PUT
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

/* ---- the origin stream, whatever the codec: response to the client ---- */

/* The response is complete: give the origin connection back (or close it) first, then the
 * last send (which may end the exchange at once). */
static void finish(proxy_req_t *pr, const struct iovec *iov, int n)
{
    pr->finished = true;
    fy_timer_stop(pr->loop, &pr->timer);
    bool reusable = fy_origin_stream_finish(&pr->os);
    drop_origin(pr, reusable);
    fy_exchange_send(pr->ex, iov, (size_t)n, FY_SEND_FINAL);
}

/* ---- WebSocket tunnels: Close frames of ours (stop, tunnel timeout) ---- */

/* This thread's open WebSocket tunnels (fy_proxy_drain). */
static __thread fy_list_t open_ws;
static __thread bool open_ws_init;

static void ws_feed(ws_track_t *t, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n) {
        if (t->left) {
            size_t k = n < t->left ? n : (size_t)t->left;
            t->left -= k;
            p += k;
            n -= k;
            continue;
        }
        t->hdr[t->hlen++] = *p++;
        n--;
        if (t->hlen < 2) continue;
        unsigned l7 = t->hdr[1] & 0x7fu;
        size_t need = 2u + (t->hdr[1] & 0x80u ? 4u : 0u) + (l7 == 126 ? 2u : l7 == 127 ? 8u : 0u);
        if (t->hlen < need) continue;
        uint64_t len = l7;
        if (l7 == 126) len = (uint64_t)t->hdr[2] << 8 | t->hdr[3];
        if (l7 == 127)
            for (int i = 2; i < 10; i++) len = len << 8 | t->hdr[i];
        t->left = len;
        t->hlen = 0;
    }
}

static bool ws_at_boundary(const ws_track_t *t)
{
    return t->left == 0 && t->hlen == 0;
}

/* Close, 1001 "going away" (RFC 6455 §7.4.1), server to client: unmasked */
static const char ws_close_1001[4] = {(char)0x88, 0x02, 0x03, (char)0xe9};

/* Our Close to the client, once nothing else is being sent and its frames are whole. */
static void ws_close_down(proxy_req_t *pr)
{
    if (pr->ws_down_sent || pr->finished || pr->stopped || pr->res_sending ||
        !ws_at_boundary(&pr->ws_down))
        return;
    pr->ws_down_sent = true;
    pr->res_sending = true; /* the codec calls proceed once it is out */
    pr->sending_len = 0;
    struct iovec iov = {(void *)ws_close_1001, sizeof ws_close_1001};
    fy_exchange_send(pr->ex, &iov, 1, FY_SEND_MORE);
}

/* Our Close to the origin (client to server: masked), then the end of that direction. */
static void ws_close_up(proxy_req_t *pr)
{
    if (pr->ws_up_sent || pr->q_end || pr->qn || !ws_at_boundary(&pr->ws_up)) return;
    pr->ws_up_sent = true;
    uint8_t m[4] = {0x5a, 0x3c, 0x96, 0xe1};
    if (getrandom(m, sizeof m, GRND_NONBLOCK) != (ssize_t)sizeof m) m[0] ^= (uint8_t)now_us();
    uint8_t *f = pr->ws_up_frame;
    f[0] = 0x88;
    f[1] = 0x82;
    memcpy(f + 2, m, 4);
    f[6] = 0x03 ^ m[0];
    f[7] = 0xe9 ^ m[1];
    pr->qp = (const char *)f;
    pr->qn = sizeof pr->ws_up_frame;
    pr->q_end = true;
    resume_body(pr);
}

/* Stop or tunnel timeout: Close 1001 to both sides (each as soon as its direction is between
 * frames), then the peers' answers end the tunnel: the origin's close finishes the exchange.
 * A close handshake that takes longer than `limits.tunnel-close-timeout` is cut. */
static void ws_going_away(proxy_req_t *pr)
{
    if (pr->ws_closing || pr->finished || pr->stopped) return;
    pr->ws_closing = true;
    pr->timer_kind = T_IDLE;
    fy_timer_start(pr->loop, &pr->timer, pr->ex->ctx->limits->tunnel_close_timeout_ms);
    ws_close_up(pr);
    if (!pr->finished && !pr->stopped) ws_close_down(pr);
}

/* After our Close went to the client, what the origin sends is not for it (its Close reply
 * included): consumed and dropped. */
static void ws_drop_down(proxy_req_t *pr)
{
    for (int guard = 0; guard < 64 && !pr->finished && !pr->stopped; guard++) {
        /* (a ring lends its next bytes from inside the consume) */
        if (pr->zn && fy_origin_stream_is_open(&pr->os)) {
            size_t n = pr->zn;
            pr->zn = 0;
            pr->in_codec++;
            fy_origin_stream_consume(&pr->os, n);
            pr->in_codec--;
            continue;
        }
        break;
    }
}

void fy_proxy_drain(void)
{
    if (!open_ws_init) return;
    fy_list_t *l = open_ws.next;
    while (l != &open_ws) {
        proxy_req_t *pr = fy_container_of(l, proxy_req_t, ws_node);
        l = l->next; /* going away may finish the exchange and unlink it */
        ws_going_away(pr);
    }
}

/* Is this complete response one to finish after the rest of the request body (above)? */
static bool trail_body(proxy_req_t *pr)
{
    const fy_exchange_t *ex = pr->ex;
    if (pr->tunnel || !fy_origin_stream_sending(&pr->os)) return false;
    if (ex->req.content_length <= 0 || ex->body_received > (uint64_t)ex->req.content_length)
        return false;
    /* HTTP/1.1 clients only, and only a response complete by its Content-Length: a chunked
       one, or END_STREAM on h2/h3, would come only after the upload, and clients wait for
       that end before they send more (curl 7.88 stalls an h2 upload after the response) */
    if (ex->req.version >= 20 || (ex->res.content_length < 0 && ex->req.method_id != FY_M_HEAD))
        return false;
    return (uint64_t)ex->req.content_length - ex->body_received <= FY_PROXY_TRAIL_MAX;
}

static void deliver(proxy_req_t *pr)
{
    if (pr->res_sending || pr->finished || pr->stopped || !pr->o_head || pr->in_codec ||
        fy_origin_stream_busy(&pr->os))
        return;
    if (pr->ws_closing) { /* WebSocket going away: our Close first, then nothing of the origin */
        if (!pr->ws_down_sent && ws_at_boundary(&pr->ws_down)) {
            ws_close_down(pr);
            return;
        }
        if (pr->ws_down_sent) {
            ws_drop_down(pr);
            if (pr->o_end && !pr->finished && !pr->stopped) finish(pr, NULL, 0);
            return;
        }
    }
    if (pr->trail) {
        /* the response is out; finish once the body's end reached the origin */
        if (!pr->trail_abort && fy_origin_stream_sending(&pr->os)) return;
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
        for (int i = 0; i < n; i++) ws_feed(&pr->ws_down, iov[i].iov_base, iov[i].iov_len);
    fy_exchange_send(pr->ex, iov, (size_t)n, FY_SEND_MORE);
}

static void proceed(fy_exchange_t *ex)
{
    proxy_req_t *pr = ex->handler_data;
    if (!pr->res_sending) return;
    pr->res_sending = false;
    size_t n = pr->sending_len;
    pr->sending_len = 0;
    if (n && fy_origin_stream_is_open(&pr->os)) {
        pr->zn = 0;
        pr->in_codec++;
        fy_origin_stream_consume(&pr->os, n); /* the origin may send as much again */
        pr->in_codec--;
    }
    if (!pr->o_end && !pr->finished) set_timer(pr, T_IDLE);
    deliver(pr);
}

/* More of the client's body (or tunnel bytes) may go to the origin. */
static void resume_body(proxy_req_t *pr)
{
    if (!fy_origin_stream_is_open(&pr->os)) return;
    pr->in_codec++;
    fy_origin_stream_resume(&pr->os);
    pr->in_codec--;
    deliver(pr);
}

static void o_on_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    proxy_req_t *pr = ud;
    fy_exchange_t *ex = pr->ex;
    const fy_proxy_conf_t *pc = pr->ph->conf;
    bool upgrade = fy_origin_stream_framing(&pr->os).upgrade; /* 101 opens tunnels */
    if (status < 200 && !(status == 101 && upgrade)) {
        /* a bound on them, or an origin trickling 1xx holds the exchange forever */
        int64_t max = ex->ctx->limits->max_informational;
        if (++pr->interim > max) {
            pr->no_retry = true;
            origin_failed(pr, 502,
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
            int fc = field_class(hs->v[i].name);
            if (fc != F_HOP && fc != F_TE) hs->v[k++] = hs->v[i];
        }
        hs->n = k;
        fy_exchange_send_informational(ex, status, hs);
        return;
    }
    set_timer(pr, T_IDLE);
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
        switch (field_class(n)) {
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
        if ((pc->response_remove_headers.n && in_list(&pc->response_remove_headers, n)) ||
            (pc->response_set_headers.n && in_map(&pc->response_set_headers, n)))
            continue;
        rh->v[rh->n++] = (fy_header_t){n, v};
    }
    add_response_extras(pr);
    pr->o_head = true;
    ex->res.status = status;
    bool ok = status < 500;
    if (pr->tunnel && (upgrade ? status == 101 : status >= 200 && status < 300)) {
        /* the tunnel is open: h1 clients get 101 (with our Sec-WebSocket-Accept), h2 200 */
        pr->tunnel_open = true;
        if (ex->req.protocol.len == 9 && fy_str_ieq(ex->req.protocol, "websocket", 9)) {
            if (!open_ws_init) {
                fy_list_init(&open_ws);
                open_ws_init = true;
            }
            pr->ws = true;
            fy_list_insert_tail(&open_ws, &pr->ws_node);
        }
        set_timer(pr, T_IDLE); /* from now on `limits.tunnel-timeout` */
        ex->res.content_length = -1;
        ex->res.status = ex->req.version < 20 ? 101 : 200;
        if (ex->req.version < 20 && !upgrade) {
            const fy_header_t *k = FY_HDR_FIND(&ex->req.headers, "sec-websocket-key");
            char acc[32];
            if (k && ws_accept(k->value, acc)) {
                char *v = fy_arena_strndup(ex->arena, acc, 28);
                FY_HDR_ADD(ex->arena, &ex->res.headers, "sec-websocket-accept", v, 28);
            }
        }
        fy_upstream_report(pr->ph->up, pr->worker, pr->server, true, pr->loop->now_ms);
        fy_exchange_start_response(ex, &proxy_producer);
        pr->res_sending = true; /* the 101/200 goes out now, before any tunnel byte */
        pr->sending_len = 0;
        fy_exchange_send(ex, NULL, 0, FY_SEND_MORE);
        resume_body(pr); /* the client's bytes may flow now */
        return;
    }
    if (pr->tunnel) {
        /* refused upgrade: an ordinary response; nothing of the client's goes on */
        pr->q_end = true;
        resume_body(pr);
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
    fy_origin_stream_expect(&pr->os, ex->res.content_length);
    fy_upstream_report(pr->ph->up, pr->worker, pr->server, ok, pr->loop->now_ms);
    if (fy_upstream_conf(pr->ph->up)->balance == FY_BALANCE_LEAST_TIME)
        fy_upstream_report_ttfb(pr->ph->up, pr->worker, pr->server, now_us() - pr->sent_us);
    fy_exchange_start_response(ex, &proxy_producer);
}

static void o_on_data(void *ud, const char *p, size_t n)
{
    proxy_req_t *pr = ud;
    /* lent by the origin stream until consumed: no copy here */
    pr->zp = p;
    pr->zn = n;
    set_timer(pr, T_IDLE);
    deliver(pr);
}

static void o_on_end(void *ud, fy_headers_t *trailers)
{
    proxy_req_t *pr = ud;
    pr->o_end = true;
    if (trailers->n) pr->ex->res_trailers = *trailers;
    if (pr->tunnel_open) pr->q_end = true; /* the origin ended the tunnel */
    deliver(pr);
}

static void o_on_error(void *ud, int kind, uint64_t code, const char *why)
{
    proxy_req_t *pr = ud;
    if (pr->trail || pr->o_end) {
        /* the response is complete: only the connection is lost (release says so) */
        pr->trail_abort = true;
        deliver(pr);
        return;
    }
    bool count = fy_origin_stream_blames(&pr->os, kind, code, pr->o_head);
    if (!pr->o_head) {
        if (kind == FY_CLIENT_REFUSED && !pr->sent_any &&
            ++pr->refusals <= fy_upstream_conf(pr->ph->up)->retries + FY_PROXY_REFUSED_EXTRA) {
            /* not processed (RST REFUSED_STREAM or past GOAWAY's last stream): try again */
            fy_debug("upstream %s: %s; retrying", fy_upstream_conf(pr->ph->up)->name, why);
            fy_timer_stop(pr->loop, &pr->timer);
            drop_origin(pr, false);
            attempt(pr);
            return;
        }
        origin_failed(pr, 502, why, count);
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
    drop_origin(pr, false);
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
    if (!pr->in_read_body) resume_body(pr);
}

/* The next piece of the client's body for the origin codec, in place (*p): valid until the
 * client codec is asked for more, which happens here, once the piece is taken. */
static ssize_t take_body(void *ud, const char **p, size_t len, const fy_headers_t **trailers)
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
            if (!pr->o_head && !pr->tunnel) set_timer(pr, T_IDLE);
            if (pr->ws && !pr->ws_up_sent) ws_feed(&pr->ws_up, *p, n);
            if (pr->tunnel_open) set_timer(pr, T_IDLE); /* tunnels idle out both ways */
            return (ssize_t)n;
        }
        if (pr->ws_closing && !pr->ws_up_sent && !pr->q_end && ws_at_boundary(&pr->ws_up)) {
            ws_close_up(pr); /* the client's frame is through: our Close now */
            continue;
        }
        if (pr->q_end) {
            *trailers = pr->tunnel ? NULL : &pr->ex->req_trailers;
            if (!pr->o_head && !pr->tunnel) set_timer(pr, T_FIRST_BYTE); /* all sent */
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

static ssize_t o_read_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers)
{
    const char *p = NULL;
    ssize_t n = take_body(ud, &p, len, trailers);
    if (n > 0) memcpy(buf, p, (size_t)n);
    return n;
}

/* ---- one attempt: a stream on a connection of the chosen server ---- */

static void o_on_open(void *ud, const char *err);
static void o_after_io(void *ud);

static const fy_origin_stream_ops_t origin_ops = {
    {o_on_head, o_on_data, o_on_end, o_on_error, o_read_body, take_body},
    o_on_open,
    o_after_io,
};

static void start(proxy_req_t *pr)
{
    if (pr->tunnel && !fy_origin_stream_can_tunnel(&pr->os)) {
        drop_origin(pr, true);
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
    build_fields(pr, &hs); /* Host may depend on the server */
    fy_origin_request_t rq = {&hs,        pr->ex->req.content_length,
                              pr->tunnel, pr->ex->req.method_id == FY_M_HEAD,
                              &lim,       pr->ex->arena};
    set_timer(pr, T_FIRST_BYTE);
    pr->sent_us = now_us();
    pr->in_codec++;
    int rc = fy_origin_stream_submit(&pr->os, &rq);
    pr->in_codec--;
    if (rc < 0) {
        origin_failed(pr, 502, "cannot open a stream to the origin", false);
        return;
    }
    deliver(pr);
}

static void o_on_open(void *ud, const char *err)
{
    proxy_req_t *pr = ud;
    if (err) {
        origin_failed(pr, 502, err, true);
        return;
    }
    start(pr);
}

static void o_after_io(void *ud)
{
    deliver(ud);
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
    pr->ex->upstream = up, pr->ex->upstream_server = pr->server; /* ops/http_metrics.c */
    pr->sent_any = false;
    pr->got_bytes = false;
    pr->o_head = pr->o_end = false;
    pr->interim = 0;
    pr->zn = 0;
    const char *err = "origin connect failed";
    /* refused before: first in line on the next connection */
    int rc =
        fy_origin_stream_open(&pr->os, up, pr->worker, pr->server, pr->loop, pr->refusals, &err);
    if (rc < 0) { /* not even a socket */
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
        deliver(pr);
        return;
    }
    fy_warn("upstream %s: request body not complete within limits.body-total-timeout "
            "(%llu ms): aborted",
            fy_upstream_conf(pr->ph->up)->name,
            (unsigned long long)pr->ex->ctx->limits->body_total_timeout_ms);
    fy_timer_stop(pr->loop, &pr->timer);
    drop_origin(pr, false);
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
    fy_origin_stream_init(&pr->os, &origin_ops, pr);
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
    return &ph->h;
}
