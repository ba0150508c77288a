/* The admin listener's thread, connections and request handler (see ops/admin.h). */
#include "ops/admin.h"
#include "ops/admin_cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"
#include "core/loop.h"
#include "core/pool.h"
#include "h1/h1_server.h"
#include "http/exchange.h"
#include "http/handler.h"
#include "http/router.h"
#include "net/listener_conf.h"
#include "net/sock.h"
#include "ops/http_metrics.h"
#include "tls/tls.h"

typedef struct admin_handler {
    fy_handler_t h;
    fy_admin_t *a;
} admin_handler_t;

struct fy_admin {
    const fy_admin_conf_t *conf; /* borrowed (the first config's) */
    fy_admin_host_t host;
    pthread_mutex_t mu; /* the running generation: read, swapped (one reload at a time) */
    pthread_t thread;
    bool started;
    fy_loop_t loop;
    fy_io_t lio; /* the listening socket */
    fy_http_limits_t limits;
    admin_handler_t handler;
    fy_route_t route;
    fy_router_t router;
    fy_http_ctx_t ctx;
    fy_tls_ctx_t *tls; /* owned: admin.tls, or NULL */
    atomic_bool stop;
    char *source;     /* owned: the file the process runs, NULL = embedded */
    char *cur, *prev; /* owned: running config text, and the one before (rollback) */
    size_t cur_len, prev_len;
    time_t started_at;
};

/* ---- small JSON writer (open_memstream) ---- */

void fy_admin_json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* The lines of `text` as a JSON array of strings. */
static void json_lines(FILE *out, const char *text)
{
    fputc('[', out);
    bool first = true;
    for (const char *p = text; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l) {
            char *line = strndup(p, l);
            if (!line) abort();
            fputs(first ? "" : ", ", out);
            first = false;
            fy_admin_json_str(out, line);
            free(line);
        }
        p += l + (e != NULL);
    }
    fputc(']', out);
}

typedef struct reply {
    char *buf;
    size_t len;
    FILE *f;
} reply_t;

static FILE *reply_open(reply_t *r)
{
    r->buf = NULL;
    r->len = 0;
    r->f = open_memstream(&r->buf, &r->len);
    if (!r->f) abort();
    return r->f;
}

static void reply_send(fy_exchange_t *ex, reply_t *r, int status, const char *ctype)
{
    fclose(r->f);
    /* the body must live until the exchange is done (the sink references large ones) */
    char *body = fy_arena_alloc(ex->arena, r->len ? r->len : 1);
    memcpy(body, r->buf, r->len);
    free(r->buf);
    fy_exchange_respond(ex, status, ctype, body, r->len);
}

static void json_error(fy_exchange_t *ex, int status, const char *msg)
{
    reply_t r;
    FILE *f = reply_open(&r);
    fputs("{\"ok\": false, \"errors\": [", f);
    fy_admin_json_str(f, msg);
    fputs("]}\n", f);
    reply_send(ex, &r, status, "application/json");
}

/* ---- config apply / rollback (lock held) ---- */

static char *xmemdup(const char *p, size_t n)
{
    char *d = fy_xmalloc(n + 1);
    memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

/* Load `text` and apply it; on success the running text becomes the previous one. Errors go
 * to errf. Returns the new generation (> 0) or -1 (errors written), -2 (could not be set up). */
static int apply_text_locked(fy_admin_t *a, const char *name, const char *text, size_t len,
                             FILE *errf, FILE *diff)
{
    struct fy_config *cfg = a->host.load(name, text, len, errf);
    if (!cfg) return -1;
    unsigned gen = 0;
    const struct fy_config *cur = a->host.current(a->host.ud, &gen);
    if (diff) fy_admin_diff(a->host.table, cur, cfg, diff);
    if (a->host.apply(a->host.ud, cfg) < 0) return -2;
    free(a->prev);
    a->prev = a->cur;
    a->prev_len = a->cur_len;
    a->cur = xmemdup(text, len);
    a->cur_len = len;
    a->host.current(a->host.ud, &gen);
    return (int)gen;
}

static char *read_file(const char *path, size_t *len, FILE *errf)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errf) fprintf(errf, "%s: cannot read: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) buf = fy_xrealloc(buf, cap = cap ? 2 * cap : 65536);
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    *len = n;
    return buf;
}

int fy_admin_reload_source(fy_admin_t *a, FILE *errf)
{
    pthread_mutex_lock(&a->mu);
    size_t len = 0;
    char *text = a->source ? read_file(a->source, &len, errf) : xmemdup(a->cur, a->cur_len);
    if (!a->source) len = a->cur_len;
    int r = text ? apply_text_locked(a, a->source ? a->source : "<embedded>", text, len, errf, NULL)
                 : -1;
    free(text);
    pthread_mutex_unlock(&a->mu);
    return r > 0 ? 0 : -1;
}

/* ---- endpoints ---- */

static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

static void metrics(fy_admin_t *a, fy_exchange_t *ex)
{
    reply_t r;
    FILE *f = reply_open(&r);
    fy_counters_snapshot_t s;
    if (fy_counters_snapshot(&s) == 0) {
        fy_counters_write_prometheus(&s, f);
        fy_counters_snapshot_free(&s);
    }
    fprintf(f,
            "# HELP ferry_process_resident_memory_bytes Resident memory (/proc/self/statm).\n"
            "# TYPE ferry_process_resident_memory_bytes gauge\n"
            "ferry_process_resident_memory_bytes %ld\n",
            rss_bytes());
    pthread_mutex_lock(&a->mu);
    unsigned gen = 0;
    a->host.current(a->host.ud, &gen);
    fprintf(f,
            "# HELP ferry_config_generation The running configuration generation.\n"
            "# TYPE ferry_config_generation gauge\nferry_config_generation %u\n",
            gen);
    fy_upstream_t *const *ups;
    size_t nu = a->host.upstreams(a->host.ud, &ups);
    static const char *const fam[3][2] = {
        {"ferry_upstream_server_up", "1 when the server may take requests (not down, ejected "
                                     "or drained)."},
        {"ferry_upstream_server_ejected", "1 while passive health keeps the server out."},
        {"ferry_upstream_server_drained", "1 when the admin API drained the server."},
    };
    for (int k = 0; k < 3; k++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", fam[k][0], fam[k][1], fam[k][0]);
        for (size_t i = 0; i < nu; i++) {
            const fy_upstream_conf_t *uc = fy_upstream_conf(ups[i]);
            const fy_upstream_server_conf_t *sv = uc->servers.v;
            for (size_t j = 0; j < uc->servers.n; j++) {
                fy_upstream_server_state_t st;
                fy_upstream_server_state(ups[i], (int)j, &st);
                bool ej = st.ejected_until_ms > a->loop.now_ms;
                int v = k == 0 ? !st.down && !ej && !st.drained : k == 1 ? ej : st.drained;
                fprintf(f, "%s{upstream=\"%s\",server=\"%s\"} %d\n", fam[k][0], uc->name, sv[j].url,
                        v);
            }
        }
    }
    pthread_mutex_unlock(&a->mu);
    reply_send(ex, &r, 200, "text/plain; version=0.0.4; charset=utf-8");
}

static void status(fy_admin_t *a, fy_exchange_t *ex)
{
    reply_t r;
    FILE *f = reply_open(&r);
    pthread_mutex_lock(&a->mu);
    unsigned gen = 0;
    a->host.current(a->host.ud, &gen);
    fprintf(f, "{\"ok\": true, \"pid\": %ld, \"generation\": %u, \"config\": ", (long)getpid(),
            gen);
    fy_admin_json_str(f, a->source ? a->source : "<embedded>");
    fprintf(f, ", \"uptime_seconds\": %lld, \"rollback_available\": %s}\n",
            (long long)(time(NULL) - a->started_at), a->prev ? "true" : "false");
    pthread_mutex_unlock(&a->mu);
    reply_send(ex, &r, 200, "application/json");
}

static void get_config(fy_admin_t *a, fy_exchange_t *ex)
{
    reply_t r;
    FILE *f = reply_open(&r);
    pthread_mutex_lock(&a->mu);
    a->host.dump(a->host.current(a->host.ud, NULL), f);
    pthread_mutex_unlock(&a->mu);
    reply_send(ex, &r, 200, "application/yaml");
}

static void post_config(fy_admin_t *a, fy_exchange_t *ex, const char *body, size_t len,
                        bool dry_run)
{
    char *errs = NULL, *diff = NULL;
    size_t elen = 0, dlen = 0;
    FILE *ef = open_memstream(&errs, &elen), *df = open_memstream(&diff, &dlen);
    if (!ef || !df) abort();
    int gen = 0, status = 200;
    unsigned cur = 0;
    pthread_mutex_lock(&a->mu);
    if (dry_run) {
        struct fy_config *cfg = a->host.load("<request>", body, len, ef);
        if (cfg) {
            fy_admin_diff(a->host.table, a->host.current(a->host.ud, &cur), cfg, df);
            a->host.free(cfg);
            gen = (int)cur;
        } else {
            gen = -1;
        }
    } else {
        gen = apply_text_locked(a, "<request>", body, len, ef, df);
    }
    pthread_mutex_unlock(&a->mu);
    fclose(ef);
    fclose(df);
    reply_t r;
    FILE *f = reply_open(&r);
    if (gen == -1) {
        status = 400;
        fputs("{\"ok\": false, \"errors\": ", f);
        json_lines(f, errs);
        fputs("}\n", f);
    } else if (gen == -2) {
        status = 500;
        fputs("{\"ok\": false, \"errors\": [\"the configuration is valid but could not be set "
              "up (see the error log); the running generation goes on serving\"], \"diff\": ",
              f);
        fputs(dlen ? diff : "null", f);
        fputs("}\n", f);
    } else {
        fprintf(f, "{\"ok\": true, \"dry_run\": %s, \"generation\": %d, \"diff\": %s}\n",
                dry_run ? "true" : "false", gen, dlen ? diff : "null");
    }
    free(errs);
    free(diff);
    reply_send(ex, &r, status, "application/json");
}

static void rollback(fy_admin_t *a, fy_exchange_t *ex)
{
    pthread_mutex_lock(&a->mu);
    if (!a->prev) {
        pthread_mutex_unlock(&a->mu);
        json_error(ex, 409, "no previous configuration to roll back to");
        return;
    }
    char *text = a->prev;
    size_t len = a->prev_len;
    a->prev = NULL;
    char *errs = NULL, *diff = NULL;
    size_t elen = 0, dlen = 0;
    FILE *ef = open_memstream(&errs, &elen), *df = open_memstream(&diff, &dlen);
    if (!ef || !df) abort();
    int gen = apply_text_locked(a, "<rollback>", text, len, ef, df);
    if (gen < 0) {
        a->prev = text; /* still there for another try */
        a->prev_len = len;
    } else {
        free(text);
    }
    pthread_mutex_unlock(&a->mu);
    fclose(ef);
    fclose(df);
    reply_t r;
    FILE *f = reply_open(&r);
    if (gen < 0) {
        fputs("{\"ok\": false, \"errors\": ", f);
        json_lines(f, elen ? errs
                           : "the previous configuration could not be set up (see the "
                             "error log)");
        fputs("}\n", f);
    } else {
        fprintf(f, "{\"ok\": true, \"generation\": %d, \"diff\": %s}\n", gen, diff);
    }
    free(errs);
    free(diff);
    reply_send(ex, &r, gen < 0 ? 500 : 200, "application/json");
}

static void reload(fy_admin_t *a, fy_exchange_t *ex)
{
    char *errs = NULL;
    size_t elen = 0;
    FILE *ef = open_memstream(&errs, &elen);
    if (!ef) abort();
    int rc = fy_admin_reload_source(a, ef);
    fclose(ef);
    reply_t r;
    FILE *f = reply_open(&r);
    pthread_mutex_lock(&a->mu);
    unsigned gen = 0;
    a->host.current(a->host.ud, &gen);
    pthread_mutex_unlock(&a->mu);
    if (rc < 0) {
        fputs("{\"ok\": false, \"errors\": ", f);
        json_lines(f, elen ? errs : "the configuration could not be set up (see the error log)");
        fprintf(f, ", \"generation\": %u}\n", gen);
    } else {
        fprintf(f, "{\"ok\": true, \"generation\": %u}\n", gen);
    }
    free(errs);
    reply_send(ex, &r, rc < 0 ? 400 : 200, "application/json");
}

/* The mean time to first byte of one upstream server from the metrics, or -1. */
static double ttfb_mean(const fy_counters_snapshot_t *s, const char *labels)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (strcmp(s->v[i].name, "ferry_upstream_ttfb_seconds") == 0 &&
            strcmp(s->v[i].labels, labels) == 0 && s->v[i].value > 0)
            return (double)s->v[i].sum_us / 1e6 / (double)s->v[i].value;
    return -1;
}

static void upstreams(fy_admin_t *a, fy_exchange_t *ex)
{
    reply_t r;
    FILE *f = reply_open(&r);
    fy_counters_snapshot_t snap;
    bool have = fy_counters_snapshot(&snap) == 0;
    pthread_mutex_lock(&a->mu);
    unsigned gen = 0;
    a->host.current(a->host.ud, &gen);
    fy_upstream_t *const *ups;
    size_t nu = a->host.upstreams(a->host.ud, &ups);
    fprintf(f, "{\"generation\": %u, \"upstreams\": [", gen);
    for (size_t i = 0; i < nu; i++) {
        const fy_upstream_conf_t *uc = fy_upstream_conf(ups[i]);
        const fy_upstream_server_conf_t *sv = uc->servers.v;
        fprintf(f, "%s{\"name\": ", i ? ", " : "");
        fy_admin_json_str(f, uc->name);
        fputs(", \"servers\": [", f);
        for (size_t j = 0; j < uc->servers.n; j++) {
            fy_upstream_server_state_t st;
            fy_upstream_server_state(ups[i], (int)j, &st);
            uint64_t left =
                st.ejected_until_ms > a->loop.now_ms ? st.ejected_until_ms - a->loop.now_ms : 0;
            fprintf(f, "%s{\"index\": %zu, \"url\": ", j ? ", " : "", j);
            fy_admin_json_str(f, sv[j].url);
            fprintf(f,
                    ", \"weight\": %lld, \"healthy\": %s, \"down\": %s, \"ejected\": %s, "
                    "\"ejected_for_ms\": %llu, \"drained\": %s",
                    (long long)sv[j].weight, !st.down && !left ? "true" : "false",
                    st.down ? "true" : "false", left ? "true" : "false", (unsigned long long)left,
                    st.drained ? "true" : "false");
            char lab[512];
            snprintf(lab, sizeof lab, "upstream=\"%s\",server=\"%s\"", uc->name, sv[j].url);
            double m = ttfb_mean(have ? &snap : NULL, lab);
            if (m >= 0)
                fprintf(f, ", \"ttfb_mean_seconds\": %.6f", m);
            else
                fputs(", \"ttfb_mean_seconds\": null", f);
            /* the balancer's own view (least-time), per worker, averaged */
            if (st.ewma_ttfb_us >= 0)
                fprintf(f, ", \"ewma_ttfb_seconds\": %.6f, \"ewma_workers\": %d}",
                        st.ewma_ttfb_us / 1e6, st.ewma_workers);
            else
                fputs(", \"ewma_ttfb_seconds\": null, \"ewma_workers\": 0}", f);
        }
        fputs("]}", f);
    }
    fputs("]}\n", f);
    pthread_mutex_unlock(&a->mu);
    if (have) fy_counters_snapshot_free(&snap);
    reply_send(ex, &r, 200, "application/json");
}

static void server_action(fy_admin_t *a, fy_exchange_t *ex, const char *name, const char *idx,
                          bool drain)
{
    int n = fy_admin_parse_index(idx);
    pthread_mutex_lock(&a->mu);
    fy_upstream_t *const *ups;
    size_t nu = a->host.upstreams(a->host.ud, &ups);
    fy_upstream_t *u = NULL;
    for (size_t i = 0; i < nu; i++)
        if (strcmp(fy_upstream_conf(ups[i])->name, name) == 0) u = ups[i];
    const char *url = NULL;
    if (u && n >= 0 && (size_t)n < fy_upstream_nservers(u)) {
        fy_upstream_set_drained(u, n, drain);
        url = ((const fy_upstream_server_conf_t *)fy_upstream_conf(u)->servers.v)[n].url;
        fy_notice("admin: upstream %s: server %s %s", name, url,
                  drain ? "drained (no new requests)" : "enabled");
    }
    pthread_mutex_unlock(&a->mu);
    if (!u) {
        json_error(ex, 404, "no upstream of that name");
        return;
    }
    if (!url) {
        json_error(ex, 404, "no server of that index in the upstream");
        return;
    }
    reply_t r;
    FILE *f = reply_open(&r);
    fputs("{\"ok\": true, \"upstream\": ", f);
    fy_admin_json_str(f, name);
    fprintf(f, ", \"server\": %d, \"url\": ", n);
    fy_admin_json_str(f, url);
    fprintf(f, ", \"drained\": %s}\n", drain ? "true" : "false");
    reply_send(ex, &r, 200, "application/json");
}

/* ---- request dispatch ---- */

typedef struct req_state {
    fy_admin_t *a;
    char *body; /* arena */
    size_t len, cap;
    bool dry_run;
    int kind; /* what a POST with a body does */
} req_state_t;

enum { POST_CONFIG = 1 };

static bool authorized(const fy_admin_t *a, const fy_exchange_t *ex)
{
    const char *tok = a->conf->token;
    if (!tok) return true;
    const fy_header_t *h = FY_HDR_FIND(&ex->req.headers, "authorization");
    size_t tl = strlen(tok);
    if (!h || h->value.len != 7 + tl || strncasecmp(h->value.p, "Bearer ", 7) != 0) return false;
    unsigned char d = 0; /* constant time in the token's length */
    for (size_t i = 0; i < tl; i++) d |= (unsigned char)(h->value.p[7 + i] ^ tok[i]);
    return d == 0;
}

static void on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    req_state_t *st = ex->handler_data;
    if (st->len + n > st->cap) {
        fy_exchange_fail(ex, 413, "admin: request body over admin.max-body");
        return;
    }
    memcpy(st->body + st->len, p, n);
    st->len += n;
    if (!end) {
        fy_exchange_read_body(ex, on_body);
        return;
    }
    post_config(st->a, ex, st->body, st->len, st->dry_run);
}

static bool is(const fy_exchange_t *ex, int method)
{
    return ex->req.method_id == method;
}

static void method_not_allowed(fy_exchange_t *ex, const char *allow)
{
    FY_HDR_ADD(ex->arena, &ex->res.headers, "allow", allow, strlen(allow));
    json_error(ex, 405, "method not allowed here");
}

static void on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    fy_admin_t *a = ((admin_handler_t *)h)->a;
    if (!authorized(a, ex)) {
        FY_HDR_ADD(ex->arena, &ex->res.headers, "www-authenticate", "Bearer realm=\"ferry\"", 20);
        json_error(ex, 401, "missing or wrong bearer token (admin.token)");
        return;
    }
    char buf[FY_ADMIN_MAX_TARGET + 1];
    const char *seg[8];
    bool dry = false;
    int n = fy_admin_split_target(ex->req.target.p, ex->req.target.len, buf, seg, 8, &dry);
    if (n < 0) {
        json_error(ex, 400, "bad request target");
        return;
    }
    if (n == 1 && !strcmp(seg[0], "metrics")) {
        if (!is(ex, FY_M_GET) && !is(ex, FY_M_HEAD)) return method_not_allowed(ex, "GET, HEAD");
        return metrics(a, ex);
    }
    if (n == 1 && !strcmp(seg[0], "status")) {
        if (!is(ex, FY_M_GET)) return method_not_allowed(ex, "GET");
        return status(a, ex);
    }
    if (n == 1 && !strcmp(seg[0], "upstreams")) {
        if (!is(ex, FY_M_GET)) return method_not_allowed(ex, "GET");
        return upstreams(a, ex);
    }
    if (n == 1 && !strcmp(seg[0], "config")) {
        if (is(ex, FY_M_GET)) return get_config(a, ex);
        if (!is(ex, FY_M_POST)) return method_not_allowed(ex, "GET, POST");
        req_state_t *st = fy_arena_calloc(ex->arena, sizeof *st);
        st->a = a;
        st->dry_run = dry;
        st->cap = ex->req.content_length >= 0 ? (size_t)ex->req.content_length
                                              : (size_t)a->conf->max_body;
        if (st->cap > a->conf->max_body) {
            json_error(ex, 413, "request body over admin.max-body");
            return;
        }
        st->body = fy_arena_alloc(ex->arena, st->cap + 1);
        ex->handler_data = st;
        if (ex->req.content_length == 0) return post_config(a, ex, "", 0, dry);
        fy_exchange_read_body(ex, on_body);
        return;
    }
    if (n == 2 && !strcmp(seg[0], "config") &&
        (!strcmp(seg[1], "rollback") || !strcmp(seg[1], "reload"))) {
        if (!is(ex, FY_M_POST)) return method_not_allowed(ex, "POST");
        return seg[1][1] == 'o' ? rollback(a, ex) : reload(a, ex);
    }
    if (n == 5 && !strcmp(seg[0], "upstreams") && !strcmp(seg[2], "servers") &&
        (!strcmp(seg[4], "drain") || !strcmp(seg[4], "enable"))) {
        if (!is(ex, FY_M_POST)) return method_not_allowed(ex, "POST");
        return server_action(a, ex, seg[1], seg[3], seg[4][0] == 'd');
    }
    if (n >= 1 && !strcmp(seg[0], "cache")) return fy_admin_cache(ex, seg, n); /* admin_cache.c */
    json_error(ex, 404,
               "no such admin endpoint (GET /metrics, /status, /config, /upstreams; "
               "POST /config[?dry-run=1], /config/rollback, /config/reload, "
               "/upstreams/NAME/servers/N/drain|enable)");
}

static void handler_destroy(fy_handler_t *h)
{
    (void)h;
}

static const fy_handler_ops_t admin_ops = {"admin", on_request, handler_destroy};

/* ---- thread and loop ---- */

static void on_accept(fy_io_t *io, uint32_t ev)
{
    (void)ev;
    fy_admin_t *a = io->data;
    for (int i = 0; i < 16; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(io->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                fy_error("admin: accept: %s", strerror(errno));
            return;
        }
        if (a->ctx.nconns >= 64) { /* the admin API is for a few operators and scrapers */
            close(fd);
            continue;
        }
        fy_h1_conn_accept(&a->ctx, fd, (struct sockaddr *)&ss, sl);
    }
}

static void on_conn_closed(fy_http_ctx_t *ctx)
{
    (void)ctx;
}

static void on_wake(fy_loop_t *loop)
{
    fy_admin_t *a = loop->data;
    if (!atomic_load(&a->stop)) return;
    fy_loop_stop(loop);
}

static void run_defers(fy_loop_t *loop)
{
    fy_defer_t *d;
    while ((d = loop->defer_head)) {
        loop->defer_head = d->next;
        if (!loop->defer_head) loop->defer_tail = &loop->defer_head;
        d->queued = false;
        d->cb(d);
    }
}

static void *admin_main(void *arg)
{
    fy_admin_t *a = arg;
    fy_log_set_worker(-1);
    fy_counters_bind_discard(); /* scrapes and API calls are not traffic */
    fy_loop_run(&a->loop);
    fy_io_set(&a->loop, &a->lio, 0);
    close(a->lio.fd);
    a->lio.fd = -1;
    fy_http_ctx_close_all(&a->ctx);
    a->loop.stop = false;
    run_defers(&a->loop);
    fy_router_thread_cleanup();
    fy_h1_thread_cleanup();
    fy_tls_thread_cleanup();
    fy_pool_drain(fy_chunk_pool());
    return NULL;
}

void fy_admin_prepare(void)
{
    fy_http_metrics_want();
}

fy_admin_t *fy_admin_start(const fy_admin_conf_t *conf, const fy_http_limits_t *limits,
                           const char *data_dir, const fy_admin_host_t *host, const char *source,
                           const char *text, size_t len)
{
    fy_admin_t *a = fy_xcalloc(1, sizeof *a);
    a->conf = conf;
    a->host = *host;
    pthread_mutex_init(&a->mu, NULL);
    a->source = source ? fy_xstrdup(source) : NULL;
    a->cur = xmemdup(text, len);
    a->cur_len = len;
    a->started_at = time(NULL);
    a->limits = *limits;
    a->limits.max_body = conf->max_body;
    a->limits.header_timeout_ms = conf->timeout_ms;
    a->limits.body_timeout_ms = conf->timeout_ms;
    a->limits.keepalive_timeout_ms = conf->timeout_ms;
    a->limits.max_connections = 64;
    a->handler.h.ops = &admin_ops;
    a->handler.a = a;
    a->route.path = "/";
    a->route.path_len = 1;
    a->route.handler = &a->handler.h;
    a->router.routes = &a->route;
    a->router.n = 1;
    /* no SO_REUSEPORT: an address a listener (or another process) holds must fail here
       rather than share its clients */
    int fd = socket(conf->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (const struct sockaddr *)&conf->addr, conf->addrlen) < 0 || listen(fd, 64) < 0) {
        fy_log(FY_LOG_EMERG, "admin: cannot listen on %s: %s", conf->address, strerror(errno));
        if (fd >= 0) close(fd);
        goto fail;
    }
    if (conf->tls) {
        static const char *const alpn[] = {"http/1.1", NULL};
        a->tls = fy_tls_ctx_new(conf->tls, data_dir, alpn);
        if (!a->tls ||
            (conf->client_ca && fy_tls_ctx_require_client_cert(a->tls, conf->client_ca) < 0)) {
            fy_log(FY_LOG_EMERG, "admin: TLS setup failed");
            close(fd);
            goto fail;
        }
        a->ctx.is_tls = true;
        a->ctx.tls = a->tls;
    }
    if (fy_loop_init(&a->loop) < 0) {
        close(fd);
        goto fail;
    }
    a->loop.data = a;
    a->loop.on_wake = on_wake;
    a->ctx.router = &a->router;
    a->ctx.limits = &a->limits;
    a->ctx.loop = &a->loop;
    a->ctx.worker_id = 0;
    a->ctx.protocols = FY_PROTO_H1;
    a->ctx.on_conn_closed = on_conn_closed;
    a->ctx.data = a;
    fy_list_init(&a->ctx.conns);
    a->lio.fd = fd;
    a->lio.cb = on_accept;
    a->lio.data = a;
    fy_io_set(&a->loop, &a->lio, EPOLLIN);
    if (pthread_create(&a->thread, NULL, admin_main, a) != 0) {
        fy_log(FY_LOG_EMERG, "admin: cannot start its thread");
        close(fd);
        fy_loop_destroy(&a->loop);
        goto fail;
    }
    a->started = true;
    fy_notice("admin API on %s://%s/ (metrics at /metrics)%s%s", a->tls ? "https" : "http",
              conf->address, conf->token ? "; bearer token required" : "",
              conf->client_ca ? "; client certificate required" : "");
    return a;
fail:
    fy_tls_ctx_free(a->tls);
    free(a->source);
    free(a->cur);
    pthread_mutex_destroy(&a->mu);
    free(a);
    return NULL;
}

void fy_admin_stop(fy_admin_t *a)
{
    if (!a) return;
    if (a->started) {
        atomic_store(&a->stop, true);
        fy_loop_wake(&a->loop);
        pthread_join(a->thread, NULL);
        fy_loop_destroy(&a->loop);
    }
    free(a->source);
    free(a->cur);
    free(a->prev);
    fy_tls_ctx_free(a->tls);
    pthread_mutex_destroy(&a->mu);
    free(a);
}
