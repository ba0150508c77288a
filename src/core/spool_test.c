/* Tests for spool.c: sizes counted per class, blocks reused from the thread's list (not under
 * -DFY_NO_POOL), contents kept by realloc, large blocks, blocks freed on another thread, and a
 * thread's lists given back to malloc at its exit. */
#include "core/spool.h"
#include "core/test.h"

#include <pthread.h>
#include <stdint.h>

static void test_classes(void)
{
    void *a = fy_spool_alloc(1);
    CHECK(a && ((uintptr_t)a & 15) == 0);
    CHECK_EQ_INT(fy_spool_size(a), 16);
    void *b = fy_spool_alloc(17);
    CHECK_EQ_INT(fy_spool_size(b), 32);
    void *z = fy_spool_alloc(0);
    CHECK_EQ_INT(fy_spool_size(z), 16);
    void *m = fy_spool_alloc(FY_SPOOL_MAX);
    CHECK_EQ_INT(fy_spool_size(m), FY_SPOOL_MAX);
    void *big = fy_spool_alloc(FY_SPOOL_MAX + 1);
    CHECK_EQ_INT(fy_spool_size(big), FY_SPOOL_MAX + 1);
    memset(big, 0xab, FY_SPOOL_MAX + 1);
    fy_spool_free(a);
    void *a2 = fy_spool_alloc(9);
#ifndef FY_NO_POOL
    CHECK(a2 == a); /* the class's list gave it back */
#endif
    fy_spool_free(a2);
    fy_spool_free(b);
    fy_spool_free(z);
    fy_spool_free(m);
    fy_spool_free(big);
    fy_spool_free(NULL);
}

static void test_realloc(void)
{
    char *p = fy_spool_realloc(NULL, 10);
    memcpy(p, "0123456789", 10);
    char *q = fy_spool_realloc(p, 12); /* same class: in place */
    CHECK(q == p);
    char *r = fy_spool_realloc(q, 700);
    CHECK(r && memcmp(r, "0123456789", 10) == 0);
    CHECK_EQ_INT(fy_spool_size(r), 700);
    char *s = fy_spool_realloc(r, 5);
    CHECK(s && memcmp(s, "01234", 5) == 0);
    fy_spool_free(s);
}

static void *other_thread(void *arg)
{
    fy_spool_free(arg); /* joins this thread's list */
    void *p = fy_spool_alloc(40);
    fy_spool_free(p);
    /* one block on the list (arg, taken again and given back): drained, the thread's exit
     * leaves nothing behind */
    size_t n = fy_spool_thread_drain();
#ifndef FY_NO_POOL
    CHECK_EQ_INT(n, 1);
#else
    CHECK_EQ_INT(n, 0);
#endif
    CHECK_EQ_INT(fy_spool_thread_drain(), 0);
    return NULL;
}

static void test_threads(void)
{
    void *p = fy_spool_alloc(40);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, p) == 0);
    pthread_join(t, NULL);
    /* many more than a list keeps: the rest go back to malloc */
    void *v[FY_SPOOL_KEEP + 10];
    for (int i = 0; i < FY_SPOOL_KEEP + 10; i++) v[i] = fy_spool_alloc(100);
    for (int i = 0; i < FY_SPOOL_KEEP + 10; i++) fy_spool_free(v[i]);
#ifndef FY_NO_POOL
    CHECK(fy_spool_thread_drain() >= FY_SPOOL_KEEP); /* a full list, and test_classes' blocks */
#endif
    CHECK_EQ_INT(fy_spool_thread_drain(), 0);
}

FY_TEST_MAIN(test_classes(); test_realloc(); test_threads())
