/* Tests for cache_store.c: the index (begin/follow, variants, replacement, invalidation,
 * prefix and tag purges), bodies across chunks read while they are written (a writer thread
 * against lock-free readers), the size bound (LRU eviction, max-object abort), 304 copies,
 * and waiters woken across threads through the worker's eventfd. */
#include "policy/cache_store.h"

#include <pthread.h>

#include "core/test.h"
#include "policy/cache_key.h"

static fy_arena_t A;

static fy_cache_obj_t *begin(fy_cache_zone_t *z, const char *key, bool *follow)
{
    return fy_cache_begin(z, fy_cache_hash(key, strlen(key)), key, strlen(key), follow);
}

static fy_cache_obj_t *lookup(fy_cache_zone_t *z, const char *key, const fy_headers_t *rh,
                              bool *pending)
{
    static fy_headers_t none;
    return fy_cache_lookup(z, fy_cache_hash(key, strlen(key)), key, strlen(key), rh ? rh : &none,
                           &A, pending);
}

static fy_header_t H1[] = {{FY_STR_LIT("etag"), FY_STR_LIT("\"x\"")},
                           {FY_STR_LIT("surrogate-key"), FY_STR_LIT("t1 t2")}};
static fy_headers_t HS = {H1, 2, 2};

static fy_cache_obj_t *store(fy_cache_zone_t *z, const char *key, const char *body)
{
    bool f;
    fy_cache_obj_t *o = begin(z, key, &f);
    CHECK(!f);
    CHECK_EQ_INT(fy_cache_set_head(z, o, 200, &HS, NULL, 0, NULL, 0, 1 << 20), 0);
    CHECK_EQ_INT(fy_cache_append(z, o, body, strlen(body), 1 << 20), 0);
    fy_cache_finish(z, o);
    return o;
}

static size_t read_all(fy_cache_obj_t *o, char *out, size_t cap)
{
    const fy_cache_chunk_t *c = NULL;
    size_t co = 0, off = 0, k;
    const char *p;
    while ((k = fy_cache_obj_read(o, off, &c, &co, &p)) > 0 && off + k <= cap) {
        memcpy(out + off, p, k);
        off += k;
    }
    return off;
}

static void test_index(void)
{
    fy_cache_zone_t *z = fy_cache_zone_get("t-index", 1 << 20);
    CHECK(fy_cache_zone_get("t-index", 1 << 20) == z);
    fy_cache_zone_put(z);
    bool f, pend;
    fy_cache_obj_t *o = begin(z, "k1", &f);
    CHECK(o && !f);
    fy_cache_obj_t *o2 = begin(z, "k1", &f);
    CHECK(o2 == o && f); /* a second miss follows the first */
    fy_cache_obj_release(o2);
    fy_cache_obj_t *l = lookup(z, "k1", NULL, &pend);
    CHECK(l == o && pend);
    fy_cache_obj_release(l);
    CHECK_EQ_INT(fy_cache_set_head(z, o, 200, &HS, NULL, 0, NULL, 0, 1 << 20), 0);
    CHECK(o->etag.len == 3);
    l = lookup(z, "k1", NULL, &pend);
    CHECK(l == o && !pend);
    fy_cache_obj_release(l);
    fy_cache_finish(z, o);
    fy_cache_obj_release(o);
    /* a newer response replaces the stored one */
    fy_cache_obj_t *n = store(z, "k1", "new");
    l = lookup(z, "k1", NULL, &pend);
    CHECK(l == n);
    fy_cache_obj_release(l);
    fy_cache_obj_release(n);
    CHECK_EQ_INT(fy_cache_zone_count(z), 1);
    CHECK_EQ_INT(fy_cache_invalidate(z, fy_cache_hash("k1", 2), "k1", 2), 1);
    CHECK(lookup(z, "k1", NULL, &pend) == NULL);
    fy_cache_obj_release(store(z, "http://h/a/1", "1"));
    fy_cache_obj_release(store(z, "http://h/a/2", "2"));
    fy_cache_obj_release(store(z, "http://h/b", "3"));
    CHECK_EQ_INT(fy_cache_purge_prefix(z, "http://h/a/", 11), 2);
    CHECK_EQ_INT(fy_cache_purge_tag(z, "t2", 2), 1);
    CHECK_EQ_INT(fy_cache_purge_tag(z, "t2", 2), 0);
    CHECK_EQ_INT(fy_cache_zone_count(z), 0);
    CHECK_EQ_INT(fy_cache_zone_bytes(z), 0);
    fy_cache_zone_put(z);
}

static void test_variants(void)
{
    fy_cache_zone_t *z = fy_cache_zone_get("t-vary", 1 << 20);
    const char *names = "accept-encoding";
    fy_header_t g[] = {{FY_STR_LIT("Accept-Encoding"), FY_STR_LIT("gzip")}};
    fy_header_t b[] = {{FY_STR_LIT("Accept-Encoding"), FY_STR_LIT("br")}};
    fy_headers_t rg = {g, 1, 1}, rb = {b, 1, 1};
    size_t kl;
    bool f, pend;
    for (int i = 0; i < 2; i++) {
        fy_headers_t *r = i ? &rb : &rg;
        char *vk = fy_cache_vary_key(&A, r, names, strlen(names), &kl);
        fy_cache_obj_t *o = begin(z, "v", &f);
        CHECK(!f);
        CHECK_EQ_INT(fy_cache_set_head(z, o, 200, &HS, names, strlen(names), vk, kl, 1 << 20), 0);
        fy_cache_append(z, o, i ? "B" : "G", 1, 1 << 20);
        fy_cache_finish(z, o);
        fy_cache_obj_release(o);
    }
    char out[8];
    fy_cache_obj_t *o = lookup(z, "v", &rg, &pend);
    CHECK(o && read_all(o, out, 8) == 1 && out[0] == 'G');
    fy_cache_obj_release(o);
    o = lookup(z, "v", &rb, &pend);
    CHECK(o && read_all(o, out, 8) == 1 && out[0] == 'B');
    fy_cache_obj_release(o);
    CHECK(lookup(z, "v", NULL, &pend) == NULL);
    CHECK_EQ_INT(fy_cache_invalidate(z, fy_cache_hash("v", 1), "v", 1), 2);
    fy_cache_zone_put(z);
}

static void test_bounds(void)
{
    fy_cache_zone_t *z = fy_cache_zone_get("t-bounds", 200000);
    static char big[60000];
    memset(big, 'x', sizeof big - 1);
    char key[16];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "e%d", i);
        fy_cache_obj_release(store(z, key, big));
    }
    CHECK(fy_cache_zone_bytes(z) <= 200000);
    bool pend;
    CHECK(lookup(z, "e0", NULL, &pend) == NULL);
    fy_cache_obj_t *o = lookup(z, "e9", NULL, &pend);
    CHECK(o != NULL);
    /* a 304's copy: same body, new head, replaces it */
    fy_header_t nh[] = {{FY_STR_LIT("x-new"), FY_STR_LIT("1")}};
    fy_headers_t nhs = {nh, 1, 1};
    fy_cache_obj_t *c = fy_cache_obj_copy(o, &nhs);
    fy_cache_obj_release(o);
    fy_cache_insert(z, c);
    o = lookup(z, "e9", NULL, &pend);
    CHECK(o == c && o->nhdrs == 1 && atomic_load(&o->body_len) == sizeof big - 1);
    fy_cache_obj_release(o);
    fy_cache_obj_release(c);
    /* past max-object-size while streaming: aborted and out of the index */
    bool f;
    o = begin(z, "m", &f);
    CHECK_EQ_INT(fy_cache_set_head(z, o, 200, &HS, NULL, 0, NULL, 0, 1000), 0);
    CHECK_EQ_INT(fy_cache_append(z, o, big, 500, 1000), 0);
    CHECK_EQ_INT(fy_cache_append(z, o, big, 600, 1000), -1);
    CHECK_EQ_INT(atomic_load(&o->state), FY_CACHE_ABORTED);
    CHECK(lookup(z, "m", NULL, &pend) == NULL);
    fy_cache_obj_release(o);
    fy_cache_zone_put(z);
}

/* a writer thread appends 1 MB in odd pieces while this thread reads what is there */
static fy_cache_zone_t *tz;
static fy_cache_obj_t *tobj;
static void *writer(void *arg)
{
    (void)arg;
    unsigned char buf[7777];
    size_t total = 0;
    while (total < 1000000) {
        size_t n = 1 + (total * 31) % sizeof buf;
        if (n > 1000000 - total) n = 1000000 - total;
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)((total + i) * 13);
        fy_cache_append(tz, tobj, (char *)buf, n, 1 << 24);
        total += n;
    }
    fy_cache_finish(tz, tobj);
    return NULL;
}

static void test_concurrent_read(void)
{
    tz = fy_cache_zone_get("t-conc", 1 << 24);
    bool f;
    tobj = begin(tz, "c", &f);
    fy_cache_set_head(tz, tobj, 200, &HS, NULL, 0, NULL, 0, 1 << 24);
    pthread_t t;
    pthread_create(&t, NULL, writer, NULL);
    const fy_cache_chunk_t *c = NULL;
    size_t co = 0, off = 0;
    bool ok = true;
    for (;;) {
        int st = atomic_load(&tobj->state);
        const char *p;
        size_t k = fy_cache_obj_read(tobj, off, &c, &co, &p);
        for (size_t i = 0; i < k && ok; i++)
            ok = (unsigned char)p[i] == (unsigned char)((off + i) * 13);
        off += k;
        if (!k && st == FY_CACHE_COMPLETE) break;
    }
    pthread_join(t, NULL);
    CHECK(ok);
    CHECK_EQ_INT(off, 1000000);
    fy_cache_obj_release(tobj);
    fy_cache_zone_put(tz);
}

/* a waiter on this loop, woken by another thread's append */
static fy_loop_t loop;
static int woken;
static void on_wake(fy_cache_waiter_t *w)
{
    woken++;
    if (atomic_load(&w->obj->body_len) > 0) {
        fy_cache_unwait(w);
        fy_loop_stop(&loop);
    }
}
static void *late_writer(void *arg)
{
    fy_cache_append(tz, arg, "abc", 3, 100);
    return NULL;
}

static void test_waiter(void)
{
    fy_loop_init(&loop);
    tz = fy_cache_zone_get("t-wait", 1 << 20);
    bool f;
    fy_cache_obj_t *o = begin(tz, "w", &f);
    fy_cache_set_head(tz, o, 200, &HS, NULL, 0, NULL, 0, 100);
    fy_cache_waiter_t w = {.cb = on_wake};
    fy_list_init(&w.link);
    CHECK_EQ_INT(fy_cache_wait(&loop, 3, &w, o), 0);
    CHECK_EQ_INT(atomic_load(&o->nwaiting), 1);
    pthread_t t;
    pthread_create(&t, NULL, late_writer, o);
    fy_loop_run(&loop);
    pthread_join(t, NULL);
    CHECK(woken >= 1);
    CHECK(!w.parked);
    CHECK_EQ_INT(atomic_load(&o->nwaiting), 0);
    fy_cache_unwait(&w); /* idempotent */
    fy_cache_finish(tz, o);
    fy_cache_obj_release(o);
    fy_cache_zone_put(tz);
}

/* One allocation per object: after a first head, the next object of the zone has room for a
   head block (and a small body of known length) like it inside itself. A head that fits is
   stored there (the body right behind it), a larger one gets its own block, and both read
   back whole; a head past the reserve's bound leaves the next object without one. */
static void test_reserve(void)
{
    fy_cache_zone_t *z = fy_cache_zone_get("t-reserve", 1 << 20);
    char out[64];
    for (int i = 0; i < 4; i++) {
        char key[8] = {'r', (char)('0' + i), 0};
        bool f;
        fy_cache_obj_t *o = begin(z, key, &f);
        CHECK(!f);
        CHECK(i == 0 ? o->reserve_cap == 0 : o->reserve_cap > 0);
        o->content_length = 5;
        fy_header_t big[] = {{FY_STR_LIT("etag"), FY_STR_LIT("\"x\"")},
                             {FY_STR_LIT("x-long"), {NULL, 0}}};
        static char filler[300];
        memset(filler, 'f', sizeof filler);
        big[1].value = fy_str(filler, i == 2 ? sizeof filler : 10);
        fy_headers_t hs = {big, 2, 2};
        CHECK_EQ_INT(fy_cache_set_head(z, o, 200, &hs, NULL, 0, NULL, 0, 1 << 20), 0);
        CHECK(i == 0 || i == 2 ? o->mem != NULL : o->mem == NULL); /* 2: larger than room */
        CHECK(o->reserve == NULL);
        CHECK_EQ_INT(fy_cache_append(z, o, "hello", 5, 1 << 20), 0);
        fy_cache_finish(z, o);
        CHECK_EQ_INT(read_all(o, out, sizeof out), 5);
        CHECK(memcmp(out, "hello", 5) == 0);
        CHECK(fy_str_eq(o->etag, "\"x\"", 3));
        CHECK_EQ_INT(o->hdrs[1].value.len, i == 2 ? sizeof filler : 10);
        fy_cache_obj_release(o);
    }
    fy_cache_zone_put(z);
}

/* Lookup and begin under one lock: nothing there makes a PENDING object (created); a second
   call finds it pending (follow it); once it has a head, a third is a hit of it. */
static void test_lookup_begin(void)
{
    fy_cache_zone_t *z = fy_cache_zone_get("t-lookup-begin", 1 << 20);
    static fy_headers_t none;
    const char *key = "lb";
    uint64_t h = fy_cache_hash(key, 2);
    bool pend, created;
    fy_cache_obj_t *o = fy_cache_lookup_begin(z, h, key, 2, &none, &A, &pend, &created);
    CHECK(o && created && !pend);
    CHECK_EQ_INT(atomic_load(&o->state), FY_CACHE_PENDING);
    CHECK_EQ_INT(fy_cache_zone_count(z), 1);
    fy_cache_obj_t *f = fy_cache_lookup_begin(z, h, key, 2, &none, &A, &pend, &created);
    CHECK(f == o && pend && !created);
    fy_cache_obj_release(f);
    bool follow;
    f = begin(z, key, &follow); /* begin sees the same pending object */
    CHECK(f == o && follow);
    fy_cache_obj_release(f);
    CHECK_EQ_INT(fy_cache_set_head(z, o, 200, &HS, NULL, 0, NULL, 0, 1 << 20), 0);
    CHECK_EQ_INT(fy_cache_append(z, o, "abc", 3, 1 << 20), 0);
    fy_cache_finish(z, o);
    f = fy_cache_lookup_begin(z, h, key, 2, &none, &A, &pend, &created);
    CHECK(f == o && !pend && !created);
    CHECK_EQ_INT(fy_cache_zone_count(z), 1);
    fy_cache_obj_release(f);
    fy_cache_obj_release(o);
    fy_cache_zone_put(z);
}

FY_TEST_MAIN(fy_arena_init(&A, NULL, 0, 0); test_index(); test_variants(); test_bounds();
             test_concurrent_read(); test_waiter(); test_reserve(); test_lookup_begin();
             fy_arena_free(&A))
