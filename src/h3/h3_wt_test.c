/* Unit tests of WebTransport's pure parts (h3_wt.c): the error-code mapping onto HTTP/3 codes
 * both ways (reserved codepoints skipped), and the capsule reader fed whole and byte by byte:
 * CLOSE with code and reason, DRAIN, unknown capsules skipped, bad lengths refused. */
#include <string.h>

#include "core/test.h"
#include "h3/h3_frame.h"
#include "h3/h3_wt.h"

static void test_codes(void)
{
    CHECK(fy_wt_code_to_h3(0) == 0x52e4a40fa8dbull);
    CHECK_EQ_INT(fy_wt_code_from_h3(0x52e4a40fa8dbull), 0);
    CHECK(fy_wt_code_to_h3(0xffffffffu) == 0x52e5ac983162ull);
    CHECK(fy_wt_code_from_h3(0x52e5ac983162ull) == 0xffffffffll);
    static const uint32_t v[] = {1, 0x1d, 0x1e, 0x1f, 0x3c, 1000, 0x7fffffff, 0xfffffffe};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint64_t h = fy_wt_code_to_h3(v[i]);
        CHECK((h - 0x21) % 0x1f != 0); /* never a reserved codepoint */
        CHECK(fy_wt_code_from_h3(h) == (int64_t)v[i]);
    }
    /* a reserved codepoint inside the range, and codes outside it */
    uint64_t h = 0x52e4a40fa8dbull;
    while ((h - 0x21) % 0x1f != 0) h++;
    CHECK_EQ_INT(fy_wt_code_from_h3(h), -1);
    CHECK_EQ_INT(fy_wt_code_from_h3(0x100), -1);
    CHECK_EQ_INT(fy_wt_code_from_h3(0x52e5ac983163ull), -1);
}

/* Feed `p` in pieces of `step` bytes; returns the first event. */
static fy_wt_capsule_ev_t feed(fy_wt_capsule_rd_t *rd, const uint8_t *p, size_t n, size_t step,
                               size_t *used)
{
    fy_wt_capsule_ev_t ev = {0};
    size_t at = 0;
    while (at < n) {
        size_t k = n - at < step ? n - at : step;
        size_t u = fy_wt_capsule_feed(rd, p + at, k, &ev);
        CHECK(u <= k);
        at += u;
        if (ev.kind) break;
        CHECK_EQ_INT(u, k);
    }
    *used = at;
    return ev;
}

static void test_capsules(void)
{
    uint8_t b[64 + FY_WT_CLOSE_REASON_MAX];
    size_t n = 0;
    /* an unknown capsule (skipped), then CLOSE(7, "bye"), then DRAIN */
    n += fy_h3_varint_encode(b + n, 0x1234567);
    n += fy_h3_varint_encode(b + n, 5);
    memcpy(b + n, "12345", 5);
    n += 5;
    size_t close_at = n;
    n += fy_wt_capsule_close(b + n, 7, "bye", 3);
    size_t close_end = n;
    n += fy_h3_varint_encode(b + n, FY_WT_CAPSULE_DRAIN);
    n += fy_h3_varint_encode(b + n, 0);
    static const size_t steps[] = {1, 2, 3, 7, 1000};
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        fy_wt_capsule_rd_t rd;
        memset(&rd, 0, sizeof rd);
        size_t used;
        fy_wt_capsule_ev_t ev = feed(&rd, b, n, steps[s], &used);
        CHECK_EQ_INT(ev.kind, 1);
        CHECK_EQ_INT(used, close_end);
        CHECK_EQ_INT(ev.code, 7);
        CHECK_EQ_INT(ev.reason_len, 3);
        CHECK(!memcmp(ev.reason, "bye", 3));
        ev = feed(&rd, b + close_end, n - close_end, steps[s], &used);
        CHECK_EQ_INT(ev.kind, 2);
        CHECK_EQ_INT(used, n - close_end);
    }
    (void)close_at;
    /* CLOSE shorter than its code, DRAIN with a payload, a reason over the limit */
    const uint8_t short_close[] = {0x80, 0x00, 0x28, 0x43, 0x02, 0, 0};
    const uint8_t fat_drain[] = {0x80, 0x00, 0x78, 0xae, 0x01, 0};
    uint8_t long_close[16];
    size_t ll = fy_h3_varint_encode(long_close, FY_WT_CAPSULE_CLOSE);
    ll += fy_h3_varint_encode(long_close + ll, 4 + FY_WT_CLOSE_REASON_MAX + 1);
    const uint8_t *bad[] = {short_close, fat_drain, long_close};
    const size_t badn[] = {sizeof short_close, sizeof fat_drain, ll};
    for (size_t i = 0; i < 3; i++) {
        fy_wt_capsule_rd_t rd;
        memset(&rd, 0, sizeof rd);
        fy_wt_capsule_ev_t ev;
        fy_wt_capsule_feed(&rd, bad[i], badn[i], &ev);
        CHECK_EQ_INT(ev.kind, -1);
        CHECK(ev.why != NULL);
    }
    /* the reason is cut at the limit when we write one */
    static char big[FY_WT_CLOSE_REASON_MAX + 50];
    memset(big, 'r', sizeof big);
    size_t k = fy_wt_capsule_close(b, 1, big, sizeof big);
    fy_wt_capsule_rd_t rd;
    memset(&rd, 0, sizeof rd);
    fy_wt_capsule_ev_t ev;
    CHECK_EQ_INT(fy_wt_capsule_feed(&rd, b, k, &ev), k);
    CHECK_EQ_INT(ev.kind, 1);
    CHECK_EQ_INT(ev.reason_len, FY_WT_CLOSE_REASON_MAX);
}

FY_TEST_MAIN(test_codes(); test_capsules())
