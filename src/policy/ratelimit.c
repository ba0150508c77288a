/* The shared GCRA table, the `rate-limit:` and `client-limits:` filters (policy/ratelimit.h). */
#include "policy/ratelimit.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"
#include "policy/cidr.h"
#include "policy/forwarded.h"
#include "policy/redis.h"

/* ---- hashing ---- */

static uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

uint64_t fy_rl_hash(uint64_t seed, const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = seed ^ (0x9e3779b97f4a7c15ull * (n + 1));
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        b += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, b, n);
    h = (h ^ w) * 0x100000001b3ull;
    return fmix64(h);
}

/* ---- the table ---- */

#define PROBE 8

typedef struct rl_slot {
    _Atomic uint64_t key; /* 0: never used */
    _Atomic uint64_t tat; /* ns, the loop clock */
} rl_slot_t;

struct fy_rl_table {
    rl_slot_t *v; /* owned */
    size_t mask;
    uint64_t seed; /* of the slot index (keys may come from clients' headers) */
};

fy_rl_table_t *fy_rl_table_new(size_t slots)
{
    size_t n = 16;
    while (n < slots) n <<= 1;
    fy_rl_table_t *t = fy_xcalloc(1, sizeof *t);
    t->v = fy_xcalloc(n, sizeof *t->v);
    t->mask = n - 1;
    if (getrandom(&t->seed, sizeof t->seed, GRND_NONBLOCK) != sizeof t->seed)
        t->seed = (uint64_t)(uintptr_t)t * 0x9e3779b97f4a7c15ull;
    return t;
}

void fy_rl_table_free(fy_rl_table_t *t)
{
    if (!t) return;
    free(t->v);
    free(t);
}

static inline fy_rl_result_t gcra(rl_slot_t *s, uint64_t now, uint64_t T, uint64_t burst,
                                  bool evicted)
{
    fy_rl_result_t r = {.evicted = evicted};
    uint64_t tau = T * burst;
    uint64_t tat = atomic_load_explicit(&s->tat, memory_order_relaxed);
    for (;;) {
        uint64_t base = tat > now ? tat : now;
        uint64_t next = base + T;
        if (next - now > tau) {
            r.wait_ns = next - now - tau;
            return r;
        }
        if (atomic_compare_exchange_weak_explicit(&s->tat, &tat, next, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            r.allowed = true;
            r.wait_ns = next - now;
            return r;
        }
    }
}

/* The slot of `key` in its probe window: found, a free one claimed, or the one whose key
   would be allowed again soonest taken over. A key whose TAT is in the past is in the same
   state as a fresh key, so taking its slot loses nothing (not counted as an eviction). */
uint64_t fy_rl_table_seed(const fy_rl_table_t *t)
{
    return t->seed;
}

/* Keyed by the secret seed, nonlinear in it (a client cannot solve for a colliding address
   without it), and folded so that the slot index (low bits) depends on every address bit. */
static inline uint64_t ip_key(uint64_t seed, const fy_ip_t *ip)
{
    uint64_t h = ((ip->hi ^ seed) * 0x9e3779b97f4a7c15ull ^ ip->lo) * 0xff51afd7ed558ccdull;
    return h ^ (h >> 31);
}

uint64_t fy_rl_ip_key(uint64_t seed, const fy_ip_t *ip)
{
    return ip_key(seed, ip);
}

static fy_rl_result_t take_slow(fy_rl_table_t *t, uint64_t key, uint64_t now_ns, uint64_t t_ns,
                                uint64_t burst);

/* the common case, inlined into the filter: the key sits in its home slot */
static inline fy_rl_result_t take(fy_rl_table_t *t, uint64_t key, uint64_t now_ns, uint64_t t_ns,
                                  uint64_t burst)
{
    rl_slot_t *home = &t->v[key & t->mask];
    if (__builtin_expect(atomic_load_explicit(&home->key, memory_order_acquire) == key && key, 1))
        return gcra(home, now_ns, t_ns, burst, false);
    return take_slow(t, key, now_ns, t_ns, burst);
}

fy_rl_result_t fy_rl_take(fy_rl_table_t *t, uint64_t key, uint64_t now_ns, uint64_t t_ns,
                          uint64_t burst)
{
    return take(t, key, now_ns, t_ns, burst);
}

static fy_rl_result_t take_slow(fy_rl_table_t *t, uint64_t key, uint64_t now_ns, uint64_t t_ns,
                                uint64_t burst)
{
    if (key == 0) key = 1;
    size_t base = (size_t)key;
    for (int attempt = 0; attempt < 4; attempt++) {
        rl_slot_t *victim = NULL;
        uint64_t vkey = 0, vtat = UINT64_MAX;
        for (size_t j = 0; j < PROBE; j++) {
            rl_slot_t *s = &t->v[(base + j) & t->mask];
            uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
            if (k == key) return gcra(s, now_ns, t_ns, burst, false);
            if (k == 0) {
                if (atomic_compare_exchange_strong(&s->key, &k, key))
                    return gcra(s, now_ns, t_ns, burst, false);
                if (k == key) return gcra(s, now_ns, t_ns, burst, false);
            }
            uint64_t tat = atomic_load_explicit(&s->tat, memory_order_relaxed);
            if (tat < vtat) {
                victim = s;
                vkey = k;
                vtat = tat;
            }
        }
        if (victim && atomic_compare_exchange_strong(&victim->key, &vkey, key)) {
            bool live = vtat > now_ns;
            if (live) atomic_store_explicit(&victim->tat, 0, memory_order_relaxed);
            return gcra(victim, now_ns, t_ns, burst, live);
        }
    }
    /* four lost races in a row on one window: let the request through */
    return (fy_rl_result_t){.allowed = true};
}

/* Concurrency slots: the table's `key` words only, packing a 40-bit key and a 24-bit count;
   a slot whose count is 0 is free for any key. */
#define CKEY(k) (((k) | 1) << 24) /* never 0 */
#define CCOUNT(v) ((v)&0xffffffu)

_Atomic uint64_t *fy_rl_conc_acquire(fy_rl_table_t *t, uint64_t key, uint64_t max, bool *untracked)
{
    uint64_t ck = CKEY(key >> 24);
    size_t base = (size_t)key;
    *untracked = false;
    if (max > 0xffffffu) max = 0xffffffu;
    for (int attempt = 0; attempt < 4; attempt++) {
        _Atomic uint64_t *idle = NULL;
        uint64_t idle_v = 0;
        for (size_t j = 0; j < PROBE; j++) {
            _Atomic uint64_t *s = &t->v[(base + j) & t->mask].key;
            uint64_t v = atomic_load_explicit(s, memory_order_relaxed);
            while ((v & ~0xffffffull) == ck) {
                if (CCOUNT(v) >= max) return NULL;
                if (atomic_compare_exchange_weak(s, &v, v + 1)) return s;
            }
            if (!idle && CCOUNT(v) == 0) {
                idle = s;
                idle_v = v;
            }
        }
        if (idle && atomic_compare_exchange_strong(idle, &idle_v, ck | 1)) return idle;
    }
    *untracked = true;
    return NULL;
}

void fy_rl_conc_release(_Atomic uint64_t *slot)
{
    atomic_fetch_sub_explicit(slot, 1, memory_order_relaxed);
}

/* ---- the 429 answer ---- */

static void add_hdr(fy_exchange_t *ex, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void add_hdr(fy_exchange_t *ex, const char *name, const char *fmt, ...)
{
    char buf[192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
    fy_headers_add(ex->arena, &ex->res.headers, name, strlen(name),
                   fy_arena_strndup(ex->arena, buf, (size_t)n), (size_t)n);
}

void fy__ratelimit_reject(fy_exchange_t *ex, int status, const char *policy, uint64_t quota,
                          uint64_t window_s, uint64_t wait_ns)
{
    unsigned long long secs = (wait_ns + 999999999ull) / 1000000000ull;
    if (secs == 0) secs = 1;
    add_hdr(ex, "retry-after", "%llu", secs);
    /* draft-ietf-httpapi-ratelimit-headers-08 §4, §5: structured-field lists of named items */
    add_hdr(ex, "ratelimit-policy", "\"%s\";q=%llu;w=%llu", policy, (unsigned long long)quota,
            (unsigned long long)window_s);
    add_hdr(ex, "ratelimit", "\"%s\";r=0;t=%llu", policy, secs);
    ex->error = "rate-limit: over the limit";
    static const char body[] = "rate limit exceeded\n";
    fy_exchange_respond(ex, status, "text/plain; charset=utf-8", body, sizeof body - 1);
}

/* `headers: always`: the two fields on allowed responses too, added by a sink layer when the
   response head goes out (the handler builds its own header list before that) */
typedef struct rl_layer {
    fy_sink_layer_t base;
    const char *policy, *state; /* arena */
    size_t plen, slen;
    bool added;
} rl_layer_t;

static void rl_layer_add(rl_layer_t *l, fy_exchange_t *ex)
{
    if (l->added || ex->head_sent) return;
    l->added = true;
    fy_headers_add(ex->arena, &ex->res.headers, "ratelimit-policy", 16, l->policy, l->plen);
    fy_headers_add(ex->arena, &ex->res.headers, "ratelimit", 9, l->state, l->slen);
}

static void rl_layer_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                          int state)
{
    rl_layer_add((rl_layer_t *)l, ex);
    fy_layer_next_send(l, ex, bufs, n, state);
}

static void rl_layer_send_file(fy_sink_layer_t *l, fy_exchange_t *ex, int fd, off_t off, size_t len,
                               int state)
{
    rl_layer_add((rl_layer_t *)l, ex);
    fy_layer_next_send_file(l, ex, fd, off, len, state);
}

static const fy_layer_ops_t rl_layer_ops = {
    .name = "rate-limit",
    .send = rl_layer_send,
    .send_file = rl_layer_send_file,
};

static void push_headers(fy_exchange_t *ex, const char *policy, uint64_t quota, uint64_t window_s,
                         uint64_t remaining, uint64_t reset_s)
{
    rl_layer_t *l = fy_arena_calloc(ex->arena, sizeof *l);
    char buf[192];
    int n = snprintf(buf, sizeof buf, "\"%s\";q=%llu;w=%llu", policy, (unsigned long long)quota,
                     (unsigned long long)window_s);
    l->plen = n > 0 && (size_t)n < sizeof buf ? (size_t)n : 0;
    l->policy = fy_arena_strndup(ex->arena, buf, l->plen);
    n = snprintf(buf, sizeof buf, "\"%s\";r=%llu;t=%llu", policy, (unsigned long long)remaining,
                 (unsigned long long)reset_s);
    l->slen = n > 0 && (size_t)n < sizeof buf ? (size_t)n : 0;
    l->state = fy_arena_strndup(ex->arena, buf, l->slen);
    fy_exchange_push_layer(ex, &l->base, &rl_layer_ops, FY_STAGE_LIMIT);
}

/* ---- key parts ---- */

enum { KEY_CLIENT = 1, KEY_HEADER, KEY_ROUTE };

typedef struct key_part {
    int kind;
    const char *header; /* borrowed (config), lowercase */
    size_t hlen;
} key_part_t;

static fy_ip_t client_ip(const fy_exchange_t *ex, const fy_cidr_trie_t *trusted)
{
    fy_ip_t ip = {0, 0};
    if (fy_ip_from_sockaddr(ex->remote, &ip) && trusted)
        ip = fy_forwarded_client(&ex->req.headers, &ip, trusted);
    return ip;
}

static uint64_t key_of(uint64_t seed, const key_part_t *parts, size_t n, const fy_exchange_t *ex,
                       const fy_cidr_trie_t *trusted)
{
    uint64_t h = seed;
    for (size_t i = 0; i < n; i++) {
        const key_part_t *p = &parts[i];
        if (p->kind == KEY_CLIENT) {
            fy_ip_t ip = client_ip(ex, trusted);
            h = ip_key(h, &ip);
        } else if (p->kind == KEY_HEADER) {
            const fy_header_t *hd = fy_headers_find(&ex->req.headers, p->header, p->hlen);
            h = fy_rl_hash(h + 0x51, hd ? hd->value.p : "", hd ? hd->value.len : 0);
        } else {
            h = fy_rl_hash(h + 0x77, "route", 5);
        }
    }
    return h;
}

static size_t parse_parts(const fy_conf_strlist_t *key, key_part_t *parts)
{
    size_t n = 0;
    for (size_t i = 0; i < key->n; i++) {
        const char *k = key->v[i];
        if (!strcmp(k, "client-address"))
            parts[n++] = (key_part_t){KEY_CLIENT, NULL, 0};
        else if (!strcmp(k, "route"))
            parts[n++] = (key_part_t){KEY_ROUTE, NULL, 0};
        else if (!strncmp(k, "header:", 7))
            parts[n++] = (key_part_t){KEY_HEADER, k + 7, strlen(k + 7)};
    }
    return n;
}

/* ---- rate-limit ---- */

typedef struct rl_filter {
    fy_filter_t base;
    fy_rl_table_t *table;    /* owned; NULL with redis */
    fy_rl_redis_t *redis;    /* owned, or NULL */
    fy_cidr_trie_t *trusted; /* owned, or NULL */
    key_part_t *parts;       /* owned */
    size_t nparts;
    bool client_only;    /* key: [client-address] and no trusted proxies */
    bool headers_always; /* `headers: always` (local limits) */
    uint64_t seed;       /* of the keys: the table's random seed (local), or the hash of the policy
                            name (Redis: the same on every instance) */
    uint64_t t_ns, burst;
    uint64_t window_s; /* burst * T in seconds (RateLimit-Policy w) */
    int status;
    char *name; /* owned */
    fy_counter_id_t rejected, evictions;
} rl_filter_t;

static fy_filter_verdict_t rl_on_request(fy_filter_t *f, fy_exchange_t *ex)
{
    rl_filter_t *r = (rl_filter_t *)f;
    uint64_t key;
    fy_ip_t ip;
    if (r->client_only && fy_ip_from_sockaddr(ex->remote, &ip)) /* the default key */
        key = ip_key(r->seed, &ip);
    else
        key = key_of(r->seed, r->parts, r->nparts, ex, r->trusted);
    if (r->redis) return fy__rl_redis_take(r->redis, ex, key);
    uint64_t now = ex->ctx->loop->now_ms * 1000000ull;
    fy_rl_result_t res = take(r->table, key, now, r->t_ns, r->burst);
    if (__builtin_expect(res.evicted, 0)) fy_counter_inc(r->evictions);
    if (__builtin_expect(res.allowed, 1)) {
        if (__builtin_expect(r->headers_always, 0)) {
            uint64_t tau = r->t_ns * r->burst;
            push_headers(ex, r->name, r->burst, r->window_s,
                         res.wait_ns <= tau ? (tau - res.wait_ns) / r->t_ns : 0,
                         (res.wait_ns + 999999999ull) / 1000000000ull);
        }
        return FY_FILTER_NEXT;
    }
    fy_counter_inc(r->rejected);
    fy__ratelimit_reject(ex, r->status, r->name, r->burst, r->window_s, res.wait_ns);
    return FY_FILTER_DONE;
}

static void rl_destroy(fy_filter_t *f)
{
    rl_filter_t *r = (rl_filter_t *)f;
    fy_rl_table_free(r->table);
    fy__rl_redis_free(r->redis);
    fy_cidr_trie_free(r->trusted);
    free(r->parts);
    free(r->name);
    free(r);
}

static const fy_filter_ops_t rl_ops = {
    .name = "rate-limit",
    .stage = FY_STAGE_LIMIT,
    .on_request = rl_on_request,
    .destroy = rl_destroy,
};

fy_filter_t *fy_ratelimit_filter_new(const fy_ratelimit_conf_t *conf, const char *name,
                                     const char *where)
{
    rl_filter_t *r = fy_xcalloc(1, sizeof *r);
    r->base.ops = &rl_ops;
    r->name = fy_xstrdup(conf->name ? conf->name : name);
    r->seed = fy_rl_hash(0, r->name, strlen(r->name));
    /* local keys are seeded per process, so that clients cannot aim their keys at the probe
       window of another key; Redis keys must be the same on every instance */
    r->burst = conf->burst > 0 ? (uint64_t)conf->burst : conf->count;
    r->t_ns = conf->period_ms * 1000000ull / conf->count;
    if (r->t_ns == 0) r->t_ns = 1;
    r->window_s = (r->t_ns * r->burst + 999999999ull) / 1000000000ull;
    r->status = (int)conf->status;
    r->headers_always = conf->headers == FY_RL_HEADERS_ALWAYS && !conf->redis;
    r->parts = fy_xcalloc(conf->key.n ? conf->key.n : 1, sizeof *r->parts);
    r->nparts = parse_parts(&conf->key, r->parts);
    r->client_only = r->nparts == 1 && r->parts[0].kind == KEY_CLIENT && !conf->trusted_proxies.n;
    if (conf->trusted_proxies.n) {
        r->trusted = fy__cidr_trie_of(&conf->trusted_proxies, where);
        if (!r->trusted) goto fail;
    }
    if (conf->redis) {
        r->redis = fy__rl_redis_new(conf->redis, r->name, r->t_ns, r->burst, r->status, r->window_s,
                                    where);
        if (!r->redis) goto fail;
    } else {
        r->table = fy_rl_table_new((size_t)conf->max_keys);
        r->seed ^= fy_rl_table_seed(r->table);
    }
    char labels[192];
    snprintf(labels, sizeof labels, "policy=\"%s\"", r->name);
    r->rejected = fy_counter_register("ferry_policy_ratelimit_rejected_total", labels, FY_COUNTER);
    r->evictions =
        fy_counter_register("ferry_policy_ratelimit_evictions_total", labels, FY_COUNTER);
    return &r->base;
fail:
    rl_destroy(&r->base);
    return NULL;
}

/* ---- client-limits ---- */

typedef struct cl_filter {
    fy_filter_t base;
    fy_rl_table_t *conc; /* owned, or NULL: no concurrency limit */
    fy_rl_table_t *conn; /* owned, or NULL: no connection rate */
    uint64_t max_conc;
    uint64_t conn_t_ns, conn_burst;
    int status;
    fy_counter_id_t over_conc, over_rate, untracked;
} cl_filter_t;

static void conc_release(void *slot)
{
    fy_rl_conc_release(slot);
}

static fy_filter_verdict_t cl_on_request(fy_filter_t *f, fy_exchange_t *ex)
{
    cl_filter_t *c = (cl_filter_t *)f;
    if (!c->conc) return FY_FILTER_NEXT;
    fy_ip_t ip = client_ip(ex, NULL);
    bool untracked;
    _Atomic uint64_t *slot = fy_rl_conc_acquire(
        c->conc, fy_rl_ip_key(fy_rl_table_seed(c->conc), &ip), c->max_conc, &untracked);
    if (__builtin_expect(slot != NULL, 1)) {
        fy_arena_on_reset(ex->arena, conc_release, (void *)slot);
        return FY_FILTER_NEXT;
    }
    if (untracked) {
        fy_counter_inc(c->untracked);
        return FY_FILTER_NEXT;
    }
    fy_counter_inc(c->over_conc);
    fy_exchange_fail(ex, c->status, "client-limits: too many concurrent requests");
    return FY_FILTER_DONE;
}

static void cl_destroy(fy_filter_t *f)
{
    cl_filter_t *c = (cl_filter_t *)f;
    fy_rl_table_free(c->conc);
    fy_rl_table_free(c->conn);
    free(c);
}

static const fy_filter_ops_t cl_ops = {
    .name = "client-limits",
    .stage = FY_STAGE_ACCESS,
    .on_request = cl_on_request,
    .destroy = cl_destroy,
};

fy_filter_t *fy_client_limits_filter_new(const fy_client_limits_conf_t *conf, const char *where)
{
    cl_filter_t *c = fy_xcalloc(1, sizeof *c);
    c->base.ops = &cl_ops;
    c->status = (int)conf->status;
    if (conf->concurrency > 0) {
        c->conc = fy_rl_table_new((size_t)conf->max_keys);
        c->max_conc = (uint64_t)conf->concurrency;
    }
    if (conf->connection_rate) {
        c->conn = fy_rl_table_new((size_t)conf->max_keys);
        c->conn_t_ns = conf->conn_period_ms * 1000000ull / conf->conn_count;
        if (c->conn_t_ns == 0) c->conn_t_ns = 1;
        c->conn_burst =
            conf->connection_burst > 0 ? (uint64_t)conf->connection_burst : conf->conn_count;
    }
    char labels[160];
    snprintf(labels, sizeof labels, "policy=\"%s\"", where);
    c->over_conc =
        fy_counter_register("ferry_policy_client_concurrency_rejected_total", labels, FY_COUNTER);
    c->over_rate =
        fy_counter_register("ferry_policy_client_connection_rate_closed_total", labels, FY_COUNTER);
    c->untracked = fy_counter_register("ferry_policy_client_untracked_total", labels, FY_COUNTER);
    return &c->base;
}

bool fy_client_limits_admit(const fy_filter_chain_t *chain, const struct sockaddr *sa,
                            uint64_t now_ms)
{
    if (!chain) return true;
    for (size_t i = 0; i < chain->n; i++) {
        if (chain->v[i]->ops != &cl_ops) continue;
        cl_filter_t *c = (cl_filter_t *)chain->v[i];
        if (!c->conn) continue;
        fy_ip_t ip;
        if (!fy_ip_from_sockaddr(sa, &ip)) continue;
        fy_rl_result_t r = fy_rl_take(c->conn, fy_rl_ip_key(fy_rl_table_seed(c->conn), &ip),
                                      now_ms * 1000000ull, c->conn_t_ns, c->conn_burst);
        if (!r.allowed) {
            fy_counter_inc(c->over_rate);
            return false;
        }
    }
    return true;
}
