/* Unit tests of the WebTransport client's wire pieces (h3_wt_client.c), no socket: the peer
 * stream prefix reader fed whole and byte by byte (bidi 0x41 and uni 0x54 with a session id,
 * foreign types given up after the type), our control stream's SETTINGS, our streams' heads,
 * the CLOSE and DRAIN capsules inside DATA frames read back by the capsule reader, datagram framing
 * (quarter stream id, size bound, another session's refused), and the error-code space the
 * client's resets use (0x52e4a40fa8db + n + n/0x1e). */
#include <string.h>

#include "core/test.h"
#include "h3/h3_frame.h"
#include "h3/h3_wt.h"
#include "h3/h3_wt_client.h"

/* Feed `p` to a fresh prefix reader `step` bytes at a time; *used: the bytes it took. */
static fy__wtc_prefix_t prefix(uint64_t want, const uint8_t *p, size_t n, size_t step, size_t *used)
{
    fy__wtc_prefix_t pr;
    memset(&pr, 0, sizeof pr);
    size_t at = 0;
    while (at < n && pr.state == 0) {
        size_t k = n - at < step ? n - at : step;
        size_t u = fy__wtc_prefix_feed(&pr, want, p + at, k);
        CHECK(u <= k);
        at += u;
        if (pr.state == 0) CHECK_EQ_INT(u, k);
    }
    *used = at;
    return pr;
}

static void test_prefix(void)
{
    static const size_t steps[] = {1, 2, 3, 100};
    static const uint64_t sids[] = {0, 4, 60, 16384, 1ull << 40};
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        for (size_t i = 0; i < sizeof sids / sizeof sids[0]; i++) {
            for (int uni = 0; uni < 2; uni++) {
                uint8_t b[32];
                size_t n = fy__wtc_stream_head(b, uni, sids[i]);
                memcpy(b + n, "payload", 7); /* stream bytes follow: not the prefix's */
                size_t used;
                fy__wtc_prefix_t pr =
                    prefix(uni ? FY_WT_STREAM_UNI : FY_WT_STREAM_BIDI, b, n + 7, steps[s], &used);
                CHECK_EQ_INT(pr.state, 1);
                CHECK(pr.sid == sids[i]);
                CHECK_EQ_INT(used, n);
                /* done: it takes nothing more */
                CHECK_EQ_INT(fy__wtc_prefix_feed(&pr, FY_WT_STREAM_BIDI, b + n, 7), 0);
            }
        }
        /* a control stream (type 0), a QPACK encoder stream (2), a GREASE type: not ours,
           given up right after the type */
        static const uint64_t foreign[] = {0x00, 0x02, 0x1f * 7 + 0x21};
        for (size_t i = 0; i < 3; i++) {
            uint8_t b[16];
            size_t n = fy_h3_varint_encode(b, foreign[i]);
            size_t tl = n;
            n += fy_h3_varint_encode(b + n, 4);
            size_t used;
            fy__wtc_prefix_t pr = prefix(FY_WT_STREAM_UNI, b, n, steps[s], &used);
            CHECK_EQ_INT(pr.state, -1);
            CHECK(pr.type == foreign[i]);
            CHECK_EQ_INT(used, tl);
        }
        /* a bidi signal on a stream where a uni type is expected is foreign too */
        uint8_t b[16];
        size_t n = fy__wtc_stream_head(b, false, 0);
        size_t used;
        CHECK_EQ_INT(prefix(FY_WT_STREAM_UNI, b, n, steps[s], &used).state, -1);
    }
    /* incomplete: still reading, everything taken */
    uint8_t b[16];
    size_t n = fy__wtc_stream_head(b, true, 1ull << 40); /* 8-byte session id */
    fy__wtc_prefix_t pr;
    memset(&pr, 0, sizeof pr);
    CHECK_EQ_INT(fy__wtc_prefix_feed(&pr, FY_WT_STREAM_UNI, b, n - 1), n - 1);
    CHECK_EQ_INT(pr.state, 0);
    CHECK_EQ_INT(fy__wtc_prefix_feed(&pr, FY_WT_STREAM_UNI, b + n - 1, 1), 1);
    CHECK_EQ_INT(pr.state, 1);
}

static void test_settings(void)
{
    uint8_t b[64];
    size_t n = fy__wtc_settings(b);
    CHECK(n <= sizeof b);
    uint64_t v;
    size_t k = fy_h3_varint_decode(b, n, &v);
    CHECK(k && v == FY_H3_STREAM_CONTROL);
    size_t at = k;
    k = fy_h3_varint_decode(b + at, n - at, &v);
    CHECK(k && v == FY_H3_SETTINGS);
    at += k;
    uint64_t len;
    k = fy_h3_varint_decode(b + at, n - at, &len);
    at += k;
    CHECK_EQ_INT(at + len, n);
    int dg = 0, dg04 = 0, wt02 = 0, maxs = 0, pairs = 0;
    while (at < n) {
        uint64_t id, val;
        k = fy_h3_varint_decode(b + at, n - at, &id);
        CHECK(k);
        at += k;
        k = fy_h3_varint_decode(b + at, n - at, &val);
        CHECK(k);
        at += k;
        pairs++;
        dg += id == FY_H3_SETTINGS_H3_DATAGRAM && val == 1;
        dg04 += id == FY_H3_SETTINGS_H3_DATAGRAM_04 && val == 1;
        wt02 += id == FY_WT_SETTINGS_DRAFT02 && val == 1;
        maxs += id == FY_WT_SETTINGS_MAX_SESSIONS && val == 1;
    }
    CHECK_EQ_INT(at, n);
    CHECK_EQ_INT(pairs, 4);
    CHECK(dg == 1 && dg04 == 1 && wt02 == 1 && maxs == 1);
}

static void test_close_frame(void)
{
    static char big[FY_WT_CLOSE_REASON_MAX + 10];
    memset(big, 'x', sizeof big);
    static const size_t rlens[] = {0, 3, FY_WT_CLOSE_REASON_MAX, sizeof big};
    for (size_t i = 0; i < 4; i++) {
        uint8_t f[32 + FY_WT_CLOSE_REASON_MAX];
        size_t n = fy__wtc_close_frame(f, 0xdeadbeefu, big, rlens[i]);
        CHECK(n <= sizeof f);
        fy_h3_frame_rd_t rd;
        memset(&rd, 0, sizeof rd);
        size_t k = fy_h3_frame_hdr_feed(&rd, f, n);
        CHECK(rd.have_hdr);
        CHECK(rd.type == FY_H3_DATA);
        CHECK_EQ_INT(k + rd.left, n);
        fy_wt_capsule_rd_t cr;
        memset(&cr, 0, sizeof cr);
        fy_wt_capsule_ev_t ev;
        CHECK_EQ_INT(fy_wt_capsule_feed(&cr, f + k, n - k, &ev), n - k);
        CHECK_EQ_INT(ev.kind, 1);
        CHECK(ev.code == 0xdeadbeefu);
        size_t want = rlens[i] > FY_WT_CLOSE_REASON_MAX ? FY_WT_CLOSE_REASON_MAX : rlens[i];
        CHECK_EQ_INT(ev.reason_len, want);
    }
}

static void test_drain_frame(void)
{
    uint8_t f[16];
    size_t n = fy__wtc_drain_frame(f);
    CHECK(n <= sizeof f);
    fy_h3_frame_rd_t rd;
    memset(&rd, 0, sizeof rd);
    size_t k = fy_h3_frame_hdr_feed(&rd, f, n);
    CHECK(rd.have_hdr && rd.type == FY_H3_DATA);
    CHECK_EQ_INT(k + rd.left, n);
    CHECK_EQ_INT(rd.left, 5);                      /* 0x78ae takes a 4-byte varint, then length 0 */
    for (size_t step = 1; step <= n - k; step++) { /* whole and in pieces */
        fy_wt_capsule_rd_t cr;
        memset(&cr, 0, sizeof cr);
        fy_wt_capsule_ev_t ev = {0};
        size_t at = k;
        while (at < n && !ev.kind) {
            size_t m = n - at < step ? n - at : step;
            at += fy_wt_capsule_feed(&cr, f + at, m, &ev);
        }
        CHECK_EQ_INT(ev.kind, 2);
        CHECK_EQ_INT(at, n);
    }
}

static void test_datagram(void)
{
    uint8_t b[1500];
    /* session on stream 8: quarter stream id 2 */
    size_t n = fy__wtc_datagram(b, sizeof b, 8, "hello", 5);
    CHECK_EQ_INT(n, 6);
    CHECK_EQ_INT(b[0], 2);
    CHECK(!memcmp(b + 1, "hello", 5));
    CHECK_EQ_INT(fy__wtc_datagram_of(b, n, 8), 1);
    CHECK_EQ_INT(fy__wtc_datagram_of(b, n, 12), 0); /* another session's */
    CHECK_EQ_INT(fy__wtc_datagram_of(b, 0, 8), 0);  /* no quarter stream id */
    /* a two-byte quarter stream id (stream 400: 100), empty payload */
    n = fy__wtc_datagram(b, sizeof b, 400, NULL, 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(fy__wtc_datagram_of(b, n, 400), 2);
    /* the size bound: exactly full fits, one more byte does not */
    static uint8_t pay[1500];
    CHECK_EQ_INT(fy__wtc_datagram(b, sizeof b, 0, pay, sizeof b - 1), sizeof b);
    CHECK_EQ_INT(fy__wtc_datagram(b, sizeof b, 0, pay, sizeof b), 0);
}

/* The code space the client's resets and the proxy's relay use, against the draft's formula
 * (first + n + floor(n / 0x1e)) and back. */
static void test_codes(void)
{
    static const uint32_t v[] = {0,    1,    5,    7,   0x1d,        0x1e,
                                 0x1f, 0x3b, 0x3c, 255, 0xfffffffeu, 0xffffffffu};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint64_t h = 0x52e4a40fa8dbull + v[i] + v[i] / 0x1e;
        CHECK(fy_wt_code_to_h3(v[i]) == h);
        CHECK(fy_wt_code_from_h3(h) == (int64_t)v[i]);
    }
    /* consecutive codes stay distinct and increasing across a skipped codepoint */
    for (uint32_t c = 0; c < 200; c++) CHECK(fy_wt_code_to_h3(c + 1) > fy_wt_code_to_h3(c));
    /* codes of the proxy's own resets are HTTP/3 codes, not WebTransport ones */
    CHECK_EQ_INT(fy_wt_code_from_h3(FY_WT_SESSION_GONE), -1);
    CHECK_EQ_INT(fy_wt_code_from_h3(FY_WT_BUFFERED_STREAM_REJECTED), -1);
    CHECK_EQ_INT(fy_wt_code_from_h3(0), -1);
}

FY_TEST_MAIN(test_prefix(); test_settings(); test_close_frame(); test_drain_frame();
             test_datagram(); test_codes())
