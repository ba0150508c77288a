/* Tests for cache.c's per-thread free list of exchange states: a worker's list keeps what its
 * exchanges gave back, and fy_cache_thread_cleanup (called at worker exit) empties it, on the
 * main thread and on a thread of its own. */
#include "policy/cache_int.h"

#include <pthread.h>

#include "core/test.h"

/* Two states out and back in; the list keeps them (none under -DFY_NO_POOL, where every put
 * frees), and cleanup leaves nothing; the list works again after it. */
static void cycle(void)
{
    cache_ex_t *a = fy__cache_ce_get(), *b = fy__cache_ce_get();
    CHECK(a && b && a != b);
    fy__cache_ce_put(a);
    fy__cache_ce_put(b);
    CHECK(fy_cache_thread_cached() == 2 || fy_cache_thread_cached() == 0);
    fy_cache_thread_cleanup();
    CHECK_EQ_INT(fy_cache_thread_cached(), 0);
    cache_ex_t *c = fy__cache_ce_get();
    CHECK(c != NULL);
    fy__cache_ce_put(c);
    fy_cache_thread_cleanup();
    CHECK_EQ_INT(fy_cache_thread_cached(), 0);
}

static void *worker(void *arg)
{
    (void)arg;
    cycle();
    return NULL;
}

static void test_thread_cleanup(void)
{
    cycle();
    pthread_t t;
    CHECK_EQ_INT(pthread_create(&t, NULL, worker, NULL), 0);
    CHECK_EQ_INT(pthread_join(t, NULL), 0);
    /* the other thread's list was its own: this one's is still empty */
    CHECK_EQ_INT(fy_cache_thread_cached(), 0);
}

FY_TEST_MAIN(test_thread_cleanup())
