/* The cache's producer: a response answered from a stored object (fresh hits, 304s,
 * ranges, followers of a collapsed fetch), streamed as the client takes it. */
#include "policy/cache_int.h"

/* ---- answering from an object ---- */

static void serve_proceed(fy_exchange_t *ex)
{
    cache_ex_t *ce = ex->handler_data;
    ce->sending = false;
    fy__cache_serve_step(ce);
}

static void serve_stop(fy_exchange_t *ex)
{
    cache_ex_t *ce = ex->handler_data;
    ce->finished = true;
    fy__cache_unwait(ce);
}

const fy_producer_ops_t fy__cache_serve_producer = {serve_proceed, serve_stop};

/* The followed object has its head, or failed: serve it (true), or not (false: the request
   goes to the origin alone, with the layer pushed). */
bool fy__cache_follow_ready(cache_ex_t *ce)
{
    fy_exchange_t *ex = ce->ex;
    fy_cache_obj_t *o = ce->obj;
    int st = atomic_load(&o->state);
    if (st == FY_CACHE_STREAMING || st == FY_CACHE_COMPLETE) {
        bool match = true;
        if (o->vary_names) {
            size_t l;
            char *k = fy_cache_vary_key(ex->arena, &ex->req.headers, o->vary_names, o->vnlen, &l);
            match = l == o->vklen && !memcmp(k, o->vary_key, l);
        }
        int64_t age = fy__cache_obj_age(o, ex->ctx->loop->now_sec);
        int use = fy_cache_use(&o->fresh, age, &ce->qi, ce->cf->conf->ignore_request_no_cache);
        if (match && use != FY_CACHE_USE_REVALIDATE) {
            fy__cache_serve_start(ce, o,
                                  o->from_disk ? "hit; detail=disk" : "fwd=uri-miss; collapsed");
            return true;
        }
    }
    if (o->disk_load && st == FY_CACHE_PASS && !ce->fill && ex->req.method_id == FY_M_GET &&
        !ce->range && !ce->client_cond) {
        /* the file was bad or gone: this request fetches and stores it again */
        bool fl = false;
        ce->fill = fy_cache_begin(ce->cf->zone, o->hash, o->key, o->keylen, &fl);
        if (ce->fill && fl) {
            fy_cache_obj_release(ce->fill);
            ce->fill = NULL;
        }
    }
    fy_cache_obj_release(o);
    ce->obj = NULL;
    ce->mode = M_MISS;
    ce->fwd = "fwd=uri-miss";
    fy__cache_push_layer(ce);
    return false;
}

void fy__cache_on_wait(fy_cache_waiter_t *w)
{
    cache_ex_t *ce = fy_container_of(w, cache_wait_t, waiter)->ce;
    if (ce->mode == M_SERVE) {
        if (!ce->sending && !ce->finished) fy__cache_serve_step(ce);
        return;
    }
    if (fy__cache_follow_waits(ce->obj)) return;
    fy_cache_unwait(w);
    fy_timer_stop(ce->ex->ctx->loop, &ce->w->timer);
    if (!fy__cache_follow_ready(ce)) fy_filter_resume(ce->ex);
}

void fy__cache_on_follow_timeout(fy_timer_t *t)
{
    cache_ex_t *ce = t->data;
    fy__cache_unwait(ce);
    fy_cache_obj_release(ce->obj);
    ce->obj = NULL;
    ce->mode = M_MISS;
    ce->fwd = "fwd=uri-miss; detail=collapse-timeout";
    fy__cache_push_layer(ce);
    fy_filter_resume(ce->ex);
}

void fy__cache_serve_step(cache_ex_t *ce)
{
    fy_exchange_t *ex = ce->ex;
    if (ce->finished) return;
    if (ce->head_only) {
        ce->finished = true;
        fy_exchange_send(ex, NULL, 0, FY_SEND_FINAL);
        return;
    }
    fy_cache_obj_t *o = ce->obj;
    for (int pass = 0; pass < 2; pass++) {
        int st = atomic_load(&o->state); /* before the length: COMPLETE then means all of it */
        const char *p;
        size_t k =
            ce->off < ce->end ? fy_cache_obj_read(o, ce->off, &ce->chunk, &ce->chunk_off, &p) : 0;
        if (k > ce->end - ce->off) k = ce->end - ce->off;
        if (k) {
            ce->off += k;
            size_t total = atomic_load(&o->body_len);
            bool last = ce->off == ce->end || (st == FY_CACHE_COMPLETE && ce->off == total);
            struct iovec iov = {(void *)p, k};
            fy__cache_unwait(ce);
            if (last) {
                ce->finished = true;
                fy_exchange_send(ex, &iov, 1, FY_SEND_FINAL);
            } else {
                ce->sending = true;
                fy_exchange_send(ex, &iov, 1, FY_SEND_MORE);
            }
            return;
        }
        if (ce->off >= ce->end || st == FY_CACHE_COMPLETE) {
            fy__cache_unwait(ce);
            ce->finished = true;
            fy_exchange_send(ex, NULL, 0, FY_SEND_FINAL);
            return;
        }
        if (st == FY_CACHE_ABORTED || st == FY_CACHE_PASS) {
            fy__cache_unwait(ce);
            ce->finished = true;
            fy_exchange_fail(ex, 502, "cache: the fetch being followed failed");
            return;
        }
        /* caught up with the writer: park, then look once more (no lost wake-up) */
        if (pass == 0 && !(ce->w && ce->w->waiter.parked) &&
            fy_cache_wait(ex->ctx->loop, ex->ctx->worker_id, &fy__cache_wait_of(ce)->waiter, o) <
                0) {
            ce->finished = true;
            fy_exchange_fail(ex, 502, "cache: cannot wait for the fetch being followed");
            return;
        }
    }
}

/* The client's own conditionals against the object (RFC 9110 §13.1): true for 304. */
static bool not_modified(const cache_ex_t *ce, const fy_cache_obj_t *o)
{
    const fy_header_t *inm = ce->inm;
    if (inm) {
        if (!o->etag.len) return false;
        fy_str_t et = o->etag;
        if (et.len > 2 && et.p[0] == 'W' && et.p[1] == '/') et.p += 2, et.len -= 2;
        const char *p = inm->value.p, *e = p + inm->value.len;
        while (p < e) {
            while (p < e && (*p == ' ' || *p == '\t' || *p == ',')) p++;
            const char *s = p;
            while (p < e && *p != ',') p++;
            const char *t = p;
            while (t > s && (t[-1] == ' ' || t[-1] == '\t')) t--;
            fy_str_t m = fy_str(s, (size_t)(t - s));
            if (m.len == 1 && m.p[0] == '*') return true;
            if (m.len > 2 && m.p[0] == 'W' && m.p[1] == '/') m.p += 2, m.len -= 2;
            if (m.len == et.len && !memcmp(m.p, et.p, m.len)) return true; /* weak compare */
        }
        return false;
    }
    const fy_header_t *ims = ce->ims;
    if (ims && o->last_modified.len) {
        time_t t = fy_http_date_parse(ims->value), lm = fy_http_date_parse(o->last_modified);
        return t >= 0 && lm >= 0 && lm <= t;
    }
    return false;
}

/* A single "bytes=a-b" / "bytes=a-" / "bytes=-n" range of a complete object of `len` bytes:
   1 and [*s, *e) when satisfiable, 0 to ignore Range (send 200), -1 for 416. */
static int one_range(fy_str_t v, size_t len, size_t *s, size_t *e)
{
    if (v.len < 7 || memcmp(v.p, "bytes=", 6) != 0) return 0;
    const char *p = v.p + 6, *end = v.p + v.len;
    for (const char *q = p; q < end; q++)
        if (*q == ',') return 0; /* several ranges: the whole object instead */
    uint64_t a = 0, b = 0;
    bool ha = false, hb = false;
    while (p < end && *p >= '0' && *p <= '9' && a < ((uint64_t)1 << 60))
        a = a * 10 + (uint64_t)(*p++ - '0'), ha = true;
    if (p >= end || *p++ != '-') return 0;
    while (p < end && *p >= '0' && *p <= '9' && b < ((uint64_t)1 << 60))
        b = b * 10 + (uint64_t)(*p++ - '0'), hb = true;
    if (p != end || (!ha && !hb)) return 0;
    if (!ha) { /* suffix */
        if (b == 0) return -1;
        *s = b >= len ? 0 : len - (size_t)b;
        *e = len;
        return 1;
    }
    if (a >= len) return -1;
    if (hb && b < a) return 0;
    *s = (size_t)a;
    *e = hb && b + 1 < len ? (size_t)b + 1 : len;
    return 1;
}

/* Start the response from o (a reference the exchange now holds in ce->obj). */
void fy__cache_serve_start(cache_ex_t *ce, fy_cache_obj_t *o, const char *status)
{
    fy_exchange_t *ex = ce->ex;
    if (ce->obj != o) {
        if (ce->obj) fy_cache_obj_release(ce->obj);
        ce->obj = o;
    }
    ce->mode = M_SERVE;
    ce->serving = true;
    ex->handler_data = ce;
    time_t now = ex->ctx->loop->now_sec;
    int64_t age = fy__cache_obj_age(o, now);
    int st = atomic_load(&o->state);
    size_t total = atomic_load(&o->body_len);
    bool complete = st == FY_CACHE_COMPLETE;
    /* the stored head, Age ours (§5.1), Cache-Status appended */
    fy_headers_t *rh = &ex->res.headers;
    rh->cap = o->nhdrs + 4;
    rh->v = fy_arena_alloc(ex->arena, rh->cap * sizeof *rh->v);
    rh->n = 0;
    for (size_t i = 0; i < o->nhdrs; i++) {
        fy_str_t n = o->hdrs[i].name;
        if (n.len == 3 && fy_str_ieq(n, "age", 3)) continue;
        rh->v[rh->n++] = o->hdrs[i];
    }
    char *av = fy_arena_alloc(ex->arena, 24);
    size_t al = (size_t)(fy__cache_put_u64(av, (uint64_t)age) - av);
    rh->v[rh->n++] = (fy_header_t){fy_str("age", 3), fy_str(av, al)};
    int status_code = o->status;
    ce->off = 0;
    ce->end = SIZE_MAX;
    int64_t cl = complete ? (int64_t)total : o->content_length;
    if (ce->client_cond && status_code == 200 && not_modified(ce, o)) {
        status_code = 304;
        ce->head_only = true;
        cl = -1;
    } else if (status_code == 200 && complete && ex->req.method_id == FY_M_GET) {
        const fy_header_t *rg = ce->range, *ir = ce->if_range;
        /* If-Range: only a strong ETag that matches keeps the range (RFC 9110 §13.1.5) */
        bool range_ok =
            rg && (!ir || (o->etag.len && o->etag.p[0] == '"' && ir->value.len == o->etag.len &&
                           !memcmp(ir->value.p, o->etag.p, o->etag.len)));
        size_t s = 0, e = 0;
        int r = range_ok ? one_range(rg->value, total, &s, &e) : 0;
        if (r != 0) {
            char *cr = fy_arena_alloc(ex->arena, 80), *p = cr;
            p = PUT_LIT(p, "bytes ");
            if (r > 0) {
                p = fy__cache_put_u64(p, s);
                *p++ = '-';
                p = fy__cache_put_u64(p, e - 1);
                status_code = 206;
                ce->off = s;
                ce->end = e;
                cl = (int64_t)(e - s);
            } else {
                *p++ = '*';
                status_code = 416;
                ce->head_only = true;
                cl = 0;
            }
            *p++ = '/';
            p = fy__cache_put_u64(p, total);
            rh->v[rh->n++] =
                (fy_header_t){fy_str("content-range", 13), fy_str(cr, (size_t)(p - cr))};
        }
    }
    if (ex->req.method_id == FY_M_HEAD) ce->head_only = true;
    /* "NAME; hit; ttl=N" (negative when stale) */
    size_t sl = strlen(status);
    char *sv = fy_arena_alloc(ex->arena, ce->cf->name_len + 64 + sl), *p = sv;
    p = fy__cache_put_s(p, ce->cf->conf->status_name, ce->cf->name_len);
    p = PUT_LIT(p, "; ");
    p = fy__cache_put_s(p, status, sl);
    if (!strncmp(status, "hit", 3)) {
        int64_t ttl = o->fresh.lifetime - age;
        p = PUT_LIT(p, "; ttl=");
        if (ttl < 0) *p++ = '-';
        p = fy__cache_put_u64(p, (uint64_t)(ttl < 0 ? -ttl : ttl));
    }
    rh->v[rh->n++] = (fy_header_t){fy_str("cache-status", 12), fy_str(sv, (size_t)(p - sv))};
    ex->res.status = status_code;
    ex->res.content_length = status_code == 304 ? -1 : cl;
    fy_exchange_start_response(ex, &fy__cache_serve_producer);
    fy__cache_serve_step(ce);
}
