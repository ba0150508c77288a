/* Tests for ratelimit.c: GCRA admits exactly `burst` at once and one per interval after,
 * rejected requests do not move the TAT, keys are independent, a full probe window evicts
 * (the expired first, counted only when live), concurrency counters take and give back, and
 * four threads hammering one key at one instant admit exactly `burst` between them. */
#include "policy/ratelimit.h"

#include <pthread.h>

#include "core/test.h"

#define MS 1000000ull

static void test_gcra(void)
{
    fy_rl_table_t *t = fy_rl_table_new(64);
    uint64_t now = 1000 * MS, T = 100 * MS; /* 10/s */
    for (int i = 0; i < 10; i++) {
        fy_rl_result_t r = fy_rl_take(t, 42, now, T, 10);
        CHECK(r.allowed);
    }
    fy_rl_result_t r = fy_rl_take(t, 42, now, T, 10);
    CHECK(!r.allowed);
    CHECK_EQ_INT(r.wait_ns, T);
    /* rejections do not push the key further out */
    for (int i = 0; i < 5; i++) CHECK(!fy_rl_take(t, 42, now, T, 10).allowed);
    CHECK(!fy_rl_take(t, 42, now + T - 1, T, 10).allowed);
    CHECK(fy_rl_take(t, 42, now + T, T, 10).allowed);
    CHECK(!fy_rl_take(t, 42, now + T, T, 10).allowed);
    /* another key is not affected */
    CHECK(fy_rl_take(t, 43, now, T, 10).allowed);
    /* a long pause refills to the burst, not beyond */
    int n = 0;
    while (fy_rl_take(t, 42, now + 100 * T, T, 10).allowed && n < 100) n++;
    CHECK_EQ_INT(n, 10);
    /* burst 1 */
    CHECK(fy_rl_take(t, 7, now, T, 1).allowed);
    CHECK(!fy_rl_take(t, 7, now, T, 1).allowed);
    fy_rl_table_free(t);
}

static void test_eviction(void)
{
    fy_rl_table_t *t = fy_rl_table_new(16); /* 16 slots, windows of 8 */
    uint64_t now = 5000 * MS, T = 1000 * MS;
    int evicted = 0;
    /* 64 live keys in 16 slots: most of them evict a live key */
    for (uint64_t k = 1; k <= 64; k++) {
        fy_rl_result_t r = fy_rl_take(t, k * 7919, now, T, 1);
        CHECK(r.allowed);
        evicted += r.evicted;
    }
    CHECK(evicted >= 64 - 16);
    /* expired keys are taken over silently */
    evicted = 0;
    for (uint64_t k = 100; k <= 164; k++)
        evicted += fy_rl_take(t, k * 7919, now + 10 * T, T, 1).evicted;
    CHECK(evicted >= 64 - 16); /* the first 16 found expired slots; then live ones again */
    fy_rl_result_t r = fy_rl_take(t, 1000003, now + 100 * T, T, 1);
    CHECK(r.allowed && !r.evicted);
    fy_rl_table_free(t);
}

static void test_concurrency(void)
{
    fy_rl_table_t *t = fy_rl_table_new(16);
    bool untracked;
    _Atomic uint64_t *a = fy_rl_conc_acquire(t, 99, 2, &untracked);
    _Atomic uint64_t *b = fy_rl_conc_acquire(t, 99, 2, &untracked);
    CHECK(a && b && a == b);
    CHECK(fy_rl_conc_acquire(t, 99, 2, &untracked) == NULL && !untracked);
    fy_rl_conc_release(a);
    _Atomic uint64_t *c = fy_rl_conc_acquire(t, 99, 2, &untracked);
    CHECK(c == a);
    fy_rl_conc_release(b);
    fy_rl_conc_release(c);
    /* a slot with no holder goes to another key */
    int got = 0, untr = 0;
    _Atomic uint64_t *held[64];
    for (uint64_t k = 0; k < 64; k++) {
        held[k] = fy_rl_conc_acquire(t, (k + 1) * 0x9e3779b97f4a7c15ull, 1, &untracked);
        got += held[k] != NULL;
        untr += untracked;
    }
    CHECK_EQ_INT(got, 16);
    CHECK_EQ_INT(untr, 48);
    for (int k = 0; k < 64; k++)
        if (held[k]) fy_rl_conc_release(held[k]);
    CHECK(fy_rl_conc_acquire(t, 12345, 1, &untracked) != NULL);
    fy_rl_table_free(t);
}

static fy_rl_table_t *shared;
static _Atomic int admitted;

static void *hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100000; i++)
        if (fy_rl_take(shared, 5, 77 * MS, 1000 * MS, 1000).allowed) admitted++;
    return NULL;
}

static void test_threads(void)
{
    shared = fy_rl_table_new(1024);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, hammer, NULL);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK_EQ_INT(admitted, 1000);
    fy_rl_table_free(shared);
}

static void test_rate_parse(void)
{
    uint64_t c, ms;
    CHECK(fy_ratelimit_parse_rate("10/s", &c, &ms) == 0 && c == 10 && ms == 1000);
    CHECK(fy_ratelimit_parse_rate("1/min", &c, &ms) == 0 && c == 1 && ms == 60000);
    CHECK(fy_ratelimit_parse_rate("5/h", &c, &ms) == 0 && ms == 3600000);
    CHECK(fy_ratelimit_parse_rate("0/s", &c, &ms) < 0);
    CHECK(fy_ratelimit_parse_rate("10", &c, &ms) < 0);
    CHECK(fy_ratelimit_parse_rate("10/w", &c, &ms) < 0);
    CHECK(fy_ratelimit_parse_rate("/s", &c, &ms) < 0);
    CHECK(fy_ratelimit_parse_rate("99999999999/s", &c, &ms) < 0);
    CHECK(fy_rl_hash(0, "abc", 3) == fy_rl_hash(0, "abc", 3));
    CHECK(fy_rl_hash(0, "abc", 3) != fy_rl_hash(1, "abc", 3));
    CHECK(fy_rl_hash(0, "abcdefghij", 10) != fy_rl_hash(0, "abcdefghik", 10));
}

FY_TEST_MAIN(test_gcra(); test_eviction(); test_concurrency(); test_threads(); test_rate_parse())
