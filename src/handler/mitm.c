/* Intercepting proxy handler: CONNECT takeover, peek, paused TLS handshake, origin probe,
 * nested h1 codec on the decrypted stream, byte relay, absolute-form forwarding. */
#include "handler/mitm.h"

#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <openssl/pem.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/errors.h"
#include "core/log.h"
#include "h1/h1_server.h"
#include "h2/h2_server.h"
#include "handler/mitm_dest.h"
#include "handler/mitm_hooks.h"
#include "handler/mitm_rules.h"
#include "handler/proxy.h"
#include "handler/socks5.h"
#include "http/exchange.h"
#include "net/resolve.h"
#include "net/sock.h"
#include "tls/mint.h"
#include "tls/tls.h"
#include "upstream/upstream_dyn.h"

#define MAX_PINS 256
#define PROBE_CACHE 1024   /* origins whose probe succeeded, remembered (shared) */
#define PROBE_TTL_MS 60000 /* for this long: later tunnels skip the probe connection */
#define PROBE_WAYS 8       /* entries per set of the probe cache */
#define RELAY_BUF 16384

typedef struct pin {
    char host[256];
    int fails;
    uint64_t until_ms; /* passed through until then; 0: not bypassed */
} pin_t;

typedef struct probed {
    uint64_t hash;
    uint64_t until_ms;
    bool h2;
} probed_t;

typedef struct mitm {
    fy_handler_t h;
    const fy_intercept_conf_t *conf; /* borrowed */
    fy_ca_t *ca;                     /* owned */
    fy_mint_t *mint;                 /* owned */
    fy_upstream_dyn_t *dyn;          /* owned */
    fy_resolver_t *resolver;         /* owned: origins' names, off the worker threads */
    fy_proxy_conf_t pconf;           /* of the proxy handlers over ad-hoc origins */
    fy_cidr_t *allow;                /* owned */
    size_t nallow;
    char *auth_b64; /* owned: base64(user:password), or NULL */
    SSL_CTX *probe, *probe_insecure;
    pthread_mutex_t pin_lock;
    pin_t pins[MAX_PINS];
    probed_t probed[PROBE_CACHE];    /* under pin_lock */
    fy_mitm_rules_t *rules;          /* owned */
    fy_mitm_dest_t *dest;            /* owned: intercept.destinations */
    struct sockaddr_storage own[16]; /* our proxy listeners: requests to them would loop */
    size_t nown;
    char fwd_host[256]; /* intercept.forward, split; fwd_port 0: none */
    int fwd_port;
    ferry_hooks_t hooks; /* include/ferry/mitm.h; all NULL when not embedded */
    bool any_hook;
    char *ca_pem; /* owned: the certificate served on the info page */
    size_t ca_pem_len;
} mitm_t;

/* What the nested codec's exchanges carry as ex->tunnel. */
typedef struct tunnel_info {
    char host[256]; /* CONNECT host */
    int port;
    char name[256]; /* SNI, else the CONNECT host: certificate name and origin SNI */
    bool insecure;
    char error[400];     /* origin failure: every request gets a 502 page saying this */
    int status;          /* of that page: 502, or 403 (intercept.destinations) */
    bool origin_h2;      /* the origin chose h2 in the probe and the listener speaks h2: the client
                            is offered h2 too */
    bool origin_alpn_h2; /* the origin chose h2 in the probe: requests go to it over h2 */
    bool plain;          /* transparent plain HTTP: no TLS either side; host "" = use Host */
} tunnel_info_t;

enum { S_PEEK, S_HELLO, S_PROBE, S_FINISH, S_RELAY_CONNECT, S_RELAY, S_SOCKS, S_SOCKS_CONNECT };
static const char *const state_names[] = {
    "peek",    "client hello", "origin handshake", "client handshake",
    "connect", "relay",        "socks5 handshake", "socks5 connect"};

typedef struct tunnel {
    fy_conn_node_t node; /* in ctx->conns: drained and closed with the listener's conns */
    mitm_t *m;
    fy_http_ctx_t *ctx;
    fy_loop_t *loop;
    struct sockaddr_storage remote;
    fy_io_t cio, oio; /* client and origin sockets */
    fy_timer_t timer;
    fy_defer_t defer;
    int state;
    bool closed;
    char host[256];
    int port;
    SSL *cssl, *ossl;
    tunnel_info_t *info; /* owned until handed to the nested codec */
    char *c2o, *o2c;     /* relay buffers (owned) */
    size_t c2o_len, c2o_off, o2c_len, o2c_off;
    bool c_eof, o_eof, c_shut, o_shut;
    int socks_stage;     /* enum fy_socks5_stage while state == S_SOCKS */
    bool transparent;    /* kind: transparent; host "" until SNI/Host tell it (direct mode) */
    fy_resolve_req_t rq; /* the origin's name, while resolving */
    void (*connected)(struct tunnel *t,
                      const char *err); /* after connect_origin: fd in oio or err */
    int oerrno;    /* why connect_origin failed: an errno, ELOOP to ourselves, EACCES denied by
                      intercept.destinations, 0 the name */
    char why[400]; /* connect_origin's error text when it is not static */
} tunnel_t;

static bool loops(const mitm_t *m, const struct sockaddr *sa);
static void refuse(fy_exchange_t *ex, int status, const char *error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- pinning ---- */

static bool pinned(mitm_t *m, const char *host, uint64_t now)
{
    bool r = false;
    pthread_mutex_lock(&m->pin_lock);
    for (int i = 0; i < MAX_PINS; i++) {
        pin_t *p = &m->pins[i];
        if (!p->host[0] || strcmp(p->host, host) != 0) continue;
        if (p->until_ms > now)
            r = true;
        else if (p->until_ms)
            memset(p, 0, sizeof *p); /* the bypass expired: try decrypting again */
        break;
    }
    pthread_mutex_unlock(&m->pin_lock);
    return r;
}

static void pin_fail(mitm_t *m, const char *host, uint64_t now)
{
    if (m->conf->pin_failures <= 0) return;
    pthread_mutex_lock(&m->pin_lock);
    pin_t *p = NULL, *spare = NULL;
    for (int i = 0; i < MAX_PINS && !p; i++) {
        if (m->pins[i].host[0] && strcmp(m->pins[i].host, host) == 0) p = &m->pins[i];
        if (!spare && (!m->pins[i].host[0] || (m->pins[i].until_ms && m->pins[i].until_ms <= now)))
            spare = &m->pins[i];
    }
    if (!p) p = spare ? spare : &m->pins[(now ^ (uint64_t)(uintptr_t)host) % MAX_PINS];
    if (strcmp(p->host, host) != 0) {
        memset(p, 0, sizeof *p);
        snprintf(p->host, sizeof p->host, "%s", host);
    }
    if (++p->fails >= m->conf->pin_failures) {
        p->until_ms = now + m->conf->pin_ttl_ms;
        p->fails = 0;
        fy_warn("mitm: %s refused the forged certificate %lld times (certificate pinning?): "
                "passing it through undecrypted for %llus",
                host, (long long)m->conf->pin_failures,
                (unsigned long long)(m->conf->pin_ttl_ms / 1000));
    }
    pthread_mutex_unlock(&m->pin_lock);
}

/* ---- tunnel lifecycle ---- */

static void tunnel_free_cb(fy_defer_t *d)
{
    tunnel_t *t = d->data;
    fy_http_ctx_t *ctx = t->ctx;
    free(t->c2o);
    free(t->o2c);
    free(t->info);
    free(t);
    if (ctx->on_conn_closed) ctx->on_conn_closed(ctx);
}

static void tunnel_close(tunnel_t *t)
{
    if (t->closed) return;
    t->closed = true;
    fy_resolve_cancel(&t->rq);
    fy_timer_stop(t->loop, &t->timer);
    if (t->cio.fd >= 0) {
        fy_io_set(t->loop, &t->cio, 0);
        close(t->cio.fd);
        t->cio.fd = -1;
    }
    if (t->oio.fd >= 0) {
        fy_io_set(t->loop, &t->oio, 0);
        close(t->oio.fd);
        t->oio.fd = -1;
    }
    SSL_free(t->cssl);
    SSL_free(t->ossl);
    t->cssl = t->ossl = NULL;
    fy_list_remove(&t->node.link);
    t->ctx->nconns--;
    t->defer.cb = tunnel_free_cb;
    t->defer.data = t;
    fy_defer(t->loop, &t->defer);
}

static void node_close(fy_conn_node_t *n)
{
    tunnel_close(fy_container_of(n, tunnel_t, node));
}

static void socks_reply(tunnel_t *t, int err, const char *why);

static void on_timer(fy_timer_t *tm)
{
    tunnel_t *t = tm->data;
    if (t->state == S_SOCKS_CONNECT) {
        socks_reply(t, ETIMEDOUT, "connect timeout");
        return;
    }
    fy_info("mitm: tunnel to %s:%d: %s timeout", t->host, t->port, state_names[t->state]);
    if (t->state == S_FINISH) pin_fail(t->m, t->info ? t->info->name : t->host, t->loop->now_ms);
    tunnel_close(t);
}

static int connect_addr(tunnel_t *t, const struct sockaddr *sa, socklen_t len, const char **err)
{
    if (loops(t->m, sa)) {
        *err = "the tunnel is addressed to this proxy itself";
        t->oerrno = ELOOP;
        return -1;
    }
    if (fy__mitm_dest_check(t->m->dest, t->host, t->port, sa, t->why, sizeof t->why) ==
        FY_DEST_DENY) {
        char a[64];
        fy_warn("mitm: client %s: %s", fy_sock_host_str((struct sockaddr *)&t->remote, a, sizeof a),
                t->why);
        *err = t->why;
        t->oerrno = EACCES;
        return -1;
    }
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        t->oerrno = errno;
        *err = "cannot make a socket";
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, sa, len) < 0 && errno != EINPROGRESS) {
        t->oerrno = errno;
        *err = strerror(errno);
        close(fd);
        return -1;
    }
    t->oio.fd = fd;
    return 0;
}

static void origin_resolved(fy_resolve_req_t *q, const struct sockaddr *sa, socklen_t len,
                            const char *err)
{
    tunnel_t *t = q->data;
    t->oerrno = 0;
    if (sa && connect_addr(t, sa, len, &err) == 0) err = NULL;
    t->connected(t, err);
}

/* Resolve the tunnel's host (off this thread unless literal or cached) and start a
 * non-blocking connect; `connected` gets the outcome (maybe before this returns). */
static void connect_origin(tunnel_t *t, void (*connected)(tunnel_t *t, const char *err))
{
    t->connected = connected;
    t->rq.cb = origin_resolved;
    t->rq.data = t;
    int r = fy_resolve(t->m->resolver, t->ctx->worker_id, t->loop, t->host, t->port, &t->rq);
    if (r == 0) return; /* origin_resolved comes later */
    if (r < 0) {
        connected(t, t->rq.err);
        return;
    }
    origin_resolved(&t->rq, (struct sockaddr *)&t->rq.addr, t->rq.addrlen, NULL);
}

/* ---- relay (plain bytes inside CONNECT, passthrough, pinned hosts) ---- */

static void relay_events(tunnel_t *t)
{
    uint32_t ce = 0, oe = 0;
    if (!t->c_eof && t->c2o_len == t->c2o_off) ce |= EPOLLIN;
    if (t->o2c_len > t->o2c_off) ce |= EPOLLOUT;
    if (!t->o_eof && t->o2c_len == t->o2c_off) oe |= EPOLLIN;
    if (t->c2o_len > t->c2o_off) oe |= EPOLLOUT;
    fy_io_set(t->loop, &t->cio, ce);
    fy_io_set(t->loop, &t->oio, oe);
}

/* Move what can move one way. Returns 1 progress, 0 none, -1 error. */
static int pump(int from, int to, char *buf, size_t *len, size_t *off, bool *eof, bool *shut)
{
    int progress = 0;
    if (*len == *off && !*eof) {
        ssize_t n = read(from, buf, RELAY_BUF);
        if (n > 0) {
            *len = (size_t)n;
            *off = 0;
            progress = 1;
        } else if (n == 0) {
            *eof = true;
            progress = 1;
        } else if (errno != EAGAIN && errno != EINTR) {
            return -1;
        }
    }
    while (*len > *off) {
        ssize_t n = send(to, buf + *off, *len - *off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) break;
            return -1;
        }
        *off += (size_t)n;
        progress = 1;
    }
    if (*len == *off) *len = *off = 0;
    if (*eof && *len == 0 && !*shut) {
        shutdown(to, SHUT_WR);
        *shut = true;
    }
    return progress;
}

static void relay(tunnel_t *t)
{
    for (int i = 0; i < 16; i++) {
        int a = pump(t->cio.fd, t->oio.fd, t->c2o, &t->c2o_len, &t->c2o_off, &t->c_eof, &t->o_shut);
        int b = pump(t->oio.fd, t->cio.fd, t->o2c, &t->o2c_len, &t->o2c_off, &t->o_eof, &t->c_shut);
        if (a < 0 || b < 0) {
            tunnel_close(t);
            return;
        }
        if (t->c_shut && t->o_shut) {
            tunnel_close(t);
            return;
        }
        if (!a && !b) break;
    }
    fy_timer_start(t->loop, &t->timer, t->m->conf->tunnel_idle_ms);
    relay_events(t);
}

static void relay_connected(tunnel_t *t, const char *err)
{
    if (err) {
        fy_info("mitm: relay to %s:%d: %s", t->host, t->port, err);
        tunnel_close(t);
        return;
    }
    t->state = S_RELAY_CONNECT;
    fy_io_set(t->loop, &t->cio, 0);
    fy_io_set(t->loop, &t->oio, EPOLLOUT);
    fy_timer_start(t->loop, &t->timer, t->m->conf->connect_timeout_ms);
}

static void relay_start_connected(tunnel_t *t)
{
    t->state = S_RELAY;
    t->c2o = t->c2o ? t->c2o : fy_xmalloc(RELAY_BUF);
    t->o2c = fy_xmalloc(RELAY_BUF);
    relay(t);
}

static void start_relay(tunnel_t *t)
{
    if (t->oio.fd >= 0) { /* connected before the 200 */
        relay_start_connected(t);
        return;
    }
    fy_io_set(t->loop, &t->cio, 0); /* quiet while the name resolves */
    fy_timer_start(t->loop, &t->timer, t->m->conf->connect_timeout_ms);
    connect_origin(t, relay_connected);
}

/* ---- interception ---- */

static void drive_client(tunnel_t *t);

static void hand_over(tunnel_t *t)
{
    int fd = t->cio.fd;
    fy_io_set(t->loop, &t->cio, 0);
    t->cio.fd = -1;
    fy_mint_handed_over(t->cssl);
    fy_transport_t *tr = fy_tls_transport_from_ssl(t->cssl, fd);
    t->cssl = NULL;
    tunnel_info_t *info = t->info;
    t->info = NULL;
    fy_http_ctx_t *ctx = t->ctx;
    struct sockaddr_storage remote = t->remote;
    tunnel_close(t);
    if (!tr) {
        close(fd);
        free(info);
        return;
    }
    if (tr->alpn && strcmp(tr->alpn, "h2") == 0)
        fy_h2_conn_start_tunnel(ctx, fd, tr, (struct sockaddr *)&remote, sizeof remote, info, free);
    else
        fy_h1_conn_start(ctx, fd, tr, (struct sockaddr *)&remote, sizeof remote, info, free);
}

/* why: NULL when the origin is fine; else the 502 page says "why: detail". `waited`: the
   client's handshake was paused for a probe connection (it may have left meanwhile). */
static void probe_done(tunnel_t *t, const char *why, const char *detail, bool waited)
{
    if (t->ossl) {
        SSL_free(t->ossl);
        t->ossl = NULL;
    }
    if (t->oio.fd >= 0) {
        fy_io_set(t->loop, &t->oio, 0);
        close(t->oio.fd);
        t->oio.fd = -1;
    }
    if (why) {
        snprintf(t->info->error, sizeof t->info->error, "%s: %s", why, detail);
        fy_warn("mitm: origin %s:%d (%s): %s", t->host, t->port, t->info->name, t->info->error);
    }
    char b;
    if (waited && recv(t->cio.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
        /* the client left while we probed: not a refusal of our certificate (pinning) */
        fy_info("mitm: client to %s:%d left during the origin handshake", t->host, t->port);
        tunnel_close(t);
        return;
    }
    /* protocol mirroring: h2 to the client only when the origin speaks it; the exchanges go to
       the origin in its own protocol (forward(): an h2:// ad-hoc upstream) */
    if (fy_mint_resume(t->m->mint, t->cssl, t->info->name, t->info->origin_h2 && !why) < 0) {
        tunnel_close(t);
        return;
    }
    t->state = S_FINISH;
    fy_timer_start(t->loop, &t->timer, t->m->conf->connect_timeout_ms);
    drive_client(t);
}

static void probe_remember(mitm_t *m, const tunnel_info_t *ti, uint64_t now);

static void drive_probe(tunnel_t *t)
{
    ERR_clear_error();
    int r = SSL_do_handshake(t->ossl);
    if (r == 1) {
        const unsigned char *p;
        unsigned len;
        SSL_get0_alpn_selected(t->ossl, &p, &len);
        t->info->origin_alpn_h2 = len == 2 && memcmp(p, "h2", 2) == 0;
        t->info->origin_h2 = t->info->origin_alpn_h2 && t->ctx->h2conf;
        probe_remember(t->m, t->info, t->loop->now_ms);
        probe_done(t, NULL, NULL, true);
        return;
    }
    int e = SSL_get_error(t->ossl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        fy_io_set(t->loop, &t->oio, e == SSL_ERROR_WANT_READ ? EPOLLIN : EPOLLOUT);
        return;
    }
    long v = SSL_get_verify_result(t->ossl);
    char msg[300];
    if (v != X509_V_OK) {
        snprintf(msg, sizeof msg, "%s", X509_verify_cert_error_string(v));
        ERR_clear_error();
        probe_done(t, "the origin's certificate is not trusted", msg, true);
        return;
    }
    unsigned long le = ERR_get_error();
    ERR_clear_error();
    if (e == SSL_ERROR_SYSCALL || !le) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(t->oio.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        probe_done(t, "cannot connect to the origin",
                   soerr ? strerror(soerr) : "connection closed during the TLS handshake", true);
        return;
    }
    ERR_error_string_n(le, msg, sizeof msg);
    probe_done(t, "TLS handshake with the origin failed", msg, true);
}

static uint64_t probe_key(const tunnel_info_t *ti)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)ti->port ^ (ti->insecure ? 0x5a : 0);
    for (const char *p = ti->host; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ '|') * 1099511628211ull;
    for (const char *p = ti->name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h | 1;
}

/* The probe cache is set-associative: PROBE_WAYS entries per set, the set chosen by the mixed
   key. (Direct-mapped by key % 512, it kept only 62 of 200 similar host names apart: the rest
   evicted each other, and most new tunnels paid a second origin connection and handshake.) */
static probed_t *probe_set(mitm_t *m, uint64_t k)
{
    uint64_t x = k; /* a 64-bit finalizer: FNV's low bits vary little between similar names */
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    size_t set = (size_t)(x % (PROBE_CACHE / PROBE_WAYS));
    return &m->probed[set * PROBE_WAYS];
}

/* A verified probe of this origin within PROBE_TTL_MS: its ALPN into *h2. */
static bool probe_cached(mitm_t *m, const tunnel_info_t *ti, uint64_t now, bool *h2)
{
    uint64_t k = probe_key(ti);
    bool hit = false;
    pthread_mutex_lock(&m->pin_lock);
    probed_t *set = probe_set(m, k);
    for (int i = 0; i < PROBE_WAYS && !hit; i++)
        if (set[i].hash == k && set[i].until_ms > now) {
            hit = true;
            *h2 = set[i].h2;
        }
    pthread_mutex_unlock(&m->pin_lock);
    return hit;
}

static void probe_remember(mitm_t *m, const tunnel_info_t *ti, uint64_t now)
{
    uint64_t k = probe_key(ti);
    pthread_mutex_lock(&m->pin_lock);
    probed_t *set = probe_set(m, k), *p = NULL;
    /* the same origin, else the entry that expires first (empty and expired ones first) */
    for (int i = 0; i < PROBE_WAYS && !p; i++)
        if (set[i].hash == k) p = &set[i];
    if (!p) {
        p = &set[0];
        for (int i = 1; i < PROBE_WAYS; i++)
            if (set[i].until_ms < p->until_ms) p = &set[i];
    }
    p->hash = k;
    p->until_ms = now + PROBE_TTL_MS;
    p->h2 = ti->origin_alpn_h2;
    pthread_mutex_unlock(&m->pin_lock);
}

static void probe_connected(tunnel_t *t, const char *err);

static void start_probe(tunnel_t *t)
{
    mitm_t *m = t->m;
    tunnel_info_t *ti = fy_xcalloc(1, sizeof *ti);
    t->info = ti;
    const char *sni = fy_mint_sni(t->cssl);
    if (!t->host[0]) {
        /* transparent, pointed at directly: the SNI names the origin */
        if (!sni[0]) {
            fy_info("mitm: transparent client sent no SNI and there is no intercept.forward");
            tunnel_close(t);
            return;
        }
        snprintf(t->host, sizeof t->host, "%s", sni);
        t->port = 443;
    }
    snprintf(ti->host, sizeof ti->host, "%s", t->host);
    ti->port = t->port;
    const char *gen = t->transparent && m->conf->generic_cert ? m->conf->generic_cert : t->host;
    snprintf(ti->name, sizeof ti->name, "%s", sni[0] ? sni : gen);
    ti->insecure = fy_host_list_match(&m->conf->insecure, ti->name) ||
                   fy_host_list_match(&m->conf->insecure, t->host);
    t->state = S_PROBE;
    bool h2 = false;
    if (probe_cached(m, ti, t->loop->now_ms, &h2)) {
        /* verified moments ago: the proxied requests' own TLS verifies it again. The client
           stays registered for reading (the handshake goes on at once): no epoll_ctl pair */
        ti->origin_alpn_h2 = h2;
        ti->origin_h2 = h2 && t->ctx->h2conf;
        probe_done(t, NULL, NULL, false);
        return;
    }
    fy_io_set(t->loop, &t->cio, 0);
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
    if (t->oio.fd >= 0) { /* connected before the 200: the probe's TLS goes over it */
        probe_connected(t, NULL);
        return;
    }
    connect_origin(t, probe_connected);
}

static void probe_connected(tunnel_t *t, const char *err)
{
    mitm_t *m = t->m;
    tunnel_info_t *ti = t->info;
    if (err) {
        if (t->oerrno == EACCES) {
            ti->status = 403;
            probe_done(t, "not allowed", err, true);
            return;
        }
        probe_done(t, "cannot connect to the origin", err, true);
        return;
    }
    t->ossl = SSL_new(ti->insecure ? m->probe_insecure : m->probe);
    if (!t->ossl) {
        tunnel_close(t);
        return;
    }
    SSL_set_fd(t->ossl, t->oio.fd);
    SSL_set_connect_state(t->ossl);
    bool ip = strspn(ti->name, "0123456789.") == strlen(ti->name) || strchr(ti->name, ':');
    if (!ip) SSL_set_tlsext_host_name(t->ossl, ti->name);
    if (!ti->insecure) SSL_set1_host(t->ossl, ti->name);
    fy_io_set(t->loop, &t->oio, EPOLLOUT);
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
}

static void drive_client(tunnel_t *t)
{
    unsigned want = 0;
    int alert = 0;
    int r = fy_mint_handshake(t->cssl, &want, &alert);
    if (r == FY_MINT_HELLO && t->state == S_HELLO) {
        start_probe(t);
        return;
    }
    if (r == 0) {
        fy_io_set(t->loop, &t->cio, want & FY_WANT_WRITE ? EPOLLOUT : EPOLLIN);
        return;
    }
    if (r == 1 && t->state == S_FINISH) {
        hand_over(t);
        return;
    }
    if (t->state == S_FINISH) {
        /* unknown_ca, bad_certificate, certificate_unknown: the client does not trust our CA,
           which a new user has to be told (at info, the line drowned among the others) */
        const char *why = alert == SSL_AD_UNKNOWN_CA            ? "unknown_ca"
                          : alert == SSL_AD_BAD_CERTIFICATE     ? "bad_certificate"
                          : alert == SSL_AD_CERTIFICATE_UNKNOWN ? "certificate_unknown"
                                                                : NULL;
        char a[64];
        fy_sock_host_str((const struct sockaddr *)&t->remote, a, sizeof a);
        if (why)
            fy_warn("mitm: client %s refused the certificate forged for %s (TLS alert %s): it "
                    "does not trust Ferry's CA %s; `ferry ca export` writes it and prints how "
                    "to trust it",
                    a, t->info->name, why, fy_ca_pem_path(t->m->ca));
        else
            fy_info("mitm: client %s refused the certificate forged for %s (TLS alert %d)", a,
                    t->info->name, alert);
        pin_fail(t->m, t->info->name, t->loop->now_ms);
        if (strcmp(t->info->name, t->host) != 0) pin_fail(t->m, t->host, t->loop->now_ms);
    } else {
        fy_info("mitm: TLS from the client to %s:%d failed before the hello", t->host, t->port);
    }
    tunnel_close(t);
}

/* Transparent plain HTTP: the h1 codec serves the socket; exchanges go to the original
   destination (or `forward`), else to their Host. */
static void transparent_http(tunnel_t *t)
{
    tunnel_info_t *ti = fy_xcalloc(1, sizeof *ti);
    snprintf(ti->host, sizeof ti->host, "%s", t->host);
    ti->port = t->port;
    ti->plain = true;
    int fd = t->cio.fd;
    fy_io_set(t->loop, &t->cio, 0);
    t->cio.fd = -1;
    fy_http_ctx_t *ctx = t->ctx;
    struct sockaddr_storage remote = t->remote;
    tunnel_close(t);
    fy_h1_conn_start(ctx, fd, NULL, (struct sockaddr *)&remote, sizeof remote, ti, free);
}

static void decide(tunnel_t *t, unsigned char first)
{
    mitm_t *m = t->m;
    bool pass = fy_host_list_match(&m->conf->passthrough, t->host);
    if (!pass && first == 0x16 && m->hooks.on_tunnel)
        pass = m->hooks.on_tunnel(t->host, t->port, m->hooks.ud) == FERRY_TUNNEL_PASS;
    bool pin = !pass && pinned(m, t->host, t->loop->now_ms);
    if (t->transparent && first != 0x16) {
        transparent_http(t);
        return;
    }
    if (t->transparent && !t->host[0] && (pass || pin)) pass = pin = false; /* no name yet */
    if (first != 0x16 || t->c2o_len || pass || pin) {
        if (pin) fy_info("mitm: %s:%d passed through (pinning bypass)", t->host, t->port);
        start_relay(t);
        return;
    }
    t->cssl = fy_mint_ssl_new(m->mint, t->cio.fd);
    if (!t->cssl) {
        tunnel_close(t);
        return;
    }
    t->state = S_HELLO;
    drive_client(t);
}

/* ---- SOCKS5 (kind: socks5 listeners) ---- */

static bool say(tunnel_t *t, const void *p, size_t n)
{
    return send(t->cio.fd, p, n, MSG_NOSIGNAL) == (ssize_t)n;
}

/* RFC 1928 §6 REP for a failed connect to the origin. */
static unsigned char socks_rep(int err)
{
    switch (err) {
    case 0: /* the name did not resolve */
    case EHOSTUNREACH:
    case ETIMEDOUT:
        return 4;
    case ENETUNREACH:
        return 3;
    case ECONNREFUSED:
        return 5;
    case ELOOP: /* to ourselves */
    case EACCES:
        return 2;
    default:
        return 1;
    }
}

/* The SOCKS5 CONNECT's origin connected (or not): reply, then on as an HTTP CONNECT. */
static void socks_reply(tunnel_t *t, int err, const char *why)
{
    unsigned char reply[10] = {5, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    if (why) {
        reply[1] = socks_rep(err);
        fy_info("mitm: socks5 CONNECT %s:%d: %s", t->host, t->port, why);
        say(t, reply, sizeof reply);
        tunnel_close(t);
        return;
    }
    if (!say(t, reply, sizeof reply)) {
        tunnel_close(t);
        return;
    }
    /* from here on, exactly a CONNECT tunnel */
    fy_io_set(t->loop, &t->oio, 0);
    t->state = S_PEEK;
    fy_timer_start(t->loop, &t->timer, t->m->conf->connect_timeout_ms);
    if (t->c2o_len) {
        decide(t, (unsigned char)t->c2o[0]);
        return;
    }
    fy_io_set(t->loop, &t->cio, EPOLLIN);
}

static void socks_connected(tunnel_t *t, const char *err)
{
    if (err) {
        socks_reply(t, t->oerrno, err);
        return;
    }
    fy_io_set(t->loop, &t->oio, EPOLLOUT);
    fy_timer_start(t->loop, &t->timer, t->m->conf->connect_timeout_ms);
}

static void socks_read(tunnel_t *t)
{
    mitm_t *m = t->m;
    for (;;) {
        if (t->c2o_len == RELAY_BUF) {
            tunnel_close(t);
            return;
        }
        ssize_t n = read(t->cio.fd, t->c2o + t->c2o_len, RELAY_BUF - t->c2o_len);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            tunnel_close(t);
            return;
        }
        if (n < 0) break;
        t->c2o_len += (size_t)n;
    }
    for (;;) {
        fy_socks5_msg_t msg;
        int r = fy_socks5_parse(t->socks_stage, (const unsigned char *)t->c2o, t->c2o_len, &msg);
        if (r == 0) return;
        if (r == FY_SOCKS5_EATYP) {
            static const unsigned char no_atyp[] = {5, 8, 0, 1, 0, 0, 0, 0, 0, 0};
            say(t, no_atyp, sizeof no_atyp);
        }
        if (r < 0) {
            fy_info("mitm: socks5: malformed %s from the client",
                    t->socks_stage == FY_SOCKS5_GREETING ? "greeting"
                    : t->socks_stage == FY_SOCKS5_AUTH   ? "authentication"
                                                         : "request");
            tunnel_close(t);
            return;
        }
        memmove(t->c2o, t->c2o + r, t->c2o_len - (size_t)r);
        t->c2o_len -= (size_t)r;
        if (t->socks_stage == FY_SOCKS5_GREETING) {
            unsigned want = m->auth_b64 ? FY_SOCKS5_M_USERPASS : FY_SOCKS5_M_NOAUTH;
            unsigned char reply[2] = {5, 0xff};
            if (msg.methods & want) reply[1] = m->auth_b64 ? 2 : 0;
            if (!say(t, reply, 2) || reply[1] == 0xff) {
                if (reply[1] == 0xff)
                    fy_info("mitm: socks5: client offers no acceptable authentication method");
                tunnel_close(t);
                return;
            }
            t->socks_stage = m->auth_b64 ? FY_SOCKS5_AUTH : FY_SOCKS5_REQUEST;
        } else if (t->socks_stage == FY_SOCKS5_AUTH) {
            const char *a = m->conf->auth, *colon = strchr(a, ':');
            size_t ul = (size_t)(colon - a);
            bool ok = msg.user_len == ul && memcmp(msg.user, a, ul) == 0 &&
                      msg.pass_len == strlen(colon + 1) &&
                      memcmp(msg.pass, colon + 1, msg.pass_len) == 0;
            unsigned char reply[2] = {1, ok ? 0 : 1};
            if (!say(t, reply, 2) || !ok) {
                if (!ok) fy_info("mitm: socks5: bad username or password");
                tunnel_close(t);
                return;
            }
            t->socks_stage = FY_SOCKS5_REQUEST;
        } else {
            unsigned char reply[10] = {5, 0, 0, 1, 0, 0, 0, 0, 0, 0};
            if (msg.cmd != FY_SOCKS5_CMD_CONNECT) {
                reply[1] = 7; /* command not supported: CONNECT only */
                say(t, reply, sizeof reply);
                tunnel_close(t);
                return;
            }
            snprintf(t->host, sizeof t->host, "%s", msg.host);
            t->port = msg.port;
            /* the origin first: the reply says whether it could be reached */
            t->state = S_SOCKS_CONNECT;
            fy_io_set(t->loop, &t->cio, 0);
            connect_origin(t, socks_connected);
            return;
        }
    }
}

static void on_client(fy_io_t *io, uint32_t ev)
{
    tunnel_t *t = io->data;
    if (t->closed) return;
    switch (t->state) {
    case S_PEEK: {
        unsigned char b;
        ssize_t n = recv(t->cio.fd, &b, 1, MSG_PEEK);
        if (n == 1) {
            decide(t, b);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR) || (ev & (EPOLLERR | EPOLLHUP))) {
            tunnel_close(t);
        }
        return;
    }
    case S_HELLO:
    case S_FINISH:
        drive_client(t);
        return;
    case S_RELAY:
        relay(t);
        return;
    case S_SOCKS:
        socks_read(t);
        return;
    default:
        return;
    }
}

static void on_origin(fy_io_t *io, uint32_t ev)
{
    tunnel_t *t = io->data;
    if (t->closed) return;
    if (t->state == S_PROBE) {
        drive_probe(t);
    } else if (t->state == S_RELAY_CONNECT) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(t->oio.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr || (ev & EPOLLERR)) {
            fy_info("mitm: relay to %s:%d: %s", t->host, t->port,
                    strerror(soerr ? soerr : ECONNREFUSED));
            tunnel_close(t);
            return;
        }
        relay_start_connected(t);
    } else if (t->state == S_RELAY) {
        relay(t);
    } else if (t->state == S_SOCKS_CONNECT) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(t->oio.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (!soerr && (ev & (EPOLLERR | EPOLLHUP))) soerr = ECONNREFUSED;
        socks_reply(t, soerr, soerr ? strerror(soerr) : NULL);
    }
}

/* Split "host:port", "[v6]:port" or "host" (port dflt). Returns 0 or -1. */
static int split_authority(fy_str_t a, int dflt, char *host, size_t hlen, int *port)
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

static tunnel_t *tunnel_new(mitm_t *m, fy_http_ctx_t *ctx, int fd, const struct sockaddr *sa,
                            socklen_t salen);

/* ---- CONNECT over HTTP/2 to the proxy ----
 * The stream's DATA are the tunnel's bytes. A socketpair joins the stream to the ordinary
 * fd-based tunnel code (peek, probe, forged TLS, nested codec, relay): this side pumps the
 * request DATA into the pair and what comes out of it into response DATA, with one buffer in
 * flight each way (flow control is the h2 windows' and the socket buffers'). */
typedef struct h2tun {
    fy_exchange_t *ex;
    fy_loop_t *loop;
    fy_io_t io;     /* our end of the pair */
    const char *in; /* request DATA not yet written into the pair (codec's buffer) */
    size_t in_len, in_off;
    bool in_end, in_shut;   /* the client ended its side / we shut the pair's write side */
    bool sending, sock_eof; /* a response slice is with the codec / the tunnel side closed */
    bool stopped;
    int busy;  /* inside h2tun_on_io: the exchange may end (arena reset) under us */
    bool gone; /* it did: free when the callback unwinds */
    char out[RELAY_BUF];
} h2tun_t;

static void h2tun_on_body(fy_exchange_t *ex, const char *p, size_t n, bool end);

static void h2tun_events(h2tun_t *h)
{
    uint32_t ev = 0;
    if (!h->sending && !h->sock_eof) ev |= EPOLLIN;
    if (h->in_off < h->in_len) ev |= EPOLLOUT;
    fy_io_set(h->loop, &h->io, ev);
}

static void h2tun_fail(h2tun_t *h)
{
    if (h->stopped) return;
    h->stopped = true;
    fy_io_set(h->loop, &h->io, 0);
    fy_exchange_send(h->ex, NULL, 0, FY_SEND_ERROR);
}

/* Write pending request DATA into the pair; when all is in, ask for more (or shut). */
static void h2tun_push(h2tun_t *h)
{
    if (h->stopped) return;
    while (h->in_off < h->in_len) {
        ssize_t w = send(h->io.fd, h->in + h->in_off, h->in_len - h->in_off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            h2tun_events(h);
            return;
        }
        if (w < 0) {
            h2tun_fail(h);
            return;
        }
        h->in_off += (size_t)w;
    }
    h->in_len = h->in_off = 0;
    if (h->in_end) {
        if (!h->in_shut) shutdown(h->io.fd, SHUT_WR);
        h->in_shut = true;
        h2tun_events(h);
        return;
    }
    h2tun_events(h);
    fy_exchange_read_body(h->ex, h2tun_on_body);
}

static void h2tun_on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    h2tun_t *h = ex->handler_data;
    if (h->stopped) return;
    h->in = p;
    h->in_len = n;
    h->in_off = 0;
    h->in_end = end;
    h2tun_push(h);
}

static void h2tun_pull(h2tun_t *h)
{
    if (h->sending || h->sock_eof || h->stopped) return;
    ssize_t r = recv(h->io.fd, h->out, sizeof h->out, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
        h2tun_events(h);
        return;
    }
    if (r < 0) {
        h2tun_fail(h);
        return;
    }
    if (r == 0) {
        h->sock_eof = true;
        fy_io_set(h->loop, &h->io, h->in_off < h->in_len ? EPOLLOUT : 0);
        fy_exchange_send(h->ex, NULL, 0, FY_SEND_FINAL);
        return;
    }
    h->sending = true;
    h2tun_events(h);
    struct iovec iov = {h->out, (size_t)r};
    fy_exchange_send(h->ex, &iov, 1, FY_SEND_MORE);
}

static void h2tun_on_io(fy_io_t *io, uint32_t events)
{
    h2tun_t *h = io->data;
    h->busy++;
    if (events & EPOLLOUT) h2tun_push(h);
    if (!h->stopped && !h->gone && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) h2tun_pull(h);
    if (--h->busy == 0 && h->gone) free(h);
}

static void h2tun_proceed(fy_exchange_t *ex)
{
    h2tun_t *h = ex->handler_data;
    if (!h->sending) return;
    h->sending = false;
    h2tun_pull(h);
}

static void h2tun_stop(fy_exchange_t *ex)
{
    h2tun_t *h = ex->handler_data;
    h->stopped = true;
    fy_io_set(h->loop, &h->io, 0);
}

static const fy_producer_ops_t h2tun_producer = {h2tun_proceed, h2tun_stop};

static void h2tun_free(void *arg)
{
    h2tun_t *h = arg;
    fy_io_set(h->loop, &h->io, 0);
    close(h->io.fd); /* the tunnel side sees the end */
    h->io.fd = -1;
    h->stopped = true;
    if (h->busy)
        h->gone = true;
    else
        free(h);
}

static void h2_connect_start(mitm_t *m, fy_exchange_t *ex, const char *host, int port, int ofd)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        close(ofd);
        fy_exchange_fail(ex, 503, "cannot make a socketpair for the tunnel");
        return;
    }
    h2tun_t *h = fy_xcalloc(1, sizeof *h);
    h->ex = ex;
    h->loop = ex->ctx->loop;
    h->io.fd = sv[1];
    h->io.cb = h2tun_on_io;
    h->io.data = h;
    fy_arena_on_reset(ex->arena, h2tun_free, h);
    tunnel_t *t = tunnel_new(m, ex->ctx, sv[0], ex->remote, sizeof(struct sockaddr_storage));
    t->oio.fd = ofd;
    snprintf(t->host, sizeof t->host, "%s", host);
    t->port = port;
    t->state = S_PEEK;
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
    if (fy_io_set(t->loop, &t->cio, EPOLLIN) < 0) {
        tunnel_close(t);
        fy_exchange_fail(ex, 503, "cannot watch the tunnel");
        return;
    }
    ex->handler_data = h;
    ex->res.status = 200;
    ex->res.content_length = -1;
    fy_exchange_start_response(ex, &h2tun_producer);
    h->sending = true;                           /* until proceed: then the pair is read */
    fy_exchange_send(ex, NULL, 0, FY_SEND_MORE); /* the 200 opens the tunnel */
    if (!h->stopped) fy_exchange_read_body(ex, h2tun_on_body);
}

/* intercept.destinations for an exchange's destination (addr NULL: by name, where the name
   decides). False after answering 403. */
static bool dest_allowed(mitm_t *m, fy_exchange_t *ex, const char *host, int port,
                         const struct sockaddr *addr)
{
    char why[400];
    if (fy__mitm_dest_check(m->dest, host, port, addr, why, sizeof why) != FY_DEST_DENY)
        return true;
    char a[64];
    fy_warn("mitm: client %s: %s", fy_sock_host_str(ex->remote, a, sizeof a), why);
    refuse(ex, 403, "destination denied by intercept.destinations", "%s", why);
    return false;
}

/* The origin connected (fd): take the client connection over, answer 200, peek. */
static void connect_established(mitm_t *m, fy_exchange_t *ex, const char *host, int port, int ofd)
{
    if (!ex->sink->detach) {
        h2_connect_start(m, ex, host, port, ofd);
        return;
    }
    char *pre = fy_xmalloc(RELAY_BUF);
    size_t prelen = 0;
    int fd = -1;
    fy_http_ctx_t *ctx = ex->ctx;
    struct sockaddr_storage remote;
    memcpy(&remote, ex->remote, sizeof remote);
    if (ex->sink->detach(ex, &fd, pre, RELAY_BUF, &prelen) < 0) {
        free(pre);
        close(ofd);
        fy_exchange_fail(ex, 501, "CONNECT cannot be taken over on this connection");
        return;
    }
    /* ex is gone: the codec freed itself */
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    tunnel_t *t = tunnel_new(m, ctx, fd, (struct sockaddr *)&remote, sizeof remote);
    t->oio.fd = ofd;
    free(t->c2o);
    t->c2o = pre;
    t->c2o_len = prelen;
    snprintf(t->host, sizeof t->host, "%s", host);
    t->port = port;
    if (send(fd, ok, sizeof ok - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof ok - 1)) {
        tunnel_close(t);
        return;
    }
    t->state = S_PEEK;
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
    if (t->c2o_len) {
        decide(t, (unsigned char)t->c2o[0]);
        return;
    }
    fy_io_set(t->loop, &t->cio, EPOLLIN);
}

/* A CONNECT whose origin is being connected before the client hears 200 (in its arena):
   a closed port, a timeout or a name that does not resolve is a 502 naming it, not a 200
   followed by a reset. */
typedef struct preconn {
    mitm_t *m;
    fy_exchange_t *ex;
    fy_loop_t *loop;
    fy_resolve_req_t q;
    fy_io_t io;
    fy_timer_t timer;
    bool done; /* answered or handed over: nothing left to cancel */
    int port;
    char host[256];
} preconn_t;

static void preconn_cleanup(preconn_t *p)
{
    if (p->done) return;
    p->done = true;
    fy_resolve_cancel(&p->q);
    fy_timer_stop(p->loop, &p->timer);
    if (p->io.fd >= 0) {
        fy_io_set(p->loop, &p->io, 0);
        close(p->io.fd);
        p->io.fd = -1;
    }
}

static void preconn_cancel(void *arg)
{
    preconn_cleanup(arg);
}

static void preconn_fail(preconn_t *p, int status, const char *error, const char *why)
{
    preconn_cleanup(p);
    fy_info("mitm: CONNECT %s:%d: %s", p->host, p->port, why);
    refuse(p->ex, status, error, "%s", why);
}

static void preconn_ok(preconn_t *p)
{
    int fd = p->io.fd;
    fy_io_set(p->loop, &p->io, 0);
    p->io.fd = -1;
    preconn_cleanup(p);
    char host[256];
    snprintf(host, sizeof host, "%s", p->host);
    connect_established(p->m, p->ex, host, p->port, fd);
}

static void preconn_timeout(fy_timer_t *tm)
{
    preconn_t *p = tm->data;
    char why[400];
    snprintf(why, sizeof why, "cannot connect to %s:%d: timed out after %llu ms (connect-timeout)",
             p->host, p->port, (unsigned long long)p->m->conf->connect_timeout_ms);
    preconn_fail(p, 502, "origin connect timed out", why);
}

static void preconn_io(fy_io_t *io, uint32_t ev)
{
    preconn_t *p = io->data;
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    getsockopt(p->io.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (!soerr && (ev & (EPOLLERR | EPOLLHUP))) soerr = ECONNREFUSED;
    if (soerr) {
        char why[400];
        snprintf(why, sizeof why, "cannot connect to %s:%d: %s", p->host, p->port, strerror(soerr));
        preconn_fail(p, 502, "origin connect failed", why);
        return;
    }
    preconn_ok(p);
}

static void preconn_resolved(fy_resolve_req_t *q, const struct sockaddr *sa, socklen_t len,
                             const char *err)
{
    preconn_t *p = q->data;
    char why[400];
    if (!sa) {
        preconn_fail(p, 502, "origin host name did not resolve", err);
        return;
    }
    if (loops(p->m, sa)) {
        char a[80];
        snprintf(why, sizeof why, "the tunnel is addressed to this proxy itself (%s)",
                 fy_sock_addr_str(sa, a, sizeof a));
        preconn_fail(p, 508, "tunnel addressed to the proxy itself", why);
        return;
    }
    if (fy__mitm_dest_check(p->m->dest, p->host, p->port, sa, why, sizeof why) == FY_DEST_DENY) {
        preconn_cleanup(p);
        char a[64];
        fy_warn("mitm: client %s: %s", fy_sock_host_str(p->ex->remote, a, sizeof a), why);
        refuse(p->ex, 403, "destination denied by intercept.destinations", "%s", why);
        return;
    }
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot make a socket: %s", strerror(errno));
        preconn_fail(p, 503, "no socket for the origin", why);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, sa, len) < 0 && errno != EINPROGRESS) {
        snprintf(why, sizeof why, "cannot connect to %s:%d: %s", p->host, p->port, strerror(errno));
        close(fd);
        preconn_fail(p, 502, "origin connect failed", why);
        return;
    }
    p->io.fd = fd;
    if (fy_io_set(p->loop, &p->io, EPOLLOUT) < 0) {
        preconn_fail(p, 503, "cannot watch the origin connection", "cannot watch the socket");
        return;
    }
    fy_timer_start(p->loop, &p->timer, p->m->conf->connect_timeout_ms);
}

static void connect_start(mitm_t *m, fy_exchange_t *ex)
{
    char host[256];
    int port;
    if (split_authority(ex->req.authority, 443, host, sizeof host, &port) < 0) {
        fy_exchange_fail(ex, 400, "CONNECT target is not host:port");
        return;
    }
    if (ex->req.protocol.len) {
        fy_exchange_fail(ex, 501, "extended CONNECT (:protocol) to the proxy is not a tunnel");
        return;
    }
    if (!dest_allowed(m, ex, host, port, NULL)) return;
    preconn_t *p = fy_arena_calloc(ex->arena, sizeof *p);
    p->m = m;
    p->ex = ex;
    p->loop = ex->ctx->loop;
    p->port = port;
    snprintf(p->host, sizeof p->host, "%s", host);
    p->io.fd = -1;
    p->io.cb = preconn_io;
    p->io.data = p;
    fy_timer_init(&p->timer, preconn_timeout, p);
    p->q.cb = preconn_resolved;
    p->q.data = p;
    fy_arena_on_reset(ex->arena, preconn_cancel, p);
    int r = fy_resolve(m->resolver, ex->ctx->worker_id, p->loop, p->host, port, &p->q);
    if (r < 0) {
        preconn_fail(p, 502, "origin host name did not resolve", p->q.err);
        return;
    }
    if (r == 1) preconn_resolved(&p->q, (struct sockaddr *)&p->q.addr, p->q.addrlen, NULL);
}

static tunnel_t *tunnel_new(mitm_t *m, fy_http_ctx_t *ctx, int fd, const struct sockaddr *sa,
                            socklen_t salen)
{
    tunnel_t *t = fy_xcalloc(1, sizeof *t);
    t->m = m;
    t->ctx = ctx;
    t->loop = ctx->loop;
    memcpy(&t->remote, sa, salen < sizeof t->remote ? salen : sizeof t->remote);
    t->c2o = fy_xmalloc(RELAY_BUF);
    t->cio.fd = fd;
    t->cio.cb = on_client;
    t->cio.data = t;
    t->oio.fd = -1;
    t->oio.cb = on_origin;
    t->oio.data = t;
    t->node.drain = node_close;
    t->node.close = node_close;
    fy_list_insert_tail(&ctx->conns, &t->node.link);
    ctx->nconns++;
    fy_timer_init(&t->timer, on_timer, t);
    return t;
}

static bool client_allowed(mitm_t *m, const struct sockaddr *sa)
{
    bool allowed = m->nallow == 0;
    for (size_t i = 0; i < m->nallow && !allowed; i++) allowed = fy_cidr_match(&m->allow[i], sa);
    if (!allowed) {
        char a[64];
        fy_warn("mitm: client %s is not in intercept.allow", fy_sock_host_str(sa, a, sizeof a));
    }
    return allowed;
}

int fy_mitm_socks5_accept(fy_handler_t *h, fy_http_ctx_t *ctx, int fd, const struct sockaddr *sa,
                          socklen_t salen)
{
    mitm_t *m = (mitm_t *)h;
    if (!client_allowed(m, sa)) {
        close(fd);
        return -EACCES;
    }
    tunnel_t *t = tunnel_new(m, ctx, fd, sa, salen);
    snprintf(t->host, sizeof t->host, "-");
    t->state = S_SOCKS;
    t->socks_stage = FY_SOCKS5_GREETING;
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
    if (fy_io_set(t->loop, &t->cio, EPOLLIN) < 0) {
        tunnel_close(t);
        return -EIO;
    }
    return 0;
}

int fy_mitm_transparent_accept(fy_handler_t *h, fy_http_ctx_t *ctx, int fd,
                               const struct sockaddr *sa, socklen_t salen)
{
    mitm_t *m = (mitm_t *)h;
    if (!client_allowed(m, sa)) {
        close(fd);
        return -EACCES;
    }
    tunnel_t *t = tunnel_new(m, ctx, fd, sa, salen);
    t->transparent = true;
    struct sockaddr_storage dst;
    socklen_t dl = sizeof dst;
    int r = sa->sa_family == AF_INET6 ? getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &dst, &dl)
                                      : getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl);
    /* not redirected: the original destination is this listener itself */
    bool redirected = r == 0 && !loops(m, (struct sockaddr *)&dst);
    if (m->fwd_port) {
        snprintf(t->host, sizeof t->host, "%s", m->fwd_host);
        t->port = m->fwd_port;
    } else if (redirected) {
        fy_sock_host_str((struct sockaddr *)&dst, t->host, sizeof t->host);
        t->port = ntohs(dst.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&dst)->sin6_port
                                                  : ((struct sockaddr_in *)&dst)->sin_port);
    } /* else: pointed at directly: SNI or Host decide */
    t->state = S_PEEK;
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
    if (fy_io_set(t->loop, &t->cio, EPOLLIN) < 0) {
        tunnel_close(t);
        return -EIO;
    }
    return 0;
}

/* ---- exchanges ---- */

static void release_entry(void *arg)
{
    fy_upstream_dyn_entry_t *e = arg;
    e->inflight--;
}

/* ---- body capture (HAR): the innermost filter, so it sees what the client saw ---- */

typedef struct cap {
    fy_sink_ops_t ops; /* first, then the sink below: the layout every mitm filter shares */
    const fy_sink_ops_t *inner;
    fy_exchange_t *ex;
    size_t max;
    char *req, *res; /* arena */
    size_t req_len, res_len;
    bool cut;
    void (*saved_on_body)(fy_exchange_t *ex, const char *p, size_t n, bool end);
} cap_t;

static const char cap_name[] = "mitm-capture";

static void cap_keep(cap_t *c, char **buf, size_t *len, const char *p, size_t n)
{
    if (!*buf) *buf = fy_arena_alloc(c->ex->arena, c->max);
    size_t room = c->max - *len;
    if (n > room) c->cut = true;
    if (n == 0) return; /* a body's end may come with no bytes and no pointer */
    memcpy(*buf + *len, p, n < room ? n : room);
    *len += n < room ? n : room;
}

static void cap_send(fy_exchange_t *ex, const struct iovec *bufs, size_t n, int state)
{
    cap_t *c = (cap_t *)ex->sink;
    for (size_t i = 0; i < n && state != FY_SEND_ERROR; i++)
        cap_keep(c, &c->res, &c->res_len, bufs[i].iov_base, bufs[i].iov_len);
    c->inner->send(ex, bufs, n, state);
}

static void cap_send_file(fy_exchange_t *ex, int fd, off_t off, size_t len, int state)
{
    cap_t *c = (cap_t *)ex->sink;
    c->inner->send_file(ex, fd, off, len, state);
}

static void cap_send_informational(fy_exchange_t *ex, int status, const fy_headers_t *hs)
{
    cap_t *c = (cap_t *)ex->sink;
    if (c->inner->send_informational) c->inner->send_informational(ex, status, hs);
}

static void cap_on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    cap_t *c = (cap_t *)ex->sink;
    cap_keep(c, &c->req, &c->req_len, p, n);
    ex->on_body = c->saved_on_body;
    c->saved_on_body(ex, p, n, end);
}

static void cap_read_body(fy_exchange_t *ex)
{
    cap_t *c = (cap_t *)ex->sink;
    if (ex->on_body != cap_on_body) {
        c->saved_on_body = ex->on_body;
        ex->on_body = cap_on_body;
    }
    c->inner->read_body(ex);
}

static int cap_detach(fy_exchange_t *ex, int *fd, char *buf, size_t capn, size_t *len)
{
    cap_t *c = (cap_t *)ex->sink;
    return c->inner->detach ? c->inner->detach(ex, fd, buf, capn, len) : -1;
}

static void capture_begin(mitm_t *m, fy_exchange_t *ex)
{
    if (!m->conf->capture.har || !m->conf->capture.body_cap) return;
    cap_t *c = fy_arena_calloc(ex->arena, sizeof *c);
    c->ops = (fy_sink_ops_t){.name = cap_name,
                             .send = cap_send,
                             .send_file = cap_send_file,
                             .read_body = cap_read_body,
                             .send_informational = cap_send_informational,
                             .detach = cap_detach};
    c->inner = ex->sink;
    c->ex = ex;
    c->max = m->conf->capture.body_cap;
    ex->sink = &c->ops;
}

bool fy_mitm_captured(const fy_exchange_t *ex, fy_str_t *req, fy_str_t *res, bool *cut)
{
    /* every mitm filter starts with its ops and then the sink below it */
    typedef struct {
        fy_sink_ops_t ops;
        const fy_sink_ops_t *inner;
    } layer_t;
    const fy_sink_ops_t *s = ex->sink;
    while (s && s->name && strncmp(s->name, "mitm-", 5) == 0) {
        if (s->name == cap_name) {
            const cap_t *c = (const cap_t *)s;
            *req = fy_str(c->req ? c->req : "", c->req_len);
            *res = fy_str(c->res ? c->res : "", c->res_len);
            *cut = c->cut;
            return true;
        }
        s = ((const layer_t *)s)->inner;
    }
    return false;
}

/* Is the (normalised) address one of this host's: loopback, or on one of its interfaces? */
static bool addr_is_local(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET &&
        (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127)
        return true;
    if (sa->sa_family == AF_INET6 &&
        IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr))
        return true;
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) < 0) return true; /* cannot tell: rather refuse than loop */
    bool local = false;
    for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next) {
        const struct sockaddr *a = i->ifa_addr;
        if (!a || a->sa_family != sa->sa_family) continue;
        if (a->sa_family == AF_INET)
            local = ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
                    ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
        else
            local = memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                           &((const struct sockaddr_in6 *)sa)->sin6_addr, 16) == 0;
    }
    freeifaddrs(ifs);
    return local;
}

/* Would a connection to `sa` reach one of our own proxy listeners? Every spelling of an address
   counts (`[::ffff:127.0.0.1]`, `0.0.0.0`, `127.1` and the numeric forms resolve to these); a
   listener bound to a wildcard is reached through any of this host's addresses of its family
   (IPv6 listeners are IPV6_V6ONLY). */
static bool loops(const mitm_t *m, const struct sockaddr *sa)
{
    struct sockaddr_storage d;
    fy__mitm_dest_normalise(sa, &d);
    const struct sockaddr *dst = (const struct sockaddr *)&d;
    int local = -1; /* not asked yet */
    for (size_t i = 0; i < m->nown; i++) {
        struct sockaddr_storage os;
        const struct sockaddr *raw = (const struct sockaddr *)&m->own[i];
        bool wild = (raw->sa_family == AF_INET &&
                     ((const struct sockaddr_in *)raw)->sin_addr.s_addr == htonl(INADDR_ANY)) ||
                    (raw->sa_family == AF_INET6 &&
                     IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)raw)->sin6_addr));
        fy__mitm_dest_normalise(raw, &os);
        const struct sockaddr *o = (const struct sockaddr *)&os;
        if (o->sa_family != dst->sa_family) continue;
        if (dst->sa_family == AF_INET) {
            const struct sockaddr_in *a = (const void *)dst, *b = (const void *)o;
            if (a->sin_port != b->sin_port) continue;
            if (!wild && a->sin_addr.s_addr == b->sin_addr.s_addr) return true;
        } else {
            const struct sockaddr_in6 *a = (const void *)dst, *b = (const void *)o;
            if (a->sin6_port != b->sin6_port) continue;
            if (!wild && memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0)
                return true;
        }
        if (wild) {
            if (local < 0) local = addr_is_local(dst);
            if (local) return true;
        }
    }
    return false;
}

void fy_mitm_add_own_address(fy_handler_t *h, const struct sockaddr *sa, socklen_t len)
{
    mitm_t *m = (mitm_t *)h;
    if (m->nown < sizeof m->own / sizeof m->own[0] && len <= sizeof m->own[0])
        memcpy(&m->own[m->nown++], sa, len);
}

/* A refusal with a plain-text body that says why (fy_exchange_fail's page names no reason). */
static void refuse(fy_exchange_t *ex, int status, const char *error, const char *fmt, ...)
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

static void go_entry(mitm_t *m, fy_exchange_t *ex, fy_upstream_dyn_entry_t *e, const char *host,
                     int port)
{
    const fy_upstream_server_conf_t *sv = fy_upstream_conf(e->up)->servers.v;
    if (loops(m, (const struct sockaddr *)&sv->addr)) {
        char a[80];
        refuse(ex, 508, "request addressed to the proxy itself",
               "the request is addressed to this proxy itself (%s)",
               fy_sock_addr_str((const struct sockaddr *)&sv->addr, a, sizeof a));
        return;
    }
    if (!dest_allowed(m, ex, host, port, (const struct sockaddr *)&sv->addr)) return;
    if (!e->user) e->user = fy_proxy_handler_new(&m->pconf, e->up);
    e->inflight++;
    fy_arena_on_reset(ex->arena, release_entry, e);
    fy_handler_t *ph = e->user;
    ph->ops->on_request(ph, ex);
}

/* An exchange whose origin's name is being resolved (in its arena). */
typedef struct pending {
    fy_resolve_req_t q;
    mitm_t *m;
    fy_exchange_t *ex;
    fy_mitm_target_t t; /* strings copied into the arena */
} pending_t;

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
    mitm_t *m = ud;
    fy_upstream_dyn_entry_t *e = fy_upstream_dyn_find(m->dyn, ex->ctx->worker_id, t->host, t->port,
                                                      t->tls, t->h2, t->sni, t->insecure);
    if (e) {
        go_entry(m, ex, e, t->host, t->port);
        return;
    }
    if (!dest_allowed(m, ex, t->host, t->port, NULL)) return;
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
    int r = fy_resolve(m->resolver, ex->ctx->worker_id, ex->ctx->loop, p->t.host, p->t.port, &p->q);
    if (r < 0) {
        dns_failed(ex, p->q.err);
        return;
    }
    if (r == 1) {
        go_addr(p, (struct sockaddr *)&p->q.addr, p->q.addrlen);
        return;
    }
    fy_arena_on_reset(ex->arena, pending_cancel, p);
}

static void forward(mitm_t *m, fy_exchange_t *ex, const char *host, int port, bool tls, bool h2,
                    const char *sni, bool insecure)
{
    fy_mitm_target_t t = {host, port, tls, sni, insecure, h2};
    capture_begin(m, ex);
    if (m->any_hook && fy__mitm_hooks_begin(&m->hooks, ex)) return; /* answered: ex may be gone */
    fy__mitm_rules_run(m->rules, ex, &t, go, m);
}

static void error_page(fy_exchange_t *ex, const tunnel_info_t *ti)
{
    if (ti->status == 403) {
        refuse(ex, 403, "destination denied by intercept.destinations", "%s", ti->error);
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

static void info_page(mitm_t *m, fy_exchange_t *ex)
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

static bool authorized(mitm_t *m, fy_exchange_t *ex)
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
    mitm_t *m = (mitm_t *)h;
    tunnel_info_t *ti = ex->tunnel;
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
            if (!host[0] && split_authority(ex->req.authority, 80, host, sizeof host, &port) < 0) {
                fy_exchange_fail(ex, 400, "no usable Host for a transparent request");
                return;
            }
            forward(m, ex, host, port, false, false, NULL, false);
            return;
        }
        forward(m, ex, ti->host, ti->port, true, ti->origin_alpn_h2, ti->name, ti->insecure);
        return;
    }
    if (!client_allowed(m, ex->remote)) {
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
        connect_start(m, ex);
        return;
    }
    if (!ex->req.absolute_form) {
        info_page(m, ex);
        return;
    }
    bool tls = fy_str_eq(ex->req.scheme, "https", 5);
    char host[256];
    int port;
    if (split_authority(ex->req.authority, tls ? 443 : 80, host, sizeof host, &port) < 0) {
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
    mitm_t *m = (mitm_t *)h;
    fy_upstream_dyn_free(m->dyn);
    fy_resolver_free(m->resolver);
    fy__mitm_rules_free(m->rules);
    fy__mitm_dest_free(m->dest);
    fy_mint_free(m->mint);
    fy_ca_free(m->ca);
    SSL_CTX_free(m->probe);
    SSL_CTX_free(m->probe_insecure);
    pthread_mutex_destroy(&m->pin_lock);
    free(m->allow);
    free(m->auth_b64);
    free(m->ca_pem);
    free(m);
}

void fy_mitm_set_hooks(fy_handler_t *h, const ferry_hooks_t *hooks)
{
    mitm_t *m = (mitm_t *)h;
    m->hooks = *hooks;
    m->any_hook = hooks->on_request || hooks->on_response || hooks->on_request_body ||
                  hooks->on_response_body;
}

void fy_mitm_worker_close(fy_handler_t *h, int w)
{
    mitm_t *m = (mitm_t *)h;
    fy_upstream_dyn_worker_close(m->dyn, w);
    fy_resolver_worker_close(m->resolver, w);
}

static const fy_handler_ops_t mitm_ops = {"mitm", on_request, destroy};

static SSL_CTX *probe_ctx(const char *ca, bool insecure)
{
    SSL_CTX *c = SSL_CTX_new(TLS_client_method());
    if (!c) return NULL;
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
    static const unsigned char alpn[] = "\x02h2\x08http/1.1";
    SSL_CTX_set_alpn_protos(c, alpn, sizeof alpn - 1);
    if (!insecure) {
        SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
        if ((ca ? SSL_CTX_load_verify_locations(c, ca, NULL)
                : SSL_CTX_set_default_verify_paths(c)) != 1) {
            fy_tls_log_errors(FY_LOG_EMERG, ca ? ca : "system CA store");
            SSL_CTX_free(c);
            return NULL;
        }
    }
    return c;
}

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
    mitm_t *m = fy_xcalloc(1, sizeof *m);
    m->h.ops = &mitm_ops;
    m->conf = conf;
    m->ca = ca;
    pthread_mutex_init(&m->pin_lock, NULL);
    char leaves[4200];
    snprintf(leaves, sizeof leaves, "%s/leaves", conf->ca_dir);
    m->mint = fy_mint_new(ca, (size_t)conf->cert_cache, conf->cert_disk ? leaves : NULL);
    m->probe = probe_ctx(conf->upstream_ca, false);
    m->probe_insecure = probe_ctx(NULL, true);
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
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(b, fy_ca_cert(ca));
    char *p;
    long n = BIO_get_mem_data(b, &p);
    m->ca_pem = fy_xmalloc((size_t)n + 1);
    memcpy(m->ca_pem, p, (size_t)n);
    m->ca_pem_len = (size_t)n;
    BIO_free(b);
    return &m->h;
}
