/* Tests for h2_check.c: its character rules agree with nghttp2 1.52's own public checks on
 * every byte (the rules it applied while its HTTP messaging was on), and the field, head and
 * body-length verdicts of RFC 9113 §8. */
#include "h2/h2_check.h"
#include "core/test.h"

#include <nghttp2/nghttp2.h>
#include <string.h>

static void test_chars_match_nghttp2(void)
{
    for (int c = 0; c < 256; c++) {
        uint8_t one[1] = {(uint8_t)c}, mid[3] = {'a', (uint8_t)c, 'a'};
        CHECK(fy__h2_valid_name(mid, 3) == (nghttp2_check_header_name(mid, 3) != 0));
        CHECK(fy__h2_valid_value(one, 1) == (nghttp2_check_header_value_rfc9113(one, 1) != 0));
        CHECK(fy__h2_valid_value(mid, 3) == (nghttp2_check_header_value_rfc9113(mid, 3) != 0));
        CHECK(fy__h2_valid_method(one, 1) == (nghttp2_check_method(one, 1) != 0));
        CHECK(fy__h2_valid_path(one, 1) == (nghttp2_check_path(one, 1) != 0));
        CHECK(fy__h2_valid_authority(one, 1) == (nghttp2_check_authority(one, 1) != 0));
    }
    CHECK(!fy__h2_valid_name((const uint8_t *)"", 0));
    CHECK(!fy__h2_valid_name((const uint8_t *)":", 1));
    CHECK(fy__h2_valid_name((const uint8_t *)":path", 5));
    CHECK(!fy__h2_valid_name((const uint8_t *)"X-A", 3));
    CHECK(fy__h2_valid_value((const uint8_t *)"", 0));
    CHECK(!fy__h2_valid_method((const uint8_t *)"", 0));
    CHECK(fy__h2_valid_scheme((const uint8_t *)"https", 5));
    CHECK(fy__h2_valid_scheme((const uint8_t *)"a+b-c.d1", 8));
    CHECK(!fy__h2_valid_scheme((const uint8_t *)"1a", 2));
    CHECK(!fy__h2_valid_scheme((const uint8_t *)"a b", 3));
    CHECK(!fy__h2_valid_scheme((const uint8_t *)"", 0));
}

static int field(fy_h2_check_t *k, const char *n, const char *v, bool trailer)
{
    return fy__h2_check_field(k, (const uint8_t *)n, strlen(n), false, (const uint8_t *)v,
                              strlen(v), false, trailer);
}

static void test_head(void)
{
    fy_h2_check_t k = {0};
    CHECK(field(&k, ":method", "GET", false) == 0);
    CHECK(field(&k, ":scheme", "https", false) == 0);
    CHECK(field(&k, ":path", "/a", false) == 0);
    CHECK(!fy__h2_check_head(&k)); /* no :authority, no host */
    CHECK(field(&k, "host", "a", false) == 0);
    CHECK(fy__h2_check_head(&k));
    CHECK(field(&k, ":authority", "a", false) < 0); /* after a regular field */
    CHECK(field(&k, "te", "trailers", false) == 0);
    CHECK(field(&k, "te", "gzip", false) < 0);
    CHECK(field(&k, "connection", "x", false) < 0);
    CHECK(field(&k, "host", "b", false) < 0); /* twice */
    CHECK(field(&k, "x-a", " b", false) < 0);
    CHECK(field(&k, "x-a", "b\r", false) < 0);
    CHECK(field(&k, ":path", "/b", true) < 0); /* pseudo in trailers */
    CHECK(field(&k, "x-t", "1", true) == 0);

    fy_h2_check_t o = {0}; /* OPTIONS * */
    CHECK(field(&o, ":method", "OPTIONS", false) == 0);
    CHECK(field(&o, ":scheme", "http", false) == 0);
    CHECK(field(&o, ":authority", "a", false) == 0);
    CHECK(field(&o, ":path", "*", false) == 0);
    CHECK(fy__h2_check_head(&o));

    fy_h2_check_t g = {0}; /* GET * */
    CHECK(field(&g, ":method", "GET", false) == 0);
    CHECK(field(&g, ":scheme", "http", false) == 0);
    CHECK(field(&g, ":authority", "a", false) == 0);
    CHECK(field(&g, ":path", "*", false) == 0);
    CHECK(!fy__h2_check_head(&g));

    fy_h2_check_t c = {0}; /* CONNECT, then extended CONNECT */
    CHECK(field(&c, ":method", "CONNECT", false) == 0);
    CHECK(!fy__h2_check_head(&c));
    CHECK(field(&c, ":authority", "a:443", false) == 0);
    CHECK(fy__h2_check_head(&c));
    CHECK(field(&c, ":protocol", "websocket", false) == 0);
    CHECK(!fy__h2_check_head(&c)); /* extended: :scheme and :path too */
    CHECK(field(&c, ":scheme", "https", false) == 0);
    CHECK(field(&c, ":path", "/chat", false) == 0);
    CHECK(fy__h2_check_head(&c));
    CHECK(field(&c, ":bogus", "1", false) < 0);
    CHECK(field(&c, ":method", "GET", false) < 0); /* twice */
}

static void test_content_length(void)
{
    fy_h2_check_t k = {0};
    CHECK(field(&k, "content-length", "", false) < 0);
    CHECK(field(&k, "content-length", "1x", false) < 0);
    CHECK(field(&k, "content-length", "99999999999999999999", false) < 0);
    CHECK(field(&k, "content-length", "5", false) == 0);
    CHECK(field(&k, "content-length", "5", false) < 0); /* twice */
    CHECK(!fy__h2_check_end(&k));
    CHECK(fy__h2_check_data(&k, 3));
    CHECK(fy__h2_check_data(&k, 2));
    CHECK(fy__h2_check_end(&k));
    CHECK(!fy__h2_check_data(&k, 1));
    fy_h2_check_t none = {0};
    CHECK(fy__h2_check_data(&none, 100));
    CHECK(fy__h2_check_end(&none));
}

FY_TEST_MAIN(test_chars_match_nghttp2(); test_head(); test_content_length())
