/* Tests for counters.c: the registry (ids, re-registration, kinds, a full table), per-worker
 * sums, histogram bucketing at and around every bound, and N writer threads summed exactly
 * after join (and read while they run: never more than was written, never decreasing). */
#include "core/counters.h"
#include "core/test.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

static void test_registry(void)
{
    fy_counter_id_t a = fy_counter_register("t_requests_total", "route=\"0\"", FY_COUNTER);
    fy_counter_id_t b = fy_counter_register("t_requests_total", "route=\"1\"", FY_COUNTER);
    fy_counter_id_t h = fy_counter_register("t_latency_seconds", "", FY_HISTOGRAM);
    fy_counter_id_t c = fy_counter_register("t_after", NULL, FY_GAUGE);
    CHECK(a > 0 && b > 0 && h > 0 && c > 0);
    CHECK(a != b);
    CHECK_EQ_INT(c - h, FY_HIST_NSLOTS); /* a histogram takes its slots */
    CHECK_EQ_INT(fy_counter_register("t_requests_total", "route=\"0\"", FY_COUNTER), a);
    CHECK_EQ_INT(fy_counter_register("t_requests_total", "route=\"0\"", FY_GAUGE), 0);
    CHECK_EQ_INT(fy_counter_lookup("t_requests_total", "route=\"1\""), b);
    CHECK_EQ_INT(fy_counter_lookup("t_nope", ""), 0);
    CHECK_EQ_INT(fy_counter_lookup("t_after", ""), c);

    fy_counter_add(a, 5);
    fy_counter_inc(b);
    fy_gauge_add(c, 1);
    fy_gauge_add(c, -3);
    fy_counter_inc(0); /* the none id: harmless */
    fy_hist_observe(0, 5);
    fy_counters_snapshot_t s;
    CHECK_EQ_INT(fy_counters_snapshot(&s), 0);
    CHECK_EQ_INT(fy_counters_snapshot_get(&s, "t_requests_total", "route=\"0\""), 5);
    CHECK_EQ_INT(fy_counters_snapshot_get(&s, "t_requests_total", "route=\"1\""), 1);
    CHECK_EQ_INT(fy_counters_snapshot_get(&s, "t_after", ""), -2);
    CHECK_EQ_INT(fy_counters_snapshot_get(&s, "t_latency_seconds", ""), 0);
    CHECK_EQ_INT(fy_counters_snapshot_get(&s, "t_missing", ""), -1);
    fy_counters_snapshot_free(&s);
}

static void test_buckets(void)
{
    CHECK_EQ_INT(fy_hist_bucket(0), 0);
    for (unsigned i = 0; i < FY_HIST_NBOUNDS; i++) {
        uint64_t b = fy_hist_bounds_us[i];
        CHECK_EQ_INT(fy_hist_bucket(b), i); /* le: equal counts in this bucket */
        CHECK_EQ_INT(fy_hist_bucket(b + 1), i + 1);
        CHECK_EQ_INT(fy_hist_bucket(b - 1), i); /* bounds are far apart */
        if (i) CHECK(fy_hist_bounds_us[i] > fy_hist_bounds_us[i - 1]);
    }
    CHECK_EQ_INT(fy_hist_bucket(UINT64_MAX), FY_HIST_NBOUNDS);
    /* the table lookup relies on each bound being at least twice the one before */
    for (unsigned i = 1; i < FY_HIST_NBOUNDS; i++)
        CHECK(fy_hist_bounds_us[i] >= 2 * fy_hist_bounds_us[i - 1]);
    /* against a linear search: every value to 0.3 s, then powers of two and their neighbours */
    for (uint64_t us = 0; us <= 300000; us++) {
        unsigned want = 0;
        while (want < FY_HIST_NBOUNDS && fy_hist_bounds_us[want] < us) want++;
        if (fy_hist_bucket(us) != want) {
            CHECK_EQ_INT(fy_hist_bucket(us), want);
            break;
        }
    }
    for (unsigned k = 0; k < 64; k++)
        for (int d = -1; d <= 1; d++) {
            uint64_t us = (1ull << k) + (uint64_t)(int64_t)d;
            unsigned want = 0;
            while (want < FY_HIST_NBOUNDS && fy_hist_bounds_us[want] < us) want++;
            CHECK_EQ_INT(fy_hist_bucket(us), want);
        }
    CHECK_EQ_INT(fy_hist_bounds_us[6], 1000);                       /* 1 ms */
    CHECK_EQ_INT(fy_hist_bounds_us[FY_HIST_NBOUNDS - 1], 60000000); /* 60 s */

    fy_counter_id_t h = fy_counter_register("t_hist_seconds", "", FY_HISTOGRAM);
    fy_hist_observe(h, 10);       /* bucket 0 */
    fy_hist_observe(h, 11);       /* bucket 1 */
    fy_hist_observe(h, 1000);     /* le 0.001 */
    fy_hist_observe(h, 61000000); /* +Inf */
    fy_counters_snapshot_t s;
    CHECK_EQ_INT(fy_counters_snapshot(&s), 0);
    const fy_counter_sample_t *x = NULL;
    for (size_t i = 0; i < s.n; i++)
        if (strcmp(s.v[i].name, "t_hist_seconds") == 0) x = &s.v[i];
    CHECK(x != NULL);
    if (x) {
        CHECK_EQ_INT(x->value, 4);
        CHECK_EQ_INT(x->buckets[0], 1);
        CHECK_EQ_INT(x->buckets[1], 2);
        CHECK_EQ_INT(x->buckets[5], 2);
        CHECK_EQ_INT(x->buckets[6], 3);
        CHECK_EQ_INT(x->buckets[FY_HIST_NBOUNDS - 1], 3);
        CHECK_EQ_INT(x->buckets[FY_HIST_NBOUNDS], 4);
        CHECK_EQ_INT(x->sum_us, 10 + 11 + 1000 + 61000000);
    }
    char buf[8192];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    CHECK(f != NULL);
    if (f) {
        fy_counters_write_text(&s, f);
        fclose(f);
        CHECK(strstr(buf, "t_hist_seconds_bucket{le=\"0.001000\"} 3\n") != NULL);
        CHECK(strstr(buf, "t_hist_seconds_bucket{le=\"+Inf\"} 4\n") != NULL);
        CHECK(strstr(buf, "t_hist_seconds_count{} 4\n") != NULL);
        CHECK(strstr(buf, "t_requests_total{route=\"0\"} 5\n") != NULL);
    }
    fy_counters_snapshot_free(&s);
}

/* A histogram whose first bucket is implicit: its count comes from counter slots (two ranges,
 * one named twice), its writers observe only values above the first bound. */
static void test_implicit_first(void)
{
    const char *names[3] = {"t_imp_total", "t_imp_total", "t_imp_other"};
    const char *labels[3] = {"c=\"a\"", "c=\"b\"", NULL};
    const int kinds[3] = {FY_COUNTER, FY_COUNTER, FY_COUNTER};
    fy_counter_id_t blk = fy_counter_register_block(names, labels, kinds, 3);
    fy_counter_id_t other = fy_counter_register("t_imp2_total", "", FY_COUNTER);
    fy_counter_id_t h = fy_counter_register("t_imp_seconds", "", FY_HISTOGRAM);
    CHECK(blk && other && h);
    CHECK_EQ_INT(fy_counter_hist_count_from(h, blk, 2), 0);
    CHECK_EQ_INT(fy_counter_hist_count_from(h, blk, 2), 0); /* again: no change */
    CHECK_EQ_INT(fy_counter_hist_count_from(h, other, 1), 0);
    CHECK_EQ_INT(fy_counter_hist_count_from(blk, other, 1), -EINVAL); /* not a histogram */
    CHECK_EQ_INT(fy_counter_hist_count_from(h, 0, 1), -EINVAL);
    _Atomic uint64_t *mine = fy__counters_mine;
    /* five exchanges: three under the first bound (no histogram write), two above */
    fy_counter_add(blk, 3);
    fy_counter_add(blk + 1, 1);
    fy_counter_inc(other);
    fy_counter_add(blk + 2, 50); /* not a source */
    fy_hist_observe_above_at(mine, h, 0);
    fy_hist_observe_above_at(mine, h, 5);
    fy_hist_observe_above_at(mine, h, 2000);
    fy_hist_observe_above_at(mine, h, 70000000);
    fy_counters_snapshot_t s;
    CHECK_EQ_INT(fy_counters_snapshot(&s), 0);
    const fy_counter_sample_t *x = NULL;
    for (size_t i = 0; i < s.n; i++)
        if (strcmp(s.v[i].name, "t_imp_seconds") == 0) x = &s.v[i];
    CHECK(x != NULL);
    if (x) {
        CHECK_EQ_INT(x->value, 5);
        CHECK_EQ_INT(x->buckets[0], 3); /* 5 - the two stored */
        CHECK_EQ_INT(x->buckets[6], 3); /* le 1 ms */
        CHECK_EQ_INT(x->buckets[7], 4); /* le 2.5 ms */
        CHECK_EQ_INT(x->buckets[FY_HIST_NBOUNDS - 1], 4);
        CHECK_EQ_INT(x->buckets[FY_HIST_NBOUNDS], 5);
        CHECK_EQ_INT(x->sum_us, 5 + 2000 + 70000000);
    }
    fy_counters_snapshot_free(&s);
}

#define NTHREADS 4
#define NITER 200000

static fy_counter_id_t mt_c, mt_g, mt_h;
static atomic_int started;

static void *writer(void *arg)
{
    fy_counters_bind((int)(intptr_t)arg);
    atomic_fetch_add(&started, 1);
    for (int i = 0; i < NITER; i++) {
        fy_counter_inc(mt_c);
        fy_gauge_add(mt_g, (i & 1) ? -1 : 1);
        fy_hist_observe(mt_h, (uint64_t)(i % 3) * 1000);
    }
    return NULL;
}

static void test_threads(void)
{
    CHECK_EQ_INT(fy_counters_init(NTHREADS), 0);
    mt_c = fy_counter_register("t_mt_total", "", FY_COUNTER);
    mt_g = fy_counter_register("t_mt_active", "", FY_GAUGE);
    mt_h = fy_counter_register("t_mt_seconds", "", FY_HISTOGRAM);
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) pthread_create(&t[i], NULL, writer, (void *)(intptr_t)i);
    /* reads while they write: monotonic, never above the total */
    int64_t last = 0;
    for (int k = 0; k < 50; k++) {
        fy_counters_snapshot_t s;
        fy_counters_snapshot(&s);
        int64_t v = fy_counters_snapshot_get(&s, "t_mt_total", "");
        CHECK(v >= last && v <= (int64_t)NTHREADS * NITER);
        last = v;
        fy_counters_snapshot_free(&s);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
    fy_counters_snapshot_t s;
    fy_counters_snapshot(&s);
    CHECK_EQ_INT(fy_counters_snapshot_get(&s, "t_mt_total", ""), (int64_t)NTHREADS * NITER);
    CHECK_EQ_INT(fy_counters_snapshot_get(&s, "t_mt_active", ""), 0);
    CHECK_EQ_INT(fy_counters_snapshot_get(&s, "t_mt_seconds", ""), (int64_t)NTHREADS * NITER);
    uint64_t le0 = 0, le1ms = 0, sum = 0; /* what one writer observed */
    for (int i = 0; i < NITER; i++) {
        uint64_t us = (uint64_t)(i % 3) * 1000;
        le0 += us <= 10;
        le1ms += us <= 1000;
        sum += us;
    }
    for (size_t i = 0; i < s.n; i++)
        if (strcmp(s.v[i].name, "t_mt_seconds") == 0) {
            CHECK_EQ_INT(s.v[i].buckets[0], NTHREADS * le0);
            CHECK_EQ_INT(s.v[i].buckets[6], NTHREADS * le1ms);
            CHECK_EQ_INT(s.v[i].sum_us, NTHREADS * sum);
        }
    fy_counters_snapshot_free(&s);
}

/* The exposition writer groups each family under one HELP and TYPE (the registry interleaves
 * blocks); per-server registration; a discarding thread's writes are never summed. */
static void test_prometheus(void)
{
    fy_counter_id_t x0 = fy_counter_register("p_x_total", "k=\"0\"", FY_COUNTER);
    fy_counter_id_t y = fy_counter_register("p_y", "", FY_GAUGE);
    fy_counter_id_t x1 = fy_counter_register("p_x_total", "k=\"1\"", FY_COUNTER);
    fy_counter_add(x0, 2);
    fy_counter_add(x1, 3);
    fy_gauge_add(y, -1);
    struct {
        const char *pad;
        char *url;
    } sv[2] = {{"a", "http://h:1"}, {"b", "http://h:2"}};
    fy_counter_id_t *ids = fy_counters_register_servers(
        "p_srv_total", FY_COUNTER, "u", sv, 2, sizeof sv[0], offsetof(__typeof__(sv[0]), url));
    CHECK(ids[0] && ids[1] && ids[0] != ids[1]);
    CHECK_EQ_INT(fy_counter_lookup("p_srv_total", "upstream=\"u\",server=\"http://h:2\""), ids[1]);
    fy_counter_inc(ids[1]);
    free(ids);
    fy_counters_snapshot_t s;
    CHECK_EQ_INT(fy_counters_snapshot(&s), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK_EQ_INT(fy_counters_write_prometheus(&s, f), 0);
    fclose(f);
    const char *want = "# HELP p_x_total Ferry metric.\n# TYPE p_x_total counter\n"
                       "p_x_total{k=\"0\"} 2\np_x_total{k=\"1\"} 3\n"
                       "# HELP p_y Ferry metric.\n# TYPE p_y gauge\np_y{} -1\n";
    CHECK(strstr(buf, want) != NULL);
    CHECK(strstr(buf,
                 "# TYPE p_srv_total counter\np_srv_total{upstream=\"u\",server=\"http://h:1\"} "
                 "0\np_srv_total{upstream=\"u\",server=\"http://h:2\"} 1\n") != NULL);
    free(buf);
    fy_counters_snapshot_free(&s);
    /* writes after bind_discard are not summed */
    fy_counters_bind_discard();
    fy_counter_add(x0, 100);
    fy_counters_bind(-1); /* back to the unbound array */
    CHECK_EQ_INT(fy_counters_snapshot(&s), 0);
    CHECK_EQ_INT(fy_counters_snapshot_get(&s, "p_x_total", "k=\"0\""), 2);
    fy_counters_snapshot_free(&s);
}

FY_TEST_MAIN(test_registry(), test_buckets(), test_implicit_first(), test_threads(),
             test_prometheus())
