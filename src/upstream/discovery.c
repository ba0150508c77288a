/* Discovery at run time: a file watched with inotify, or DNS re-resolved per TTL, on the
 * health-check worker's loop; each good answer goes to fy__upstream_set_servers. */
#include "upstream/discovery.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "net/dns.h"
#include "upstream/upstream_int.h"

static const char *const schemes[] = {"http", "https", "h2c", "h2", "h3"};

struct fy__discovery {
    fy_upstream_t *u; /* NULL: the first lookup while loading (collects into `out`) */
    const fy_upstream_conf_t *uc;
    const fy_discovery_conf_t *dc;
    fy_loop_t *loop;
    const char *name; /* the upstream's, for logs */
    size_t max;
    /* file */
    int ifd;
    fy_io_t io;
    char base[NAME_MAX + 1];
    fy_defer_t reread;
    /* dns */
    fy_dns_t *dns;
    fy_timer_t next;    /* the next lookup */
    fy_timer_t timeout; /* resolve-timeout of the lookup under way */
    fy_dns_query_t *q;  /* the A/AAAA or SRV query under way */
    struct tgt {
        fy__discovery_t *d;
        fy_dns_srv_t rec;
        fy_dns_query_t *q; /* its addresses, under way */
    } tgt[FY_DNS_SRV_MAX];
    size_t ntgt, nleft;
    fy_disc_entry_t *acc;
    size_t nacc;
    uint32_t ttl; /* smallest TTL seen in the lookup under way */
    bool have_ttl;
    char err[400];
    bool failing; /* the last lookup failed: said once until one works */
    /* the first lookup */
    fy_disc_entry_t *out;
    size_t nout;
    bool done;
};

/* ---- file ---- */

static int read_file(const char *path, fy_disc_entry_t *out, size_t max, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    char *buf = fy_xmalloc(FY_DISC_FILE_MAX + 1);
    size_t n = fread(buf, 1, FY_DISC_FILE_MAX + 1, f);
    bool bad = ferror(f);
    fclose(f);
    int r = -1;
    if (bad)
        snprintf(err, errlen, "%s: cannot read", path);
    else
        r = fy_discovery_parse(path, buf, n, out, max, err, errlen);
    if (r == 0) {
        snprintf(err, errlen, "%s: lists no server", path);
        r = -1;
    }
    free(buf);
    return r;
}

static void file_load(fy__discovery_t *d)
{
    fy_disc_entry_t *e = fy_xcalloc(d->max, sizeof *e);
    char err[800];
    int n = read_file(d->dc->file, e, d->max, err, sizeof err);
    if (n < 0)
        fy_warn("upstream %s: discovery: %s; keeping the last good set of %zu servers", d->name,
                err, fy__upstream_live_servers(d->u));
    else
        fy__upstream_set_servers(d->u, e, (size_t)n);
    free(e);
}

static void on_reread(fy_defer_t *df)
{
    file_load(df->data);
}

static void on_inotify(fy_io_t *io, uint32_t ev)
{
    (void)ev;
    fy__discovery_t *d = io->data;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool ours = false;
    for (;;) {
        ssize_t n = read(d->ifd, buf, sizeof buf);
        if (n <= 0) break;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ie = (const struct inotify_event *)p;
            if (ie->len && strcmp(ie->name, d->base) == 0) ours = true;
            if (ie->mask & IN_Q_OVERFLOW) ours = true;
            p += sizeof *ie + ie->len;
        }
    }
    /* a burst of events (write, then rename) is one read, after this callback */
    if (ours) fy_defer(d->loop, &d->reread);
}

static int file_start(fy__discovery_t *d)
{
    const char *path = d->dc->file;
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path ? slash - path : 1), path);
    else
        snprintf(dir, sizeof dir, ".");
    snprintf(d->base, sizeof d->base, "%s", slash ? slash + 1 : path);
    d->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (d->ifd < 0) {
        fy_error("upstream %s: discovery: inotify: %s", d->name, strerror(errno));
        return -1;
    }
    /* the directory, not the file: editors and deploy tools replace it by a rename */
    if (inotify_add_watch(d->ifd, dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM) <
        0) {
        fy_error("upstream %s: discovery: cannot watch %s: %s", d->name, dir, strerror(errno));
        close(d->ifd);
        d->ifd = -1;
        return -1;
    }
    d->io.fd = d->ifd;
    d->io.cb = on_inotify;
    d->io.data = d;
    fy_io_set(d->loop, &d->io, EPOLLIN);
    d->reread.cb = on_reread;
    d->reread.data = d;
    /* it may have changed between the load and now */
    fy_defer(d->loop, &d->reread);
    return 0;
}

/* ---- dns ---- */

static void lookup(fy__discovery_t *d);

static void on_next(fy_timer_t *t)
{
    lookup(t->data);
}

static void cancel_queries(fy__discovery_t *d)
{
    fy_dns_cancel(d->q);
    d->q = NULL;
    for (size_t i = 0; i < d->ntgt; i++) {
        fy_dns_cancel(d->tgt[i].q);
        d->tgt[i].q = NULL;
    }
    d->ntgt = d->nleft = 0;
}

static void lookup_done(fy__discovery_t *d, bool ok)
{
    fy_timer_stop(d->loop, &d->timeout);
    cancel_queries(d);
    const fy_discovery_conf_t *dc = d->dc;
    uint64_t next = dc->min_ttl_ms;
    if (ok && d->nacc == 0) {
        ok = false;
        snprintf(d->err, sizeof d->err, "%s: no usable %s records", dc->dns,
                 dc->type == FY_DISC_SRV    ? "SRV"
                 : dc->type == FY_DISC_AAAA ? "AAAA"
                                            : "A");
    }
    if (ok) {
        uint64_t ttl = d->have_ttl ? (uint64_t)d->ttl * 1000 : dc->min_ttl_ms;
        next = ttl < dc->min_ttl_ms ? dc->min_ttl_ms : ttl > dc->max_ttl_ms ? dc->max_ttl_ms : ttl;
        if (d->failing) fy_notice("upstream %s: discovery: %s answers again", d->name, dc->dns);
        d->failing = false;
    }
    if (!d->u) { /* the first lookup, while loading */
        if (ok) {
            memcpy(d->out, d->acc, d->nacc * sizeof *d->acc);
            d->nout = d->nacc;
        } else {
            fy_warn("upstream %s: discovery: %s; no servers until a lookup works", d->name, d->err);
        }
        d->done = true;
        fy_loop_stop(d->loop);
        return;
    }
    if (ok) {
        fy__upstream_set_servers(d->u, d->acc, d->nacc);
    } else if (!d->failing) {
        fy_warn("upstream %s: discovery: %s; keeping the last good set of %zu servers", d->name,
                d->err, fy__upstream_live_servers(d->u));
        d->failing = true;
    }
    fy_timer_start(d->loop, &d->next, next);
}

static void on_timeout(fy_timer_t *t)
{
    fy__discovery_t *d = t->data;
    snprintf(d->err, sizeof d->err, "%s: no answer within %llu ms", d->dc->dns,
             (unsigned long long)d->dc->timeout_ms);
    lookup_done(d, false);
}

static void take_ttl(fy__discovery_t *d, uint32_t ttl)
{
    if (ttl && (!d->have_ttl || ttl < d->ttl)) {
        d->ttl = ttl;
        d->have_ttl = true;
    }
}

static void add_entry(fy__discovery_t *d, const fy_dns_addr_t *a, int port, int64_t weight,
                      const char *name)
{
    if (d->nacc == d->max) return;
    char ip[INET6_ADDRSTRLEN];
    const void *p = a->addr.ss_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)&a->addr)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)&a->addr)->sin6_addr;
    if (!inet_ntop(a->addr.ss_family, p, ip, sizeof ip)) return;
    fy_disc_entry_t *e = &d->acc[d->nacc];
    const char *sch = schemes[d->dc->scheme];
    if (a->addr.ss_family == AF_INET6)
        snprintf(e->url, sizeof e->url, "%s://[%s]:%d", sch, ip, port);
    else
        snprintf(e->url, sizeof e->url, "%s://%s:%d", sch, ip, port);
    take_ttl(d, a->ttl);
    for (size_t i = 0; i < d->nacc; i++)
        if (strcmp(d->acc[i].url, e->url) == 0) return; /* two records, one server */
    snprintf(e->name, sizeof e->name, "%s", name);
    e->weight = weight;
    d->nacc++;
}

static void on_addrs(void *ud, int status, const fy_dns_addr_t *v, size_t n, const char *err)
{
    fy__discovery_t *d = ud;
    d->q = NULL; /* answered: the handle is gone */
    if (status < 0) {
        snprintf(d->err, sizeof d->err, "%s", err);
        lookup_done(d, false);
        return;
    }
    for (size_t i = 0; i < n; i++) add_entry(d, &v[i], (int)d->dc->port, d->dc->weight, d->dc->dns);
    lookup_done(d, true);
}

/* One SRV target's addresses. A target that does not resolve is left out (logged); the
 * lookup fails only when none does. */
static void on_target(void *ud, int status, const fy_dns_addr_t *v, size_t n, const char *err)
{
    struct tgt *t = ud;
    fy__discovery_t *d = t->d;
    t->q = NULL;
    if (status < 0) {
        fy_info("upstream %s: discovery: SRV target %s", d->name, err);
        snprintf(d->err, sizeof d->err, "%s", err);
    }
    for (size_t i = 0; i < n; i++)
        add_entry(d, &v[i], t->rec.port, t->rec.weight ? t->rec.weight : 1, t->rec.target);
    if (--d->nleft == 0) lookup_done(d, true);
}

static void on_srv(void *ud, int status, const fy_dns_srv_t *v, size_t n, uint32_t ttl,
                   const char *err)
{
    fy__discovery_t *d = ud;
    d->q = NULL;
    if (status < 0 || n == 0) {
        snprintf(d->err, sizeof d->err, "%s", status < 0 ? err : "no SRV records");
        lookup_done(d, false);
        return;
    }
    take_ttl(d, ttl);
    /* RFC 2782: the lowest priority is used while any of it is there */
    unsigned best = 65536;
    for (size_t i = 0; i < n; i++)
        if (v[i].priority < best) best = v[i].priority;
    d->ntgt = 0;
    for (size_t i = 0; i < n && d->ntgt < FY_DNS_SRV_MAX; i++) {
        if (v[i].priority != best || v[i].port == 0 || !strcmp(v[i].target, ".")) continue;
        struct tgt *t = &d->tgt[d->ntgt++];
        t->d = d;
        t->rec = v[i];
        t->q = NULL;
    }
    d->nleft = d->ntgt;
    if (d->ntgt == 0) {
        snprintf(d->err, sizeof d->err, "%s: no usable SRV records", d->dc->dns);
        lookup_done(d, false);
        return;
    }
    for (size_t i = 0, nt = d->ntgt; i < nt; i++)
        d->tgt[i].q =
            fy_dns_addrinfo(d->dns, d->tgt[i].rec.target, AF_UNSPEC, on_target, &d->tgt[i]);
}

static void lookup(fy__discovery_t *d)
{
    d->nacc = 0;
    d->have_ttl = false;
    d->err[0] = 0;
    fy_timer_start(d->loop, &d->timeout, d->dc->timeout_ms);
    if (d->dc->type == FY_DISC_SRV)
        d->q = fy_dns_srv(d->dns, d->dc->dns, on_srv, d);
    else
        d->q = fy_dns_addrinfo(d->dns, d->dc->dns, d->dc->type == FY_DISC_AAAA ? AF_INET6 : AF_INET,
                               on_addrs, d);
    if (!d->q) {
        snprintf(d->err, sizeof d->err, "%s: cannot start the lookup", d->dc->dns);
        lookup_done(d, false);
    }
}

static fy__discovery_t *make(fy_upstream_t *u, const fy_upstream_conf_t *uc, fy_loop_t *loop,
                             size_t max)
{
    fy__discovery_t *d = fy_xcalloc(1, sizeof *d);
    d->u = u;
    d->uc = uc;
    d->dc = uc->discovery;
    d->loop = loop;
    d->name = uc->name;
    d->max = max;
    d->ifd = -1;
    fy_timer_init(&d->next, on_next, d);
    fy_timer_init(&d->timeout, on_timeout, d);
    return d;
}

static int dns_open(fy__discovery_t *d)
{
    char err[300];
    fy_dns_opts_t o = {.servers = d->dc->resolver};
    d->dns = fy_dns_new(d->loop, &o, err, sizeof err);
    if (!d->dns) {
        fy_error("upstream %s: discovery: %s", d->name, err);
        return -1;
    }
    d->acc = fy_xcalloc(d->max, sizeof *d->acc);
    return 0;
}

static void destroy(fy__discovery_t *d)
{
    cancel_queries(d);
    fy_timer_stop(d->loop, &d->next);
    fy_timer_stop(d->loop, &d->timeout);
    if (d->reread.queued) fy_defer_cancel(d->loop, &d->reread);
    if (d->ifd >= 0) {
        fy_io_set(d->loop, &d->io, 0);
        close(d->ifd);
    }
    fy_dns_free(d->dns);
    free(d->acc);
    free(d);
}

size_t fy__discovery_initial(const fy_upstream_conf_t *uc, fy_disc_entry_t *out, size_t max)
{
    const fy_discovery_conf_t *dc = uc->discovery;
    if (dc->file) {
        char err[800];
        int n = read_file(dc->file, out, max, err, sizeof err);
        if (n < 0) {
            fy_warn("upstream %s: discovery: %s; no servers until the file is fixed", uc->name,
                    err);
            return 0;
        }
        return (size_t)n;
    }
    fy_loop_t loop;
    if (fy_loop_init(&loop) < 0) return 0;
    fy_loop_update_time(&loop);
    fy__discovery_t *d = make(NULL, uc, &loop, max);
    d->out = out;
    size_t n = 0;
    if (dns_open(d) == 0) {
        lookup(d); /* bounded by resolve-timeout: lookup_done stops the loop */
        if (!d->done) fy_loop_run(&loop);
        n = d->nout;
    }
    destroy(d);
    fy_loop_destroy(&loop);
    return n;
}

fy__discovery_t *fy__discovery_start(fy_upstream_t *u, const fy_upstream_conf_t *uc,
                                     fy_loop_t *loop)
{
    fy__discovery_t *d = make(u, uc, loop, (size_t)uc->discovery->max_servers);
    if (uc->discovery->file) {
        if (file_start(d) < 0) {
            destroy(d);
            return NULL;
        }
        return d;
    }
    if (dns_open(d) < 0) {
        destroy(d);
        return NULL;
    }
    /* the set from loading is fresh: the next lookup when its TTL would have run out is not
       known here, so ask again after min-ttl; a reload's set is the generation before's: now */
    fy_timer_start(loop, &d->next, fy__upstream_lookup_now(u) ? 0 : d->dc->min_ttl_ms);
    return d;
}

void fy__discovery_stop(fy__discovery_t *d)
{
    if (d) destroy(d);
}
