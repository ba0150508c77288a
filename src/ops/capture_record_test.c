/* Capture records: the redaction table, the inline copy at every short length, encode then
 * decode and index (in place and from the encoder's Content-Type position) agreeing. */
#include "ops/capture_record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/test.h"

static void test_hred(void)
{
    static const char *const names[] = {"authorization", "cookie", "x-a", NULL};
    fy__cs_hred_t t;
    fy__cs_hred_init(&t, names);
    CHECK(fy__cs_hred_match(&t, FY_STR_LIT("Authorization")));
    CHECK(fy__cs_hred_match(&t, FY_STR_LIT("COOKIE")));
    CHECK(fy__cs_hred_match(&t, FY_STR_LIT("x-A")));
    CHECK(!fy__cs_hred_match(&t, FY_STR_LIT("cookies")));
    CHECK(!fy__cs_hred_match(&t, FY_STR_LIT("cookiE2")));
    CHECK(!fy__cs_hred_match(&t, FY_STR_LIT("x-b")));    /* same length and first byte */
    CHECK(!fy__cs_hred_match(&t, FY_STR_LIT("bookie"))); /* same length */
    CHECK(!fy__cs_hred_match(&t, FY_STR_LIT("")));
    /* names of 63 bytes and more share one length bit */
    char longn[80];
    memset(longn, 'l', sizeof longn);
    longn[70] = 0;
    const char *const ln[] = {longn, NULL};
    fy__cs_hred_init(&t, ln);
    CHECK(fy__cs_hred_match(&t, fy_str(longn, 70)));
    CHECK(!fy__cs_hred_match(&t, fy_str(longn, 69)));
    CHECK(!fy__cs_hred_match(&t, fy_str(longn, 63)));
}

static void test_copy(void)
{
    char src[64], dst[80];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (char)('a' + i % 26);
    for (size_t n = 0; n <= 40; n++) {
        memset(dst, '#', sizeof dst);
        fy__cs_copy(dst + 1, src + 3, n);
        CHECK(memcmp(dst + 1, src + 3, n) == 0);
        CHECK(dst[0] == '#' && dst[n + 1] == '#');
    }
}

static void test_roundtrip(void)
{
    static const char *const names[] = {"authorization", NULL};
    fy__cs_hred_t t;
    fy__cs_hred_init(&t, names);
    fy_cs_header_t rq[] = {{FY_STR_LIT("Host"), FY_STR_LIT("h.test")},
                           {FY_STR_LIT("AUTHORIZATION"), FY_STR_LIT("Bearer x")}};
    fy_cs_header_t rs[] = {{FY_STR_LIT("server"), FY_STR_LIT("s")},
                           {FY_STR_LIT("Content-Type"), FY_STR_LIT("text/plain")},
                           {FY_STR_LIT("content-type"), FY_STR_LIT("second")}};
    fy_cs_header_t meta[] = {{FY_STR_LIT("t.wait"), FY_STR_LIT("123")}};
    fy_cs_flow_t f = {.start_us = 42,
                      .duration_ms = 7,
                      .status = 201,
                      .version = 20,
                      .stream_id = 3,
                      .flags = FY_CS_INTERCEPTED,
                      .method = FY_STR_LIT("GET"),
                      .scheme = FY_STR_LIT("https"),
                      .authority = FY_STR_LIT("h.test:8443"),
                      .target = FY_STR_LIT("/a?b=c"),
                      .req_headers = rq,
                      .n_req_headers = 2,
                      .res_headers = rs,
                      .n_res_headers = 3,
                      .req_size = 0,
                      .res_size = 99,
                      .meta = meta,
                      .n_meta = 1};
    fy__cs_rec_edit_t e = {.req_body = FY_STR_LIT(""),
                           .res_body = FY_STR_LIT("hello"),
                           .flags = f.flags | FY_CS_RES_TRUNCATED,
                           .hred = &t};
    size_t n = fy__cs_rec_size(&f, &e);
    char *buf = malloc(n + 1);
    uint32_t ct[2];
    /* too little room: refused, and nothing written past it (the guard byte) */
    for (size_t room = 0; room < n; room++) {
        buf[room] = 'Z';
        CHECK_EQ_INT(fy__cs_rec_encode(buf, room, &f, &e, 77, ct), 0);
        CHECK(buf[room] == 'Z');
    }
    buf[n] = 'Z';
    CHECK_EQ_INT(fy__cs_rec_encode(buf, n, &f, &e, 77, ct), n);
    CHECK(buf[n] == 'Z'); /* the size was exact */
    char *big = malloc(n + 100);
    uint32_t ct2[2];
    CHECK_EQ_INT(fy__cs_rec_encode(big, n + 100, &f, &e, 77, ct2), n);
    CHECK(memcmp(big, buf, n) == 0 && ct2[0] == ct[0] && ct2[1] == ct[1]);
    free(big);
    uint32_t len;
    memcpy(&len, buf + 4, 4);
    CHECK_EQ_INT(len, n);

    fy_cs_entry_t a, b;
    fy_str_t sa[4], sb[4];
    CHECK_EQ_INT(fy__cs_rec_index(buf, n, &a, sa), 0);
    fy__cs_rec_index_encoded(buf, ct, &b, sb);
    CHECK_EQ_INT(a.id, 77);
    CHECK_EQ_INT(b.id, 77);
    CHECK_EQ_INT(b.status, 201);
    CHECK_EQ_INT(b.flags, FY_CS_INTERCEPTED | FY_CS_RES_TRUNCATED);
    CHECK_EQ_INT(b.res_size, 99);
    CHECK_EQ_INT(b.stream_id, 3);
    for (int i = 0; i < 4; i++)
        CHECK(sa[i].len == sb[i].len && memcmp(sa[i].p, sb[i].p, sa[i].len) == 0);
    CHECK_STRN(sb[0].p, sb[0].len, "GET");
    CHECK_STRN(sb[1].p, sb[1].len, "h.test:8443");
    CHECK_STRN(sb[2].p, sb[2].len, "/a?b=c");
    CHECK_STRN(sb[3].p, sb[3].len, "text/plain"); /* the first one */

    char *copy = malloc(n);
    memcpy(copy, buf, n);
    fy_cs_loaded_t l;
    CHECK_EQ_INT(fy__cs_rec_decode(copy, n, &l), 0);
    CHECK_EQ_INT(l.f.n_req_headers, 2);
    CHECK_STRN(l.f.req_headers[1].value.p, l.f.req_headers[1].value.len, "[redacted]");
    CHECK_STRN(l.f.req_headers[0].value.p, l.f.req_headers[0].value.len, "h.test");
    CHECK_STRN(l.f.res_body.p, l.f.res_body.len, "hello");
    CHECK_EQ_INT(l.f.n_meta, 1);
    CHECK_STRN(l.f.meta[0].value.p, l.f.meta[0].value.len, "123");
    free(l.hdrs);
    free(l.meta);
    free(copy);

    /* a record cut short anywhere is refused by both readers */
    for (size_t k = 0; k < n; k++) {
        if (k == n - 21) continue; /* ends before the meta (4 + 10 + 7 bytes): a valid record */
        CHECK(fy__cs_rec_index(buf, k, &a, sa) < 0);
        char *c = malloc(k ? k : 1);
        memcpy(c, buf, k);
        CHECK(fy__cs_rec_decode(c, k, &l) < 0);
        free(c);
    }
    free(buf);
}

static void test_ctype_position(void)
{
    fy_cs_header_t rs[] = {{FY_STR_LIT("Content-Typf"), FY_STR_LIT("x")},
                           {FY_STR_LIT("content_type"), FY_STR_LIT("z")},
                           {FY_STR_LIT("CONTENT-TYPE"), FY_STR_LIT("y")}};
    fy_cs_flow_t f = {.method = FY_STR_LIT("GET"), .res_headers = rs, .n_res_headers = 3};
    fy__cs_rec_edit_t e = {0};
    size_t n = fy__cs_rec_size(&f, &e);
    char *buf = malloc(n);
    uint32_t ct[2];
    CHECK_EQ_INT(fy__cs_rec_encode(buf, n, &f, &e, 1, ct), n);
    CHECK_EQ_INT(ct[1], 1);
    CHECK(ct[0] < n && buf[ct[0]] == 'y');
    fy_cs_entry_t a;
    fy_str_t sa[4];
    CHECK_EQ_INT(fy__cs_rec_index(buf, n, &a, sa), 0);
    CHECK_STRN(sa[3].p, sa[3].len, "y");
    free(buf);
}

/* Timings given as numbers are stored as the first meta, as strings would be: the same
   record as the strings give (the format did not change). */
static void test_timings(void)
{
    fy_cs_header_t tls[] = {{FY_STR_LIT("tls.sni"), FY_STR_LIT("a.test")}};
    fy_cs_flow_t f = {.method = FY_STR_LIT("GET"),
                      .meta = tls,
                      .n_meta = 1,
                      .t_set = 2 | 4 | 8,
                      .t_us = {5, 1736, -1, 2147483647}};
    fy_cs_header_t as_str[] = {{FY_STR_LIT("t.connect"), FY_STR_LIT("1736")},
                               {FY_STR_LIT("t.tls"), FY_STR_LIT("-1")},
                               {FY_STR_LIT("t.wait"), FY_STR_LIT("2147483647")},
                               {FY_STR_LIT("tls.sni"), FY_STR_LIT("a.test")}};
    fy_cs_flow_t g = {.method = FY_STR_LIT("GET"), .meta = as_str, .n_meta = 4};
    fy__cs_rec_edit_t e = {0};
    size_t n = fy__cs_rec_size(&f, &e);
    CHECK_EQ_INT(n, fy__cs_rec_size(&g, &e));
    char *a = malloc(n), *b = malloc(n);
    uint32_t ct[2];
    for (size_t room = 0; room < n; room++)
        CHECK_EQ_INT(fy__cs_rec_encode(a, room, &f, &e, 9, ct), 0);
    CHECK_EQ_INT(fy__cs_rec_encode(a, n, &f, &e, 9, ct), n);
    CHECK_EQ_INT(fy__cs_rec_encode(b, n, &g, &e, 9, ct), n);
    CHECK(memcmp(a, b, n) == 0);
    fy_cs_loaded_t l;
    CHECK_EQ_INT(fy__cs_rec_decode(a, n, &l), 0);
    CHECK_EQ_INT(l.f.n_meta, 4);
    CHECK_EQ_INT(l.f.t_set, 0);
    CHECK_STRN(l.f.meta[0].value.p, l.f.meta[0].value.len, "1736");
    CHECK_STRN(l.f.meta[2].value.p, l.f.meta[2].value.len, "2147483647");
    free(l.hdrs);
    free(l.meta);
    /* each digit count, and dns alone */
    int32_t vals[] = {0, 9, 10, 99, 100, 999, 1000, 12345, 100000, 9999999};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        char want[16];
        snprintf(want, sizeof want, "%d", (int)vals[i]);
        fy_cs_flow_t h = {.t_set = 1, .t_us = {vals[i]}};
        size_t m = fy__cs_rec_size(&h, &e);
        char *c = malloc(m);
        CHECK_EQ_INT(fy__cs_rec_encode(c, m, &h, &e, 1, ct), m);
        CHECK_EQ_INT(fy__cs_rec_decode(c, m, &l), 0);
        CHECK_EQ_INT(l.f.n_meta, 1);
        CHECK_STRN(l.f.meta[0].name.p, l.f.meta[0].name.len, "t.dns");
        CHECK_STRN(l.f.meta[0].value.p, l.f.meta[0].value.len, want);
        free(l.hdrs);
        free(l.meta);
        free(c);
    }
    free(a);
    free(b);
}

FY_TEST_MAIN({
    test_timings();
    test_ctype_position();
    test_hred();
    test_copy();
    test_roundtrip();
})
