/* The hiredis loop adapter and the Redis-backed GCRA limiter (policy/redis.h). */
#include "policy/redis.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/list.h"
#include "core/log.h"
#include "policy/ratelimit.h"

/* ---- the adapter ---- */

typedef struct redis_ev {
    fy_io_t io;
    fy_loop_t *loop;
    redisAsyncContext *ac;
    uint32_t want; /* EPOLLIN / EPOLLOUT asked for by hiredis */
    bool *dead;    /* set by cleanup while a callback of ours is on the stack */
} redis_ev_t;

static void ev_update(redis_ev_t *e)
{
    fy_io_set(e->loop, &e->io, e->want);
}

static void ev_add_read(void *p)
{
    redis_ev_t *e = p;
    e->want |= EPOLLIN;
    ev_update(e);
}

static void ev_del_read(void *p)
{
    redis_ev_t *e = p;
    e->want &= ~(uint32_t)EPOLLIN;
    ev_update(e);
}

static void ev_add_write(void *p)
{
    redis_ev_t *e = p;
    e->want |= EPOLLOUT;
    ev_update(e);
}

static void ev_del_write(void *p)
{
    redis_ev_t *e = p;
    e->want &= ~(uint32_t)EPOLLOUT;
    ev_update(e);
}

static void ev_cleanup(void *p)
{
    redis_ev_t *e = p;
    if (e->dead) *e->dead = true;
    e->want = 0;
    ev_update(e);
    free(e);
}

/* hiredis may free the context (and so us, through cleanup) inside either handler */
static void ev_cb(fy_io_t *io, uint32_t events)
{
    redis_ev_t *e = io->data;
    bool dead = false;
    e->dead = &dead;
    if ((e->want & EPOLLOUT) && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
        redisAsyncHandleWrite(e->ac);
    if (!dead && (e->want & EPOLLIN) && (events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
        redisAsyncHandleRead(e->ac);
    if (!dead) e->dead = NULL;
}

int fy_redis_attach(redisAsyncContext *ac, fy_loop_t *loop)
{
    if (ac->ev.data) return -1;
    redis_ev_t *e = fy_xcalloc(1, sizeof *e);
    e->loop = loop;
    e->ac = ac;
    e->io.fd = ac->c.fd;
    e->io.cb = ev_cb;
    e->io.data = e;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    ac->ev.data = e;
    return 0;
}

/* ---- per-worker connections (process lifetime, reused across reloads) ---- */

#define MAX_WORKERS 256

typedef struct conn {
    redisAsyncContext *ac; /* NULL: not connected */
    fy_loop_t *loop;
    uint64_t retry_at_ms;
    char host[64];
    int port;
    struct conn *next;
} conn_t;

static conn_t *conns[MAX_WORKERS]; /* [worker]: only that worker's thread touches its list */

static void on_connect(const redisAsyncContext *ac, int status)
{
    conn_t *c = ac->data;
    if (status != REDIS_OK) {
        fy_debug("redis %s:%d: connect failed: %s", c->host, c->port, ac->errstr);
        c->ac = NULL; /* hiredis frees it after this callback */
    }
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    conn_t *c = ac->data;
    (void)status;
    if (c->ac == ac) c->ac = NULL;
}

static conn_t *conn_find(int wid, fy_loop_t *loop, const char *host, int port)
{
    for (conn_t *c = conns[wid]; c; c = c->next)
        if (c->port == port && !strcmp(c->host, host) && c->loop == loop) return c;
    conn_t *c = fy_xcalloc(1, sizeof *c);
    c->loop = loop;
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    c->next = conns[wid];
    conns[wid] = c;
    return c;
}

/* The connection's context, connecting when it is time to try; NULL while down. */
static redisAsyncContext *conn_get(conn_t *c, uint64_t now_ms, uint64_t reconnect_ms)
{
    if (c->ac) {
        if (c->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)) return NULL;
        return c->ac;
    }
    if (now_ms < c->retry_at_ms) return NULL;
    c->retry_at_ms = now_ms + reconnect_ms;
    redisAsyncContext *ac = redisAsyncConnect(c->host, c->port);
    if (!ac) return NULL;
    if (ac->err) {
        fy_debug("redis %s:%d: %s", c->host, c->port, ac->errstr);
        redisAsyncFree(ac);
        return NULL;
    }
    ac->data = c;
    fy_redis_attach(ac, c->loop);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    c->ac = ac;
    return ac;
}

/* ---- the limiter ---- */

/* GCRA in µs on Redis's clock. KEYS[1]; ARGV: T, tau (= burst * T), n wanted. Returns
   {granted, wait}: wait (µs) until the next token when fewer than n were granted. */
static const char SCRIPT[] =
    "local t=redis.call('TIME') local now=t[1]*1000000+t[2] "
    "local T=tonumber(ARGV[1]) local tau=tonumber(ARGV[2]) local n=tonumber(ARGV[3]) "
    "local tat=tonumber(redis.call('GET',KEYS[1]) or '0') or 0 "
    "if tat<now then tat=now end "
    "local k=math.floor((now+tau-tat)/T) if k>n then k=n end if k<0 then k=0 end "
    "if k>0 then tat=tat+k*T redis.call('SET',KEYS[1],string.format('%d',tat),'PX',"
    "string.format('%d',math.floor((tat-now)/1000)+1000)) end "
    "local wait=0 if k<n then wait=tat+T-tau-now if wait<0 then wait=0 end end "
    "return {k,wait}";

#define LEASE_SLOTS 1024u

typedef struct rq rq_t;

typedef struct lease {
    uint64_t key;
    uint64_t tokens;
    uint64_t expires_ms;
    rq_t *pending; /* the round trip that will refill it */
} lease_t;

typedef struct rlw {
    conn_t *conn;
    lease_t leases[LEASE_SLOTS];
} rlw_t;

struct fy_rl_redis {
    atomic_int refs; /* the filter's, and one per round trip in flight */
    char host[64];
    int port;
    uint64_t lease, timeout_ms, reconnect_ms;
    int on_error, error_status, status;
    uint64_t t_us, tau_us, t_ns, burst, window_s;
    char *prefix, *name, *where; /* owned */
    /* the command, formatted once: head = "*7 EVAL script 1", then the key (keyp + 16 hex
       digits), tail = T and tau, then n */
    char head[sizeof SCRIPT + 64];
    size_t head_len;
    char keyp[256];
    size_t keyp_len;
    char tail[64];
    size_t tail_len;
    atomic_bool down;
    fy_counter_id_t down_total, rejected, round_trips;
    rlw_t *w[MAX_WORKERS]; /* owned; each made by its own worker */
};

struct rq {
    fy_rl_redis_t *r; /* holds a reference */
    rlw_t *w;
    fy_loop_t *loop;
    uint64_t key, n;
    lease_t *slot; /* the lease it refills, or NULL */
    fy_list_t waiters;
    fy_timer_t timer;
};

typedef struct waiter {
    fy_list_t link;
    fy_exchange_t *ex;
    rq_t *rq; /* NULL once answered */
} waiter_t;

static void r_unref(fy_rl_redis_t *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    for (int i = 0; i < MAX_WORKERS; i++) free(r->w[i]);
    free(r->prefix);
    free(r->name);
    free(r->where);
    free(r);
}

static void set_down(fy_rl_redis_t *r, bool down, const char *why)
{
    if (atomic_load_explicit(&r->down, memory_order_relaxed) == down) return;
    if (atomic_exchange(&r->down, down) == down) return; /* another worker logged it */
    if (down) {
        fy_counter_inc(r->down_total);
        fy_warn("%s: rate-limit %s: Redis %s:%d is down (%s): %s", r->where, r->name, r->host,
                r->port, why,
                r->on_error == FY_RL_FAIL_OPEN ? "failing open (no limit)" : "failing closed");
    } else {
        fy_info("%s: rate-limit %s: Redis %s:%d is back", r->where, r->name, r->host, r->port);
    }
}

/* Redis is down for this request: NEXT or DONE per on-error. */
static fy_filter_verdict_t down_verdict(fy_rl_redis_t *r, fy_exchange_t *ex)
{
    if (r->on_error == FY_RL_FAIL_OPEN) return FY_FILTER_NEXT;
    fy_exchange_fail(ex, r->error_status, "rate-limit: Redis down");
    return FY_FILTER_DONE;
}

static void waiter_gone(void *p)
{
    waiter_t *wt = p;
    if (wt->rq) fy_list_remove(&wt->link);
    wt->rq = NULL;
}

static waiter_t *pop_waiter(rq_t *q)
{
    if (fy_list_empty(&q->waiters)) return NULL;
    waiter_t *wt = (waiter_t *)((char *)q->waiters.next - offsetof(waiter_t, link));
    fy_list_remove(&wt->link);
    wt->rq = NULL;
    return wt;
}

static void serve_down(rq_t *q)
{
    waiter_t *wt;
    while ((wt = pop_waiter(q))) {
        if (down_verdict(q->r, wt->ex) == FY_FILTER_NEXT) fy_filter_resume(wt->ex);
    }
}

static void on_timeout(fy_timer_t *t)
{
    rq_t *q = t->data;
    /* the reply may still come (its tokens are then dropped): requests for this key from now
       on ask again instead of queueing behind it */
    if (q->slot && q->slot->pending == q) q->slot->pending = NULL;
    q->slot = NULL;
    set_down(q->r, true, "no reply in time");
    serve_down(q);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv);

static size_t put_u64(char *out, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

/* "$LEN\r\n" */
static size_t put_bulk_head(char *out, size_t len)
{
    out[0] = '$';
    size_t n = 1 + put_u64(out + 1, len);
    out[n++] = '\r';
    out[n++] = '\n';
    return n;
}

static size_t put_bulk(char *out, const char *s, size_t len)
{
    size_t n = put_bulk_head(out, len);
    memcpy(out + n, s, len);
    n += len;
    out[n++] = '\r';
    out[n++] = '\n';
    return n;
}

/* Send one round trip asking n tokens of `key`; NULL when it cannot be sent. */
static rq_t *issue(fy_rl_redis_t *r, rlw_t *w, fy_loop_t *loop, uint64_t key, uint64_t n,
                   lease_t *slot)
{
    redisAsyncContext *ac = conn_get(w->conn, loop->now_ms, r->reconnect_ms);
    if (!ac) return NULL;
    rq_t *q = fy_xcalloc(1, sizeof *q);
    q->r = r;
    q->w = w;
    q->loop = loop;
    q->key = key;
    q->n = n;
    q->slot = slot;
    fy_list_init(&q->waiters);
    fy_timer_init(&q->timer, on_timeout, q);
    /* RESP by hand: the script and the constant arguments were formatted once (hiredis's
       printf-style formatting cost more than the rest of the round trip) */
    char cmd[sizeof r->head + sizeof r->keyp + sizeof r->tail + 64];
    size_t len = 0;
    memcpy(cmd, r->head, r->head_len);
    len = r->head_len;
    char key_text[16];
    for (int i = 15; i >= 0; i--, key >>= 4) key_text[i] = "0123456789abcdef"[key & 15];
    len += put_bulk_head(cmd + len, r->keyp_len + 16);
    memcpy(cmd + len, r->keyp, r->keyp_len);
    len += r->keyp_len;
    memcpy(cmd + len, key_text, 16);
    len += 16;
    memcpy(cmd + len, "\r\n", 2);
    len += 2;
    memcpy(cmd + len, r->tail, r->tail_len);
    len += r->tail_len;
    char num[24];
    size_t nl = put_u64(num, n);
    len += put_bulk_head(cmd + len, nl);
    memcpy(cmd + len, num, nl);
    len += nl;
    memcpy(cmd + len, "\r\n", 2);
    len += 2;
    atomic_fetch_add(&r->refs, 1);
    if (redisAsyncFormattedCommand(ac, on_reply, q, cmd, len) != REDIS_OK) {
        atomic_fetch_sub(&r->refs, 1); /* the filter still holds one */
        free(q);
        return NULL;
    }
    fy_counter_inc(r->round_trips);
    fy_timer_start(loop, &q->timer, r->timeout_ms);
    if (slot) slot->pending = q;
    return q;
}

static void add_waiter(rq_t *q, fy_exchange_t *ex)
{
    waiter_t *wt = fy_arena_alloc(ex->arena, sizeof *wt);
    wt->ex = ex;
    wt->rq = q;
    fy_list_insert_tail(&q->waiters, &wt->link);
    fy_arena_on_reset(ex->arena, waiter_gone, wt);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    rq_t *q = priv;
    fy_rl_redis_t *r = q->r;
    fy_timer_stop(q->loop, &q->timer);
    if (q->slot && q->slot->pending == q) q->slot->pending = NULL;
    const redisReply *rep = reply;
    bool ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
              rep->element[0]->type == REDIS_REPLY_INTEGER &&
              rep->element[1]->type == REDIS_REPLY_INTEGER;
    if (!ok) {
        set_down(r, true,
                 !rep                             ? "connection lost"
                 : rep->type == REDIS_REPLY_ERROR ? rep->str
                                                  : "unexpected reply");
        serve_down(q);
    } else {
        set_down(r, false, NULL);
        uint64_t k = (uint64_t)(rep->element[0]->integer > 0 ? rep->element[0]->integer : 0);
        uint64_t wait_us = (uint64_t)(rep->element[1]->integer > 0 ? rep->element[1]->integer : 0);
        waiter_t *wt;
        while (k > 0 && (wt = pop_waiter(q))) {
            k--;
            fy_filter_resume(wt->ex);
        }
        if (!fy_list_empty(&q->waiters)) {
            if (q->n > (uint64_t)rep->element[0]->integer) { /* Redis said: over the limit */
                while ((wt = pop_waiter(q))) {
                    fy_counter_inc(r->rejected);
                    fy__ratelimit_reject(wt->ex, r->status, r->name, r->burst, r->window_s,
                                         wait_us * 1000);
                }
            } else { /* more waited than were asked for: another round trip for them */
                lease_t *slot =
                    q->slot && !q->slot->pending && q->slot->key == q->key ? q->slot : NULL;
                rq_t *q2 = issue(r, q->w, q->loop, q->key, r->lease, slot);
                while ((wt = pop_waiter(q))) {
                    if (q2)
                        add_waiter(q2, wt->ex);
                    else if (down_verdict(r, wt->ex) == FY_FILTER_NEXT)
                        fy_filter_resume(wt->ex);
                }
            }
        } else if (k > 0 && q->slot && q->slot->key == q->key && !q->slot->pending) {
            q->slot->tokens += k; /* the rest of the lease, spent locally */
            /* spendable for as long as the tokens stand for, and at least a second: a lease
               of a fast limit must not expire between two requests */
            uint64_t ms = (k * r->t_ns) / 1000000;
            q->slot->expires_ms = q->loop->now_ms + (ms > 1000 ? ms : 1000);
        }
    }
    free(q);
    r_unref(r);
}

fy_filter_verdict_t fy__rl_redis_take(fy_rl_redis_t *r, fy_exchange_t *ex, uint64_t key)
{
    unsigned wid = (unsigned)ex->ctx->worker_id % MAX_WORKERS;
    rlw_t *w = r->w[wid];
    fy_loop_t *loop = ex->ctx->loop;
    if (__builtin_expect(!w, 0)) {
        w = r->w[wid] = fy_xcalloc(1, sizeof *w);
        w->conn = conn_find((int)wid, loop, r->host, r->port);
    }
    lease_t *L = &w->leases[key & (LEASE_SLOTS - 1)];
    if (L->key == key) {
        if (L->tokens > 0 && loop->now_ms < L->expires_ms) {
            L->tokens--;
            return FY_FILTER_NEXT;
        }
        if (L->pending) {
            add_waiter(L->pending, ex);
            return FY_FILTER_WAIT;
        }
    }
    lease_t *slot = NULL;
    if (!L->pending) { /* take the slot over (a lease of another key is dropped) */
        L->key = key;
        L->tokens = 0;
        slot = L;
    }
    bool down = atomic_load_explicit(&r->down, memory_order_relaxed);
    if (down && !slot) return down_verdict(r, ex); /* a probe for this slot is in flight */
    rq_t *q = issue(r, w, loop, key, r->lease, slot);
    if (!q) {
        set_down(r, true, "not connected");
        return down_verdict(r, ex);
    }
    if (down) return down_verdict(r, ex); /* the round trip only probes (and leases) */
    add_waiter(q, ex);
    return FY_FILTER_WAIT;
}

fy_rl_redis_t *fy__rl_redis_new(const fy_ratelimit_redis_conf_t *rc, const char *name,
                                uint64_t t_ns, uint64_t burst, int status, uint64_t window_s,
                                const char *where)
{
    fy_rl_redis_t *r = fy_xcalloc(1, sizeof *r);
    atomic_init(&r->refs, 1);
    snprintf(r->host, sizeof r->host, "%s", rc->host);
    r->port = rc->port;
    r->lease = rc->lease > 0 ? (uint64_t)rc->lease : burst / 50;
    if (r->lease == 0) r->lease = 1;
    r->timeout_ms = rc->timeout_ms;
    r->reconnect_ms = rc->reconnect_ms;
    r->on_error = rc->on_error;
    r->error_status = (int)rc->error_status;
    r->status = status;
    r->t_ns = t_ns;
    r->t_us = t_ns / 1000 ? t_ns / 1000 : 1;
    r->burst = burst;
    r->tau_us = r->t_us * burst;
    r->window_s = window_s;
    r->prefix = fy_xstrdup(rc->prefix ? rc->prefix : "");
    r->name = fy_xstrdup(name);
    memcpy(r->head, "*7\r\n", 4);
    r->head_len = 4;
    r->head_len += put_bulk(r->head + r->head_len, "EVAL", 4);
    r->head_len += put_bulk(r->head + r->head_len, SCRIPT, sizeof SCRIPT - 1);
    r->head_len += put_bulk(r->head + r->head_len, "1", 1);
    int kp = snprintf(r->keyp, sizeof r->keyp, "%s%s:", r->prefix, r->name);
    if (kp < 0 || (size_t)kp >= sizeof r->keyp) {
        fy_error("%s: rate-limit %s: redis prefix and name are too long (%zu bytes at most)", where,
                 name, sizeof r->keyp - 1);
        free(r->prefix);
        free(r->name);
        free(r);
        return NULL;
    }
    r->keyp_len = (size_t)kp;
    char num[24];
    size_t nl = put_u64(num, r->t_us);
    r->tail_len = put_bulk(r->tail, num, nl);
    nl = put_u64(num, r->tau_us);
    r->tail_len += put_bulk(r->tail + r->tail_len, num, nl);
    r->where = fy_xstrdup(where);
    char labels[192];
    snprintf(labels, sizeof labels, "policy=\"%s\"", name);
    r->down_total =
        fy_counter_register("ferry_policy_ratelimit_redis_down_total", labels, FY_COUNTER);
    r->rejected = fy_counter_register("ferry_policy_ratelimit_rejected_total", labels, FY_COUNTER);
    r->round_trips =
        fy_counter_register("ferry_policy_ratelimit_redis_round_trips_total", labels, FY_COUNTER);
    return r;
}

void fy__rl_redis_free(fy_rl_redis_t *r)
{
    if (r) r_unref(r);
}
