/* The proxy's field rules: the request's fields for the origin (pseudo-headers, the route's
 * host/path/set/remove rules, hop-by-hop removal, X-Forwarded-*, Via, content-length), the
 * classes of fields with a rule of their own, what the route adds to every response head, and
 * our Sec-WebSocket-Accept. Pure functions of the exchange; worker's thread only. */
#include "handler/proxy_int.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "http/filter.h"
#include "net/sock.h"

int fy__proxy_field_class(fy_str_t n)
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

bool fy__proxy_in_list(const fy_conf_strlist_t *l, fy_str_t n)
{
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->v[i]) == n.len && strncasecmp(l->v[i], n.p, n.len) == 0) return true;
    return false;
}

bool fy__proxy_in_map(const fy_conf_strmap_t *m, fy_str_t n)
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

/* What the route adds to every response head: set headers, Via, the sticky cookie. */
void fy__proxy_add_response_extras(proxy_req_t *pr)
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

/* ---- the request for the origin ---- */

/* Lowercase copy of a field name (HTTP/2 and HTTP/3 want lowercase; h1 clients send any case). */
static const char *lower_dup(fy_arena_t *a, fy_str_t n)
{
    char *l = fy_arena_alloc(a, n.len + 1);
    for (size_t i = 0; i < n.len; i++) l[i] = fy_lower(n.p[i]);
    l[n.len] = '\0';
    return l;
}

/* Does a route rule drop the field named n (remove it, or set it anew)? */
static inline __attribute__((always_inline)) bool dropped(const fy_proxy_conf_t *pc, fy_str_t n)
{
    return (pc->remove_headers.n && fy__proxy_in_list(&pc->remove_headers, n)) ||
           (pc->set_headers.n && fy__proxy_in_map(&pc->set_headers, n));
}

/* our "te: trailers" (a Connection list naming te does not drop it: h1 clients must list it) */
static const char te_name[] = "te";

/* The request's fields for the origin, pseudo-headers first, whatever codec carries them:
 * route rules (host, path prefix, set/remove), hop-by-hop removal, X-Forwarded-*, Via. */
void fy__proxy_build_fields(proxy_req_t *pr, fy_headers_t *hs)
{
    fy_exchange_t *ex = pr->ex;
    fy_arena_t *a = ex->arena;
    const fy_proxy_conf_t *pc = pr->ph->conf;
    const fy_request_t *q = &ex->req;
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(pr->ph->up)->servers.v)[pr->server];
    fy_origin_framing_t fr = fy_origin_stream_framing(pr->os);
    /* sized once: 5 pseudo-headers, the client's fields, the route's, and ours (3 forwarded,
       via, te, content-length) */
    hs->cap = q->headers.n + pc->set_headers.n + 12;
    fy_header_t *o = hs->v = fy_arena_alloc(a, hs->cap * sizeof *hs->v);
    size_t n = 0; /* hs->n, kept in a register until the end */
#define PUT(np, nl, vp, vl) (o[n++] = (fy_header_t){fy_str((np), (nl)), fy_str((vp), (vl))})
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
    bool rules = pc->remove_headers.n || pc->set_headers.n; /* may a route rule drop one? */
    size_t first = n;                                       /* the client's fields from here */
    for (const fy_header_t *h = q->headers.v, *he = h + q->headers.n; h < he; h++) {
        if (fy_filter_field_is_ours(h->name.p)) {
            /* a filter's (http/filter.h: tracing's traceparent): no class, lowercase */
            if (!rules || !dropped(pc, h->name)) o[n++] = *h;
            continue;
        }
        switch (fy__proxy_field_class(h->name)) {
        case F_TE:
            if (fr.te_trailers && !pr->tunnel && fy_str_list_has(h->value, "trailers", 8))
                PUT(te_name, 2, "trailers", 8); /* the only TE HTTP/2 carries */
            continue;
        case F_HOP:
            if (h->name.len == 10 && fy_str_ieq(h->name, "connection", 10)) conn = true;
            continue;
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
        if (rules && dropped(pc, h->name)) continue;
        if (!fr.lowercase) /* the h1 codec keeps the client's case */
            PUT(h->name.p, h->name.len, h->value.p, h->value.len);
        else
            PUT(lower_dup(a, h->name), h->name.len, h->value.p, h->value.len);
    }
    if (__builtin_expect(conn, 0)) {
        /* the fields a Connection header names are hop-by-hop too: out of what was kept (found
           after the fact: the usual request has no Connection list to look for first) */
        size_t k = first;
        for (size_t j = first; j < n; j++)
            if (o[j].name.p == te_name || !named_in_connection(&q->headers, o[j].name))
                o[k++] = o[j];
        n = k;
    }
    for (size_t i = 0; i < pc->set_headers.n; i++) {
        fy_str_t k = fy_str(pc->set_headers.keys[i], strlen(pc->set_headers.keys[i]));
        PUT(fr.lowercase ? lower_dup(a, k) : k.p, k.len, pc->set_headers.values[i],
            strlen(pc->set_headers.values[i]));
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
        int l = snprintf(cl, 24, "%lld", (long long)q->content_length);
        PUT("content-length", 14, cl, (size_t)l);
    }
    hs->n = n;
#undef PUT
}

/* Sec-WebSocket-Accept for an HTTP/1.1 client's key (RFC 6455 §4.2.2): the HTTP/2 origin
 * (RFC 8441) never saw the key, so the proof is ours to give. */
bool fy__proxy_ws_accept(fy_str_t key, char out[32])
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
