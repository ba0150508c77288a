/* Breakpoints: a filter (the language of ops/inspector_filter.h) that holds matching
 * intercepted or captured requests before they go on, until the UI releases them (optionally
 * with edited request headers) or drops them, or inspector.breakpoint-timeout passes (then they
 * go on unchanged). The worker that holds an exchange polls its record every 50 ms on its own
 * loop (a timer); the API threads only change records under bp_lock. A client that goes away
 * while held frees the record (arena reset callback). */
#include "ops/inspector_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "core/alloc.h"
#include "ops/inspector_filter.h"

#define POLL_MS 50

struct fy__insp_held {
    fy__insp_held_t *next;
    uint64_t id;
    int state;          /* 0 held, 1 release, 2 drop */
    char *edit_headers; /* owned: replacement request headers ("name: value" lines), or NULL */
    char *summary;      /* owned: the JSON object the API lists */
};

typedef struct hold {
    fy_timer_t t;
    fy_exchange_t *ex;
    fy_inspector_t *ins;
    fy__insp_held_t *h; /* NULL once decided */
    uint64_t deadline;
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
    free(h->summary);
    free(h);
}

/* Replace ex's request headers by the "name: value" lines of text (arena copies). */
static void apply_headers(fy_exchange_t *ex, const char *text)
{
    fy_headers_t hs = {0};
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len && p[len - 1] == '\r') len--;
        const char *colon = memchr(p, ':', len);
        if (colon && colon > p) {
            const char *v = colon + 1;
            while (v < p + len && (*v == ' ' || *v == '\t')) v++;
            char *name = fy_arena_strndup(ex->arena, p, (size_t)(colon - p));
            char *val = fy_arena_strndup(ex->arena, v, (size_t)(p + len - v));
            fy_headers_add(ex->arena, &hs, name, (size_t)(colon - p), val, (size_t)(p + len - v));
        }
        if (!eol) break;
        p = eol + 1;
    }
    ex->req.headers = hs;
}

static void decide(hold_t *hc, int state, char *edits)
{
    fy_exchange_t *ex = hc->ex;
    hc->h = NULL;
    if (state == 2) {
        free(edits);
        fy_exchange_fail(ex, 502, "dropped at an inspector breakpoint");
        return;
    }
    if (edits) {
        apply_headers(ex, edits);
        free(edits);
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
    char *edits = h->edit_headers;
    h->edit_headers = NULL;
    unlink_held(ins, h);
    pthread_mutex_unlock(&ins->bp_lock);
    held_free(h);
    decide(hc, state, edits);
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

bool fy__insp_break(fy_inspector_t *ins, fy_exchange_t *ex)
{
    if (!atomic_load_explicit(&ins->bp_on, memory_order_relaxed)) return false;
    fy_cs_entry_t e = {.method = cstr(ex, ex->req.method),
                       .host = cstr(ex, ex->req.authority),
                       .target = cstr(ex, ex->req.target),
                       .ctype = "",
                       .version = ex->req.version};
    fy_cs_header_t *hv = fy_arena_alloc(ex->arena, (ex->req.headers.n + 1) * sizeof *hv);
    for (size_t i = 0; i < ex->req.headers.n; i++) {
        hv[i].name = ex->req.headers.v[i].name;
        hv[i].value = ex->req.headers.v[i].value;
    }
    view_t v = {.f = {.req_headers = hv, .n_req_headers = ex->req.headers.n}};
    fy_insp_subject_t s = {.e = &e, .load = view_load, .ud = &v};
    pthread_mutex_lock(&ins->bp_lock);
    bool hit = ins->bp_expr && fy_insp_filter_match(ins->bp_expr, &s);
    if (!hit) {
        pthread_mutex_unlock(&ins->bp_lock);
        return false;
    }
    fy__insp_held_t *h = fy_xcalloc(1, sizeof *h);
    h->id = ++ins->bp_next;
    fy__sb_t b = {0};
    struct timeval now;
    gettimeofday(&now, NULL);
    fy__sb_printf(&b, "{\"id\": %llu, \"since\": %lld, \"method\": ", (unsigned long long)h->id,
                  (long long)now.tv_sec * 1000 + now.tv_usec / 1000);
    fy__sb_json(&b, e.method, strlen(e.method));
    fy__sb_puts(&b, ", \"scheme\": ");
    fy__sb_json(&b, ex->req.scheme.p, ex->req.scheme.len);
    fy__sb_puts(&b, ", \"host\": ");
    fy__sb_json(&b, e.host, strlen(e.host));
    fy__sb_puts(&b, ", \"path\": ");
    fy__sb_json(&b, e.target, strlen(e.target));
    fy__sb_puts(&b, ", \"headers\": [");
    for (size_t i = 0; i < ex->req.headers.n; i++) {
        fy__sb_puts(&b, i ? ", [" : "[");
        fy__sb_json(&b, hv[i].name.p, hv[i].name.len);
        fy__sb_puts(&b, ", ");
        fy__sb_json(&b, hv[i].value.p, hv[i].value.len);
        fy__sb_puts(&b, "]");
    }
    fy__sb_puts(&b, "]}");
    h->summary = b.p;
    h->next = ins->held;
    ins->held = h;
    pthread_mutex_unlock(&ins->bp_lock);

    hold_t *hc = fy_arena_calloc(ex->arena, sizeof *hc);
    hc->ex = ex;
    hc->ins = ins;
    hc->h = h;
    hc->deadline = ex->ctx->loop->now_ms + ins->bp_timeout_ms;
    fy_timer_init(&hc->t, on_poll, hc);
    fy_arena_on_reset(ex->arena, on_reset, hc);
    fy_timer_start(ex->ctx->loop, &hc->t, POLL_MS);
    return true;
}

int fy__insp_break_set(fy_inspector_t *ins, const char *filter, size_t n, const char **err,
                       size_t *at)
{
    fy_insp_expr_t *x = fy_insp_filter_parse(filter, n, err, at);
    if (!x && *err) return -1;
    pthread_mutex_lock(&ins->bp_lock);
    fy_insp_filter_free(ins->bp_expr);
    ins->bp_expr = x;
    free(ins->bp_text);
    ins->bp_text = x ? fy_xstrdup(filter) : NULL;
    atomic_store(&ins->bp_on, x != NULL);
    pthread_mutex_unlock(&ins->bp_lock);
    return 0;
}

void fy__insp_break_list(fy_inspector_t *ins, fy__sb_t *b)
{
    pthread_mutex_lock(&ins->bp_lock);
    fy__sb_puts(b, "{\"filter\": ");
    const char *t = ins->bp_text ? ins->bp_text : "";
    fy__sb_json(b, t, strlen(t));
    fy__sb_printf(b, ", \"timeout\": %llu, \"held\": [", (unsigned long long)ins->bp_timeout_ms);
    for (fy__insp_held_t *h = ins->held; h; h = h->next) {
        fy__sb_puts(b, h->summary);
        if (h->next) fy__sb_puts(b, ", ");
    }
    fy__sb_puts(b, "]}\n");
    pthread_mutex_unlock(&ins->bp_lock);
}

int fy__insp_break_decide(fy_inspector_t *ins, uint64_t id, bool drop, const char *headers)
{
    int rc = -1;
    pthread_mutex_lock(&ins->bp_lock);
    for (fy__insp_held_t *h = ins->held; h; h = h->next)
        if (h->id == id && h->state == 0) {
            h->state = drop ? 2 : 1;
            if (headers) h->edit_headers = fy_xstrdup(headers);
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&ins->bp_lock);
    return rc;
}

void fy__insp_break_free(fy_inspector_t *ins)
{
    fy_insp_filter_free(ins->bp_expr);
    ins->bp_expr = NULL;
    free(ins->bp_text);
    ins->bp_text = NULL;
}
