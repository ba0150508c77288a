/* Active health checks of an upstream's servers, run by one worker (HTTP GET, TCP or TLS
 * probes; HTTP/2 and HTTP/3 servers through origin_probe.c). */
#include "upstream/upstream.h"

#include <errno.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/counters.h"
#include "core/alloc.h"
#include "core/log.h"
#include "h1/h1_resp.h"
#include "net/sock.h"
#include "tls/tls.h"
#include "upstream/discovery.h"
#include "upstream/upstream_int.h"

#include "upstream/upstream_state.h"

/* ---- active health checks (run by one worker) ---- */

static void hc_start_probe(hc_probe_t *p);

static void hc_result(hc_probe_t *p, bool ok, const char *why)
{
    fy_upstream_t *u = p->u;
    fy_timer_stop(u->hc_loop, &p->timeout);
    if (p->oc) {
        fy_origin_release(p->oc, false);
        p->oc = NULL;
    }
    if (p->mp) fy__mux_probe_stop(p->mp, u->hc_loop);
    const fy_health_conf_t *hc = u->conf->health;
    bool down = atomic_load(&u->down[p->server]);
    char a[64];
    fy_sock_addr_str((const struct sockaddr *)&u->servers[p->server].addr, a, sizeof a);
    if (ok) {
        p->fails = 0;
        if (down && ++p->oks >= (unsigned)hc->rise) {
            atomic_store(&u->down[p->server], false);
            fy_notice("upstream %s: server %s is up (health check)", u->conf->name, a);
        }
    } else {
        p->oks = 0;
        if (!down && ++p->fails >= (unsigned)hc->fall) {
            atomic_store(&u->down[p->server], true);
            atomic_fetch_add(&u->downs[p->server], 1);
            fy_warn("upstream %s: server %s is down (health check: %s)", u->conf->name, a, why);
        }
    }
}

static void hc_on_timeout(fy_timer_t *t)
{
    hc_result(t->data, false, "timeout");
}

static void hc_event(fy_origin_conn_t *oc, unsigned ev, void *ud)
{
    hc_probe_t *p = ud;
    fy_upstream_t *u = p->u;
    const fy_health_conf_t *hc = u->conf->health;
    if (ev & FY_ORIGIN_ERROR) {
        p->oc = NULL; /* already closed */
        hc_result(p, false, oc->error ? oc->error : "connect failed");
        return;
    }
    if ((ev & FY_ORIGIN_READY) && hc->type == FY_HEALTH_TCP) {
        hc_result(p, true, ""); /* connected (and TLS handshake done): that was the test */
        return;
    }
    if (ev & FY_ORIGIN_READY) {
        const fy_upstream_server_conf_t *sv = &u->servers[p->server];
        char req[1024];
        int n = snprintf(req, sizeof req,
                         "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: ferry-health-check\r\n"
                         "Connection: close\r\n\r\n",
                         hc->path, sv->authority);
        struct iovec iov = {req, (size_t)n};
        if (oc->t->ops->writev(oc->t, &iov, 1) != n) {
            hc_result(p, false, "request not written");
            return;
        }
        p->len = 0;
        fy_origin_want(oc, EPOLLIN);
        return;
    }
    ssize_t r = oc->t->ops->read(oc->t, p->buf + p->len, sizeof p->buf - p->len);
    if (r == 0) {
        fy_origin_want(oc, EPOLLIN);
        return;
    }
    if (r < 0) {
        hc_result(p, false, "connection closed before a response");
        return;
    }
    p->len += (size_t)r;
    fy_h1_header_t hdrs[64];
    fy_h1_resp_t resp;
    fy_h1_resp_init(&resp, hdrs);
    fy_h1_limits_t lim = {sizeof p->buf, sizeof p->buf, 64};
    int pr = fy_h1_parse_response(&resp, p->buf, p->len, false, &lim);
    if (pr == FY_H1_INCOMPLETE && p->len < sizeof p->buf) return;
    if (pr < 0) {
        hc_result(p, false, "invalid response");
        return;
    }
    bool ok = hc->expect_status ? resp.status == hc->expect_status
                                : resp.status >= 200 && resp.status < 400;
    hc_result(p, ok, ok ? "" : "unexpected status");
}

static void hc_h2_done(void *ud, int status, const char *why)
{
    hc_probe_t *p = ud;
    const fy_health_conf_t *hc = p->u->conf->health;
    if (status == 0) {
        hc_result(p, false, why);
        return;
    }
    bool ok = hc->expect_status ? status == hc->expect_status : status >= 200 && status < 400;
    hc_result(p, ok, ok ? "" : "unexpected status");
}

static void hc_start_probe(hc_probe_t *p)
{
    fy_upstream_t *u = p->u;
    if (p->oc) return; /* the previous probe is still running */
    const fy_upstream_server_conf_t *sv = &u->servers[p->server];
    if ((sv->h2 && u->conf->health->type == FY_HEALTH_HTTP) || sv->h3) {
        if (!p->mp) p->mp = fy_xcalloc(1, sizeof *p->mp);
        if (p->mp->running) return;
        fy__mux_probe_start(p->mp, u, u->hc_worker, p->server, u->hc_loop, u->conf->health->path,
                            hc_h2_done, p);
        fy_timer_start(u->hc_loop, &p->timeout, u->conf->health->timeout_ms);
        return;
    }
    const char *err = "connect failed";
    p->oc = fy_origin_connect(u, u->hc_worker, p->server, u->hc_loop, hc_event, p, &err);
    if (!p->oc) {
        hc_result(p, false, err);
        return;
    }
    fy_timer_start(u->hc_loop, &p->timeout, u->conf->health->timeout_ms);
}

static void hc_on_tick(fy_timer_t *t)
{
    fy_upstream_t *u = t->data;
    for (size_t i = 0; i < u->nservers; i++)
        if (!fy__upstream_gone(u, (int)i)) hc_start_probe(&u->probes[i]);
    fy_timer_start(u->hc_loop, &u->hc_tick, u->conf->health->interval_ms);
}

void fy_upstream_health_start(fy_upstream_t *u, fy_loop_t *loop, int w)
{
    if (u->dyn && !u->dyn->disc) u->dyn->disc = fy__discovery_start(u, u->conf, loop);
    if (!u->conf->health) return;
    u->hc_loop = loop;
    u->hc_worker = w;
    u->probes = fy_xcalloc(u->nservers, sizeof *u->probes);
    for (size_t i = 0; i < u->nservers; i++) {
        u->probes[i].u = u;
        u->probes[i].server = (int)i;
        fy_timer_init(&u->probes[i].timeout, hc_on_timeout, &u->probes[i]);
    }
    fy_timer_init(&u->hc_tick, hc_on_tick, u);
    fy_timer_start(loop, &u->hc_tick, 0);
}

void fy__upstream_hc_stop_probe(fy_upstream_t *u, hc_probe_t *p)
{
    fy_timer_stop(u->hc_loop, &p->timeout);
    if (p->oc) fy_origin_release(p->oc, false);
    p->oc = NULL;
    if (p->mp) fy__mux_probe_stop(p->mp, u->hc_loop);
    p->fails = p->oks = 0;
}

void fy_upstream_health_stop(fy_upstream_t *u)
{
    if (u->dyn) {
        fy__discovery_stop(u->dyn->disc);
        u->dyn->disc = NULL;
    }
    if (!u->probes) return;
    fy_timer_stop(u->hc_loop, &u->hc_tick);
    for (size_t i = 0; i < u->nservers; i++) {
        hc_probe_t *p = &u->probes[i];
        fy_timer_stop(u->hc_loop, &p->timeout);
        if (p->oc) fy_origin_release(p->oc, false);
        p->oc = NULL;
        if (p->mp) fy__mux_probe_stop(p->mp, u->hc_loop);
        free(p->mp);
        p->mp = NULL;
    }
}

void fy__probe_fields(fy_arena_t *a, fy_headers_t *hs, const fy_upstream_server_conf_t *sv,
                      const char *path, bool tls)
{
    FY_HDR_ADD(a, hs, ":method", "GET", 3);
    FY_HDR_ADD(a, hs, ":scheme", tls ? "https" : "http", tls ? 5 : 4);
    FY_HDR_ADD(a, hs, ":authority", sv->authority, strlen(sv->authority));
    FY_HDR_ADD(a, hs, ":path", path, strlen(path));
    FY_HDR_ADD(a, hs, "user-agent", "ferry-health-check", 18);
}

void fy_upstream_carry_health(fy_upstream_t *to, const fy_upstream_t *from)
{
    if (to->dyn && from->dyn && !atomic_load(&to->dyn->live)) {
        /* this generation's first look found nothing (a bad file, DNS down): the set the
           running one had stays until discovery finds better */
        dyn_t *fd = from->dyn;
        pthread_mutex_lock(&fd->lock);
        size_t n = fd->nlast < to->dyn->cap ? fd->nlast : to->dyn->cap;
        fy_disc_entry_t *e = fy_xcalloc(n + 1, sizeof *e);
        memcpy(e, fd->last, n * sizeof *e);
        pthread_mutex_unlock(&fd->lock);
        fy__upstream_set_servers(to, e, n);
        free(e);
    }
    for (size_t i = 0; i < to->nservers; i++)
        for (size_t j = 0; j < from->nservers; j++) {
            if (!to->servers[i].url || !from->servers[j].url ||
                strcmp(to->servers[i].url, from->servers[j].url) != 0)
                continue;
            atomic_store(&to->down[i], atomic_load(&from->down[j]));
            atomic_store(&to->downs[i], atomic_load(&from->downs[j]));
            atomic_store(&to->ejected_until[i], atomic_load(&from->ejected_until[j]));
            atomic_store(&to->drained[i], atomic_load(&from->drained[j]));
            break;
        }
}
