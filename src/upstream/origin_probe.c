/* Active health probes over multiplexed origins (h2c:// h2:// h3://): a GET stream through the
 * origin interface (origin.h) on a pooled connection of the checking worker, written once for
 * both protocols. */
#include <string.h>

#include "core/errors.h"
#include "upstream/upstream_int.h"

static void probe_finish(fy__mux_probe_t *p, int status, const char *why)
{
    if (!p->running) return;
    p->running = false;
    p->done(p->ud, status, why);
}

static void probe_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    (void)hs;
    (void)end;
    if (status >= 200) probe_finish(ud, status, "");
}
static void probe_data(void *ud, const char *d, size_t n)
{
    fy__mux_probe_t *p = ud;
    (void)d;
    fy_origin_stream_consume(&p->os, n);
}
static void probe_end(void *ud, fy_headers_t *trailers)
{
    (void)trailers;
    probe_finish(ud, 0, "stream ended without a response");
}
static void probe_error(void *ud, int kind, uint64_t code, const char *why)
{
    (void)kind;
    (void)code;
    probe_finish(ud, 0, why);
}
static ssize_t probe_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers)
{
    (void)ud;
    (void)buf;
    (void)len;
    *trailers = NULL;
    return 0;
}

static void probe_open(void *ud, const char *err);
static void probe_after_io(void *ud)
{
    (void)ud;
}

static const fy_origin_stream_ops_t probe_ops = {
    {probe_head, probe_data, probe_end, probe_error, probe_body, NULL},
    probe_open,
    probe_after_io,
};

static bool probe_go(fy__mux_probe_t *p)
{
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)fy_upstream_conf(p->u)->servers.v)[p->server];
    fy_headers_t hs = {0};
    fy__probe_fields(&p->arena, &hs, sv, p->path, sv->h3 || sv->tls);
    fy_h1_limits_t lim = {4096, 16384, 64};
    fy_origin_request_t rq = {&hs, 0, false, false, &lim, &p->arena};
    p->submitted = fy_origin_stream_submit(&p->os, &rq) == 0;
    return p->submitted;
}

static void probe_open(void *ud, const char *err)
{
    fy__mux_probe_t *p = ud;
    if (err) {
        probe_finish(p, 0, err);
        return;
    }
    if (!probe_go(p)) probe_finish(p, 0, "cannot open a stream");
}

static void probe_later(fy_defer_t *d)
{
    fy__mux_probe_t *p = d->data;
    probe_finish(p, 0, p->err);
}

void fy__mux_probe_start(fy__mux_probe_t *p, fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                         const char *path, void (*done)(void *ud, int status, const char *why),
                         void *ud)
{
    p->u = u;
    p->server = server;
    p->path = path;
    p->done = done;
    p->ud = ud;
    p->running = true;
    p->submitted = false;
    if (!p->arena_live) {
        fy_arena_init(&p->arena, p->first, sizeof p->first, 4096);
        memset(&p->os, 0, sizeof p->os);
        fy_origin_stream_init(&p->os, &probe_ops, p);
        p->arena_live = true;
    }
    const char *err = "connect failed";
    int rc = fy_origin_stream_open(&p->os, u, w, server, loop, 0, &err);
    if (rc == 1 && probe_go(p)) return;
    if (rc == 0) return;
    p->err = rc == 1 ? "cannot open a stream" : err; /* reported outside of start */
    p->later.cb = probe_later;
    p->later.data = p;
    fy_defer(loop, &p->later);
}

void fy__mux_probe_stop(fy__mux_probe_t *p, fy_loop_t *loop)
{
    /* stopped with its stream still waiting: the checker's timeout. A QUIC connection to a
       dead origin would otherwise live on until its idle timeout, and every further probe
       would wait on it; it is given up so that the next probe connects afresh. */
    bool timed_out = p->running && p->submitted;
    p->running = false;
    p->submitted = false;
    fy_defer_cancel(loop, &p->later);
    if (!p->arena_live) return;
    if (timed_out) fy_origin_stream_abandon(&p->os);
    fy_origin_stream_free(&p->os);
    fy_arena_free(&p->arena);
    p->arena_live = false;
}
