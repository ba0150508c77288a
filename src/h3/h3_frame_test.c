/* Unit tests of the HTTP/3 framing layer (h3_frame.c): varints at every length boundary,
 * frame headers fed whole, byte by byte and ending at a guard page, SETTINGS rules. */
#include "h3/h3_frame.c"

#include "core/test.h"
#include "core/test_guard.h"

static void test_varints(void)
{
    static const uint64_t vals[] = {0,     63,         64,         16383,
                                    16384, 1073741823, 1073741824, FY_H3_VARINT_MAX};
    static const size_t lens[] = {1, 1, 2, 2, 4, 4, 8, 8};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        uint8_t b[8];
        size_t l = fy_h3_varint_encode(b, vals[i]);
        CHECK_EQ_INT(l, lens[i]);
        CHECK_EQ_INT(fy_h3_varint_len(vals[i]), lens[i]);
        uint64_t v = 1;
        CHECK_EQ_INT(fy_h3_varint_decode(b, l, &v), l);
        CHECK(v == vals[i]);
        CHECK_EQ_INT(fy_h3_varint_decode(b, l - 1, &v), 0); /* one byte short */
        /* ending exactly at a guard page: no read past the varint */
        const char *g = at_guard((const char *)b, l);
        CHECK_EQ_INT(fy_h3_varint_decode((const uint8_t *)g, l, &v), l);
        CHECK(v == vals[i]);
    }
    /* RFC 9000 §A.1 examples */
    uint64_t v;
    const uint8_t e8[] = {0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c};
    CHECK_EQ_INT(fy_h3_varint_decode(e8, 8, &v), 8);
    CHECK(v == 151288809941952652ull);
    const uint8_t e4[] = {0x9d, 0x7f, 0x3e, 0x7d};
    CHECK_EQ_INT(fy_h3_varint_decode(e4, 4, &v), 4);
    CHECK(v == 494878333);
    const uint8_t e2[] = {0x7b, 0xbd};
    CHECK_EQ_INT(fy_h3_varint_decode(e2, 2, &v), 2);
    CHECK(v == 15293);
    CHECK_EQ_INT(fy_h3_varint_decode(e2, 0, &v), 0);
}

static void test_frame_headers(void)
{
    /* type 0x21 (unknown, 1 byte) len 16384 (4 bytes); then HEADERS len 5 */
    const uint8_t in[] = {0x21, 0x80, 0x00, 0x40, 0x00, 0x01, 0x05};
    fy_h3_frame_rd_t rd = {0};
    CHECK_EQ_INT(fy_h3_frame_hdr_feed(&rd, in, sizeof in), 5); /* stops after one header */
    CHECK(rd.have_hdr && rd.type == 0x21 && rd.len == 16384 && rd.left == 16384);
    /* byte by byte */
    fy_h3_frame_rd_t r2 = {0};
    for (size_t i = 0; i < 4; i++) {
        CHECK_EQ_INT(fy_h3_frame_hdr_feed(&r2, in + i, 1), 1);
        CHECK(!r2.have_hdr);
    }
    CHECK_EQ_INT(fy_h3_frame_hdr_feed(&r2, in + 4, 1), 1);
    CHECK(r2.have_hdr && r2.type == 0x21 && r2.len == 16384);
    fy_h3_frame_rd_t r3 = {0};
    const char *g = at_guard((const char *)in + 5, 2);
    CHECK_EQ_INT(fy_h3_frame_hdr_feed(&r3, (const uint8_t *)g, 2), 2);
    CHECK(r3.have_hdr && r3.type == FY_H3_HEADERS && r3.len == 5);
    /* the largest header: two 8-byte varints */
    uint8_t big[16];
    size_t k = fy_h3_varint_encode(big, FY_H3_VARINT_MAX);
    k += fy_h3_varint_encode(big + k, FY_H3_VARINT_MAX);
    fy_h3_frame_rd_t r4 = {0};
    CHECK_EQ_INT(fy_h3_frame_hdr_feed(&r4, big, k), 16);
    CHECK(r4.have_hdr && r4.type == FY_H3_VARINT_MAX && r4.len == FY_H3_VARINT_MAX);
    CHECK(fy_h3_frame_is_h2_reserved(0x2) && fy_h3_frame_is_h2_reserved(0x9) &&
          !fy_h3_frame_is_h2_reserved(FY_H3_DATA) && !fy_h3_frame_is_h2_reserved(0x21));
}

static uint64_t seen_count;
static uint64_t count_cb(void *ud, uint64_t id, uint64_t v)
{
    seen_count++;
    return id == 0x99 ? FY_H3_SETTINGS_ERROR : 0;
}

static void test_settings(void)
{
    const uint8_t ok[] = {0x01, 0x50, 0x00, 0x07, 0x10, 0x21, 0x00, 0x06, 0x44, 0x00};
    seen_count = 0;
    CHECK_EQ_INT(fy_h3_settings_parse(ok, sizeof ok, count_cb, NULL), 0);
    CHECK_EQ_INT(seen_count, 4);
    const uint8_t dup[] = {0x01, 0x00, 0x01, 0x00};
    CHECK_EQ_INT(fy_h3_settings_parse(dup, sizeof dup, NULL, NULL), FY_H3_SETTINGS_ERROR);
    const uint8_t h2[] = {0x04, 0x00}; /* SETTINGS_INITIAL_WINDOW_SIZE of HTTP/2 */
    CHECK_EQ_INT(fy_h3_settings_parse(h2, sizeof h2, NULL, NULL), FY_H3_SETTINGS_ERROR);
    const uint8_t cut[] = {0x01, 0x40};
    CHECK_EQ_INT(fy_h3_settings_parse(cut, sizeof cut, NULL, NULL), FY_H3_FRAME_ERROR);
    const uint8_t refused[] = {0x40, 0x99, 0x01};
    CHECK_EQ_INT(fy_h3_settings_parse(refused, sizeof refused, count_cb, NULL),
                 FY_H3_SETTINGS_ERROR);
    CHECK_EQ_INT(fy_h3_settings_parse(NULL, 0, NULL, NULL), 0); /* empty SETTINGS is fine */
}

FY_TEST_MAIN(guard_init(); test_varints(); test_frame_headers(); test_settings())
