/* Breakpoints: filters (the language of ops/inspector_filter.h) that hold matching
 * intercepted or captured requests before they go on, and responses before their head goes to
 * the client, until the UI releases them (optionally with edited headers; a response also with
 * an edited status and body) or drops them, or inspector.breakpoint-timeout passes (then they
 * go on unchanged). A held response keeps the handler's first send, unsent: the handler makes
 * no other until the codec asks it to (the pull model), so nothing else needs buffering. The worker
 * that holds an exchange polls its record every 50 ms on its own loop (a timer); the API threads
 * only change records under bp_lock. A client that goes away while held frees the record (arena
 * reset callback). */
#include "ops/inspector_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include "core/alloc.h"
#include "ops/inspector_filter.h"

#define POLL_MS 50

struct fy__insp_held {
    fy__insp_held_t *next;
    uint64_t id;
    int state;          /* 0 held, 1 release, 2 drop */
    char *edit_headers; /* owned: replacement headers ("name: value" lines), or NULL */
    int edit_status;    /* response: the new status (0: unchanged) */
    char *edit_body;    /* owned, response: the new body, or NULL (unchanged) */
    size_t edit_body_len;
    char *summary; /* owned: the JSON object the API lists */
};

typedef struct hold {
    fy_timer_t t;
    fy_exchange_t *ex;
    fy_inspector_t *ins;
    fy__insp_held_t *h; /* NULL once decided */
    uint64_t deadline;
    /* a held response: the handler's first send, and how to pass it on */
    bool response;
    fy_sink_layer_t *l;
    struct iovec *iov; /* arena copy of the vector (the bytes stay the handler's) */
    size_t n;
    int send_state;
    fy__insp_pass_fn pass;
} hold_t;

static void unlink_held(fy_inspector_t *ins, fy__insp_held_t *h)
{
    for (fy__insp_held_t **p = &ins->held; *p; p = &(*p)->next)
        if (*p == h) {
            *p = h->next;
            return;
        }
}

static void held_free(fy__insp_held_t *h)
{
    free(h->edit_headers);
    free(h->edit_body);
    free(h->summary);
    free(h);
}

static bool framing(const char *name, size_t n)
{
    static const char *const f[] = {"content-length", "transfer-encoding", "connection"};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (n == strlen(f[i]) && strncasecmp(name, f[i], n) == 0) return true;
    return false;
}

/* Parse the "name: value" lines of text into a header list (arena copies); a response's
   framing fields are left out (the codec writes its own from res.content_length). */
static fy_headers_t parse_headers(fy_exchange_t *ex, const char *text, bool response)
{
    fy_headers_t hs = {0};
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len && p[len - 1] == '\r') len--;
        const char *colon = memchr(p, ':', len);
        if (colon && colon > p && !(response && framing(p, (size_t)(colon - p)))) {
            const char *v = colon + 1;
            while (v < p + len && (*v == ' ' || *v == '\t')) v++;
            char *name = fy_arena_strndup(ex->arena, p, (size_t)(colon - p));
            char *val = fy_arena_strndup(ex->arena, v, (size_t)(p + len - v));
            fy_headers_add(ex->arena, &hs, name, (size_t)(colon - p), val, (size_t)(p + len - v));
        }
        if (!eol) break;
        p = eol + 1;
    }
    return hs;
}

static void noop(fy_exchange_t *ex)
{
    (void)ex;
}
static const fy_producer_ops_t replaced = {noop, noop};

/* The held response goes on: as the handler sent it (edits to the head aside), or replaced by
   `body` (NULL with drop: an empty 502). A replaced one stops the handler's producer, which
   has nothing more to say. */
static void decide_response(hold_t *hc, bool drop, const char *body, size_t blen)
{
    fy_exchange_t *ex = hc->ex;
    if (drop) {
        ex->res.status = 502;
        ex->res.headers = (fy_headers_t){0};
        ex->error = "response dropped at an inspector breakpoint";
        body = "";
        blen = 0;
    }
    if (!body) {
        hc->pass(hc->l, ex, hc->iov, hc->n, hc->send_state);
        return;
    }
    if (hc->send_state != FY_SEND_FINAL && ex->producer && ex->producer != &replaced) {
        const fy_producer_ops_t *p = ex->producer;
        ex->producer = &replaced; /* the codec's later proceed goes nowhere */
        p->stop(ex);
    }
    ex->res.content_length = (int64_t)blen;
    char *copy = fy_arena_alloc(ex->arena, blen ? blen : 1);
    if (blen) memcpy(copy, body, blen);
    struct iovec v = {copy, blen};
    hc->pass(hc->l, ex, &v, blen ? 1 : 0, FY_SEND_FINAL);
}

/* Takes h (unlinked) and frees it. */
static void decide(hold_t *hc, fy__insp_held_t *h)
{
    fy_exchange_t *ex = hc->ex;
    hc->h = NULL;
    int state = h->state;
    if (state != 2 && h->edit_headers) {
        fy_headers_t hs = parse_headers(ex, h->edit_headers, hc->response);
        if (hc->response)
            ex->res.headers = hs;
        else
            ex->req.headers = hs;
    }
    if (hc->response) {
        if (state != 2 && h->edit_status >= 100 && h->edit_status <= 999)
            ex->res.status = h->edit_status;
        char *body = h->edit_body;
        size_t blen = h->edit_body_len;
        h->edit_body = NULL;
        held_free(h);
        if (body) { /* in the arena before the decision: the exchange may end inside it */
            char *c = fy_arena_alloc(ex->arena, blen ? blen : 1);
            if (blen) memcpy(c, body, blen);
            free(body);
            body = c;
        }
        decide_response(hc, state == 2, body, blen);
        return;
    }
    held_free(h);
    if (state == 2) {
        fy_exchange_fail(ex, 502, "dropped at an inspector breakpoint");
        return;
    }
    fy_filter_resume(ex); /* last: the exchange may be done (and its arena reset) after it */
}

static void on_poll(fy_timer_t *t)
{
    hold_t *hc = t->data;
    fy_inspector_t *ins = hc->ins;
    pthread_mutex_lock(&ins->bp_lock);
    fy__insp_held_t *h = hc->h;
    int state = h->state;
    bool timeout = hc->ex->ctx->loop->now_ms >= hc->deadline;
    if (state == 0 && !timeout) {
        pthread_mutex_unlock(&ins->bp_lock);
        fy_timer_start(hc->ex->ctx->loop, &hc->t, POLL_MS);
        return;
    }
    if (state == 0) h->state = 1; /* timed out: on unchanged */
    unlink_held(ins, h);
    pthread_mutex_unlock(&ins->bp_lock);
    decide(hc, h);
}

static void on_reset(void *arg)
{
    hold_t *hc = arg;
    if (fy_timer_is_active(&hc->t)) fy_timer_stop(hc->ex->ctx->loop, &hc->t);
    if (!hc->h) return;
    pthread_mutex_lock(&hc->ins->bp_lock);
    unlink_held(hc->ins, hc->h);
    pthread_mutex_unlock(&hc->ins->bp_lock);
    held_free(hc->h);
    hc->h = NULL;
}

/* The request as the filter language sees it (no response yet). */
typedef struct view {
    fy_cs_flow_t f;
} view_t;

static const fy_cs_flow_t *view_load(void *ud)
{
    return &((view_t *)ud)->f;
}

static char *cstr(fy_exchange_t *ex, fy_str_t s)
{
    return fy_arena_strndup(ex->arena, s.p ? s.p : "", s.len);
}

static fy_cs_header_t *conv(fy_exchange_t *ex, const fy_headers_t *hs)
{
    fy_cs_header_t *hv = fy_arena_alloc(ex->arena, (hs->n + 1) * sizeof *hv);
    for (size_t i = 0; i < hs->n; i++) {
        hv[i].name = hs->v[i].name;
        hv[i].value = hs->v[i].value;
    }
    return hv;
}

static void headers_json(fy__sb_t *b, const fy_cs_header_t *hv, size_t n)
{
    fy__sb_puts(b, "[");
    for (size_t i = 0; i < n; i++) {
        fy__sb_puts(b, i ? ", [" : "[");
        fy__sb_json(b, hv[i].name.p, hv[i].name.len);
        fy__sb_puts(b, ", ");
        fy__sb_json(b, hv[i].value.p, hv[i].value.len);
        fy__sb_puts(b, "]");
    }
    fy__sb_puts(b, "]");
}

/* Does the request (response false) or the response match its breakpoint? Then a held record
   is listed (under bp_lock) and the exchange's hold starts polling it. NULL: not held. */
static hold_t *hold(fy_inspector_t *ins, fy_exchange_t *ex, bool response)
{
    fy_str_t ct = FY_STR_LIT("");
    const fy_header_t *cth = response ? FY_HDR_FIND(&ex->res.headers, "content-type") : NULL;
    if (cth) ct = cth->value;
    fy_cs_entry_t e = {.method = cstr(ex, ex->req.method),
                       .host = cstr(ex, ex->req.authority),
                       .target = cstr(ex, ex->req.target),
                       .ctype = cstr(ex, ct),
                       .status = response ? ex->res.status : 0,
                       .version = ex->req.version};
    fy_cs_header_t *hv = conv(ex, &ex->req.headers);
    view_t v = {.f = {.req_headers = hv, .n_req_headers = ex->req.headers.n}};
    fy_cs_header_t *rv = NULL;
    if (response) {
        rv = conv(ex, &ex->res.headers);
        v.f.res_headers = rv;
        v.f.n_res_headers = ex->res.headers.n;
        v.f.status = ex->res.status;
    }
    fy_insp_subject_t s = {.e = &e, .load = view_load, .ud = &v};
    pthread_mutex_lock(&ins->bp_lock);
    const fy_insp_expr_t *x = response ? ins->bp_res_expr : ins->bp_expr;
    bool hit = x && fy_insp_filter_match(x, &s);
    if (!hit) {
        pthread_mutex_unlock(&ins->bp_lock);
        return NULL;
    }
    fy__insp_held_t *h = fy_xcalloc(1, sizeof *h);
    h->id = ++ins->bp_next;
    fy__sb_t b = {0};
    struct timeval now;
    gettimeofday(&now, NULL);
    fy__sb_printf(&b, "{\"id\": %llu, \"phase\": \"%s\", \"since\": %lld, \"method\": ",
                  (unsigned long long)h->id, response ? "response" : "request",
                  (long long)now.tv_sec * 1000 + now.tv_usec / 1000);
    fy__sb_json(&b, e.method, strlen(e.method));
    fy__sb_puts(&b, ", \"scheme\": ");
    fy__sb_json(&b, ex->req.scheme.p, ex->req.scheme.len);
    fy__sb_puts(&b, ", \"host\": ");
    fy__sb_json(&b, e.host, strlen(e.host));
    fy__sb_puts(&b, ", \"path\": ");
    fy__sb_json(&b, e.target, strlen(e.target));
    fy__sb_puts(&b, ", \"headers\": ");
    headers_json(&b, response ? rv : hv, response ? ex->res.headers.n : ex->req.headers.n);
    if (response) {
        fy__sb_printf(&b, ", \"status\": %d, \"request_headers\": ", ex->res.status);
        headers_json(&b, hv, ex->req.headers.n);
    }
    fy__sb_puts(&b, "}");
    h->summary = b.p;
    h->next = ins->held;
    ins->held = h;
    pthread_mutex_unlock(&ins->bp_lock);

    hold_t *hc = fy_arena_calloc(ex->arena, sizeof *hc);
    hc->ex = ex;
    hc->ins = ins;
    hc->h = h;
    hc->response = response;
    hc->deadline = ex->ctx->loop->now_ms + ins->bp_timeout_ms;
    fy_timer_init(&hc->t, on_poll, hc);
    fy_arena_on_reset(ex->arena, on_reset, hc);
    fy_timer_start(ex->ctx->loop, &hc->t, POLL_MS);
    return hc;
}

bool fy__insp_break(fy_inspector_t *ins, fy_exchange_t *ex)
{
    if (!atomic_load_explicit(&ins->bp_on, memory_order_relaxed)) return false;
    return hold(ins, ex, false) != NULL;
}

bool fy__insp_break_response(fy_inspector_t *ins, fy_exchange_t *ex, fy_sink_layer_t *l,
                             const struct iovec *bufs, size_t n, int state, fy__insp_pass_fn pass)
{
    if (!atomic_load_explicit(&ins->bp_res_on, memory_order_relaxed) || state == FY_SEND_ERROR)
        return false;
    hold_t *hc = hold(ins, ex, true);
    if (!hc) return false;
    hc->l = l;
    hc->pass = pass;
    hc->send_state = state;
    hc->n = n;
    hc->iov = fy_arena_alloc(ex->arena, (n ? n : 1) * sizeof *hc->iov);
    if (n) memcpy(hc->iov, bufs, n * sizeof *bufs);
    return true;
}

int fy__insp_break_set(fy_inspector_t *ins, bool response, const char *filter, size_t n,
                       const char **err, size_t *at)
{
    fy_insp_expr_t *x = fy_insp_filter_parse(filter, n, err, at);
    if (!x && *err) return -1;
    pthread_mutex_lock(&ins->bp_lock);
    fy_insp_expr_t **xp = response ? &ins->bp_res_expr : &ins->bp_expr;
    char **tp = response ? &ins->bp_res_text : &ins->bp_text;
    fy_insp_filter_free(*xp);
    *xp = x;
    free(*tp);
    *tp = x ? fy_xstrdup(filter) : NULL;
    atomic_store(response ? &ins->bp_res_on : &ins->bp_on, x != NULL);
    pthread_mutex_unlock(&ins->bp_lock);
    return 0;
}

void fy__insp_break_list(fy_inspector_t *ins, fy__sb_t *b)
{
    pthread_mutex_lock(&ins->bp_lock);
    fy__sb_puts(b, "{\"filter\": ");
    const char *t = ins->bp_text ? ins->bp_text : "";
    fy__sb_json(b, t, strlen(t));
    fy__sb_puts(b, ", \"response\": ");
    t = ins->bp_res_text ? ins->bp_res_text : "";
    fy__sb_json(b, t, strlen(t));
    fy__sb_printf(b, ", \"timeout\": %llu, \"held\": [", (unsigned long long)ins->bp_timeout_ms);
    for (fy__insp_held_t *h = ins->held; h; h = h->next) {
        fy__sb_puts(b, h->summary);
        if (h->next) fy__sb_puts(b, ", ");
    }
    fy__sb_puts(b, "]}\n");
    pthread_mutex_unlock(&ins->bp_lock);
}

int fy__insp_break_decide(fy_inspector_t *ins, uint64_t id, const fy__insp_decision_t *d)
{
    int rc = -1;
    pthread_mutex_lock(&ins->bp_lock);
    for (fy__insp_held_t *h = ins->held; h; h = h->next)
        if (h->id == id && h->state == 0) {
            h->state = d->drop ? 2 : 1;
            if (d->headers) h->edit_headers = fy_xstrdup(d->headers);
            h->edit_status = d->status;
            if (d->body) {
                h->edit_body = fy_xmalloc(d->body_len + 1);
                memcpy(h->edit_body, d->body, d->body_len);
                h->edit_body_len = d->body_len;
            }
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&ins->bp_lock);
    return rc;
}

void fy__insp_break_free(fy_inspector_t *ins)
{
    fy_insp_filter_free(ins->bp_expr);
    fy_insp_filter_free(ins->bp_res_expr);
    ins->bp_expr = ins->bp_res_expr = NULL;
    free(ins->bp_text);
    free(ins->bp_res_text);
    ins->bp_text = ins->bp_res_text = NULL;
}
