/* Intercepting proxy handler: the answer to each request to the proxy (CONNECT, absolute-form,
 * info page, a request inside an intercepted tunnel), forwarding to ad-hoc origins, setup.
 * Thread rules: on_request runs on the worker of its exchange; fy__mitm_t is shared by every
 * worker and read-only after fy_mitm_handler_new (set_hooks and add_own_address: before start). */
#include "handler/mitm_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/alloc.h"
#include "core/errors.h"
#include "core/log.h"
#include "handler/mitm_hooks.h"
#include "net/sock.h"
#include "tls/tls.h"

/* Split "host:port", "[v6]:port" or "host" (port dflt). Returns 0 or -1. */
int fy__mitm_split_authority(fy_str_t a, int dflt, char *host, size_t hlen, int *port)
{
    const char *p = a.p, *end = a.p + a.len, *colon = NULL;
    if (a.len == 0) return -1;
    if (*p == '[') {
        const char *rb = memchr(p, ']', a.len);
        if (!rb) return -1;
        if ((size_t)(rb - p - 1) >= hlen || rb == p + 1) return -1;
        memcpy(host, p + 1, (size_t)(rb - p - 1));
        host[rb - p - 1] = '\0';
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
        if (rb + 1 < end && !colon) return -1;
    } else {
        colon = memchr(p, ':', a.len);
        size_t hl = colon ? (size_t)(colon - p) : a.len;
        if (hl == 0 || hl >= hlen) return -1;
        for (size_t i = 0; i < hl; i++) {
            unsigned char c = (unsigned char)p[i];
            if (!(c == '.' || c == '-' || c == '_' || (c >= '0' && c <= '9') ||
                  ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')))
                return -1;
            host[i] = (char)(c >= 'A' && c <= 'Z' ? c | 0x20 : c);
        }
        host[hl] = '\0';
    }
    *port = dflt;
    if (colon) {
        long v = 0;
        const char *q = colon + 1;
        if (q == end) return -1;
        for (; q < end; q++) {
            if (*q < '0' || *q > '9' || v > 65535) return -1;
            v = v * 10 + (*q - '0');
        }
        if (v < 1 || v > 65535) return -1;
        *port = (int)v;
    }
    return 0;
}

/* intercept.destinations for an exchange's destination (addr NULL: by name, where the name
   decides). False after answering 403. */
bool fy__mitm_dest_allowed(fy__mitm_t *m, fy_exchange_t *ex, const char *host, int port,
                           const struct sockaddr *addr)
{
    char why[400];
    if (fy__mitm_dest_check(m->dest, host, port, addr, why, sizeof why) != FY_DEST_DENY)
        return true;
    char a[64];
    fy_warn("mitm: client %s: %s", fy_sock_host_str(ex->remote, a, sizeof a), why);
    fy__mitm_refuse(ex, 403, "destination denied by intercept.destinations", "%s", why);
    return false;
}

bool fy__mitm_client_allowed(fy__mitm_t *m, const struct sockaddr *sa)
{
    bool allowed = m->nallow == 0;
    for (size_t i = 0; i < m->nallow && !allowed; i++) allowed = fy_cidr_match(&m->allow[i], sa);
    if (!allowed) {
        char a[64];
        fy_warn("mitm: client %s is not in intercept.allow", fy_sock_host_str(sa, a, sizeof a));
    }
    return allowed;
}

/* ---- exchanges ---- */

static void release_entry(void *arg)
{
    fy_upstream_dyn_entry_t *e = arg;
    e->inflight--;
}

/* A refusal with a plain-text body that says why (fy_exchange_fail's page names no reason). */
void fy__mitm_refuse(fy_exchange_t *ex, int status, const char *error, const char *fmt, ...)
{
    char *body = fy_arena_alloc(ex->arena, 700);
    int n = snprintf(body, 700, "%d %s: ", status, fy_http_reason(status));
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(body + n, 700 - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > 698) n = 698;
    body[n++] = '\n';
    ex->error = error;
    fy_exchange_respond(ex, status, "text/plain; charset=utf-8", body, (size_t)n);
}

static void go_entry(fy__mitm_t *m, fy_exchange_t *ex, fy_upstream_dyn_entry_t *e, const char *host,
                     int port)
{
    const fy_upstream_server_conf_t *sv = fy_upstream_conf(e->up)->servers.v;
    if (fy__mitm_loops(m, (const struct sockaddr *)&sv->addr)) {
        char a[80];
        fy__mitm_refuse(ex, 508, "request addressed to the proxy itself",
                        "the request is addressed to this proxy itself (%s)",
                        fy_sock_addr_str((const struct sockaddr *)&sv->addr, a, sizeof a));
        return;
    }
    if (!fy__mitm_dest_allowed(m, ex, host, port, (const struct sockaddr *)&sv->addr)) return;
    if (!e->user) e->user = fy_proxy_handler_new(&m->pconf, e->up);
    e->inflight++;
    fy_arena_on_reset(ex->arena, release_entry, e);
    fy_handler_t *ph = e->user;
    ph->ops->on_request(ph, ex);
}

/* An exchange whose origin's name is being resolved (in its arena). */
typedef struct pending {
    fy_resolve_req_t q;
    fy__mitm_t *m;
    fy_exchange_t *ex;
    fy_mitm_target_t t; /* strings copied into the arena */
    uint64_t t0_us;     /* the lookup started (the inspector's DNS timing) */
} pending_t;

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void dns_took(fy_exchange_t *ex, int32_t us)
{
    ex->timing.dns_us = us;
    ex->timing.dns_set = true;
}

static void dns_failed(fy_exchange_t *ex, const char *err)
{
    fy_info("mitm: %s", err);
    char *body = fy_arena_alloc(ex->arena, 600);
    int n = snprintf(body, 600, "502 Bad Gateway: %s\n", err);
    ex->error = "origin host name did not resolve";
    fy_exchange_respond(ex, 502, "text/plain; charset=utf-8", body, (size_t)n);
}

static void go_addr(pending_t *p, const struct sockaddr *sa, socklen_t len)
{
    const char *err = NULL;
    const fy_mitm_target_t *t = &p->t;
    fy_upstream_dyn_entry_t *e =
        fy_upstream_dyn_add(p->m->dyn, p->ex->ctx->worker_id, t->host, t->port, t->tls, t->h2,
                            t->sni, t->insecure, sa, len, &err);
    if (!e) {
        fy_info("mitm: %s:%d: %s", t->host, t->port, err);
        fy_exchange_fail(p->ex, 502, err);
        return;
    }
    go_entry(p->m, p->ex, e, t->host, t->port);
}

static void go_resolved(fy_resolve_req_t *q, const struct sockaddr *sa, socklen_t len,
                        const char *err)
{
    pending_t *p = q->data;
    dns_took(p->ex, (int32_t)(mono_us() - p->t0_us));
    if (!sa) {
        dns_failed(p->ex, err);
        return;
    }
    go_addr(p, sa, len);
}

static void pending_cancel(void *arg)
{
    fy_resolve_cancel(&((pending_t *)arg)->q);
}

static void go(fy_exchange_t *ex, const fy_mitm_target_t *t, void *ud)
{
    fy__mitm_t *m = ud;
    fy_upstream_dyn_entry_t *e = fy_upstream_dyn_find(m->dyn, ex->ctx->worker_id, t->host, t->port,
                                                      t->tls, t->h2, t->sni, t->insecure);
    if (e) {
        dns_took(ex, -1); /* this destination was resolved for an earlier flow */
        go_entry(m, ex, e, t->host, t->port);
        return;
    }
    if (!fy__mitm_dest_allowed(m, ex, t->host, t->port, NULL)) return;
    pending_t *p = fy_arena_calloc(ex->arena, sizeof *p);
    p->m = m;
    p->ex = ex;
    p->t = *t;
    size_t hl = strlen(t->host) + 1;
    char *h = fy_arena_alloc(ex->arena, hl);
    memcpy(h, t->host, hl);
    p->t.host = h;
    if (t->sni) {
        size_t sl = strlen(t->sni) + 1;
        char *s = fy_arena_alloc(ex->arena, sl);
        memcpy(s, t->sni, sl);
        p->t.sni = s;
    }
    p->q.cb = go_resolved;
    p->q.data = p;
    p->t0_us = mono_us();
    int r = fy_resolve(m->resolver, ex->ctx->worker_id, ex->ctx->loop, p->t.host, p->t.port, &p->q);
    if (r < 0) {
        dns_failed(ex, p->q.err);
        return;
    }
    if (r == 1) {
        dns_took(ex, (int32_t)(mono_us() - p->t0_us));
        go_addr(p, (struct sockaddr *)&p->q.addr, p->q.addrlen);
        return;
    }
    fy_arena_on_reset(ex->arena, pending_cancel, p);
}

static void forward(fy__mitm_t *m, fy_exchange_t *ex, const char *host, int port, bool tls, bool h2,
                    const char *sni, bool insecure)
{
    fy_mitm_target_t t = {host, port, tls, sni, insecure, h2};
    fy__mitm_capture_begin(m, ex);
    if (m->any_hook && fy__mitm_hooks_begin(&m->hooks, ex)) return; /* answered: ex may be gone */
    fy__mitm_rules_run(m->rules, ex, &t, go, m);
}

static void error_page(fy_exchange_t *ex, const fy__mitm_tunnel_info_t *ti)
{
    if (ti->status == 403) {
        fy__mitm_refuse(ex, 403, "destination denied by intercept.destinations", "%s", ti->error);
        return;
    }
    char body[1200];
    int n = snprintf(body, sizeof body,
                     "<!doctype html><title>502 Bad Gateway</title><h1>502 Bad Gateway</h1>"
                     "<p>Ferry's intercepting proxy did not forward this request to "
                     "<b>%s:%d</b>:</p><p><code>%s</code></p><p>The connection to the origin "
                     "was refused or its certificate could not be verified; Ferry never "
                     "continues with an unverified origin (see <code>intercept.insecure</code> "
                     "and <code>intercept.upstream-ca</code>).</p>\n",
                     ti->name, ti->port, ti->error);
    ex->error = "origin failed verification or connect";
    fy_exchange_respond(ex, 502, "text/html; charset=utf-8", body, (size_t)n);
}

static void info_page(fy__mitm_t *m, fy_exchange_t *ex)
{
    if (fy_str_eq(ex->req.path, "/ferry-ca.pem", 13)) {
        fy_exchange_respond(ex, 200, "application/x-pem-file", m->ca_pem, m->ca_pem_len);
        return;
    }
    static const char page[] =
        "<!doctype html><title>Ferry intercepting proxy</title><h1>Ferry intercepting proxy</h1>"
        "<p>Use this address as your HTTP and HTTPS proxy. To see HTTPS traffic, trust "
        "<a href=\"/ferry-ca.pem\">Ferry's CA certificate</a> (<code>ferry ca export</code> "
        "prints how).</p>\n";
    fy_exchange_respond(ex, 200, "text/html; charset=utf-8", page, sizeof page - 1);
}

static bool authorized(fy__mitm_t *m, fy_exchange_t *ex)
{
    if (!m->auth_b64) return true;
    const fy_header_t *h = FY_HDR_FIND(&ex->req.headers, "proxy-authorization");
    if (!h || h->value.len < 6 || strncasecmp(h->value.p, "basic ", 6) != 0) return false;
    fy_str_t v = fy_str(h->value.p + 6, h->value.len - 6);
    while (v.len && v.p[0] == ' ') v.p++, v.len--;
    while (v.len && v.p[v.len - 1] == ' ') v.len--;
    size_t el = strlen(m->auth_b64);
    return v.len == el && memcmp(v.p, m->auth_b64, el) == 0;
}

static void on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    fy__mitm_t *m = (fy__mitm_t *)h;
    fy__mitm_tunnel_info_t *ti = ex->tunnel;
    if (ti) {
        if (ex->req.method_id == FY_M_CONNECT) {
            fy_exchange_fail(ex, 405, "CONNECT inside an intercepted tunnel");
            return;
        }
        if (ti->error[0]) {
            error_page(ex, ti);
            return;
        }
        if (ti->plain) {
            char host[256];
            int port = ti->port;
            snprintf(host, sizeof host, "%s", ti->host);
            if (!host[0] &&
                fy__mitm_split_authority(ex->req.authority, 80, host, sizeof host, &port) < 0) {
                fy_exchange_fail(ex, 400, "no usable Host for a transparent request");
                return;
            }
            forward(m, ex, host, port, false, false, NULL, false);
            return;
        }
        forward(m, ex, ti->host, ti->port, true, ti->origin_alpn_h2, ti->name, ti->insecure);
        return;
    }
    if (!fy__mitm_client_allowed(m, ex->remote)) {
        fy_exchange_fail(ex, 403, "client address not in intercept.allow");
        return;
    }
    if (!authorized(m, ex)) {
        FY_HDR_ADD(ex->arena, &ex->res.headers, "proxy-authenticate", "Basic realm=\"ferry\"", 19);
        ex->error = "proxy authentication required";
        static const char msg[] = "Proxy authentication required\n";
        fy_exchange_respond(ex, 407, "text/plain", msg, sizeof msg - 1);
        return;
    }
    if (ex->req.method_id == FY_M_CONNECT) {
        fy__mitm_connect_start(m, ex);
        return;
    }
    if (!ex->req.absolute_form) {
        info_page(m, ex);
        return;
    }
    bool tls = fy_str_eq(ex->req.scheme, "https", 5);
    char host[256];
    int port;
    if (fy__mitm_split_authority(ex->req.authority, tls ? 443 : 80, host, sizeof host, &port) < 0) {
        fy_exchange_fail(ex, 400, "bad host in the request URI");
        return;
    }
    bool insecure = fy_host_list_match(&m->conf->insecure, host);
    forward(m, ex, host, port, tls, false, NULL, insecure);
}

/* ---- setup ---- */

static void free_proxy(void *p)
{
    fy_handler_t *h = p;
    h->ops->destroy(h);
}

static void destroy(fy_handler_t *h)
{
    fy__mitm_t *m = (fy__mitm_t *)h;
    for (size_t i = 0; i < FY__MITM_PROBE_CACHE; i++) free(m->probed[i].tls);
    fy_upstream_dyn_free(m->dyn);
    fy_resolver_free(m->resolver);
    fy__mitm_rules_free(m->rules);
    fy__mitm_dest_free(m->dest);
    fy_mint_free(m->mint);
    fy_ca_free(m->ca);
    fy_tls_mitm_ctx_free(m->probe);
    fy_tls_mitm_ctx_free(m->probe_insecure);
    pthread_mutex_destroy(&m->pin_lock);
    free(m->allow);
    free(m->auth_b64);
    free(m->ca_pem);
    free(m);
}

void fy_mitm_set_hooks(fy_handler_t *h, const ferry_hooks_t *hooks)
{
    fy__mitm_t *m = (fy__mitm_t *)h;
    m->hooks = *hooks;
    m->any_hook = hooks->on_request || hooks->on_response || hooks->on_request_body ||
                  hooks->on_response_body;
}

void fy_mitm_worker_close(fy_handler_t *h, int w)
{
    fy__mitm_t *m = (fy__mitm_t *)h;
    fy_upstream_dyn_worker_close(m->dyn, w);
    fy_resolver_worker_close(m->resolver, w);
}

static const fy_handler_ops_t mitm_ops = {"mitm", on_request, destroy};

static char *b64(const char *s)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(s), o = 0;
    char *r = fy_xmalloc(n / 3 * 4 + 8);
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)(unsigned char)s[i] << 16;
        if (i + 1 < n) v |= (unsigned)(unsigned char)s[i + 1] << 8;
        if (i + 2 < n) v |= (unsigned char)s[i + 2];
        r[o++] = t[v >> 18 & 63];
        r[o++] = t[v >> 12 & 63];
        r[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
        r[o++] = i + 2 < n ? t[v & 63] : '=';
    }
    r[o] = '\0';
    return r;
}

fy_handler_t *fy_mitm_handler_new(const fy_intercept_conf_t *conf, int nworkers)
{
    char err[600];
    fy_ca_t *ca = fy_ca_load(conf->ca_dir, true, err, sizeof err);
    if (!ca) {
        fy_log(FY_LOG_EMERG, "intercept: CA: %s", err);
        return NULL;
    }
    if (fy_ca_created(ca))
        fy_notice("intercept: generated the interception CA %s (trust it: ferry ca export)",
                  fy_ca_pem_path(ca));
    fy__mitm_t *m = fy_xcalloc(1, sizeof *m);
    m->h.ops = &mitm_ops;
    m->conf = conf;
    m->ca = ca;
    pthread_mutex_init(&m->pin_lock, NULL);
    char leaves[4200];
    snprintf(leaves, sizeof leaves, "%s/leaves", conf->ca_dir);
    m->mint = fy_mint_new(ca, (size_t)conf->cert_cache, conf->cert_disk ? leaves : NULL);
    m->probe = fy__mitm_probe_ctx(conf->upstream_ca, false);
    m->probe_insecure = fy__mitm_probe_ctx(NULL, true);
    m->rules = fy__mitm_rules_new(conf);
    m->dest = fy__mitm_dest_new(&conf->destinations);
    if (conf->forward) {
        const char *c = strrchr(conf->forward, ':');
        snprintf(m->fwd_host, sizeof m->fwd_host, "%.*s", (int)(c - conf->forward), conf->forward);
        m->fwd_port = (int)strtol(c + 1, NULL, 10);
    }
    if (!m->mint || !m->probe || !m->probe_insecure || !m->rules) {
        destroy(&m->h);
        return NULL;
    }
    m->dyn = fy_upstream_dyn_new(nworkers, (size_t)conf->max_origins, conf->upstream_ca,
                                 conf->connect_timeout_ms, free_proxy);
    m->resolver =
        fy_resolver_new(nworkers, (int)conf->resolver_threads, (size_t)conf->resolve_cache,
                        conf->resolve_ttl_ms, conf->resolve_timeout_ms);
    m->pconf.preserve_host = true;
    m->pconf.forwarded = false; /* an interceptor is invisible: no X-Forwarded-* */
    m->allow = fy_xcalloc(conf->allow.n ? conf->allow.n : 1, sizeof *m->allow);
    for (size_t i = 0; i < conf->allow.n; i++)
        if (fy_cidr_parse(conf->allow.v[i], &m->allow[m->nallow]) == 0) m->nallow++;
    if (conf->auth) m->auth_b64 = b64(conf->auth);
    for (size_t i = 0; i < m->nallow && conf->destinations.n == 0; i++) {
        const fy_cidr_t *c = &m->allow[i];
        bool lo = (c->family == AF_INET && c->bits >= 8 && c->addr[0] == 127) ||
                  (c->family == AF_INET6 && c->bits == 128 &&
                   IN6_IS_ADDR_LOOPBACK((const struct in6_addr *)c->addr));
        if (lo) continue;
        fy_warn("intercept.allow admits clients beyond loopback (%s) and intercept.destinations "
                "is empty: they can reach this host's loopback services and private networks "
                "through the proxy; consider destinations: [{action: deny, hosts: [loopback, "
                "private]}]",
                conf->allow.v[i]);
        break;
    }
    m->ca_pem = fy_tls_mitm_cert_pem(fy_ca_cert(ca), &m->ca_pem_len);
    return &m->h;
}
