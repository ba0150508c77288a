/* HTTP/1.1 client codec: see h1_client.h. */
#include "h1/h1_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <time.h>

#include "core/errors.h"
#include "core/pool.h"
#include "h1/h1_resp.h"

enum { R_HEAD = 0, R_BODY, R_DONE };

struct fy_h1_client {
    fy_transport_t *t;
    fy_arena_t *a;
    const fy_client_stream_ops_t *ops;
    fy_h1_client_want_fn want;
    void *ud;
    void *want_ud;
    fy_h1_limits_t lim;
    fy_h1_header_t *hdrs; /* the response parser's fields: a pool chunk when they fit */
    bool hdrs_pooled;
    bool head_req;
    bool upgrade; /* the request asked for an Upgrade */
    /* to the origin */
    struct iovec out[4];
    int nout;
    char *obuf; /* a pool chunk, or FY_H1C_BIG_OUT (malloc) for a large request body */
    size_t ocap;
    char pre[24];
    bool req_chunked;
    bool big_body; /* chunked, or more than a chunk */
    bool req_has_body;
    bool req_body_done;
    bool body_deferred;
    bool shut;
    /* from the origin */
    char *ibuf; /* the rest of the codec's own pool chunk, or big_in */
    size_t icap;
    char *big_in; /* FY_H1C_BIG_IN bytes for a large body (malloc) */
    size_t ilen, ipos;
    fy_h1_resp_t resp;
    int rstate;
    int body_kind;
    uint64_t body_left;
    fy_h1_chunked_t chunked;
    size_t dec_out;
    size_t held;    /* decoded bytes given to on_data, not consumed yet */
    size_t held_in; /* input bytes they came from (ipos moves by this once consumed) */
    bool eof;
    bool got_bytes;
    bool tunnel_open;
    bool dead;     /* failed or released: no more callbacks */
    bool released; /* fy_h1_client_release ran */
    bool freed;    /* fy_h1_client_free ran: free the struct once no call is on the stack */
    int depth;     /* calls into the codec on the stack */
    bool in_io;
    bool in_dropped; /* EPOLLIN came while bytes were held: interest dropped until consumed */
    bool short_read; /* the last read got less than it asked for: the socket was emptied */
    fy_headers_t trailers;
};

#define FY_H1C_BIG_OUT (64 * 1024)

static void pump(fy_h1_client_t *c);
static void fill(fy_h1_client_t *c);
static void rd(fy_h1_client_t *c);
static void process(fy_h1_client_t *c);

/* The codec lives at the start of one pool chunk, its read buffer is the rest: one pool get
 * per exchange, no malloc. */
#define FY_H1C_SELF ((sizeof(fy_h1_client_t) + 63) & ~(size_t)63)
_Static_assert(FY_H1C_SELF <= 1024, "the codec leaves most of its chunk to the read buffer");

fy_h1_client_t *fy_h1_client_new(fy_arena_t *a, fy_transport_t *t, const fy_h1_limits_t *limits,
                                 bool head_request, const fy_client_stream_ops_t *ops,
                                 fy_h1_client_want_fn want, void *want_ud, void *ud)
{
    /* not arena memory: a callback may end the exchange (and reset its arena) while the codec
       is still on the stack; the struct goes when the outermost call returns */
    char *chunk = fy_pool_get(fy_chunk_pool());
    fy_h1_client_t *c = (fy_h1_client_t *)chunk;
    memset(c, 0, sizeof *c);
    c->ibuf = chunk + FY_H1C_SELF;
    c->icap = FY_CHUNK_SIZE - FY_H1C_SELF;
    c->t = t;
    c->a = a;
    c->ops = ops;
    c->want = want;
    c->want_ud = want_ud;
    c->ud = ud;
    c->lim = *limits;
    c->head_req = head_request;
    c->req_body_done = true;
    return c;
}

#define ENTER(c) ((c)->depth++)
static void leave(fy_h1_client_t *c)
{
    if (--c->depth == 0 && c->freed) fy_pool_put(fy_chunk_pool(), c);
}

static void fail(fy_h1_client_t *c, int kind, uint64_t code, const char *why)
{
    if (c->dead) return;
    c->dead = true;
    c->ops->on_error(c->ud, kind, code, why);
}

static void update_want(fy_h1_client_t *c)
{
    /* once the response is complete the owner releases the connection at once (to its pool,
       which sets its own interest): changing it here would cost two epoll_ctl per request */
    if (c->dead) return;
    uint32_t ev = 0;
    if (c->rstate == R_DONE) {
        if (c->req_body_done && c->nout == 0) return;
        /* an early response: the rest of the request body still goes out; EPOLLIN stays
           to notice an origin that closes (anything it sends now is fatal too) */
        ev = EPOLLIN | (c->nout ? EPOLLOUT : 0);
        if (c->want(c->want_ud, ev) < 0) fail(c, FY_CLIENT_CONN, 0, "origin socket error");
        return;
    }
    if (c->nout) ev |= EPOLLOUT;
    /* while the owner holds bytes, EPOLLIN stays (lazily, as the h1 server does) unless the
       origin actually sends meanwhile: no epoll_ctl pair for every piece relayed */
    if (c->rstate != R_DONE && (c->held == 0 || !c->in_dropped)) ev |= EPOLLIN;
    if (c->want(c->want_ud, ev) < 0) fail(c, FY_CLIENT_CONN, 0, "origin socket error");
}

/* ---- request ---- */

/* Raw appends into a buffer sized beforehand. */
typedef struct wbuf {
    char *p;
    size_t len;
} wbuf_t;

/* n bytes from s to d with no call for a field's usual size (up to 64): unaligned moves that
 * may overlap each other but stay inside [s, s + n) and [d, d + n) */
static inline void copy_short(char *d, const char *s, size_t n)
{
    if (n <= 16) {
        if (n >= 8) {
            uint64_t x, y;
            memcpy(&x, s, 8);
            memcpy(&y, s + n - 8, 8);
            memcpy(d, &x, 8);
            memcpy(d + n - 8, &y, 8);
        } else if (n >= 4) {
            uint32_t x, y;
            memcpy(&x, s, 4);
            memcpy(&y, s + n - 4, 4);
            memcpy(d, &x, 4);
            memcpy(d + n - 4, &y, 4);
        } else if (n) {
            char x = s[0], y = s[n / 2], z = s[n - 1];
            d[0] = x;
            d[n / 2] = y;
            d[n - 1] = z;
        }
    } else if (n <= 64) {
        char x[16], y[16];
        if (n > 32) {
            char u[16], v[16];
            memcpy(u, s + 16, 16);
            memcpy(v, s + n - 32, 16);
            memcpy(d + 16, u, 16);
            memcpy(d + n - 32, v, 16);
        }
        memcpy(x, s, 16);
        memcpy(y, s + n - 16, 16);
        memcpy(d, x, 16);
        memcpy(d + n - 16, y, 16);
    } else {
        memcpy(d, s, n);
    }
}

static inline void w_put(wbuf_t *w, const char *s, size_t n)
{
    copy_short(w->p + w->len, s, n);
    w->len += n;
}
#define W_LIT(w, lit) w_put((w), (lit), sizeof(lit) - 1)
static inline void w_str(wbuf_t *w, fy_str_t s)
{
    w_put(w, s.p, s.len);
}

/* "name: value\r\n" */
static inline void w_field(wbuf_t *w, fy_str_t n, fy_str_t v)
{
    char *d = w->p + w->len;
    copy_short(d, n.p, n.len);
    d += n.len;
    memcpy(d, ": ", 2);
    copy_short(d + 2, v.p, v.len);
    d += 2 + v.len;
    memcpy(d, "\r\n", 2);
    w->len = (size_t)(d + 2 - w->p);
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

/* A made-up Sec-WebSocket-Key (RFC 6455 §4.1: 16 random bytes, base64): the client (an
 * RFC 8441 one) sent none, and the origin wants one. Not a secret. */
static void ws_key(fy_h1_client_t *c, wbuf_t *b)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ (uintptr_t)c;
    unsigned char raw[16];
    for (int i = 0; i < 16; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        raw[i] = (unsigned char)x;
    }
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char key[32];
    size_t o = 0;
    for (int i = 0; i < 16; i += 3) {
        unsigned v = (unsigned)raw[i] << 16 | (i + 1 < 16 ? raw[i + 1] << 8 : 0) |
                     (i + 2 < 16 ? raw[i + 2] : 0);
        key[o++] = b64[v >> 18 & 63];
        key[o++] = b64[v >> 12 & 63];
        key[o++] = i + 1 < 16 ? b64[v >> 6 & 63] : '=';
        key[o++] = i + 2 < 16 ? b64[v & 63] : '=';
    }
    static const char name[] = "Sec-WebSocket-Key: ";
    memcpy(b->p + b->len, name, sizeof name - 1);
    b->len += sizeof name - 1;
    memcpy(b->p + b->len, key, o);
    b->len += o;
    memcpy(b->p + b->len, "\r\n", 2);
    b->len += 2;
}

/* Fields the codec writes itself (framing, connection management). */
/* the name lengths submit looks at: codec_field's, cookie (6), sec-websocket-key (17) and
 * -version (21) */
#define SPECIAL_LENS                                                                               \
    ((1u << 2) | (1u << 4) | (1u << 6) | (1u << 7) | (1u << 10) | (1u << 14) | (1u << 17) |        \
     (1u << 21))

static bool codec_field(fy_str_t n)
{
    switch (n.len) {
    case 2:
        return fy_str_ieq(n, "te", 2);
    case 4:
        return fy_str_ieq(n, "host", 4);
    case 7:
        return fy_str_ieq(n, "upgrade", 7);
    case 10:
        return fy_str_ieq(n, "connection", 10) || fy_str_ieq(n, "keep-alive", 10);
    case 14:
        return fy_str_ieq(n, "content-length", 14);
    case 17:
        return fy_str_ieq(n, "transfer-encoding", 17);
    default:
        return false;
    }
}

void fy_h1_client_submit(fy_h1_client_t *c, const fy_headers_t *hs, int64_t body_len)
{
    fy_str_t method = {0}, path = {0}, authority = {0}, protocol = {0};
    size_t i = 0;
    for (; i < hs->n && hs->v[i].name.len && hs->v[i].name.p[0] == ':'; i++) {
        fy_str_t n = hs->v[i].name, v = hs->v[i].value;
        switch (n.len) {
        case 5:
            path = v;
            break; /* :path */
        case 7:    /* :method, :scheme */
            if (n.p[1] == 'm' || n.p[1] == 'M') method = v;
            break;
        case 9:
            protocol = v;
            break; /* :protocol */
        case 10:
            authority = v;
            break; /* :authority */
        default:
            break;
        }
    }
    ENTER(c);
    c->upgrade = protocol.len > 0;
    /* an upper bound of the head: every field at most once as "name: value\r\n" (joined
       cookies take less), the request line, Host, and our framing fields */
    size_t need = method.len + path.len + authority.len + 2 * protocol.len + 256;
    for (size_t k = i; k < hs->n; k++) need += hs->v[k].name.len + hs->v[k].value.len + 4;
    wbuf_t b = {fy_arena_alloc(c->a, need), 0};
    if (c->upgrade && fy_str_ieq(method, "connect", 7))
        W_LIT(&b, "GET"); /* extended CONNECT (RFC 8441) is an Upgrade in HTTP/1.1 */
    else
        w_str(&b, method);
    W_LIT(&b, " ");
    if (path.len)
        w_str(&b, path);
    else
        W_LIT(&b, "/");
    W_LIT(&b, " HTTP/1.1\r\nHost: ");
    w_str(&b, authority);
    W_LIT(&b, "\r\n");
    bool cookies_done = false, has_key = false, has_version = false;
    for (size_t k = i; k < hs->n; k++) {
        fy_str_t n = hs->v[k].name;
        /* the usual field has none of the lengths below (traceparent, accept, x-forwarded-*,
           via ...): straight out */
        if (__builtin_expect(n.len >= 32 || !(SPECIAL_LENS >> n.len & 1), 1)) {
            w_field(&b, n, hs->v[k].value);
            continue;
        }
        if (codec_field(n)) continue;
        if (n.len == 6 && fy_str_ieq(n, "cookie", 6)) {
            /* h2 clients split cookies into crumbs; HTTP/1.1 wants one field (RFC 9113
               §8.2.3), joined with "; " */
            if (cookies_done) continue;
            cookies_done = true;
            W_LIT(&b, "Cookie: ");
            bool first = true;
            for (size_t j = k; j < hs->n; j++) {
                if (!fy_str_ieq(hs->v[j].name, "cookie", 6)) continue;
                if (!first) W_LIT(&b, "; ");
                w_str(&b, hs->v[j].value);
                first = false;
            }
            W_LIT(&b, "\r\n");
            continue;
        }
        if (c->upgrade && n.len == 17 && fy_str_ieq(n, "sec-websocket-key", 17)) has_key = true;
        if (c->upgrade && n.len == 21 && fy_str_ieq(n, "sec-websocket-version", 21))
            has_version = true;
        w_field(&b, n, hs->v[k].value);
    }
    c->req_has_body = c->upgrade || body_len != 0;
    c->big_body = body_len < 0 || body_len > FY_CHUNK_SIZE;
    if (c->upgrade) {
        W_LIT(&b, "Connection: Upgrade\r\nUpgrade: ");
        w_str(&b, protocol);
        W_LIT(&b, "\r\n");
        if (fy_str_ieq(protocol, "websocket", 9)) {
            if (!has_key) ws_key(c, &b);
            if (!has_version) W_LIT(&b, "Sec-WebSocket-Version: 13\r\n");
        }
    } else if (body_len > 0) {
        char cl[40];
        int n = snprintf(cl, sizeof cl, "Content-Length: %lld\r\n", (long long)body_len);
        w_put(&b, cl, (size_t)n);
    } else if (body_len < 0) {
        W_LIT(&b, "Transfer-Encoding: chunked\r\n");
        c->req_chunked = true;
    }
    W_LIT(&b, "\r\n");
    c->out[0] = (struct iovec){b.p, b.len};
    c->nout = 1;
    c->req_body_done = !c->req_has_body;
    if (!c->req_body_done) fill(c); /* the head goes out with the first piece of body */
    if (!c->dead) pump(c);
    if (!c->dead) update_want(c);
    leave(c);
}

/* Pull the next piece of request body into out[] (after what is queued). */
static void fill(fy_h1_client_t *c)
{
    if (c->upgrade && !c->tunnel_open) return; /* nothing of the client's before the 101 */
    const fy_headers_t *tr = NULL;
    const char *p = NULL;
    ssize_t n;
    if (c->ops->ref_body) {
        /* no copy: out[] points into the owner's buffer until it is all written (fill is
           called again only then) */
        n = c->ops->ref_body(c->ud, &p, (size_t)1 << 30, &tr);
    } else {
        if (!c->obuf) {
            /* a large body goes out in larger pieces (fewer writes), tunnels in small ones */
            c->ocap = c->big_body && !c->upgrade ? FY_H1C_BIG_OUT : FY_CHUNK_SIZE;
            c->obuf = c->ocap == FY_CHUNK_SIZE ? fy_pool_get(fy_chunk_pool()) : malloc(c->ocap);
            if (!c->obuf) {
                c->ocap = FY_CHUNK_SIZE;
                c->obuf = fy_pool_get(fy_chunk_pool());
            }
        }
        n = c->ops->read_body(c->ud, c->obuf, c->ocap, &tr);
        p = c->obuf;
    }
    if (c->dead) return;
    if (n == FY_CLIENT_DEFER) {
        c->body_deferred = true;
        return;
    }
    if (n < 0) {
        fail(c, FY_CLIENT_CONN, 0, "request body failed");
        return;
    }
    if (n > 0) {
        if (c->req_chunked) {
            int l = snprintf(c->pre, sizeof c->pre, "%zx\r\n", (size_t)n);
            c->out[c->nout++] = (struct iovec){c->pre, (size_t)l};
            c->out[c->nout++] = (struct iovec){(void *)p, (size_t)n};
            c->out[c->nout++] = (struct iovec){(void *)"\r\n", 2};
        } else {
            c->out[c->nout++] = (struct iovec){(void *)p, (size_t)n};
        }
        return;
    }
    c->req_body_done = true;
    if (c->req_chunked) {
        /* the last chunk, with the client's trailers */
        sbuf_t b = {fy_arena_alloc(c->a, 256), 0, 256, c->a};
        SB_LIT(&b, "0\r\n");
        for (size_t i = 0; tr && i < tr->n; i++) {
            sb_str(&b, tr->v[i].name);
            SB_LIT(&b, ": ");
            sb_str(&b, tr->v[i].value);
            SB_LIT(&b, "\r\n");
        }
        SB_LIT(&b, "\r\n");
        c->out[c->nout++] = (struct iovec){b.p, b.len};
    }
}

/* Write what is queued, pulling more body while the origin takes it. */
static void pump(fy_h1_client_t *c)
{
    for (int guard = 0; guard < 1024 && !c->dead; guard++) {
        if (c->nout == 0 && !c->req_body_done && !c->body_deferred) {
            fill(c);
            if (c->dead) return;
        }
        if (c->nout == 0) break;
        ssize_t w = c->t->ops->writev(c->t, c->out, c->nout);
        if (w == 0) break;
        if (w < 0) {
            fail(c, FY_CLIENT_CONN, 0, "writing to the origin failed");
            return;
        }
        size_t left = (size_t)w;
        int i = 0;
        while (i < c->nout && left >= c->out[i].iov_len) left -= c->out[i++].iov_len;
        memmove(c->out, c->out + i, (size_t)(c->nout - i) * sizeof c->out[0]);
        c->nout -= i;
        if (c->nout && left) {
            c->out[0].iov_base = (char *)c->out[0].iov_base + left;
            c->out[0].iov_len -= left;
        }
        if (c->nout) break; /* partial: wait for EPOLLOUT */
    }
    if (c->dead) return;
    if (c->nout == 0 && c->upgrade && c->tunnel_open && c->req_body_done && !c->shut) {
        /* the client ended its side of the tunnel: pass the FIN on, keep reading */
        c->shut = true;
        c->t->ops->shutdown(c->t);
    }
}

void fy_h1_client_resume(fy_h1_client_t *c)
{
    if (c->dead) return;
    c->body_deferred = false;
    if (c->nout) return; /* EPOLLOUT pulls more once these are written */
    ENTER(c);
    pump(c);
    update_want(c);
    leave(c);
}

/* ---- response ---- */

static void on_chunk(void *ud, const char *p, size_t n)
{
    fy_h1_client_t *c = ud;
    if (c->ibuf + c->dec_out != p) memmove(c->ibuf + c->dec_out, p, n);
    c->dec_out += n;
}

static void on_trailer(void *ud, fy_h1_str_t name, fy_h1_str_t value)
{
    fy_h1_client_t *c = ud;
    fy_headers_add(c->a, &c->trailers, fy_arena_strndup(c->a, name.p, name.len), name.len,
                   fy_arena_strndup(c->a, value.p, value.len), value.len);
}

/* Does a Connection value name fields beyond close / keep-alive / upgrade (RFC 9110 §7.6.1)? */
static bool names_more(fy_str_t v)
{
    const char *p = v.p, *e = v.p + v.len;
    while (p < e) {
        while (p < e && (*p == ',' || *p == ' ' || *p == '\t')) p++;
        const char *t = p;
        while (p < e && *p != ',' && *p != ' ' && *p != '\t') p++;
        fy_str_t tok = fy_str(t, (size_t)(p - t));
        if (tok.len && !fy_str_ieq(tok, "close", 5) && !fy_str_ieq(tok, "keep-alive", 10) &&
            !fy_str_ieq(tok, "upgrade", 7))
            return true;
    }
    return false;
}

/* Is the field named in one of the head's Connection fields? */
static bool conn_listed(const fy_h1_resp_t *r, fy_h1_str_t name)
{
    char low[64];
    if (name.len >= sizeof low) return false;
    for (size_t i = 0; i < name.len; i++) low[i] = fy_lower(name.p[i]);
    for (size_t i = 0; i < r->nheaders; i++)
        if (r->headers[i].name.len == 10 && fy_h1_str_eq_lit(r->headers[i].name, "connection") &&
            fy_str_list_has(fy_str(r->headers[i].value.p, r->headers[i].value.len), low, name.len))
            return true;
    return false;
}

/* The head's end-to-end fields as arena memory (the input buffer is reused for the body): one
 * copy of the whole head, the fields pointing into it. Fields that a Connection field names
 * are connection-specific (RFC 9110 §7.6.1) and stay here; the other hop-by-hop fields are
 * fixed names the owner knows. */
static void head_fields(fy_h1_client_t *c, fy_headers_t *hs, const char *head, size_t len)
{
    const fy_h1_resp_t *r = &c->resp;
    bool named = false;
    for (size_t i = 0; i < r->nheaders && !named; i++)
        if (r->headers[i].name.len == 10 && fy_h1_str_eq_lit(r->headers[i].name, "connection"))
            named = names_more(fy_str(r->headers[i].value.p, r->headers[i].value.len));
    char *copy = fy_arena_alloc(c->a, len);
    memcpy(copy, head, len);
    *hs = (fy_headers_t){0};
    hs->cap = r->nheaders ? r->nheaders : 1;
    hs->v = fy_arena_alloc(c->a, hs->cap * sizeof *hs->v);
    for (size_t i = 0; i < r->nheaders; i++) {
        const fy_h1_header_t *h = &r->headers[i];
        if (named && conn_listed(r, h->name)) continue;
        hs->v[hs->n].name = fy_str(copy + (h->name.p - head), h->name.len);
        hs->v[hs->n].value = fy_str(copy + (h->value.p - head), h->value.len);
        hs->n++;
    }
}

static void end_response(fy_h1_client_t *c)
{
    c->rstate = R_DONE;
    c->ops->on_end(c->ud, &c->trailers);
}

/* Parse heads; returns false when the head is not complete yet (or the stream failed). */
static bool parse_head(fy_h1_client_t *c)
{
    if (!c->hdrs) {
        c->hdrs_pooled = c->lim.max_headers * sizeof(fy_h1_header_t) <= FY_CHUNK_SIZE;
        c->hdrs = c->hdrs_pooled
                      ? fy_pool_get(fy_chunk_pool())
                      : fy_arena_alloc(c->a, sizeof(fy_h1_header_t) * c->lim.max_headers);
    }
    for (;;) {
        fy_h1_resp_init(&c->resp, c->hdrs);
        const char *head = c->ibuf + c->ipos;
        int r = fy_h1_parse_response(&c->resp, head, c->ilen - c->ipos, c->head_req, &c->lim);
        if (r == FY_H1_INCOMPLETE) return false;
        if (r < 0) {
            fail(c, FY_CLIENT_PROTOCOL, 1, "invalid response head from the origin");
            return false;
        }
        int status = c->resp.status;
        if (status == 101 && !c->upgrade) {
            fail(c, FY_CLIENT_PROTOCOL, 1, "101 from the origin without an Upgrade request");
            return false;
        }
        fy_headers_t hs;
        if (status < 200 && status != 101) {
            /* interim (100 Continue, 103 Early Hints, ...): the owner decides what goes on */
            head_fields(c, &hs, head, (size_t)r);
            c->ipos += (size_t)r;
            c->ops->on_head(c->ud, status, &hs, false);
            if (c->dead) return false;
            continue;
        }
        c->ipos += (size_t)r;
        c->body_kind = c->resp.body_kind;
        if (status == 101) { /* the tunnel is open: raw bytes until close */
            c->tunnel_open = true;
            c->body_kind = FY_H1_RESP_CLOSE;
        } else if (c->body_kind == FY_H1_RESP_LENGTH) {
            c->body_left = c->resp.content_length;
        } else if (c->body_kind == FY_H1_RESP_CHUNKED) {
            fy_h1_chunked_init(&c->chunked);
        }
        head_fields(c, &hs, head, (size_t)r);
        bool end = c->body_kind == FY_H1_RESP_NONE ||
                   (c->body_kind == FY_H1_RESP_LENGTH && c->body_left == 0);
        c->rstate = end ? R_DONE : R_BODY;
        c->ops->on_head(c->ud, status, &hs, end);
        if (c->dead) return false;
        if (end) {
            c->ops->on_end(c->ud, &c->trailers);
            return false;
        }
        if (c->tunnel_open && !c->nout && !c->req_body_done) {
            c->body_deferred = false; /* the client's bytes may flow now */
            pump(c);
            if (c->dead) return false;
        }
        return true;
    }
}

/* Hand the next piece of body to the owner (nothing is held). */
static void body(fy_h1_client_t *c)
{
    size_t avail = c->ilen - c->ipos;
    size_t take = 0, in = 0;
    bool end = false;
    if (c->body_kind == FY_H1_RESP_LENGTH) {
        take = avail < c->body_left ? avail : (size_t)c->body_left;
        c->body_left -= take;
        in = take;
        end = c->body_left == 0;
    } else if (c->body_kind == FY_H1_RESP_CHUNKED) {
        size_t consumed = 0;
        c->dec_out = c->ipos;
        int r = fy_h1_chunked_decode(&c->chunked, c->ibuf + c->ipos, avail, &consumed,
                                     c->lim.max_header_bytes, on_chunk, on_trailer, c);
        if (r < 0) {
            fail(c, FY_CLIENT_PROTOCOL, 1, "invalid chunked body from the origin");
            return;
        }
        take = c->dec_out - c->ipos; /* decoded bytes sit at ipos */
        in = consumed;
        end = r == 1;
    } else { /* until close */
        take = avail;
        in = take;
        end = c->eof;
    }
    if (take == 0 && !end) {
        /* need more: keep a partial chunk line, drop what is consumed */
        c->ipos += in;
        if (c->ipos >= c->ilen) {
            c->ipos = c->ilen = 0;
        } else if (c->ipos > 0) {
            memmove(c->ibuf, c->ibuf + c->ipos, c->ilen - c->ipos);
            c->ilen -= c->ipos;
            c->ipos = 0;
        }
        return;
    }
    if (end) {
        /* the last piece stays where it is (valid until release); the end comes with it */
        const char *p = c->ibuf + c->ipos;
        c->ipos += in;
        c->rstate = R_DONE;
        if (take) {
            c->held = take;
            c->held_in = 0;
            c->ops->on_data(c->ud, p, take);
            if (c->dead) return;
        }
        end_response(c);
        return;
    }
    c->held = take;
    c->held_in = in;
    c->ops->on_data(c->ud, c->ibuf + c->ipos, take);
}

static void process(fy_h1_client_t *c)
{
    if (c->rstate == R_HEAD && !parse_head(c)) {
        if (!c->dead && c->rstate == R_HEAD && c->ipos >= c->ilen) c->ipos = c->ilen = 0;
        return;
    }
    if (c->rstate == R_BODY && c->held == 0 && !c->dead) body(c);
}

/* A body larger than the chunk's room is read in pieces of FY_H1C_BIG_IN: a 64 KiB response
 * takes one read and one write instead of five of each (syscalls, not copies, were most of
 * the relay's cost). Tunnels keep the small buffer: their messages are small. */
#define FY_H1C_BIG_IN (64 * 1024)

static void grow_input(fy_h1_client_t *c)
{
    size_t keep = c->ilen - c->ipos;
    char *b = malloc(FY_H1C_BIG_IN);
    if (!b) return; /* the small buffer still works */
    memcpy(b, c->ibuf + c->ipos, keep);
    c->big_in = c->ibuf = b;
    c->icap = FY_H1C_BIG_IN;
    c->ipos = 0;
    c->ilen = keep;
}

static void rd(fy_h1_client_t *c)
{
    if (c->rstate == R_BODY && !c->big_in && !c->tunnel_open && c->held == 0 &&
        (c->body_kind != FY_H1_RESP_LENGTH || c->body_left > c->icap - c->ilen))
        grow_input(c);
    for (int guard = 0; guard < 64 && !c->dead && c->held == 0 && c->rstate != R_DONE; guard++) {
        if (c->ilen == c->icap) {
            if (c->rstate == R_HEAD) {
                fail(c, FY_CLIENT_PROTOCOL, 1, "response head from the origin too large");
                return;
            }
            if (c->ipos == 0) {
                fail(c, FY_CLIENT_PROTOCOL, 1, "chunk framing line from the origin too long");
                return;
            }
            memmove(c->ibuf, c->ibuf + c->ipos, c->ilen - c->ipos);
            c->ilen -= c->ipos;
            c->ipos = 0;
        }
        size_t room = c->icap - c->ilen;
        ssize_t n = c->t->ops->read(c->t, c->ibuf + c->ilen, room);
        if (n == 0) break;
        if (n < 0) {
            if (n == FY_EEOF && c->rstate == R_BODY && c->body_kind == FY_H1_RESP_CLOSE) {
                c->eof = true;
                body(c);
                return;
            }
            bool before = c->rstate == R_HEAD;
            fail(c, FY_CLIENT_CONN, before ? 1 : 0,
                 before ? "origin closed the connection before responding"
                        : "origin closed the connection mid-response");
            return;
        }
        c->got_bytes = true;
        c->short_read = (size_t)n < room;
        c->ilen += (size_t)n;
        process(c);
    }
}

void fy_h1_client_io(fy_h1_client_t *c, uint32_t events)
{
    if (c->dead) return;
    ENTER(c);
    if ((events & EPOLLOUT) && c->nout) pump(c);
    if (c->held && (events & EPOLLIN)) c->in_dropped = true;
    if (!c->dead && c->rstate == R_DONE && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        if (!c->req_body_done || c->nout) {
            /* an early response's body still going out: this connection is lost */
            fail(c, FY_CLIENT_CONN, 0, "origin closed or sent bytes after its response");
        } else if (c->want(c->want_ud, 0) < 0) {
            /* the response is complete and waits for the owner to release: not our event
               any more (release tells whether the connection is still fit) */
            fail(c, FY_CLIENT_CONN, 0, "origin socket error");
        }
    } else if (!c->dead && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        rd(c);
    }
    update_want(c);
    leave(c);
}

void fy_h1_client_consume(fy_h1_client_t *c, size_t n)
{
    if (c->dead || n == 0) return;
    c->held = n < c->held ? c->held - n : 0;
    if (c->held) return;
    bool dropped = c->in_dropped;
    c->in_dropped = false;
    if (c->rstate == R_DONE) return;
    ENTER(c);
    c->ipos += c->held_in;
    c->held_in = 0;
    if (c->ipos >= c->ilen) c->ipos = c->ilen = 0;
    if (c->ilen > c->ipos) process(c); /* more is buffered already */
    /* after a short read the socket was empty: EPOLLIN (still set) says when more comes,
       so no read that would only return EAGAIN (one per relayed WebSocket message) */
    if (!c->dead && c->held == 0 &&
        (dropped || !c->short_read || (c->t->ops->pending && c->t->ops->pending(c->t))))
        rd(c);
    update_want(c);
    leave(c);
}

bool fy_h1_client_sending(const fy_h1_client_t *c)
{
    return !c->dead && (!c->req_body_done || c->nout > 0);
}

bool fy_h1_client_got_bytes(const fy_h1_client_t *c)
{
    return c->got_bytes;
}

bool fy_h1_client_release(fy_h1_client_t *c)
{
    if (c->released) return false;
    bool reusable = !c->dead && c->rstate == R_DONE && c->req_body_done && c->nout == 0 &&
                    !c->resp.conn_close && c->body_kind != FY_H1_RESP_CLOSE && c->ipos >= c->ilen &&
                    !c->tunnel_open;
    c->dead = true;
    c->released = true;
    return reusable;
}

void fy_h1_client_free(fy_h1_client_t *c)
{
    c->dead = c->released = true;
    if (c->obuf && c->ocap == FY_CHUNK_SIZE)
        fy_pool_put(fy_chunk_pool(), c->obuf);
    else
        free(c->obuf);
    if (c->hdrs_pooled) fy_pool_put(fy_chunk_pool(), c->hdrs);
    c->obuf = NULL;
    c->hdrs = NULL;
    free(c->big_in);
    c->big_in = NULL;
    c->hdrs_pooled = false;
    c->freed = true;
    if (c->depth == 0) fy_pool_put(fy_chunk_pool(), c); /* and its read buffer */
}
