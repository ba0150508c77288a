/* Unit tests of upstream/upstream_breaker.c: consecutive failures open the breaker, a success
 * in between resets the run; the error rate opens it only past min-requests and within the
 * window; open refuses until open-for, then half-open admits a bounded number of trials; all
 * succeeding closes it, one failing reopens it with a doubled interval (capped); trials that
 * never report are forgotten; outcomes while open are ignored. The retry budget allows
 * ratio x requests + min-per-second x window retries over the window, and forgets old ones. */
#include "upstream/upstream_breaker.h"

#include "core/test.h"

static fy_breaker_conf_t conf(void)
{
    return (fy_breaker_conf_t){.consecutive = 3,
                               .error_rate = 50,
                               .window_ms = 1000,
                               .min_requests = 10,
                               .open_ms = 100,
                               .max_open_ms = 350,
                               .half_open_requests = 2,
                               .on_5xx = true};
}

static void test_consecutive(void)
{
    fy_breaker_conf_t c = conf();
    c.error_rate = 0;
    fy_breaker_t b = {0};
    CHECK_EQ_INT(fy_breaker_record(&b, &c, false, 0), FY_BRK_SAME);
    CHECK_EQ_INT(fy_breaker_record(&b, &c, false, 0), FY_BRK_SAME);
    CHECK_EQ_INT(fy_breaker_record(&b, &c, true, 0), FY_BRK_SAME); /* the run starts again */
    CHECK_EQ_INT(fy_breaker_record(&b, &c, false, 0), FY_BRK_SAME);
    CHECK_EQ_INT(fy_breaker_record(&b, &c, false, 0), FY_BRK_SAME);
    CHECK(fy_breaker_usable(&b, &c, 0));
    CHECK_EQ_INT(fy_breaker_record(&b, &c, false, 10), FY_BRK_TO_OPEN);
    CHECK_EQ_INT(b.why, FY_BRK_WHY_CONSECUTIVE);
    CHECK_EQ_INT(b.open_for_ms, 100);
    CHECK(!fy_breaker_usable(&b, &c, 10));
    CHECK(!fy_breaker_usable(&b, &c, 109));
    /* late outcomes of requests sent before it opened change nothing */
    CHECK_EQ_INT(fy_breaker_record(&b, &c, true, 50), FY_BRK_SAME);
    CHECK_EQ_INT(b.state, FY_BRK_OPEN);
    CHECK(fy_breaker_usable(&b, &c, 110));
}

static void test_half_open(void)
{
    fy_breaker_conf_t c = conf();
    fy_breaker_t b = {0};
    for (int i = 0; i < 3; i++) fy_breaker_record(&b, &c, false, 0);
    CHECK_EQ_INT(b.state, FY_BRK_OPEN);
    /* due: the first admission turns it half-open; two trials at most at once */
    CHECK_EQ_INT(fy_breaker_admit(&b, &c, 100), FY_BRK_TO_HALF_OPEN);
    CHECK(fy_breaker_usable(&b, &c, 100));
    CHECK_EQ_INT(fy_breaker_admit(&b, &c, 100), FY_BRK_SAME);
    CHECK(!fy_breaker_usable(&b, &c, 100));
    CHECK_EQ_INT(fy_breaker_record(&b, &c, true, 101), FY_BRK_SAME);
    CHECK_EQ_INT(fy_breaker_record(&b, &c, true, 102), FY_BRK_TO_CLOSED);
    CHECK_EQ_INT(b.reopens, 0);
    CHECK(fy_breaker_usable(&b, &c, 102));

    /* a failed trial reopens it, for twice as long each time, capped */
    for (int i = 0; i < 3; i++) fy_breaker_record(&b, &c, false, 200);
    CHECK_EQ_INT(b.open_for_ms, 100);
    fy_breaker_admit(&b, &c, 300);
    CHECK_EQ_INT(fy_breaker_record(&b, &c, false, 301), FY_BRK_TO_OPEN);
    CHECK_EQ_INT(b.why, FY_BRK_WHY_TRIAL);
    CHECK_EQ_INT(b.open_for_ms, 200);
    CHECK(!fy_breaker_usable(&b, &c, 500));
    CHECK(fy_breaker_usable(&b, &c, 501));
    fy_breaker_admit(&b, &c, 501);
    fy_breaker_record(&b, &c, false, 502);
    CHECK_EQ_INT(b.open_for_ms, 350); /* 400, capped */
    fy_breaker_admit(&b, &c, 852);
    fy_breaker_record(&b, &c, false, 853);
    CHECK_EQ_INT(b.open_for_ms, 350);

    /* trials that never report are forgotten after open-for */
    fy_breaker_admit(&b, &c, 1203);
    fy_breaker_admit(&b, &c, 1203);
    CHECK_EQ_INT(b.state, FY_BRK_HALF_OPEN);
    CHECK(!fy_breaker_usable(&b, &c, 1250));
    CHECK(fy_breaker_usable(&b, &c, 1303));
    CHECK_EQ_INT(fy_breaker_admit(&b, &c, 1303), FY_BRK_SAME);
    CHECK_EQ_INT(b.trials_out, 1);
}

static void test_error_rate(void)
{
    fy_breaker_conf_t c = conf();
    c.consecutive = 0;
    fy_breaker_t b = {0};
    /* alternating: 50% failures, but below min-requests nothing happens */
    int r = FY_BRK_SAME;
    for (int i = 0; i < 9; i++) r = fy_breaker_record(&b, &c, i % 2 == 1, (uint64_t)i);
    CHECK_EQ_INT(r, FY_BRK_SAME);
    CHECK_EQ_INT(b.state, FY_BRK_CLOSED);
    /* the tenth outcome, a failure: 5 of 10 */
    CHECK_EQ_INT(fy_breaker_record(&b, &c, false, 9), FY_BRK_TO_OPEN);
    CHECK_EQ_INT(b.why, FY_BRK_WHY_RATE);

    /* the window forgets: failures spread wider than it never reach the rate */
    fy_breaker_t d = {0};
    for (int i = 0; i < 40; i++) {
        uint64_t t = (uint64_t)i * 300;
        r = fy_breaker_record(&d, &c, true, t);
        r |= fy_breaker_record(&d, &c, true, t);
        r |= fy_breaker_record(&d, &c, false, t + 1);
        CHECK_EQ_INT(r, FY_BRK_SAME); /* a third failed: under 50% */
    }
    CHECK_EQ_INT(d.state, FY_BRK_CLOSED);
    uint64_t n, f;
    fy_window_sum(&d.win, &n, &f);
    CHECK(n <= 12); /* about a second's worth, never the whole history */
}

static void test_budget(void)
{
    fy_retry_budget_conf_t c = {.ratio_permille = 200, .min_per_second = 0, .window_ms = 1000};
    fy_retry_budget_t rb = {0};
    for (int i = 0; i < 10; i++) fy_retry_budget_request(&rb, &c, 5);
    CHECK(fy_retry_budget_take(&rb, &c, 5));
    CHECK(fy_retry_budget_take(&rb, &c, 5));
    CHECK(!fy_retry_budget_take(&rb, &c, 5)); /* 20% of 10 */
    for (int i = 0; i < 5; i++) fy_retry_budget_request(&rb, &c, 6);
    CHECK(fy_retry_budget_take(&rb, &c, 6)); /* 20% of 15 = 3 */
    CHECK(!fy_retry_budget_take(&rb, &c, 6));
    /* a window later everything is forgotten */
    CHECK(!fy_retry_budget_take(&rb, &c, 2000));
    fy_retry_budget_request(&rb, &c, 2000);
    CHECK(!fy_retry_budget_take(&rb, &c, 2000)); /* 20% of 1 = 0 */
    /* the minimum: 3 per second of a 2 s window */
    fy_retry_budget_conf_t m = {.ratio_permille = 0, .min_per_second = 3, .window_ms = 2000};
    fy_retry_budget_t mb = {0};
    for (int i = 0; i < 6; i++) CHECK(fy_retry_budget_take(&mb, &m, 10));
    CHECK(!fy_retry_budget_take(&mb, &m, 10));
}

FY_TEST_MAIN(test_consecutive(); test_half_open(); test_error_rate(); test_budget())
