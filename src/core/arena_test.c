/* Tests for arena.c, pool.c, str.c (fy_str_list_has) and list.h. Arena allocations are filled
 * with a per-allocation byte and checked afterwards, so overlapping allocations or a block
 * overrun show up as corrupted patterns (and under ASan as errors). The pool checks adapt to
 * -DFY_NO_POOL, where get/put are plain malloc/free. */
#include "core/arena.h"
#include "core/list.h"
#include "core/pool.h"
#include "core/str.h"
#include "core/test.h"

#include <pthread.h>
#include <stdint.h>

static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

static bool in_range(const void *p, size_t n, const void *lo, const void *hi)
{
    return (const char *)p >= (const char *)lo && (const char *)p + n <= (const char *)hi;
}

/* ---- arena ---- */

typedef struct alloc_rec {
    unsigned char *p;
    size_t n;
    unsigned char fill;
} alloc_rec_t;

static int corrupted(const alloc_rec_t *v, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < v[i].n; k++)
            if (v[i].p[k] != v[i].fill) {
                bad++;
                break;
            }
    return bad;
}

static void test_arena_alignment(void)
{
    /* an unaligned caller-provided first block */
    static _Alignas(16) unsigned char first[1003];
    unsigned char *fb = first + 3;
    size_t fsz = sizeof first - 3;
    fy_arena_t a;
    fy_arena_init(&a, fb, fsz, 512);
    CHECK_EQ_INT(a.block_size, 512);

    static alloc_rec_t recs[600];
    size_t nrec = 0;
    int unaligned = 0, in_first = 0;
    for (size_t n = 0; n < 600; n++) {
        size_t sz = n % 300; /* 0..299: some > block_size/2 (big) */
        unsigned char *p = fy_arena_alloc(&a, sz);
        if (!aligned16(p)) unaligned++;
        if (in_range(p, sz, fb, fb + fsz)) in_first++;
        memset(p, (int)(n & 0xff), sz);
        recs[nrec++] = (alloc_rec_t){p, sz, (unsigned char)(n & 0xff)};
    }
    CHECK_EQ_INT(unaligned, 0);
    CHECK(in_first > 0); /* the first block was used */
    CHECK_EQ_INT(corrupted(recs, nrec), 0);
    /* the first allocation is the first 16-aligned address of the first block */
    CHECK(recs[0].p == first + 16);
    /* the first block is never written outside its bounds by the arena */
    fy_arena_free(&a);

    /* every size from 1 to 64, from a fresh arena without a first block */
    fy_arena_init(&a, NULL, 0, 0);
    CHECK_EQ_INT(a.block_size, 4096);
    nrec = 0;
    unaligned = 0;
    for (size_t sz = 1; sz <= 64; sz++) {
        unsigned char *p = fy_arena_alloc(&a, sz);
        if (!aligned16(p)) unaligned++;
        memset(p, (int)sz, sz);
        recs[nrec++] = (alloc_rec_t){p, sz, (unsigned char)sz};
    }
    CHECK_EQ_INT(unaligned, 0);
    CHECK_EQ_INT(corrupted(recs, nrec), 0);
    fy_arena_free(&a);

    /* a first block too small for even one allocation */
    static _Alignas(16) unsigned char tiny[20];
    fy_arena_init(&a, tiny + 1, 10, 256);
    unsigned char *p = fy_arena_alloc(&a, 8);
    CHECK(aligned16(p));
    CHECK(!in_range(p, 8, tiny, tiny + sizeof tiny));
    fy_arena_free(&a);
}

static void test_arena_big(void)
{
    static _Alignas(16) unsigned char first[256];
    fy_arena_t a;
    fy_arena_init(&a, first, sizeof first, 1024);
    unsigned char *s1 = fy_arena_alloc(&a, 16);
    CHECK(in_range(s1, 16, first, first + sizeof first));
    /* > block_size / 2: its own block; the current region keeps being used */
    unsigned char *big = fy_arena_alloc(&a, 600);
    CHECK(aligned16(big));
    CHECK(!in_range(big, 600, first, first + sizeof first));
    memset(big, 0xab, 600);
    unsigned char *s2 = fy_arena_alloc(&a, 16);
    CHECK(s2 == s1 + 16); /* still bumping in the first block */
    /* much bigger than a block */
    unsigned char *huge = fy_arena_alloc(&a, 100000);
    CHECK(aligned16(huge));
    memset(huge, 0xcd, 100000);
    CHECK(big[0] == 0xab && big[599] == 0xab);
    /* fill the first block, then overflow into a normal block */
    alloc_rec_t recs[64];
    size_t nrec = 0;
    for (int i = 0; i < 64; i++) {
        unsigned char *p = fy_arena_alloc(&a, 48);
        memset(p, i + 1, 48);
        recs[nrec++] = (alloc_rec_t){p, 48, (unsigned char)(i + 1)};
    }
    CHECK_EQ_INT(corrupted(recs, nrec), 0);
    CHECK(huge[0] == 0xcd && huge[99999] == 0xcd);

    /* a big allocation in an arena with no region yet */
    fy_arena_t b;
    fy_arena_init(&b, NULL, 0, 256);
    unsigned char *bb = fy_arena_alloc(&b, 1000);
    CHECK(aligned16(bb));
    memset(bb, 1, 1000);
    unsigned char *bs = fy_arena_alloc(&b, 10);
    CHECK(aligned16(bs));
    CHECK(!in_range(bs, 10, bb, bb + 1000) && !in_range(bb, 1000, bs, bs + 10));
    memset(bs, 2, 10);
    CHECK(bb[999] == 1);
    fy_arena_free(&b);
    fy_arena_free(&a);
}

static int dtor_log[16];
static int ndtor;
static void dtor(void *arg)
{
    if (ndtor < 16) dtor_log[ndtor++] = (int)(intptr_t)arg;
}

static void test_arena_reset(void)
{
    static _Alignas(16) unsigned char first[512];
    fy_arena_t a;
    fy_arena_init(&a, first, sizeof first, 256);
    unsigned char *p0 = fy_arena_alloc(&a, 32);
    CHECK(p0 == first);
    for (int i = 0; i < 50; i++) fy_arena_alloc(&a, 100); /* spill into malloc'ed blocks */
    CHECK(a.head != NULL);
    ndtor = 0;
    fy_arena_on_reset(&a, dtor, (void *)1);
    fy_arena_on_reset(&a, dtor, (void *)2);
    fy_arena_on_reset(&a, dtor, (void *)3);
    fy_arena_reset(&a);
    CHECK_EQ_INT(ndtor, 3);
    CHECK(dtor_log[0] == 3 && dtor_log[1] == 2 && dtor_log[2] == 1); /* reverse order */
    CHECK(a.head == NULL);                                           /* extra blocks freed */
    CHECK(a.dtors == NULL);
    /* the first block is reused from its start */
    unsigned char *p1 = fy_arena_alloc(&a, 32);
    CHECK(p1 == first);

    /* destructors run once: a second reset runs none */
    ndtor = 0;
    fy_arena_reset(&a);
    CHECK_EQ_INT(ndtor, 0);

    /* calloc zeroes, strndup terminates */
    memset(first, 0x5a, sizeof first);
    fy_arena_reset(&a);
    unsigned char *z = fy_arena_calloc(&a, 40);
    int nonzero = 0;
    for (int i = 0; i < 40; i++) nonzero += z[i] != 0;
    CHECK_EQ_INT(nonzero, 0);
    char *s = fy_arena_strndup(&a, "hello world", 5);
    CHECK(strcmp(s, "hello") == 0);
    CHECK(aligned16(s));
    char *e = fy_arena_strndup(&a, "", 0);
    CHECK(e[0] == '\0');

    /* free: destructors run, nothing kept; the arena still works (malloc'ed blocks only) */
    ndtor = 0;
    fy_arena_on_reset(&a, dtor, (void *)4);
    fy_arena_on_reset(&a, dtor, (void *)5);
    fy_arena_free(&a);
    CHECK(ndtor == 2 && dtor_log[0] == 5 && dtor_log[1] == 4);
    CHECK(a.first_mem == NULL && a.head == NULL && a.cur == NULL);
    unsigned char *q = fy_arena_alloc(&a, 16);
    CHECK(!in_range(q, 16, first, first + sizeof first));
    fy_arena_free(&a);

    /* reset of an arena without a first block */
    fy_arena_init(&a, NULL, 0, 0);
    fy_arena_alloc(&a, 10);
    ndtor = 0;
    fy_arena_on_reset(&a, dtor, (void *)9);
    fy_arena_reset(&a);
    CHECK(ndtor == 1 && dtor_log[0] == 9);
    CHECK(a.cur == NULL && a.head == NULL);
    CHECK(aligned16(fy_arena_alloc(&a, 3)));
    fy_arena_free(&a);
}

/* ---- pool ---- */

static void test_pool(void)
{
    fy_pool_t p;
    fy_pool_init(&p, 3, 2);
    CHECK_EQ_INT(p.size, sizeof(void *)); /* room for the free-list link */
    fy_pool_init(&p, 64, 2);
    CHECK_EQ_INT(p.size, 64);
    void *a = fy_pool_get(&p), *b = fy_pool_get(&p), *c = fy_pool_get(&p);
    CHECK(a && b && c && a != b && b != c && a != c);
    memset(a, 1, 64);
    memset(b, 2, 64);
    memset(c, 3, 64);
    fy_pool_put(&p, a);
    fy_pool_put(&p, b);
    fy_pool_put(&p, c); /* over max_free: freed */
#ifndef FY_NO_POOL
    CHECK_EQ_INT(p.nfree, 2);
    void *g1 = fy_pool_get(&p);
    CHECK(g1 == b); /* LIFO */
    CHECK_EQ_INT(p.nfree, 1);
    void *g2 = fy_pool_get(&p);
    CHECK(g2 == a);
    CHECK_EQ_INT(p.nfree, 0);
    CHECK(p.free_list == NULL);
#else
    CHECK_EQ_INT(p.nfree, 0); /* compiled out: nothing kept */
    CHECK(p.free_list == NULL);
    void *g1 = fy_pool_get(&p);
    void *g2 = fy_pool_get(&p);
#endif
    void *g3 = fy_pool_get(&p); /* from malloc */
    CHECK(g1 && g2 && g3);
    fy_pool_put(&p, g1);
    fy_pool_put(&p, g2);
    fy_pool_put(&p, g3);
    fy_pool_drain(&p);
    CHECK_EQ_INT(p.nfree, 0);
    CHECK(p.free_list == NULL);
    fy_pool_drain(&p); /* idempotent */
    CHECK_EQ_INT(p.nfree, 0);

    /* max_free 0: every put frees */
    fy_pool_init(&p, 32, 0);
    fy_pool_put(&p, fy_pool_get(&p));
    CHECK_EQ_INT(p.nfree, 0);

    /* the chunk pool: FY_CHUNK_SIZE buffers, usable end to end */
    fy_pool_t *cp = fy_chunk_pool();
    CHECK_EQ_INT(cp->size, FY_CHUNK_SIZE);
    unsigned char *ch = fy_pool_get(cp);
    memset(ch, 7, FY_CHUNK_SIZE);
    CHECK(ch[FY_CHUNK_SIZE - 1] == 7);
    fy_pool_put(cp, ch);
    fy_pool_drain(cp);
    CHECK_EQ_INT(cp->nfree, 0);
}

static void *other_chunk_pool(void *arg)
{
    *(fy_pool_t **)arg = fy_chunk_pool();
    return NULL;
}

static void test_chunk_pool_per_thread(void)
{
    fy_pool_t *mine = fy_chunk_pool(), *theirs = NULL;
    pthread_t th;
    if (pthread_create(&th, NULL, other_chunk_pool, &theirs) != 0) exit(2);
    pthread_join(th, NULL);
    CHECK(theirs != NULL && theirs != mine);
    CHECK(fy_chunk_pool() == mine);
}

/* ---- fy_str_list_has ---- */

static bool has(const char *list, const char *tok)
{
    return fy_str_list_has(fy_str(list, strlen(list)), tok, strlen(tok));
}

static void test_str_list_has(void)
{
    CHECK(has("gzip", "gzip"));
    CHECK(has("gzip, br", "br"));
    CHECK(has("gzip,br", "br"));
    CHECK(has("  gzip ,\tbr\t, deflate  ", "br"));
    CHECK(has("  gzip ,\tbr\t, deflate  ", "gzip"));
    CHECK(has("  gzip ,\tbr\t, deflate  ", "deflate"));
    CHECK(has(",,, br ,,", "br"));
    /* case-insensitive on the list (the token is given in lowercase) */
    CHECK(has("GZip, BR", "br"));
    CHECK(has("GZip, BR", "gzip"));
    CHECK(has("Keep-Alive, Upgrade", "upgrade"));
    /* parameters are ignored */
    CHECK(has("gzip;q=1.0, br", "gzip"));
    CHECK(has("gzip ; q=0.5", "gzip"));
    CHECK(has("deflate;q=0.5, br;q=1", "br"));
    CHECK(has("trailers;x=\"a,b\"", "trailers"));
    /* no partial matches */
    CHECK(!has("gzip", "gz"));
    CHECK(!has("x-gzip", "gzip"));
    CHECK(!has("gzipx", "gzip"));
    CHECK(!has("gzip deflate", "gzip")); /* a space inside is not a separator */
    CHECK(!has("br", "brotli"));
    CHECK(!has("identity;q=0, *;q=0", "gzip"));
    /* empty list, empty members */
    CHECK(!has("", "gzip"));
    CHECK(!has(" , ,", "gzip"));
    CHECK(!has(";q=0", "gzip"));
    /* length-delimited: bytes after len are not read */
    CHECK(!fy_str_list_has(fy_str("gzip", 3), "gzip", 4));
    CHECK(fy_str_list_has(fy_str("br, gzip", 2), "br", 2));
}

/* ---- fy_list ---- */

typedef struct item {
    int v;
    fy_list_t link;
} item_t;

static void test_list(void)
{
    fy_list_t head;
    fy_list_init(&head);
    CHECK(fy_list_empty(&head));
    item_t it[4];
    for (int i = 0; i < 4; i++) {
        it[i].v = i;
        fy_list_insert_tail(&head, &it[i].link);
    }
    CHECK(!fy_list_empty(&head));
    int order[4], n = 0;
    for (fy_list_t *l = head.next; l != &head && n < 4; l = l->next)
        order[n++] = fy_container_of(l, item_t, link)->v;
    CHECK(n == 4 && order[0] == 0 && order[1] == 1 && order[2] == 2 && order[3] == 3);
    /* backwards */
    n = 0;
    for (fy_list_t *l = head.prev; l != &head && n < 4; l = l->prev)
        order[n++] = fy_container_of(l, item_t, link)->v;
    CHECK(n == 4 && order[0] == 3 && order[3] == 0);

    fy_list_remove(&it[1].link);
    CHECK(it[1].link.next == &it[1].link && it[1].link.prev == &it[1].link); /* self-linked */
    fy_list_remove(&it[1].link); /* removing a removed node is harmless */
    n = 0;
    for (fy_list_t *l = head.next; l != &head && n < 4; l = l->next)
        order[n++] = fy_container_of(l, item_t, link)->v;
    CHECK(n == 3 && order[0] == 0 && order[1] == 2 && order[2] == 3);

    fy_list_remove(&it[0].link); /* first */
    fy_list_remove(&it[3].link); /* last */
    CHECK(head.next == &it[2].link && head.prev == &it[2].link);
    fy_list_remove(&it[2].link);
    CHECK(fy_list_empty(&head));
    CHECK(head.prev == &head);
    /* re-insert a removed node */
    fy_list_insert_tail(&head, &it[1].link);
    CHECK(head.next == &it[1].link && it[1].link.next == &head);
    CHECK(fy_container_of(head.next, item_t, link) == &it[1]);
}

FY_TEST_MAIN(test_arena_alignment(); test_arena_big(); test_arena_reset(); test_pool();
             test_chunk_pool_per_thread(); test_str_list_has(); test_list())
