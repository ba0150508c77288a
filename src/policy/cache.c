/* The cache filter, its producer and its sink layer (policy/cache.h). */
#include "policy/cache_int.h"

static const fy_layer_ops_t cache_layer_ops;

/* ---- small helpers ---- */

char *fy__cache_put_u64(char *p, uint64_t v)
{
    char t[24];
    int n = 0;
    do t[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < 24);
    while (n) *p++ = t[--n];
    return p;
}

char *fy__cache_put_s(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

/* "NAME; <what>" as the Cache-Status member of this cache (arena). */
static void add_status(cache_ex_t *ce, const char *what, size_t wl)
{
    fy_exchange_t *ex = ce->ex;
    fy_str_t full = FY_STR_NULL;
    for (size_t i = 0; i < 16 && forwarded[i]; i++)
        if (forwarded[i] == what) full = ce->cf->status_full[i];
    if (!full.len) {
        if (!wl) wl = strlen(what);
        const char *nm = ce->cf->conf->status_name;
        size_t nl = ce->cf->name_len;
        char *v = fy_arena_alloc(ex->arena, nl + 2 + wl), *p = v;
        p = fy__cache_put_s(p, nm, nl);
        p = PUT_LIT(p, "; ");
        p = fy__cache_put_s(p, what, wl);
        full = fy_str(v, (size_t)(p - v));
    }
    fy_headers_t *hs = &ex->res.headers;
    if (hs->n == hs->cap) { /* one more slot, not twice the array */
        fy_header_t *nv = fy_arena_alloc(ex->arena, (hs->n + 1) * sizeof *nv);
        if (hs->n) memcpy(nv, hs->v, hs->n * sizeof *nv);
        hs->v = nv;
        hs->cap = hs->n + 1;
    }
    hs->v[hs->n++] = (fy_header_t){fy_str("cache-status", 12), full};
}

static void add_status_z(cache_ex_t *ce, const char *what)
{
    add_status(ce, what, 0);
}

int64_t fy__cache_obj_age(const fy_cache_obj_t *o, time_t now)
{
    return fy_cache_current_age(o->age_value, o->date, o->request_time, o->response_time, now);
}

cache_wait_t *fy__cache_wait_of(cache_ex_t *ce)
{
    if (!ce->w) {
        cache_wait_t *w = fy_arena_calloc(ce->ex->arena, sizeof *w);
        w->ce = ce;
        w->waiter.cb = fy__cache_on_wait;
        fy_list_init(&w->waiter.link);
        fy_timer_init(&w->timer, fy__cache_on_follow_timeout, ce);
        ce->w = w;
    }
    return ce->w;
}

void fy__cache_unwait(cache_ex_t *ce)
{
    if (ce->w) fy_cache_unwait(&ce->w->waiter);
}

/* Per-worker free list of exchange states: they stay out of the exchange's arena, whose first
   block a proxied exchange nearly fills already. */
static __thread fy_pool_t ce_pool;

cache_ex_t *fy__cache_ce_get(void)
{
    if (!ce_pool.size) fy_pool_init(&ce_pool, sizeof(cache_ex_t), 256);
    return fy_pool_get(&ce_pool);
}

void fy__cache_ce_put(cache_ex_t *ce)
{
    fy_pool_put(&ce_pool, ce);
}

void fy_cache_thread_cleanup(void)
{
    fy_pool_drain(&ce_pool);
}

size_t fy_cache_thread_cached(void)
{
    return ce_pool.nfree;
}

static void cleanup(void *arg)
{
    cache_ex_t *ce = arg;
    fy_exchange_t *ex = ce->ex;
    if (ce->w) {
        fy_cache_unwait(&ce->w->waiter);
        fy_timer_stop(ex->ctx->loop, &ce->w->timer);
        fy_defer_cancel(ex->ctx->loop, &ce->w->defer);
    }
    if (ce->fill) {
        int st = atomic_load(&ce->fill->state);
        if (st == FY_CACHE_PENDING || st == FY_CACHE_STREAMING)
            fy_cache_abort(ce->cf->zone, ce->fill, FY_CACHE_ABORTED);
        fy_cache_obj_release(ce->fill);
    }
    if (ce->obj) {
        if (ce->swr_owner) atomic_store(&ce->obj->revalidating, false);
        fy_cache_obj_release(ce->obj);
    }
    fy__cache_ce_put(ce);
}

void fy__cache_push_layer(cache_ex_t *ce)
{
    if (ce->layer_pushed) return;
    ce->layer_pushed = true;
    fy_exchange_push_layer(ce->ex, &ce->layer, &cache_layer_ops, FY_STAGE_CACHE);
}

static const fy_header_t *copy_hdr(fy_exchange_t *ex, const fy_header_t *h)
{
    fy_header_t *c = fy_arena_alloc(ex->arena, sizeof *c);
    *c = *h;
    return c;
}

/* Remove the request fields that the key does not hold but an origin could answer by. */
static void strip_unkeyed(cache_ex_t *ce)
{
    const cache_filter_t *cf = ce->cf;
    fy_headers_t *hs = &ce->ex->req.headers;
    if (!cf->nstrip) return;
    size_t k = 0;
    for (size_t i = 0; i < hs->n; i++) {
        fy_str_t n = hs->v[i].name;
        bool drop = false;
        if (cf->strip_lens >> (n.len < 63 ? n.len : 63) & 1)
            for (size_t j = 0; j < cf->nstrip && !drop; j++)
                drop = fy_str_ieq(n, cf->strip[j].p, cf->strip[j].len);
        if (!drop) hs->v[k++] = hs->v[i];
    }
    hs->n = k;
}

/* One pass over the request's fields: its directives (fy_cache_req_scan's rules) and the
   conditionals and range it carries (kept: a revalidation replaces them). */
static void scan_request(cache_ex_t *ce)
{
    const fy_headers_t *hs = &ce->ex->req.headers;
    fy_cache_req_info_t *qi = &ce->qi;
    fy_cache_cc_init(&qi->cc);
    qi->authorization = false;
    bool cc = false, pragma = false;
    for (size_t i = 0; i < hs->n; i++) {
        const fy_header_t *h = &hs->v[i];
        switch (h->name.len) {
        case 5:
            if (!ce->range && fy_str_ieq(h->name, "range", 5)) ce->range = copy_hdr(ce->ex, h);
            break;
        case 6:
            if (fy_str_ieq(h->name, "pragma", 6) && fy_str_list_has(h->value, "no-cache", 8))
                pragma = true;
            break;
        case 8:
            if (!ce->if_range && fy_str_ieq(h->name, "if-range", 8))
                ce->if_range = copy_hdr(ce->ex, h);
            break;
        case 13:
            if (fy_str_ieq(h->name, "cache-control", 13)) {
                cc = true;
                fy_cache_cc_parse(&qi->cc, h->value.p, h->value.len);
            } else if (fy_str_ieq(h->name, "authorization", 13))
                qi->authorization = true;
            else if (!ce->inm && fy_str_ieq(h->name, "if-none-match", 13))
                ce->inm = copy_hdr(ce->ex, h);
            break;
        case 17:
            if (!ce->ims && fy_str_ieq(h->name, "if-modified-since", 17))
                ce->ims = copy_hdr(ce->ex, h);
            break;
        }
    }
    if (!cc && pragma) qi->cc.flags |= FY_CC_NO_CACHE;
}

/* Drop the client's conditionals and ask with the stored response's validators (§4.3.1). */
static void make_conditional(cache_ex_t *ce, const fy_cache_obj_t *o)
{
    fy_exchange_t *ex = ce->ex;
    fy_headers_t *hs = &ex->req.headers;
    size_t k = 0;
    for (size_t i = 0; i < hs->n; i++) {
        fy_str_t n = hs->v[i].name;
        if (fy_str_ieq(n, "if-none-match", 13) || fy_str_ieq(n, "if-modified-since", 17) ||
            fy_str_ieq(n, "if-match", 8) || fy_str_ieq(n, "if-unmodified-since", 19) ||
            fy_str_ieq(n, "if-range", 8) || fy_str_ieq(n, "range", 5))
            continue;
        hs->v[k++] = hs->v[i];
    }
    hs->n = k;
    if (o->etag.len) FY_HDR_ADD(ex->arena, hs, "if-none-match", o->etag.p, o->etag.len);
    if (o->last_modified.len)
        FY_HDR_ADD(ex->arena, hs, "if-modified-since", o->last_modified.p, o->last_modified.len);
}

/* ---- request phase ---- */

static cache_ex_t *new_ce(cache_filter_t *cf, fy_exchange_t *ex)
{
    cache_ex_t *ce = fy__cache_ce_get();
    memset(ce, 0, sizeof *ce);
    ce->cf = cf;
    ce->ex = ex;
    ce->request_time = ex->ctx->loop->now_sec;
    fy_arena_on_reset(ex->arena, cleanup, ce);
    return ce;
}

static void respond_status(cache_ex_t *ce, int status, const char *what, const char *body)
{
    fy_exchange_t *ex = ce->ex;
    ex->res.headers.n = 0;
    add_status_z(ce, what);
    fy_exchange_respond(ex, status, "text/plain", body, strlen(body));
}

/* PURGE (by key, by prefix with a trailing '*', by tag with Surrogate-Key). */
static void do_purge(cache_ex_t *ce)
{
    fy_exchange_t *ex = ce->ex;
    const fy_cache_conf_t *c = ce->cf->conf;
    if (!fy_cache_conf_purge_allowed(c, ex->remote)) {
        respond_status(ce, 403, "fwd=bypass; detail=purge-not-allowed", "purge not allowed\n");
        return;
    }
    size_t n = 0;
    const fy_header_t *sk = FY_HDR_FIND(&ex->req.headers, "surrogate-key");
    if (!sk) sk = FY_HDR_FIND(&ex->req.headers, "cache-tag");
    if (sk) {
        const char *p = sk->value.p, *e = p + sk->value.len;
        while (p < e) {
            while (p < e && (*p == ' ' || *p == ',' || *p == '\t')) p++;
            const char *s = p;
            while (p < e && *p != ' ' && *p != ',' && *p != '\t') p++;
            if (p > s) n += fy_cache_purge_tag(ce->cf->zone, s, (size_t)(p - s));
        }
    } else {
        fy_request_t q = ex->req;
        bool prefix = q.query.len == 0 && q.path.len && q.path.p[q.path.len - 1] == '*';
        if (prefix) q.path.len--;
        size_t kl;
        char *k = fy_cache_key(ex->arena, &q, NULL, 0, &kl);
        if (prefix)
            n = fy_cache_purge_prefix(ce->cf->zone, k, kl);
        else {
            n = fy_cache_invalidate(ce->cf->zone, fy_cache_hash(k, kl), k, kl);
            if (c->key_headers.n) {
                k[kl] = '\n';
                n += fy_cache_purge_prefix(ce->cf->zone, k, kl + 1);
            }
        }
    }
    char *body = fy_arena_alloc(ex->arena, 48);
    int bl = snprintf(body, 48, "purged %zu\n", n);
    ex->res.headers.n = 0;
    add_status_z(ce, "fwd=bypass; detail=purge");
    fy_exchange_respond(ex, n ? 200 : 404, "text/plain", body, (size_t)bl);
}

static fy_filter_verdict_t cacheable_request(cache_ex_t *ce, bool get, bool head);

/* Follow the fetch of o (a reference) that another request started. */
static fy_filter_verdict_t follow(cache_ex_t *ce, fy_cache_obj_t *o)
{
    fy_exchange_t *ex = ce->ex;
    ce->obj = o;
    ce->mode = M_FOLLOW;
    if (fy_cache_wait(ex->ctx->loop, ex->ctx->worker_id, &fy__cache_wait_of(ce)->waiter, o) < 0) {
        fy_cache_obj_release(o);
        ce->obj = NULL;
        ce->mode = M_MISS;
        fy__cache_push_layer(ce);
        return FY_FILTER_NEXT;
    }
    if (!fy__cache_follow_waits(o)) { /* it moved on meanwhile */
        fy__cache_unwait(ce);
        return fy__cache_follow_ready(ce) ? FY_FILTER_DONE : FY_FILTER_NEXT;
    }
    fy_timer_start(ex->ctx->loop, &ce->w->timer, ce->cf->conf->collapse_timeout_ms);
    return FY_FILTER_WAIT;
}

static fy_filter_verdict_t on_request(fy_filter_t *f, fy_exchange_t *ex)
{
    cache_filter_t *cf = (cache_filter_t *)f;
    const fy_cache_conf_t *c = cf->conf;
    int m = ex->req.method_id;
    bool get = m == FY_M_GET && cf->get_ok, head = m == FY_M_HEAD && cf->head_ok;
    cache_ex_t *ce = new_ce(cf, ex);
    if (!get && !head) {
        if (m == FY_M_OTHER && c->npurge_cidrs && fy_str_eq(ex->req.method, "PURGE", 5)) {
            do_purge(ce);
            return FY_FILTER_DONE;
        }
        /* safe methods pass; the others (and unknown ones) invalidate (§4.4) */
        bool safe = m == FY_M_GET || m == FY_M_HEAD || m == FY_M_OPTIONS || m == FY_M_TRACE;
        ce->mode = safe ? M_PASS : M_UNSAFE;
        ce->fwd = safe ? "fwd=bypass" : "fwd=method";
        if (!safe) ce->key = fy_cache_key(ex->arena, &ex->req, NULL, 0, &ce->keylen);
        fy__cache_push_layer(ce);
        return FY_FILTER_NEXT;
    }
    /* the key is needed only in this call (objects keep their own copy): on the stack */
    char kbuf[512];
    ce->key = fy_cache_key_into(kbuf, sizeof kbuf, ex->arena, &ex->req, c->key_headers.v,
                                c->key_headers.n, &ce->keylen);
    ce->hash = fy_cache_hash(ce->key, ce->keylen);
    /* (ce may be gone when it returns: the exchange can end inside it) */
    return cacheable_request(ce, get, head);
}

/* GET or HEAD with the key made: hit, follow, miss or revalidate. */
static fy_filter_verdict_t cacheable_request(cache_ex_t *ce, bool get, bool head)
{
    fy_exchange_t *ex = ce->ex;
    cache_filter_t *cf = ce->cf;
    const fy_cache_conf_t *c = cf->conf;
    (void)get;
    scan_request(ce);
    ce->client_cond = ce->inm || ce->ims;
    bool fat = ex->req.content_length != 0; /* a GET with a body: never stored from */
    bool ranged = ce->range != NULL;
    bool pending = false, created = false;
    fy_cache_disk_t *disk = fy_cache_zone_disk(cf->zone);
    /* a miss here would be stored (the checks below all pass): look up and begin at once */
    bool may_begin = !disk && !fat && !ranged && !head && !ce->client_cond && c->collapse &&
                     !(ce->qi.cc.flags & (FY_CC_NO_STORE | FY_CC_ONLY_IF_CACHED));
    fy_cache_obj_t *o = may_begin
                            ? fy_cache_lookup_begin(cf->zone, ce->hash, ce->key, ce->keylen,
                                                    &ex->req.headers, ex->arena, &pending, &created)
                            : fy_cache_lookup(cf->zone, ce->hash, ce->key, ce->keylen,
                                              &ex->req.headers, ex->arena, &pending);
    if (created) { /* a miss, and this request fetches what is stored */
        strip_unkeyed(ce);
        ce->mode = M_MISS;
        ce->fwd = "fwd=uri-miss";
        ce->fill = o;
        fy__cache_push_layer(ce);
        return FY_FILTER_NEXT;
    }
    if (o && !pending) {
        int64_t age = fy__cache_obj_age(o, ex->ctx->loop->now_sec);
        int use = fy_cache_use(&o->fresh, age, &ce->qi, c->ignore_request_no_cache);
        if (use == FY_CACHE_USE_SWR) {
            bool f0 = false;
            if (atomic_compare_exchange_strong(&o->revalidating, &f0, true)) {
                ce->swr_owner = true; /* this request revalidates; others get it stale */
                use = FY_CACHE_USE_REVALIDATE;
            } else
                use = FY_CACHE_USE_STALE;
        }
        if (use != FY_CACHE_USE_REVALIDATE) {
            ce->obj = o;
            fy__cache_serve_start(ce, o, use == FY_CACHE_USE_FRESH ? "hit" : "hit; detail=stale");
            return FY_FILTER_DONE;
        }
        if (ce->qi.cc.flags & FY_CC_ONLY_IF_CACHED) {
            fy_cache_obj_release(o);
            respond_status(ce, 504, "fwd=miss; detail=only-if-cached", "not cached\n");
            return FY_FILTER_DONE;
        }
        strip_unkeyed(ce); /* from here on the origin sees the request */
        /* stale or to be validated: ask the origin with our validators */
        ce->obj = o;
        ce->mode = M_REVALIDATE;
        ce->fwd =
            (ce->qi.cc.flags & FY_CC_NO_CACHE) && !o->fresh.no_cache ? "fwd=request" : "fwd=stale";
        if (!fat && atomic_load(&o->state) == FY_CACHE_COMPLETE) make_conditional(ce, o);
        if (!fat && head == false) {
            bool following;
            ce->fill = fy_cache_begin(cf->zone, ce->hash, ce->key, ce->keylen, &following);
            if (following) { /* someone else is fetching it already: no second fill */
                fy_cache_obj_release(ce->fill);
                ce->fill = NULL;
            }
        }
        fy__cache_push_layer(ce);
        return FY_FILTER_NEXT;
    }
    if (ce->qi.cc.flags & FY_CC_ONLY_IF_CACHED) {
        if (o) fy_cache_obj_release(o);
        respond_status(ce, 504, "fwd=uri-miss; detail=only-if-cached", "not cached\n");
        return FY_FILTER_DONE;
    }
    strip_unkeyed(ce); /* the origin (or a fetch we may follow) answers this one */
    ce->mode = M_MISS;
    ce->fwd = "fwd=uri-miss";
    if (disk && !fat && !pending) {
        /* not in memory: on disk? Then the disk's reader loads it into a new object that this
           request follows like a collapsed fetch (and so do others meanwhile); ranges, HEAD
           and conditionals are answered from it as from any stored object */
        uint64_t name =
            fy_cache_disk_find(disk, ce->hash, ce->key, ce->keylen, &ex->req.headers, ex->arena);
        bool fl = false;
        fy_cache_obj_t *lo =
            name ? fy_cache_begin(cf->zone, ce->hash, ce->key, ce->keylen, &fl) : NULL;
        if (lo && !fl) lo->disk_load = true; /* before the reader can see it */
        if (lo && (fl || fy_cache_disk_load(disk, lo, name) == 0)) {
            if (o) fy_cache_obj_release(o);
            return follow(ce, lo);
        }
        if (lo) fy_cache_abort(cf->zone, lo, FY_CACHE_PASS); /* the reader's queue is full */
        if (lo) fy_cache_obj_release(lo);
    }
    if (fat || ranged || head || ce->client_cond || (ce->qi.cc.flags & FY_CC_NO_STORE)) {
        /* answered by the origin, not stored: a partial, bodiless or unkeyed-input answer */
        if (o) fy_cache_obj_release(o);
        if (fat) ce->fwd = "fwd=bypass; detail=request-body";
        fy__cache_push_layer(ce);
        return FY_FILTER_NEXT;
    }
    if (o && pending && c->collapse) return follow(ce, o); /* a fetch is under way */
    if (o) fy_cache_obj_release(o);
    bool following = false;
    fy_cache_obj_t *fo = fy_cache_begin(cf->zone, ce->hash, ce->key, ce->keylen, &following);
    if (fo && following && c->collapse) return follow(ce, fo);
    if (fo && !following)
        ce->fill = fo;
    else if (fo)
        fy_cache_obj_release(fo);
    fy__cache_push_layer(ce);
    return FY_FILTER_NEXT;
}

/* ---- response phase (the layer) ---- */

/* Take the response over from the handler and answer from o (after the current call stack:
   the handler is inside its own send). */
static void takeover_cb(fy_defer_t *d)
{
    cache_ex_t *ce = d->data;
    fy_exchange_t *ex = ce->ex;
    const fy_producer_ops_t *hp = ce->handler_producer;
    if (hp && hp != &fy__cache_serve_producer && hp->stop) hp->stop(ex);
    ex->res.headers.n = 0;
    ex->res.headers.cap = 0;
    ex->res.headers.v = NULL;
    fy__cache_serve_start(ce, ce->obj, ce->detail);
}

static void takeover(cache_ex_t *ce, fy_cache_obj_t *o, const char *detail)
{
    if (ce->obj != o) {
        if (ce->swr_owner) atomic_store(&ce->obj->revalidating, false);
        ce->swr_owner = false;
        if (ce->obj) fy_cache_obj_release(ce->obj);
        ce->obj = o;
    }
    ce->detail = detail;
    ce->serving = true; /* the handler's sends stop here */
    ce->handler_producer = ce->ex->producer;
    cache_wait_t *w = fy__cache_wait_of(ce);
    w->defer.cb = takeover_cb;
    w->defer.data = ce;
    fy_defer(ce->ex->ctx->loop, &w->defer);
}

/* Freshness of the response in ex->res for the object o (RFC 9111 §4.2). */
static bool fill_head(cache_ex_t *ce, fy_cache_obj_t *o, const fy_cache_resp_info_t *ri)
{
    fy_exchange_t *ex = ce->ex;
    const fy_cache_conf_t *c = ce->cf->conf;
    time_t now = ex->ctx->loop->now_sec;
    int status = ex->res.status;
    bool force = c->force_ttl_ms && (status == 200 || status == 203 || status == 301 ||
                                     status == 404 || status == 410);
    int ns = fy_cache_storable(status, ri, &ce->qi, c->store_set_cookie);
    if (force &&
        (ns == FY_CACHE_NS_NO_STORE || ns == FY_CACHE_NS_PRIVATE || ns == FY_CACHE_NS_NO_FRESH))
        ns = FY_CACHE_STORE_OK; /* the operator's override (Set-Cookie, Vary: * still hold) */
    if (ns != FY_CACHE_STORE_OK) return false;
    if (ex->res.content_length >= 0 && (uint64_t)ex->res.content_length > c->max_object_size)
        return false;
    int64_t life = force ? (int64_t)(c->force_ttl_ms / 1000)
                         : fy_cache_lifetime(status, ri, now, c->heuristic_percent,
                                             (int64_t)(c->heuristic_max_ms / 1000),
                                             (int64_t)(c->default_ttl_ms / 1000), NULL);
    if (c->max_ttl_ms && life > (int64_t)(c->max_ttl_ms / 1000))
        life = (int64_t)(c->max_ttl_ms / 1000);
    const fy_cache_cc_t *cc = &ri->cc;
    o->fresh.lifetime = life;
    o->fresh.no_cache = !force && (cc->flags & FY_CC_NO_CACHE);
    o->fresh.never_stale =
        !force && (cc->flags & (FY_CC_MUST_REVALIDATE | FY_CC_PROXY_REVALIDATE | FY_CC_S_MAXAGE));
    o->fresh.swr = (cc->flags & FY_CC_SWR) && !(cc->bad & FY_CC_SWR)
                       ? cc->swr
                       : (int64_t)(c->stale_while_revalidate_ms / 1000);
    o->fresh.sie = (cc->flags & FY_CC_SIE) && !(cc->bad & FY_CC_SIE)
                       ? cc->sie
                       : (int64_t)(c->stale_if_error_ms / 1000);
    o->age_value = ri->age;
    o->date = ri->date >= 0 ? ri->date : now;
    o->request_time = ce->request_time;
    o->response_time = now;
    o->content_length = ex->res.content_length;
    return true;
}

/* §4.3.4: the stored head updated with the 304's fields. */
static void merge_304(fy_exchange_t *ex, const fy_cache_obj_t *o, fy_headers_t *out)
{
    const fy_headers_t *nh = &ex->res.headers;
    out->cap = o->nhdrs + nh->n + 1;
    out->v = fy_arena_alloc(ex->arena, out->cap * sizeof *out->v);
    out->n = 0;
    for (size_t i = 0; i < o->nhdrs; i++) {
        fy_str_t n = o->hdrs[i].name;
        bool replaced = false;
        for (size_t j = 0; j < nh->n && !replaced; j++)
            replaced = nh->v[j].name.len == n.len && strncasecmp(nh->v[j].name.p, n.p, n.len) == 0;
        if (!replaced) out->v[out->n++] = o->hdrs[i];
    }
    for (size_t j = 0; j < nh->n; j++) {
        fy_str_t n = nh->v[j].name;
        /* framing and per-response fields stay the stored ones */
        if (fy_str_ieq(n, "content-length", 14) || fy_str_ieq(n, "age", 3) ||
            fy_str_ieq(n, "content-encoding", 16) || fy_str_ieq(n, "transfer-encoding", 17) ||
            fy_str_ieq(n, "content-range", 13))
            continue;
        out->v[out->n++] = nh->v[j];
    }
}

/* Invalidate the key of a URI named in a response field, when it is of the same origin. */
static void invalidate_uri(cache_ex_t *ce, fy_str_t v)
{
    fy_exchange_t *ex = ce->ex;
    fy_request_t q = ex->req;
    if (v.len > 7 &&
        (strncasecmp(v.p, "http://", 7) == 0 || strncasecmp(v.p, "https://", 8) == 0)) {
        size_t sl = v.p[4] == ':' ? 4 : 5;
        if (sl != q.scheme.len || strncasecmp(v.p, q.scheme.p, sl) != 0) return;
        const char *a = v.p + sl + 3, *e = v.p + v.len, *s = a;
        while (s < e && *s != '/' && *s != '?') s++;
        /* same authority (compared through the key's normalisation) */
        fy_request_t t = q;
        t.authority = fy_str(a, (size_t)(s - a));
        t.path = FY_STR_LIT("/");
        t.query = FY_STR_NULL;
        q.path = FY_STR_LIT("/");
        q.query = FY_STR_NULL;
        size_t l1, l2;
        char *k1 = fy_cache_key(ex->arena, &t, NULL, 0, &l1);
        char *k2 = fy_cache_key(ex->arena, &q, NULL, 0, &l2);
        if (l1 != l2 || memcmp(k1, k2, l1)) return;
        q = ex->req;
        v = fy_str(s, (size_t)(e - s));
    }
    if (!v.len || v.p[0] != '/') return;
    const char *qm = memchr(v.p, '?', v.len);
    q.path = fy_str(v.p, qm ? (size_t)(qm - v.p) : v.len);
    q.query = qm ? fy_str(qm + 1, v.len - (size_t)(qm - v.p) - 1) : FY_STR_NULL;
    size_t kl;
    char *k = fy_cache_key(ex->arena, &q, NULL, 0, &kl);
    fy_cache_invalidate(ce->cf->zone, fy_cache_hash(k, kl), k, kl);
}

/* A copy of so with the response's fields merged in (§4.3.4), stored when still storable:
   a reference, or NULL. */
static fy_cache_obj_t *refresh(cache_ex_t *ce, fy_cache_obj_t *so)
{
    fy_exchange_t *ex = ce->ex;
    fy_headers_t merged;
    merge_304(ex, so, &merged);
    fy_cache_obj_t *no = fy_cache_obj_copy(so, &merged);
    if (!no) return NULL;
    fy_cache_resp_info_t ri;
    fy_cache_resp_scan(&merged, ce->cf->conf->targeted_lower, &ri);
    /* judged as the 200 it stands for */
    int saved = ex->res.status;
    ex->res.status = so->status;
    int64_t scl = ex->res.content_length;
    ex->res.content_length = (int64_t)atomic_load(&so->body_len);
    bool ok = fill_head(ce, no, &ri);
    ex->res.status = saved;
    ex->res.content_length = scl;
    if (ok) fy_cache_insert(ce->cf->zone, no);
    return no;
}

/* Does the HEAD response in ex describe the stored so (§4.3.5): the same ETag, else the same
   Last-Modified, else (neither has one) the same Content-Length? */
static bool head_describes(fy_exchange_t *ex, const fy_cache_obj_t *so)
{
    const fy_header_t *cl = FY_HDR_FIND(&ex->res.headers, "content-length");
    if (cl) { /* another length is another representation, whatever the validators say */
        uint64_t v = 0;
        for (size_t i = 0; i < cl->value.len; i++) {
            char c = cl->value.p[i];
            if (c < '0' || c > '9' || v > UINT64_MAX / 10 - 1) return false;
            v = v * 10 + (uint64_t)(c - '0');
        }
        if (!cl->value.len || v != atomic_load(&so->body_len)) return false;
    }
    const fy_header_t *et = FY_HDR_FIND(&ex->res.headers, "etag");
    if (et || so->etag.len) /* a strong ETag, the same */
        return et && fy_str_eq(so->etag, et->value.p, et->value.len) &&
               !(et->value.len > 1 && et->value.p[0] == 'W' && et->value.p[1] == '/');
    const fy_header_t *lm = FY_HDR_FIND(&ex->res.headers, "last-modified");
    if (lm || so->last_modified.len)
        return lm && fy_str_eq(so->last_modified, lm->value.p, lm->value.len);
    return cl != NULL;
}

static void on_head(cache_ex_t *ce)
{
    fy_exchange_t *ex = ce->ex;
    cache_filter_t *cf = ce->cf;
    const fy_cache_conf_t *c = cf->conf;
    int status = ex->res.status;
    if (ce->mode == M_UNSAFE) {
        if (status >= 200 && status < 400) {
            fy_cache_invalidate(cf->zone, fy_cache_hash(ce->key, ce->keylen), ce->key, ce->keylen);
            if (c->key_headers.n) { /* every keyed variant of the URI */
                char *k = fy_arena_alloc(ex->arena, ce->keylen + 1);
                memcpy(k, ce->key, ce->keylen);
                k[ce->keylen] = '\n';
                fy_cache_purge_prefix(cf->zone, k, ce->keylen + 1);
            }
            const fy_header_t *l = FY_HDR_FIND(&ex->res.headers, "location");
            if (l) invalidate_uri(ce, l->value);
            l = FY_HDR_FIND(&ex->res.headers, "content-location");
            if (l) invalidate_uri(ce, l->value);
        }
        add_status_z(ce, ce->fwd);
        return;
    }
    if (ce->mode == M_REVALIDATE && ce->obj) {
        fy_cache_obj_t *so = ce->obj;
        if (status == 200 && ex->req.method_id == FY_M_HEAD &&
            atomic_load(&so->state) == FY_CACHE_COMPLETE) {
            /* §4.3.5: a 200 to HEAD freshens the stored GET response it describes, or shows
               that the stored one is outdated */
            fy_cache_obj_t *no = head_describes(ex, so) ? refresh(ce, so) : NULL;
            if (no)
                fy_cache_obj_release(no);
            else
                fy_cache_invalidate(cf->zone, so->hash, so->key, so->keylen);
            add_status_z(ce, ce->fwd);
            return;
        }
        if (status == 304 && atomic_load(&so->state) == FY_CACHE_COMPLETE) {
            fy_cache_obj_t *no = refresh(ce, so);
            if (no) {
                if (ce->fill) {
                    fy_cache_abort(cf->zone, ce->fill, FY_CACHE_PASS);
                    fy_cache_obj_release(ce->fill);
                    ce->fill = NULL;
                }
                takeover(ce, no, "fwd=stale; fwd-status=304");
                return;
            }
        }
        if (status >= 500 && status <= 504 && atomic_load(&so->state) == FY_CACHE_COMPLETE &&
            fy_cache_stale_if_error(&so->fresh, fy__cache_obj_age(so, ex->ctx->loop->now_sec),
                                    &ce->qi)) {
            if (ce->fill) {
                fy_cache_abort(cf->zone, ce->fill, FY_CACHE_PASS);
                fy_cache_obj_release(ce->fill);
                ce->fill = NULL;
            }
            takeover(ce, so, "hit; detail=stale-if-error");
            return;
        }
    }
    if (ce->fill) {
        fy_cache_resp_info_t ri;
        fy_cache_resp_scan(&ex->res.headers, c->targeted_lower, &ri);
        bool ok = ex->req.method_id == FY_M_GET && fill_head(ce, ce->fill, &ri);
        if (ok) {
            size_t vnl = 0, vkl = 0;
            /* the scan saw every field: without a Vary line there are no names to collect */
            char *vn = ri.has_vary ? fy_cache_vary_names(ex->arena, &ex->res.headers, &vnl) : NULL;
            char *vk = NULL;
            if (vn) vk = fy_cache_vary_key(ex->arena, &ex->req.headers, vn, vnl, &vkl);
            ok = fy_cache_set_head(cf->zone, ce->fill, status, &ex->res.headers, vn, vnl, vk, vkl,
                                   c->max_object_size) == 0;
        } else
            fy_cache_abort(cf->zone, ce->fill, FY_CACHE_PASS);
        ce->storing = ok;
        add_status_z(ce,
                     ok ? (ce->mode == M_REVALIDATE ? "fwd=stale; stored" : "fwd=uri-miss; stored")
                        : ce->fwd);
        return;
    }
    add_status_z(ce, ce->fwd ? ce->fwd : "fwd=bypass");
}

static void l_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                   int state)
{
    cache_ex_t *ce = (cache_ex_t *)l;
    if (ce->serving && ex->producer == &fy__cache_serve_producer) {
        fy_layer_next_send(l, ex, bufs, n, state);
        return;
    }
    if (ce->serving) return; /* taken over: the handler's bytes go nowhere */
    if (!ce->seen_head) {
        ce->seen_head = true;
        on_head(ce);
        if (ce->serving) return;
    }
    if (ce->storing) {
        for (size_t i = 0; i < n && ce->storing; i++)
            if (bufs[i].iov_len &&
                fy_cache_append(ce->cf->zone, ce->fill, bufs[i].iov_base, bufs[i].iov_len,
                                ce->cf->conf->max_object_size) < 0)
                ce->storing = false; /* past max-object-size: the rest streams through */
        if (ce->storing && state == FY_SEND_FINAL) {
            fy_cache_finish(ce->cf->zone, ce->fill);
            ce->storing = false;
        } else if (ce->storing && state == FY_SEND_ERROR) {
            fy_cache_abort(ce->cf->zone, ce->fill, FY_CACHE_ABORTED);
            ce->storing = false;
        }
    }
    fy_layer_next_send(l, ex, bufs, n, state);
}

static void l_send_file(fy_sink_layer_t *l, fy_exchange_t *ex, int fd, off_t off, size_t len,
                        int state)
{
    cache_ex_t *ce = (cache_ex_t *)l;
    if (ce->serving) return;
    if (!ce->seen_head) {
        ce->seen_head = true;
        on_head(ce);
        if (ce->serving) return;
    }
    if (ce->storing) { /* file bodies are not copied into memory: not stored */
        fy_cache_abort(ce->cf->zone, ce->fill, FY_CACHE_ABORTED);
        ce->storing = false;
    }
    fy_layer_next_send_file(l, ex, fd, off, len, state);
}

static const fy_layer_ops_t cache_layer_ops = {
    .name = "cache",
    .send = l_send,
    .send_file = l_send_file,
};

/* ---- the filter ---- */

static void destroy(fy_filter_t *f)
{
    cache_filter_t *cf = (cache_filter_t *)f;
    fy_cache_zone_put(cf->zone);
    free(cf->strip);
    for (size_t i = 0; i < 16; i++) free((void *)cf->status_full[i].p);
    free(cf);
}

static const fy_filter_ops_t cache_ops = {"cache", FY_STAGE_CACHE, on_request, destroy};

fy_filter_t *fy_cache_filter_new(const fy_cache_conf_t *conf)
{
    cache_filter_t *cf = fy_xcalloc(1, sizeof *cf);
    cf->f.ops = &cache_ops;
    cf->conf = conf;
    cf->zone = fy_cache_zone_get(conf->zone, (size_t)conf->size);
    if (conf->disk_path && *conf->disk_path)
        fy_cache_zone_set_disk(cf->zone, conf->disk_path, conf->disk_size,
                               (unsigned)conf->disk_queue);
    cf->name_len = strlen(conf->status_name);
    for (size_t i = 0; i < conf->methods.n; i++) {
        if (!strcmp(conf->methods.v[i], "GET")) cf->get_ok = true;
        if (!strcmp(conf->methods.v[i], "HEAD")) cf->head_ok = true;
    }
    for (size_t i = 0; i < 16 && forwarded[i]; i++) {
        size_t l = cf->name_len + 2 + strlen(forwarded[i]);
        char *v = fy_xmalloc(l + 1);
        snprintf(v, l + 1, "%s; %s", conf->status_name, forwarded[i]);
        cf->status_full[i] = fy_str(v, l);
    }
    cf->strip = fy_xcalloc(conf->strip_headers.n + 1, sizeof *cf->strip);
    for (size_t i = 0; i < conf->strip_headers.n; i++) {
        const char *n = conf->strip_headers.v[i];
        bool keyed = false;
        for (size_t k = 0; k < conf->key_headers.n; k++)
            keyed |= !strcmp(n, conf->key_headers.v[k]);
        if (keyed) continue; /* in the key: another value is another object */
        cf->strip[cf->nstrip++] = fy_str(n, strlen(n));
        cf->strip_lens |= (uint64_t)1 << (strlen(n) < 63 ? strlen(n) : 63);
    }
    return &cf->f;
}
