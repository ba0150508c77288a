/* The cache's memory tier (policy/cache_store.h). */
#include "policy/cache_store.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/alloc.h"
#include "policy/cache_disk.h"
#include "policy/cache_key.h"

#define NBUCKETS 4096 /* per shard; chains are short well past a million objects */
#define CHUNK_MIN 16384
#define CHUNK_MAX 262144
#define RESERVE_MAX 4096 /* at most this much room for a head block inside the object */

typedef struct shard {
    pthread_mutex_t mu;
    fy_cache_obj_t *buckets[NBUCKETS];
    fy_cache_obj_t lru; /* sentinel: lru.lru_next is the most recent */
    size_t bytes, max, count;
} shard_t;

struct fy_cache_zone {
    char *name;
    unsigned refs; /* main thread */
    size_t nshards;
    shard_t *shards;
    fy_cache_disk_t *disk;   /* owned; NULL: memory only */
    atomic_size_t head_hint; /* the last stored head block's size (relaxed: only a hint) */
    struct fy_cache_zone *next;
};

static fy_cache_zone_t *zones; /* under zones_mu: a generation may be freed off the main thread */
static pthread_mutex_t zones_mu = PTHREAD_MUTEX_INITIALIZER;

static void set_max(fy_cache_zone_t *z, size_t size)
{
    for (size_t i = 0; i < z->nshards; i++) {
        pthread_mutex_lock(&z->shards[i].mu);
        z->shards[i].max = size / z->nshards;
        pthread_mutex_unlock(&z->shards[i].mu);
    }
}

fy_cache_zone_t *fy_cache_zone_get(const char *name, size_t size)
{
    pthread_mutex_lock(&zones_mu);
    for (fy_cache_zone_t *z = zones; z; z = z->next)
        if (!strcmp(z->name, name)) {
            z->refs++;
            pthread_mutex_unlock(&zones_mu);
            set_max(z, size);
            return z;
        }
    fy_cache_zone_t *z = fy_xcalloc(1, sizeof *z);
    z->name = fy_xstrdup(name);
    z->refs = 1;
    /* one shard per 4 MiB, up to 16: small zones stay exact LRUs */
    z->nshards = size / (4u << 20);
    if (z->nshards < 1) z->nshards = 1;
    if (z->nshards > 16) z->nshards = 16;
    z->shards = fy_xcalloc(z->nshards, sizeof *z->shards);
    for (size_t i = 0; i < z->nshards; i++) {
        shard_t *s = &z->shards[i];
        pthread_mutex_init(&s->mu, NULL);
        s->lru.lru_next = s->lru.lru_prev = &s->lru;
        s->max = size / z->nshards;
    }
    z->next = zones;
    zones = z;
    pthread_mutex_unlock(&zones_mu);
    return z;
}

void fy_cache_zone_put(fy_cache_zone_t *z)
{
    if (!z) return;
    pthread_mutex_lock(&zones_mu);
    if (--z->refs) {
        pthread_mutex_unlock(&zones_mu);
        return;
    }
    for (fy_cache_zone_t **p = &zones; *p; p = &(*p)->next)
        if (*p == z) {
            *p = z->next;
            break;
        }
    pthread_mutex_unlock(&zones_mu);
    fy_cache_disk_close(z->disk); /* its reader fills objects of this zone: first */
    for (size_t i = 0; i < z->nshards; i++) {
        shard_t *s = &z->shards[i];
        /* the zone goes: drop the index's references bucket by bucket (no chain searches,
           no LRU unlinks); readers still holding objects keep them */
        for (size_t b = 0; b < NBUCKETS; b++)
            for (fy_cache_obj_t *o = s->buckets[b], *n; o; o = n) {
                n = o->hnext;
                o->indexed = false;
                fy_cache_obj_release(o);
            }
        pthread_mutex_destroy(&s->mu);
    }
    free(z->shards);
    free(z->name);
    free(z);
}

int fy_cache_zone_set_disk(fy_cache_zone_t *z, const char *dir, uint64_t max_bytes, unsigned queue)
{
    if (!dir || !*dir) return 0;
    if (z->disk && !strcmp(fy_cache_disk_dir(z->disk), dir)) {
        fy_cache_disk_set_max(z->disk, max_bytes);
        return 0;
    }
    if (z->disk) return 0; /* another directory for a live zone: the first stays */
    z->disk = fy_cache_disk_open(dir, max_bytes, queue, z);
    return z->disk ? 0 : -1;
}

fy_cache_disk_t *fy_cache_zone_disk(fy_cache_zone_t *z)
{
    return z->disk;
}

const char *fy_cache_zone_name(const fy_cache_zone_t *z)
{
    return z->name;
}

void fy_cache_zone_foreach(void (*fn)(fy_cache_zone_t *z, void *arg), void *arg)
{
    pthread_mutex_lock(&zones_mu);
    for (fy_cache_zone_t *z = zones; z; z = z->next) fn(z, arg);
    pthread_mutex_unlock(&zones_mu);
}

size_t fy_cache_zone_bytes(fy_cache_zone_t *z)
{
    size_t b = 0;
    for (size_t i = 0; i < z->nshards; i++) {
        pthread_mutex_lock(&z->shards[i].mu);
        b += z->shards[i].bytes;
        pthread_mutex_unlock(&z->shards[i].mu);
    }
    return b;
}

size_t fy_cache_zone_count(fy_cache_zone_t *z)
{
    size_t b = 0;
    for (size_t i = 0; i < z->nshards; i++) {
        pthread_mutex_lock(&z->shards[i].mu);
        b += z->shards[i].count;
        pthread_mutex_unlock(&z->shards[i].mu);
    }
    return b;
}

static shard_t *shard_of(fy_cache_zone_t *z, uint64_t hash)
{
    return &z->shards[(hash >> 32) % z->nshards];
}

/* ---- objects ---- */

void fy_cache_obj_ref(fy_cache_obj_t *o)
{
    atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
}

void fy_cache_obj_release(fy_cache_obj_t *o)
{
    if (!o || atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) != 1) return;
    for (fy_cache_chunk_t *c = o->first, *n; c; c = n) {
        n = c->next;
        if (c != o->inline_chunk) free(c);
    }
    free(o->mem);
    free(o);
}

static void wake(fy_cache_obj_t *o);

/* ---- index ---- */

static void lru_unlink(fy_cache_obj_t *o)
{
    o->lru_prev->lru_next = o->lru_next;
    o->lru_next->lru_prev = o->lru_prev;
}

static void lru_front(shard_t *s, fy_cache_obj_t *o)
{
    o->lru_next = s->lru.lru_next;
    o->lru_prev = &s->lru;
    s->lru.lru_next->lru_prev = o;
    s->lru.lru_next = o;
}

static void unlink_locked(shard_t *s, fy_cache_obj_t *o)
{
    if (!o->indexed) return;
    fy_cache_obj_t **p = &s->buckets[o->hash % NBUCKETS];
    while (*p && *p != o) p = &(*p)->hnext;
    if (*p) *p = o->hnext;
    lru_unlink(o);
    o->indexed = false;
    s->bytes -= o->charge;
    s->count--;
    fy_cache_obj_release(o); /* the index's reference */
}

static void evict_locked(shard_t *s, const fy_cache_obj_t *keep)
{
    while (s->bytes > s->max) {
        fy_cache_obj_t *v = s->lru.lru_prev;
        if (v == &s->lru) break;
        if (v == keep) {
            v = v->lru_prev;
            if (v == &s->lru) break;
        }
        /* an object still being fetched is evicted like any other: its readers keep it */
        int st = atomic_load(&v->state);
        unlink_locked(s, v);
        if (st == FY_CACHE_PENDING) {
            /* followers of a pending one go to the origin themselves */
            (void)st;
        }
    }
}

static void charge(shard_t *s, fy_cache_obj_t *o, size_t n)
{
    o->charge += n;
    if (o->indexed) {
        s->bytes += n;
        evict_locked(s, o);
    }
}

static bool same_key(const fy_cache_obj_t *o, uint64_t hash, const char *key, size_t keylen)
{
    return o->hash == hash && o->keylen == keylen && memcmp(o->key, key, keylen) == 0;
}

static bool vary_matches(const fy_cache_obj_t *o, const fy_headers_t *req_headers, fy_arena_t *a)
{
    if (!o->vary_names) return true;
    if (o->vnlen == 1 && o->vary_names[0] == '*') return false;
    size_t l;
    char *k = fy_cache_vary_key(a, req_headers, o->vary_names, o->vnlen, &l);
    return l == o->vklen && memcmp(k, o->vary_key, l) == 0;
}

static fy_cache_obj_t *lookup_locked(shard_t *s, uint64_t hash, const char *key, size_t keylen,
                                     const fy_headers_t *req_headers, fy_arena_t *a, bool *pending)
{
    fy_cache_obj_t *found = NULL, *pend = NULL;
    *pending = false;
    for (fy_cache_obj_t *o = s->buckets[hash % NBUCKETS]; o; o = o->hnext) {
        if (!same_key(o, hash, key, keylen)) continue;
        int st = atomic_load_explicit(&o->state, memory_order_acquire);
        if (st == FY_CACHE_PENDING) {
            if (!pend) pend = o;
            continue;
        }
        if (st != FY_CACHE_STREAMING && st != FY_CACHE_COMPLETE) continue;
        if (vary_matches(o, req_headers, a)) {
            found = o;
            break;
        }
    }
    if (!found && pend) {
        found = pend;
        *pending = true;
    }
    if (found) {
        fy_cache_obj_ref(found);
        /* LRU moves at most once a second per object: a hot object costs no writes */
        uint64_t now = (uint64_t)time(NULL);
        if (found->lru_ms != now) {
            found->lru_ms = now;
            lru_unlink(found);
            lru_front(s, found);
        }
    }
    return found;
}

fy_cache_obj_t *fy_cache_lookup(fy_cache_zone_t *z, uint64_t hash, const char *key, size_t keylen,
                                const fy_headers_t *req_headers, fy_arena_t *a, bool *pending)
{
    shard_t *s = shard_of(z, hash);
    pthread_mutex_lock(&s->mu);
    fy_cache_obj_t *found = lookup_locked(s, hash, key, keylen, req_headers, a, pending);
    pthread_mutex_unlock(&s->mu);
    return found;
}

static void index_locked(shard_t *s, fy_cache_obj_t *o);
static fy_cache_obj_t *obj_new(fy_cache_zone_t *z, uint64_t hash, const char *key, size_t keylen);

fy_cache_obj_t *fy_cache_lookup_begin(fy_cache_zone_t *z, uint64_t hash, const char *key,
                                      size_t keylen, const fy_headers_t *req_headers, fy_arena_t *a,
                                      bool *pending, bool *created)
{
    shard_t *s = shard_of(z, hash);
    *created = false;
    pthread_mutex_lock(&s->mu);
    fy_cache_obj_t *o = lookup_locked(s, hash, key, keylen, req_headers, a, pending);
    if (!o && (o = obj_new(z, hash, key, keylen)) != NULL) {
        index_locked(s, o); /* no other PENDING one: lookup_locked would have found it */
        *created = true;
    }
    pthread_mutex_unlock(&s->mu);
    return o;
}

static void index_locked(shard_t *s, fy_cache_obj_t *o)
{
    fy_cache_obj_ref(o); /* the index's reference */
    o->hnext = s->buckets[o->hash % NBUCKETS];
    s->buckets[o->hash % NBUCKETS] = o;
    lru_front(s, o);
    o->indexed = true;
    s->bytes += o->charge;
    s->count++;
    evict_locked(s, o);
}

/* A new PENDING object for key, with the caller's reference (not indexed yet). */
static fy_cache_obj_t *obj_new(fy_cache_zone_t *z, uint64_t hash, const char *key, size_t keylen)
{
    /* one allocation: the object, its key, and room for a head block (and a small body) the
       size of the zone's last one, so a stored response costs no second malloc */
    size_t koff = (keylen + 1 + 15) & ~(size_t)15;
    size_t hint = atomic_load_explicit(&z->head_hint, memory_order_relaxed);
    fy_cache_obj_t *o = malloc(sizeof *o + koff + hint);
    if (!o) return NULL;
    memset(o, 0, sizeof *o);
    o->key = (char *)(o + 1);
    memcpy(o->key, key, keylen);
    o->key[keylen] = '\0';
    o->reserve = hint ? o->key + koff : NULL;
    o->reserve_cap = hint;
    o->keylen = keylen;
    o->hash = hash;
    o->content_length = -1;
    atomic_init(&o->refs, 1);
    atomic_init(&o->state, FY_CACHE_PENDING);
    o->charge = sizeof *o + koff + hint;
    return o;
}

fy_cache_obj_t *fy_cache_begin(fy_cache_zone_t *z, uint64_t hash, const char *key, size_t keylen,
                               bool *follow)
{
    shard_t *s = shard_of(z, hash);
    *follow = false;
    fy_cache_obj_t *o = obj_new(z, hash, key, keylen);
    if (!o) return NULL;
    pthread_mutex_lock(&s->mu);
    for (fy_cache_obj_t *p = s->buckets[hash % NBUCKETS]; p; p = p->hnext)
        if (same_key(p, hash, key, keylen) && atomic_load(&p->state) == FY_CACHE_PENDING) {
            fy_cache_obj_ref(p);
            pthread_mutex_unlock(&s->mu);
            fy_cache_obj_release(o);
            *follow = true;
            return p;
        }
    index_locked(s, o);
    pthread_mutex_unlock(&s->mu);
    return o;
}

static fy_str_t dup_into(char **w, fy_str_t s)
{
    memcpy(*w, s.p, s.len);
    fy_str_t r = fy_str(*w, s.len);
    *w += s.len;
    return r;
}

/* A header block (array + bytes) for hs: in `room` when it fits (then *mem is NULL), else in
   one allocation that *mem owns. */
/* (Age is not kept: it is computed for each response, §4.2.3.) */
static fy_header_t *copy_headers(const fy_headers_t *hs, const char *k2, size_t l2, const char *k3,
                                 size_t l3, size_t extra, char *room, size_t room_cap, char **mem,
                                 char **vn, char **vk, size_t *total, size_t *count)
{
    size_t bytes = l2 + l3 + 2;
    for (size_t i = 0; i < hs->n; i++) bytes += hs->v[i].name.len + hs->v[i].value.len;
    bytes = (bytes + 15) & ~(size_t)15;
    size_t arr = (hs->n ? hs->n : 1) * sizeof(fy_header_t);
    char *m = arr + bytes + extra <= room_cap ? room : malloc(arr + bytes + extra);
    if (!m) return NULL;
    fy_header_t *v = (fy_header_t *)m;
    char *w = m + arr;
    *vn = NULL;
    *vk = NULL;
    if (k2) {
        *vn = w;
        memcpy(w, k2, l2);
        w += l2;
        *w++ = '\0';
        *vk = w;
        memcpy(w, k3, l3);
        w += l3;
        *w++ = '\0';
    }
    size_t k = 0;
    for (size_t i = 0; i < hs->n; i++) {
        if (hs->v[i].name.len == 3 && fy_str_ieq(hs->v[i].name, "age", 3)) continue;
        v[k].name = dup_into(&w, hs->v[i].name);
        v[k].value = dup_into(&w, hs->v[i].value);
        k++;
    }
    *count = k;
    *mem = m == room ? NULL : m;
    *total = arr + bytes + extra;
    return v;
}

static void find_validators(fy_cache_obj_t *o)
{
    o->etag = o->last_modified = FY_STR_NULL;
    for (size_t i = 0; i < o->nhdrs; i++) {
        if (fy_str_ieq(o->hdrs[i].name, "etag", 4) && !o->etag.len) o->etag = o->hdrs[i].value;
        if (fy_str_ieq(o->hdrs[i].name, "last-modified", 13) && !o->last_modified.len)
            o->last_modified = o->hdrs[i].value;
    }
}

/* Unlink other readable objects of o's key and variant (a newer response replaces them). */
static void replace_locked(shard_t *s, fy_cache_obj_t *o)
{
    fy_cache_obj_t *p = s->buckets[o->hash % NBUCKETS];
    while (p) {
        fy_cache_obj_t *n = p->hnext;
        if (p != o && same_key(p, o->hash, o->key, o->keylen) &&
            atomic_load(&p->state) != FY_CACHE_PENDING && p->vnlen == o->vnlen &&
            p->vklen == o->vklen &&
            (!p->vnlen || !memcmp(p->vary_names, o->vary_names, p->vnlen)) &&
            (!p->vklen || !memcmp(p->vary_key, o->vary_key, p->vklen))) {
            atomic_store(&p->dead, true);
            unlink_locked(s, p);
        }
        p = n;
    }
}

int fy_cache_set_head(fy_cache_zone_t *z, fy_cache_obj_t *o, int status, const fy_headers_t *hs,
                      const char *vary_names, size_t vnlen, const char *vary_key, size_t vklen,
                      size_t max_object)
{
    char *mem, *vn, *vk;
    size_t total, count = 0;
    /* a body of known small length gets its chunk in the same allocation */
    size_t cl = o->content_length > 0 && o->content_length <= CHUNK_MAX &&
                        (size_t)o->content_length <= max_object
                    ? (size_t)o->content_length
                    : 0;
    size_t extra = cl ? sizeof(fy_cache_chunk_t) + cl : 0;
    fy_header_t *v = copy_headers(hs, vary_names, vnlen, vary_key, vklen, extra, o->reserve,
                                  o->reserve_cap, &mem, &vn, &vk, &total, &count);
    if (!v || total - extra > max_object) {
        free(v ? mem : NULL);
        fy_cache_abort(z, o, FY_CACHE_PASS);
        return -1;
    }
    /* the next object of this zone gets room for a head like this one */
    size_t hint = total <= RESERVE_MAX ? (total + 63) & ~(size_t)63 : 0;
    if (atomic_load_explicit(&z->head_hint, memory_order_relaxed) != hint)
        atomic_store_explicit(&z->head_hint, hint, memory_order_relaxed);
    bool in_reserve = !mem;
    o->reserve = NULL; /* used (or not needed): a second head gets its own block */
    o->reserve_cap = 0;
    free(o->mem);
    o->mem = mem;
    if (cl) {
        fy_cache_chunk_t *c = (fy_cache_chunk_t *)((char *)v + total - extra); /* v: the block */
        c->next = NULL;
        c->cap = cl;
        o->first = o->tail = o->inline_chunk = c;
        o->tail_used = 0;
    }
    o->vary_names = vn;
    o->vnlen = vn ? vnlen : 0;
    o->vary_key = vk;
    o->vklen = vk ? vklen : 0;
    o->status = status;
    o->hdrs = v;
    o->nhdrs = count;
    find_validators(o);
    shard_t *s = shard_of(z, o->hash);
    pthread_mutex_lock(&s->mu);
    if (o->indexed) replace_locked(s, o);
    if (!in_reserve) charge(s, o, total); /* the reserve was charged with the object */
    pthread_mutex_unlock(&s->mu);
    atomic_store_explicit(&o->state, FY_CACHE_STREAMING, memory_order_release);
    wake(o);
    return 0;
}

int fy_cache_append(fy_cache_zone_t *z, fy_cache_obj_t *o, const char *p, size_t n,
                    size_t max_object)
{
    size_t len = atomic_load_explicit(&o->body_len, memory_order_relaxed);
    if (len + n > max_object) {
        fy_cache_abort(z, o, FY_CACHE_ABORTED);
        return -1;
    }
    while (n) {
        if (!o->tail || o->tail_used == o->tail->cap) {
            size_t cap = CHUNK_MIN;
            if (o->content_length > 0 && (size_t)o->content_length > len)
                cap = (size_t)o->content_length - len;
            if (cap < n) cap = n;
            if (cap > CHUNK_MAX) cap = CHUNK_MAX;
            fy_cache_chunk_t *c = malloc(sizeof *c + cap);
            if (!c) {
                fy_cache_abort(z, o, FY_CACHE_ABORTED);
                return -1;
            }
            c->next = NULL;
            c->cap = cap;
            if (o->tail)
                o->tail->next = c;
            else
                o->first = c;
            o->tail = c;
            o->tail_used = 0;
            shard_t *s = shard_of(z, o->hash);
            pthread_mutex_lock(&s->mu);
            charge(s, o, sizeof *c + cap);
            pthread_mutex_unlock(&s->mu);
        }
        size_t k = o->tail->cap - o->tail_used;
        if (k > n) k = n;
        memcpy(o->tail->data + o->tail_used, p, k);
        o->tail_used += k;
        p += k;
        n -= k;
        len += k;
        atomic_store_explicit(&o->body_len, len, memory_order_seq_cst);
    }
    wake(o);
    return 0;
}

void fy_cache_finish(fy_cache_zone_t *z, fy_cache_obj_t *o)
{
    atomic_store_explicit(&o->state, FY_CACHE_COMPLETE, memory_order_seq_cst);
    wake(o);
    if (z->disk && !o->from_disk && !atomic_load(&o->dead)) fy_cache_disk_store(z->disk, o);
}

void fy_cache_abort(fy_cache_zone_t *z, fy_cache_obj_t *o, int state)
{
    shard_t *s = shard_of(z, o->hash);
    pthread_mutex_lock(&s->mu);
    atomic_store_explicit(&o->state, state, memory_order_seq_cst);
    unlink_locked(s, o);
    pthread_mutex_unlock(&s->mu);
    wake(o);
}

fy_cache_obj_t *fy_cache_obj_copy(const fy_cache_obj_t *o, const fy_headers_t *hs)
{
    fy_cache_obj_t *c = calloc(1, sizeof *c + o->keylen + 1);
    if (!c) return NULL;
    char *mem, *vn, *vk;
    size_t total, count = 0;
    fy_header_t *v = copy_headers(hs, o->vary_names, o->vnlen, o->vary_key, o->vklen, 0, NULL, 0,
                                  &mem, &vn, &vk, &total, &count);
    if (!v) {
        free(c);
        return NULL;
    }
    size_t len = atomic_load(&o->body_len);
    fy_cache_chunk_t *b = NULL;
    if (len) {
        b = malloc(sizeof *b + len);
        if (!b) {
            free(mem);
            free(c);
            return NULL;
        }
        b->next = NULL;
        b->cap = len;
        size_t off = 0, co = 0;
        const fy_cache_chunk_t *ch = NULL;
        const char *p;
        size_t k;
        while ((k = fy_cache_obj_read(o, off, &ch, &co, &p)) > 0) {
            memcpy(b->data + off, p, k);
            off += k;
        }
    }
    *c = *o;
    atomic_init(&c->refs, 1);
    c->mem = mem;
    c->reserve = NULL;
    c->reserve_cap = 0;
    c->key = (char *)(c + 1);
    memcpy(c->key, o->key, o->keylen);
    c->key[o->keylen] = '\0';
    c->inline_chunk = NULL;
    c->vary_names = vn;
    c->vary_key = vk;
    c->hdrs = v;
    c->nhdrs = count;
    find_validators(c);
    c->first = c->tail = b;
    c->tail_used = len;
    atomic_init(&c->body_len, len);
    atomic_init(&c->state, FY_CACHE_COMPLETE);
    atomic_init(&c->nwaiting, 0);
    atomic_init(&c->revalidating, false);
    atomic_init(&c->wait_mask, 0);
    c->hnext = c->lru_next = c->lru_prev = NULL;
    c->indexed = false;
    c->from_disk = false; /* new headers: written again */
    atomic_init(&c->dead, false);
    c->charge = sizeof *c + total + (b ? sizeof *b + len : 0);
    return c;
}

void fy_cache_insert(fy_cache_zone_t *z, fy_cache_obj_t *o)
{
    shard_t *s = shard_of(z, o->hash);
    pthread_mutex_lock(&s->mu);
    index_locked(s, o);
    replace_locked(s, o);
    pthread_mutex_unlock(&s->mu);
    if (z->disk) fy_cache_disk_store(z->disk, o);
}

size_t fy_cache_invalidate(fy_cache_zone_t *z, uint64_t hash, const char *key, size_t keylen)
{
    shard_t *s = shard_of(z, hash);
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    fy_cache_obj_t *p = s->buckets[hash % NBUCKETS];
    while (p) {
        fy_cache_obj_t *nx = p->hnext;
        if (same_key(p, hash, key, keylen) && atomic_load(&p->state) != FY_CACHE_PENDING) {
            atomic_store(&p->dead, true);
            unlink_locked(s, p);
            n++;
        }
        p = nx;
    }
    pthread_mutex_unlock(&s->mu);
    if (z->disk) {
        size_t k = fy_cache_disk_remove_key(z->disk, hash, key, keylen);
        if (k > n) n = k; /* objects in memory are mostly on disk too: count each once */
    }
    return n;
}

static bool has_tag(const fy_cache_obj_t *o, const char *tag, size_t tlen)
{
    for (size_t i = 0; i < o->nhdrs; i++) {
        fy_str_t n = o->hdrs[i].name;
        bool ct = fy_str_ieq(n, "cache-tag", 9), sk = fy_str_ieq(n, "surrogate-key", 13);
        if (!ct && !sk) continue;
        /* Cache-Tag: comma-separated; Surrogate-Key: space-separated */
        const char *p = o->hdrs[i].value.p, *e = p + o->hdrs[i].value.len;
        while (p < e) {
            while (p < e && (*p == ' ' || *p == ',' || *p == '\t')) p++;
            const char *s = p;
            while (p < e && *p != ' ' && *p != ',' && *p != '\t') p++;
            if ((size_t)(p - s) == tlen && memcmp(s, tag, tlen) == 0) return true;
        }
    }
    return false;
}

static size_t purge_if(fy_cache_zone_t *z, const char *prefix, size_t plen, const char *tag,
                       size_t tlen)
{
    size_t n = 0;
    for (size_t i = 0; i < z->nshards; i++) {
        shard_t *s = &z->shards[i];
        pthread_mutex_lock(&s->mu);
        fy_cache_obj_t *o = s->lru.lru_next;
        while (o != &s->lru) {
            fy_cache_obj_t *nx = o->lru_next;
            int st = atomic_load(&o->state);
            bool hit = st != FY_CACHE_PENDING &&
                       (prefix ? o->keylen >= plen && !memcmp(o->key, prefix, plen)
                               : has_tag(o, tag, tlen));
            if (hit) {
                atomic_store(&o->dead, true);
                unlink_locked(s, o);
                n++;
            }
            o = nx;
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (z->disk) {
        size_t k = prefix ? fy_cache_disk_remove_prefix(z->disk, prefix, plen)
                          : fy_cache_disk_remove_tag(z->disk, tag, tlen);
        if (k > n) n = k;
    }
    return n;
}

size_t fy_cache_purge_prefix(fy_cache_zone_t *z, const char *prefix, size_t plen)
{
    return purge_if(z, prefix, plen, NULL, 0);
}

size_t fy_cache_purge_tag(fy_cache_zone_t *z, const char *tag, size_t tlen)
{
    return purge_if(z, NULL, 0, tag, tlen);
}

size_t fy_cache_obj_read(const fy_cache_obj_t *o, size_t off, const fy_cache_chunk_t **chunk,
                         size_t *chunk_off, const char **p)
{
    size_t len = atomic_load_explicit(&o->body_len, memory_order_seq_cst);
    if (off >= len) return 0;
    const fy_cache_chunk_t *c = *chunk;
    size_t co = *chunk_off;
    if (!c) {
        c = o->first;
        co = 0;
    }
    while (c && off >= co + c->cap) {
        co += c->cap;
        c = c->next;
    }
    if (!c) return 0;
    *chunk = c;
    *chunk_off = co;
    size_t end = co + c->cap < len ? co + c->cap : len;
    *p = c->data + (off - co);
    return end - off;
}

/* ---- waiters: one eventfd and one list per worker ---- */

#define MAX_WORKERS 256

typedef struct notifier {
    atomic_int efd; /* -1 until the worker made it */
    fy_io_t io;
    fy_list_t waiters; /* this worker's parked waiters */
    fy_loop_t *loop;
} notifier_t;

static notifier_t notifiers[MAX_WORKERS];
static pthread_once_t notifiers_once = PTHREAD_ONCE_INIT;

static void notifiers_init(void)
{
    for (int i = 0; i < MAX_WORKERS; i++) atomic_init(&notifiers[i].efd, -1);
}

static void on_notify(fy_io_t *io, uint32_t events)
{
    (void)events;
    notifier_t *nt = io->data;
    uint64_t v;
    if (read(nt->io.fd, &v, sizeof v) < 0) { /* EAGAIN: another wake got it */
    }
    /* callbacks may unpark themselves or others of this list: take the list out first */
    fy_list_t run;
    fy_list_init(&run);
    if (!fy_list_empty(&nt->waiters)) {
        run.next = nt->waiters.next;
        run.prev = nt->waiters.prev;
        run.next->prev = &run;
        run.prev->next = &run;
        fy_list_init(&nt->waiters);
    }
    while (!fy_list_empty(&run)) {
        fy_cache_waiter_t *w = fy_container_of(run.next, fy_cache_waiter_t, link);
        fy_list_remove(&w->link);
        fy_list_insert_tail(&nt->waiters, &w->link); /* stays parked unless cb unparks */
        w->cb(w);
    }
}

static void wake(fy_cache_obj_t *o)
{
    if (!atomic_load_explicit(&o->nwaiting, memory_order_seq_cst)) return;
    uint_fast64_t m = atomic_load(&o->wait_mask);
    for (int i = 0; i < 64 && m; i++) {
        if (!(m & ((uint_fast64_t)1 << i))) continue;
        int lo = i, hi = i == 63 ? MAX_WORKERS - 1 : i;
        for (int k = lo; k <= hi; k++) {
            int fd = atomic_load(&notifiers[k].efd);
            uint64_t one = 1;
            if (fd >= 0 && write(fd, &one, sizeof one) < 0) { /* EAGAIN: already signalled */
            }
        }
    }
}

int fy_cache_wait(fy_loop_t *loop, int worker, fy_cache_waiter_t *w, fy_cache_obj_t *obj)
{
    if (worker < 0 || worker >= MAX_WORKERS) return -EINVAL;
    pthread_once(&notifiers_once, notifiers_init);
    notifier_t *nt = &notifiers[worker];
    if (atomic_load(&nt->efd) < 0 || nt->loop != loop) {
        if (atomic_load(&nt->efd) >= 0) { /* a new loop on this worker id (tests) */
            close(atomic_load(&nt->efd));
            atomic_store(&nt->efd, -1);
        }
        int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (fd < 0) return -errno;
        nt->io.fd = fd;
        nt->io.events = 0;
        nt->io.cb = on_notify;
        nt->io.data = nt;
        nt->loop = loop;
        fy_list_init(&nt->waiters);
        int rc = fy_io_set(loop, &nt->io, EPOLLIN);
        if (rc < 0) {
            close(fd);
            return rc;
        }
        atomic_store(&nt->efd, fd);
    }
    fy_cache_unwait(w);
    w->obj = obj;
    w->worker = worker;
    w->parked = true;
    fy_list_insert_tail(&nt->waiters, &w->link);
    atomic_fetch_or(&obj->wait_mask, (uint_fast64_t)1 << (worker < 63 ? worker : 63));
    atomic_fetch_add_explicit(&obj->nwaiting, 1, memory_order_seq_cst);
    return 0;
}

void fy_cache_unwait(fy_cache_waiter_t *w)
{
    if (!w->parked) return;
    w->parked = false;
    fy_list_remove(&w->link);
    atomic_fetch_sub(&w->obj->nwaiting, 1);
}
