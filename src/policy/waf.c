/* The `waf:` filter: ModSecurity v3 + the OWASP CRS on every exchange of a route
 * (policy/waf.h). */
#include "policy/waf.h"

#include <arpa/inet.h>
#include <glob.h>
#include <pthread.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <modsecurity/intervention.h>
#include <modsecurity/modsecurity.h>
#include <modsecurity/rules_set.h>
#include <modsecurity/transaction.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"

typedef struct waf_filter {
    fy_filter_t base;
    ModSecurity **ms; /* owned: one per worker (their collections are not thread-safe) */
    int nms;
    RulesSet *rules; /* owned, shared read-only by the workers */
    int mode;        /* enum fy_waf_mode */
    int overflow;    /* enum fy_waf_overflow */
    size_t body_limit;
    int status;    /* when the denying rule names none */
    bool response; /* run the response-header phase (3) */
    char where[96];
    fy_counter_id_t c_blocked, c_detected, c_overflow;
    /* sharing: identical `waf:` blocks of one generation use one filter (one rule set) */
    const void *gen;         /* borrowed: the generation's identity (its config) */
    char *sig;               /* owned: everything the rule set and the filter depend on */
    struct waf_filter *next; /* in the registry of live filters */
} waf_filter_t;

/* Live filters. Built on the main thread; a generation may be freed by the worker that drops
   its last reference, hence the lock. */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static waf_filter_t *registry;

/* Where an exchange's request stands. */
enum waf_state {
    S_BODY,   /* reading and holding the request body */
    S_REPLAY, /* passed: the held body waits for the handler's read_body */
    S_PASS,   /* the held body was handed on: read_body goes to the codec */
    S_DONE,   /* blocked, or the whole body was handed on */
};

typedef struct waf_tx {
    fy_sink_layer_t layer; /* first: found again through fy_exchange_find_layer */
    waf_filter_t *f;       /* borrowed */
    fy_exchange_t *ex;     /* borrowed */
    Transaction *t;        /* owned: cleaned up when the exchange's arena resets */
    int state;             /* enum waf_state */
    char *buf;             /* arena: the held body */
    size_t len, cap;
    bool end;    /* the held body is all of it */
    bool resume; /* the deferred callback resumes the filters (else it hands the body on) */
    bool matched;
    char ids[96]; /* the ids of the rules that matched, for the log line of a block */
    size_t idlen;
    fy_defer_t defer;
    /* response phase */
    bool head_seen; /* phase 3 ran */
    bool dropping;  /* denied: the handler's sends go nowhere until the error page */
    bool passing;   /* the error page (or all sends, once judged) pass */
    int deny_status;
    const fy_producer_ops_t *handler_producer; /* borrowed: stopped on a denial */
    fy_defer_t resp_defer;
} waf_tx_t;

static const fy_layer_ops_t waf_layer_ops;

/* Up to cap-1 bytes of s for a log line, control bytes as '?'. */
static const char *printable(char *buf, size_t cap, const char *s, size_t n)
{
    if (n >= cap) n = cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    buf[n] = '\0';
    return buf;
}

/* ModSecurity's log callback: `data` is the transaction's waf_tx_t, msg the text line of a
   rule that matched (in detection mode the only trace of it). */
static void on_msc_log(void *data, const void *msg)
{
    waf_tx_t *tx = data;
    const char *id, *m;
    size_t il, ml;
    if (!tx || !msg) return;
    if (!fy__waf_log_fields(msg, &id, &il, &m, &ml)) return;
    tx->matched = true;
    if (tx->idlen + il + 2 < sizeof tx->ids && !(il == 6 && !memcmp(id, "949110", 6))) {
        if (tx->idlen) tx->ids[tx->idlen++] = ' ';
        memcpy(tx->ids + tx->idlen, id, il);
        tx->idlen += il;
        tx->ids[tx->idlen] = '\0';
    }
    /* blocking mode logs the one rule that denies (intervene); a warning per scoring match of
       every passed request would flood the log */
    if (tx->f->mode != FY_WAF_DETECTION) return;
    char mb[256], tb[208];
    const fy_request_t *q = &tx->ex->req;
    fy_warn("waf: %s: detected rule %.*s: %s (%.*s %s)", tx->f->where, (int)il, id,
            printable(mb, sizeof mb, m, ml), (int)q->method.len, q->method.p,
            printable(tb, sizeof tb, q->target.p, q->target.len));
}

static void tx_cleanup(void *arg)
{
    waf_tx_t *tx = arg;
    fy_exchange_t *ex = tx->ex;
    fy_defer_cancel(ex->ctx->loop, &tx->defer);
    if (tx->resp_defer.cb) fy_defer_cancel(ex->ctx->loop, &tx->resp_defer);
    if (tx->matched) {
        fy_counter_inc(tx->f->c_detected);
        /* the audit log entry carries the status the client got */
        msc_update_status_code(tx->t, ex->res.status ? ex->res.status : 500);
        msc_process_logging(tx->t);
    }
    msc_transaction_cleanup(tx->t);
}

/* ModSecurity asks for a denial: log and count it, and its status into *status. */
static bool denied(waf_tx_t *tx, int *status)
{
    ModSecurityIntervention it = {.status = 200};
    if (!msc_intervention(tx->t, &it)) return false;
    *status = it.status >= 400 && it.status <= 599 ? it.status : tx->f->status;
    if (it.log) {
        const char *id, *m;
        size_t il, ml;
        fy__waf_log_fields(it.log, &id, &il, &m, &ml);
        char mb[256];
        fy_warn("waf: %s: blocked %d by rule %.*s: %s (matched: %s)", tx->f->where, *status,
                (int)il, id, printable(mb, sizeof mb, m, ml), tx->idlen ? tx->ids : "-");
    }
    free(it.log);
    free(it.url);
    tx->matched = true;
    fy_counter_inc(tx->f->c_blocked);
    return true;
}

/* The request is denied when ModSecurity asks for it: answer. true when it did. */
static bool intervene(waf_tx_t *tx)
{
    int status;
    if (!denied(tx, &status)) return false;
    tx->state = S_DONE;
    if (tx->end)
        fy_exchange_fail(tx->ex, status, "waf: denied");
    else
        fy_exchange_refuse(tx->ex, status, "waf: denied"); /* the rest of the body is unwanted */
    return true;
}

static void deferred(fy_defer_t *d)
{
    waf_tx_t *tx = d->data;
    fy_exchange_t *ex = tx->ex;
    if (tx->resume) {
        tx->resume = false;
        fy_filter_resume(ex);
        return;
    }
    /* hand the held body to the handler, as the codec would have */
    tx->state = tx->end ? S_DONE : S_PASS;
    if (ex->on_body) ex->on_body(ex, tx->buf, tx->len, tx->end);
}

static void hold(waf_tx_t *tx, const char *p, size_t n)
{
    if (!n) return; /* an empty last chunk (h2/h3 END_STREAM on DATA) may come with p = NULL */
    if (tx->len + n > tx->cap) {
        size_t cap = tx->cap ? tx->cap * 2 : 16384;
        while (cap < tx->len + n) cap *= 2;
        char *b = fy_arena_alloc(tx->ex->arena, cap);
        if (tx->len) memcpy(b, tx->buf, tx->len);
        tx->buf = b;
        tx->cap = cap;
    }
    memcpy(tx->buf + tx->len, p, n);
    tx->len += n;
}

static void on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    waf_tx_t *tx = (waf_tx_t *)fy_exchange_find_layer(ex, &waf_layer_ops);
    if (!tx || tx->state != S_BODY) return;
    const waf_filter_t *f = tx->f;
    size_t room = f->body_limit > tx->len ? f->body_limit - tx->len : 0;
    bool over = n > room;
    if (over && f->overflow == FY_WAF_OVERFLOW_REJECT) {
        tx->state = S_DONE;
        fy_counter_inc(f->c_overflow);
        fy_warn("waf: %s: request body over body-limit (%zu bytes): 413", f->where, f->body_limit);
        fy_exchange_refuse(ex, 413, "waf: request body over body-limit");
        return;
    }
    if (n) msc_append_request_body(tx->t, (const unsigned char *)p, over ? room : n);
    hold(tx, p, n); /* the whole slice: it is gone once we read again */
    if (over) fy_counter_inc(f->c_overflow);
    if (!end && !over) {
        fy_exchange_read_body(ex, on_body);
        return;
    }
    tx->end = end;
    msc_process_request_body(tx->t);
    if (intervene(tx)) return;
    tx->state = S_REPLAY;
    tx->resume = true; /* not from inside the codec's body callback */
    fy_defer(ex->ctx->loop, &tx->defer);
}

static void layer_read_body(fy_sink_layer_t *l, fy_exchange_t *ex)
{
    waf_tx_t *tx = (waf_tx_t *)l;
    if (tx->state != S_REPLAY) {
        fy_layer_next_read_body(l, ex);
        return;
    }
    if (!tx->defer.queued) fy_defer(ex->ctx->loop, &tx->defer);
}

/* ---- response phase (response: true) ---- */

/* After the handler's send returned: stop it and answer the error instead. */
static void resp_takeover(fy_defer_t *d)
{
    waf_tx_t *tx = d->data;
    fy_exchange_t *ex = tx->ex;
    const fy_producer_ops_t *hp = tx->handler_producer;
    if (hp && hp->stop) hp->stop(ex);
    tx->passing = true;
    fy_exchange_fail(ex, tx->deny_status, "waf: response denied");
}

/* Phase 3 on the response head; true when the handler's send must be dropped. */
static bool judge_head(waf_tx_t *tx, fy_exchange_t *ex)
{
    tx->head_seen = true;
    const fy_response_t *r = &ex->res;
    for (size_t i = 0; i < r->headers.n; i++)
        msc_add_n_response_header(
            tx->t, (const unsigned char *)r->headers.v[i].name.p, r->headers.v[i].name.len,
            (const unsigned char *)r->headers.v[i].value.p, r->headers.v[i].value.len);
    msc_process_response_headers(tx->t, r->status, "HTTP 1.1");
    if (ex->head_sent || !denied(tx, &tx->deny_status)) {
        tx->passing = true;
        return false;
    }
    tx->dropping = true;
    tx->handler_producer = ex->producer;
    tx->resp_defer.cb = resp_takeover;
    tx->resp_defer.data = tx;
    fy_defer(ex->ctx->loop, &tx->resp_defer);
    return true;
}

static bool drop_send(waf_tx_t *tx, fy_exchange_t *ex)
{
    if (tx->passing || !tx->f->response) return false;
    if (tx->dropping) return true;
    return judge_head(tx, ex);
}

static void layer_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                       int state)
{
    if (drop_send((waf_tx_t *)l, ex)) return;
    fy_layer_next_send(l, ex, bufs, n, state);
}

static void layer_send_file(fy_sink_layer_t *l, fy_exchange_t *ex, int fd, off_t off, size_t len,
                            int state)
{
    if (drop_send((waf_tx_t *)l, ex)) return;
    fy_layer_next_send_file(l, ex, fd, off, len, state);
}

static const fy_layer_ops_t waf_layer_ops = {
    .name = "waf", .send = layer_send, .send_file = layer_send_file, .read_body = layer_read_body};

static const char *http_version(int v)
{
    switch (v) {
    case 10:
        return "1.0";
    case 20:
        return "2.0";
    case 30:
        return "3.0";
    default:
        return "1.1";
    }
}

static void connection(waf_tx_t *tx, const fy_exchange_t *ex)
{
    char ip[INET6_ADDRSTRLEN] = "0.0.0.0";
    int port = 0;
    const struct sockaddr *sa = ex->remote;
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const void *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
        port = ntohs(s4->sin_port);
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const void *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
        port = ntohs(s6->sin6_port);
    }
    msc_process_connection(tx->t, ip, port, "127.0.0.1", 0);
}

static fy_filter_verdict_t waf_on_request(fy_filter_t *base, fy_exchange_t *ex)
{
    waf_filter_t *f = (waf_filter_t *)base;
    /* On an intercepting listener a CONNECT only sets up a tunnel (the CRS would refuse the
       method, 911100): the requests decrypted inside it come through this filter one by one;
       a tunnel passed through undecrypted has nothing a WAF could read. */
    if (ex->ctx->forward_proxy && ex->req.method_id == FY_M_CONNECT && !ex->req.protocol.len)
        return FY_FILTER_NEXT;
    waf_tx_t *tx = fy_arena_calloc(ex->arena, sizeof *tx);
    tx->f = f;
    tx->ex = ex;
    /* a tunnel (CONNECT, extended CONNECT: WebSocket over h2/h3) has streams, not a body */
    bool tunnel = ex->req.protocol.len || ex->req.method_id == FY_M_CONNECT;
    tx->end = ex->req.content_length == 0 || tunnel;
    tx->defer.cb = deferred;
    tx->defer.data = tx;
    int w = ex->ctx->worker_id;
    tx->t = w >= 0 && w < f->nms ? msc_new_transaction(f->ms[w], f->rules, tx) : NULL;
    if (!tx->t) {
        fy_exchange_fail(ex, 500, "waf: no transaction");
        return FY_FILTER_DONE;
    }
    fy_arena_on_reset(ex->arena, tx_cleanup, tx);

    const fy_request_t *q = &ex->req;
    connection(tx, ex);
    char *uri = fy_arena_strndup(ex->arena, q->target.p, q->target.len);
    char *method = fy_arena_strndup(ex->arena, q->method.p, q->method.len);
    msc_process_uri(tx->t, uri, method, http_version(q->version));
    bool host = false;
    for (size_t i = 0; i < q->headers.n; i++) {
        const fy_header_t *h = &q->headers.v[i];
        if (h->name.len == 4 && !strncasecmp(h->name.p, "host", 4)) host = true;
        msc_add_n_request_header(tx->t, (const unsigned char *)h->name.p, h->name.len,
                                 (const unsigned char *)h->value.p, h->value.len);
    }
    if (!host && q->authority.len) /* h2 / h3: the rules expect a Host header */
        msc_add_n_request_header(tx->t, (const unsigned char *)"Host", 4,
                                 (const unsigned char *)q->authority.p, q->authority.len);
    msc_process_request_headers(tx->t);
    if (intervene(tx)) return FY_FILTER_DONE;

    if (f->response || !tx->end)
        fy_exchange_push_layer(ex, &tx->layer, &waf_layer_ops, FY_STAGE_WAF);
    if (tx->end) {
        tx->state = S_DONE;
        msc_process_request_body(tx->t); /* phase 2 runs anyway: the CRS decides there */
        return intervene(tx) ? FY_FILTER_DONE : FY_FILTER_NEXT;
    }
    tx->state = S_BODY;
    fy_exchange_read_body(ex, on_body);
    return FY_FILTER_WAIT;
}

static void waf_destroy(fy_filter_t *base)
{
    waf_filter_t *f = (waf_filter_t *)base;
    pthread_mutex_lock(&registry_mu);
    for (waf_filter_t **pp = &registry; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    pthread_mutex_unlock(&registry_mu);
    free(f->sig);
    if (f->rules) msc_rules_cleanup(f->rules);
    for (int i = 0; i < f->nms; i++)
        if (f->ms[i]) msc_cleanup(f->ms[i]);
    free(f->ms);
    free(f);
}

static const fy_filter_ops_t waf_ops = {
    .name = "waf",
    .stage = FY_STAGE_WAF,
    .on_request = waf_on_request,
    .destroy = waf_destroy,
};

/* Add rules text (file NULL) or a file; -1 with "what: reason" in err. Counts rules. */
static int add_rules(waf_filter_t *f, const char *file, const char *text, char *err, size_t errlen,
                     int *count)
{
    const char *e = NULL;
    int n = file ? msc_rules_add_file(f->rules, file, &e) : msc_rules_add(f->rules, text, &e);
    if (n < 0) {
        const char *why = e && *e ? e : "does not load";
        size_t wl = strlen(why);
        while (wl && (why[wl - 1] == '\n' || why[wl - 1] == ' ')) wl--;
        snprintf(err, errlen, "%s: %.*s", file ? file : "waf settings", (int)wl, why);
        free((void *)e);
        return -1;
    }
    free((void *)e);
    *count += n;
    return 0;
}

static int add_crs(waf_filter_t *f, const fy_waf_conf_t *c, char *err, size_t errlen, int *count)
{
    char text[1024];
    if (add_rules(f, c->crs_setup, NULL, err, errlen, count) < 0) return -1;
    if (fy__waf_crs_settings(c, text, sizeof text) < 0 ||
        add_rules(f, NULL, text, err, errlen, count) < 0)
        return -1;
    char pat[1024];
    snprintf(pat, sizeof pat, "%s/*.conf", c->crs_rules);
    glob_t g;
    int rc = glob(pat, 0, NULL, &g); /* sorted: the CRS relies on name order */
    if (rc != 0) {
        snprintf(err, errlen, "%s: no CRS rule files (*.conf)", c->crs_rules);
        if (rc != GLOB_NOMATCH) globfree(&g);
        return -1;
    }
    rc = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++)
        rc = add_rules(f, g.gl_pathv[i], NULL, err, errlen, count);
    globfree(&g);
    return rc;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

fy_filter_t *fy_waf_filter_new(const fy_waf_conf_t *c, const char *where, int nworkers,
                               const void *gen, char *err, size_t errlen)
{
    /* the signature: the directives made from the config, the files, and the filter's own
       settings (the mode is in the base directives) */
    char base[4096], crs[1024];
    if (fy__waf_base_rules(c, base, sizeof base) < 0 ||
        fy__waf_crs_settings(c, crs, sizeof crs) < 0) {
        snprintf(err, errlen, "waf settings too long");
        return NULL;
    }
    size_t cap = strlen(base) + strlen(crs) + 256;
    cap += (c->crs_setup ? strlen(c->crs_setup) : 0) + (c->crs_rules ? strlen(c->crs_rules) : 0);
    for (size_t i = 0; i < c->rules.n; i++) cap += strlen(c->rules.v[i]) + 1;
    char *sig = fy_xmalloc(cap);
    int k = snprintf(sig, cap, "%s%s|%d|%s|%s|%d|%d|%zu|%d|%d|", base, c->crs ? crs : "", c->crs,
                     c->crs ? c->crs_setup : "", c->crs ? c->crs_rules : "", c->body_overflow,
                     (int)c->status, (size_t)c->body_limit, c->response, nworkers);
    for (size_t i = 0; i < c->rules.n && k > 0 && (size_t)k < cap; i++)
        k += snprintf(sig + k, cap - (size_t)k, "%s\n", c->rules.v[i]);
    if (gen) {
        pthread_mutex_lock(&registry_mu);
        waf_filter_t *same = registry;
        while (same && (same->gen != gen || strcmp(same->sig, sig))) same = same->next;
        pthread_mutex_unlock(&registry_mu);
        if (same) {
            fy_info("waf: %s: the rules of %s (identical settings)", where, same->where);
            free(sig);
            return &same->base;
        }
    }

    double t0 = now_ms();
    waf_filter_t *f = fy_xcalloc(1, sizeof *f);
    f->sig = sig;
    f->base.ops = &waf_ops;
    f->mode = c->mode;
    f->overflow = c->body_overflow;
    f->body_limit = (size_t)c->body_limit;
    f->status = (int)c->status;
    f->response = c->response;
    snprintf(f->where, sizeof f->where, "%s", where);
    f->nms = nworkers > 0 ? nworkers : 1;
    f->ms = fy_xcalloc((size_t)f->nms, sizeof *f->ms);
    for (int i = 0; i < f->nms; i++) {
        f->ms[i] = msc_init();
        if (!f->ms[i]) {
            snprintf(err, errlen, "ModSecurity did not start");
            goto fail;
        }
        msc_set_connector_info(f->ms[i], "ferry");
        msc_set_log_cb(f->ms[i], on_msc_log);
    }
    f->rules = msc_create_rules_set();
    if (!f->rules) {
        snprintf(err, errlen, "ModSecurity did not start");
        goto fail;
    }

    int count = 0;
    if (add_rules(f, NULL, base, err, errlen, &count) < 0) goto fail;
    if (c->crs && add_crs(f, c, err, errlen, &count) < 0) goto fail;
    for (size_t i = 0; i < c->rules.n; i++)
        if (add_rules(f, c->rules.v[i], NULL, err, errlen, &count) < 0) goto fail;

    char labels[160];
    snprintf(labels, sizeof labels, "policy=\"%s\"", where);
    f->c_blocked = fy_counter_register("ferry_policy_waf_blocked_total", labels, FY_COUNTER);
    f->c_detected = fy_counter_register("ferry_policy_waf_matched_total", labels, FY_COUNTER);
    f->c_overflow =
        fy_counter_register("ferry_policy_waf_body_over_limit_total", labels, FY_COUNTER);
    f->gen = gen;
    pthread_mutex_lock(&registry_mu);
    f->next = registry;
    registry = f;
    pthread_mutex_unlock(&registry_mu);
    fy_info("waf: %s: %s, %d rules (%s) loaded in %.0f ms", where,
            c->mode == FY_WAF_DETECTION ? "detection" : "blocking", count,
            c->crs ? "CRS" : "no CRS", now_ms() - t0);
    return &f->base;
fail:
    waf_destroy(&f->base);
    return NULL;
}
