/* Intercepting proxy origin probe: a TLS handshake with the origin (verified, ALPN noted) while
 * the client's handshake waits, and the shared cache of recent successful probes.
 * Thread rules: a probe runs on its tunnel's worker; the cache is shared, under m->pin_lock. */
#include "handler/mitm_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "tls/tls.h"

#define PROBE_TTL_MS 60000 /* for this long: later tunnels skip the probe connection */
#define PROBE_WAYS 8       /* entries per set of the probe cache */

/* why: NULL when the origin is fine; else the 502 page says "why: detail". `waited`: the
   client's handshake was paused for a probe connection (it may have left meanwhile). */
static void probe_done(fy__mitm_tunnel_t *t, const char *why, const char *detail, bool waited)
{
    if (t->ossl) {
        fy_tls_mitm_ssl_free(t->ossl);
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
        fy__mitm_tunnel_close(t);
        return;
    }
    /* protocol mirroring: h2 to the client only when the origin speaks it; the exchanges go to
       the origin in its own protocol (forward(): an h2:// ad-hoc upstream) */
    if (fy_mint_resume(t->m->mint, t->cssl, t->info->name, t->info->origin_h2 && !why) < 0) {
        fy__mitm_tunnel_close(t);
        return;
    }
    t->state = FY__MITM_S_FINISH;
    fy_timer_start(t->loop, &t->timer, t->m->conf->connect_timeout_ms);
    fy__mitm_drive_client(t);
}

static void probe_remember(fy__mitm_t *m, const fy__mitm_tunnel_info_t *ti, uint64_t now);

void fy__mitm_probe_drive(fy__mitm_tunnel_t *t)
{
    unsigned want = 0;
    bool h2 = false;
    char msg[300];
    int r = fy_tls_mitm_probe_step(t->ossl, t->oio.fd, &want, &h2, msg, sizeof msg);
    if (r == 1) {
        t->info->origin_alpn_h2 = h2;
        t->info->origin_h2 = h2 && t->ctx->h2conf;
        fy__mitm_tls_describe(t->ossl, true, &t->info->tls.origin);
        probe_remember(t->m, t->info, t->loop->now_ms);
        probe_done(t, NULL, NULL, true);
        return;
    }
    if (r == 0) {
        fy_io_set(t->loop, &t->oio, want & FY_WANT_READ ? EPOLLIN : EPOLLOUT);
        return;
    }
    const char *why = r == -FY_TLS_PROBE_UNTRUSTED ? "the origin's certificate is not trusted"
                      : r == -FY_TLS_PROBE_CLOSED  ? "cannot connect to the origin"
                                                   : "TLS handshake with the origin failed";
    probe_done(t, why, msg, true);
}

static uint64_t probe_key(const fy__mitm_tunnel_info_t *ti)
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
static fy__mitm_probed_t *probe_set(fy__mitm_t *m, uint64_t k)
{
    uint64_t x = k; /* a 64-bit finalizer: FNV's low bits vary little between similar names */
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    size_t set = (size_t)(x % (FY__MITM_PROBE_CACHE / PROBE_WAYS));
    return &m->probed[set * PROBE_WAYS];
}

/* A verified probe of this origin within PROBE_TTL_MS: its ALPN into *h2, what it saw of the
   origin's TLS into ti. */
static bool probe_cached(fy__mitm_t *m, fy__mitm_tunnel_info_t *ti, uint64_t now, bool *h2)
{
    uint64_t k = probe_key(ti);
    bool hit = false;
    pthread_mutex_lock(&m->pin_lock);
    fy__mitm_probed_t *set = probe_set(m, k);
    for (int i = 0; i < PROBE_WAYS && !hit; i++)
        if (set[i].hash == k && set[i].until_ms > now) {
            hit = true;
            *h2 = set[i].h2;
            if (set[i].tls) {
                ti->tls.origin = *set[i].tls;
                ti->tls.origin_cached = true;
            }
        }
    pthread_mutex_unlock(&m->pin_lock);
    return hit;
}

static void probe_remember(fy__mitm_t *m, const fy__mitm_tunnel_info_t *ti, uint64_t now)
{
    uint64_t k = probe_key(ti);
    pthread_mutex_lock(&m->pin_lock);
    fy__mitm_probed_t *set = probe_set(m, k), *p = NULL;
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
    if (!p->tls) p->tls = malloc(sizeof *p->tls);
    if (p->tls) *p->tls = ti->tls.origin;
    pthread_mutex_unlock(&m->pin_lock);
}

static void probe_connected(fy__mitm_tunnel_t *t, const char *err);

void fy__mitm_probe_start(fy__mitm_tunnel_t *t)
{
    fy__mitm_t *m = t->m;
    fy__mitm_tunnel_info_t *ti = fy_xcalloc(1, sizeof *ti);
    t->info = ti;
    const char *sni = fy_mint_sni(t->cssl);
    snprintf(ti->tls.sni, sizeof ti->tls.sni, "%s", sni);
    if (!t->host[0]) {
        /* transparent, pointed at directly: the SNI names the origin */
        if (!sni[0]) {
            fy_info("mitm: transparent client sent no SNI and there is no intercept.forward");
            fy__mitm_tunnel_close(t);
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
    t->state = FY__MITM_S_PROBE;
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
    fy__mitm_connect_origin(t, probe_connected);
}

static void probe_connected(fy__mitm_tunnel_t *t, const char *err)
{
    fy__mitm_t *m = t->m;
    fy__mitm_tunnel_info_t *ti = t->info;
    if (err) {
        if (t->oerrno == EACCES) {
            ti->status = 403;
            probe_done(t, "not allowed", err, true);
            return;
        }
        probe_done(t, "cannot connect to the origin", err, true);
        return;
    }
    t->ossl = fy_tls_mitm_probe_new(ti->insecure ? m->probe_insecure : m->probe, t->oio.fd,
                                    ti->name, !ti->insecure);
    if (!t->ossl) {
        fy__mitm_tunnel_close(t);
        return;
    }
    fy_io_set(t->loop, &t->oio, EPOLLOUT);
    fy_timer_start(t->loop, &t->timer, m->conf->connect_timeout_ms);
}

SSL_CTX *fy__mitm_probe_ctx(const char *ca, bool insecure)
{
    return fy_tls_mitm_probe_ctx(ca, insecure);
}
