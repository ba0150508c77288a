/* Unit tests of Accept-Encoding negotiation (q-values, `*`, ties, malformed entries) and MIME
 * type matching. */
#include "policy/compress_neg.c"

#include "core/test.h"

static int neg(const char *ae)
{
    static const int offer[] = {FY_CODING_BR, FY_CODING_ZSTD, FY_CODING_GZIP};
    return fy_compress_negotiate(fy_str(ae, strlen(ae)), offer, 3);
}

static void test_negotiate(void)
{
    CHECK_EQ_INT(neg(""), FY_CODING_IDENTITY);
    CHECK_EQ_INT(neg("gzip"), FY_CODING_GZIP);
    CHECK_EQ_INT(neg("gzip, deflate, br"), FY_CODING_BR); /* tie: our order */
    CHECK_EQ_INT(neg("gzip;q=1.0, br;q=0.5"), FY_CODING_GZIP);
    CHECK_EQ_INT(neg("br;q=0, gzip;q=0.001"), FY_CODING_GZIP);
    CHECK_EQ_INT(neg("br;q=0, gzip;q=0"), FY_CODING_IDENTITY);
    CHECK_EQ_INT(neg("*"), FY_CODING_BR);
    CHECK_EQ_INT(neg("*;q=0.5, zstd"), FY_CODING_ZSTD);
    CHECK_EQ_INT(neg("*;q=0"), FY_CODING_IDENTITY);
    CHECK_EQ_INT(neg("identity"), FY_CODING_IDENTITY);
    CHECK_EQ_INT(neg("GZIP ; Q=0.8 , ZStd;q=0.9"), FY_CODING_ZSTD);
    CHECK_EQ_INT(neg("gzip;q=2"), FY_CODING_IDENTITY);      /* malformed q: refused */
    CHECK_EQ_INT(neg("gzip;q=0.1234"), FY_CODING_IDENTITY); /* four decimals: malformed */
    CHECK_EQ_INT(neg("gzip;level=1;q=0.3, br;q=0.2"), FY_CODING_GZIP);
    CHECK_EQ_INT(neg(",,gzip,,"), FY_CODING_GZIP);
    CHECK_EQ_INT(neg("x-gzip"), FY_CODING_IDENTITY);
    static const int only_gzip[] = {FY_CODING_GZIP};
    CHECK_EQ_INT(fy_compress_negotiate(FY_STR_LIT("br, zstd"), only_gzip, 1), FY_CODING_IDENTITY);
    CHECK_EQ_INT(qvalue("0.5", 3), 500);
    CHECK_EQ_INT(qvalue("1.000", 5), 1000);
    CHECK_EQ_INT(qvalue("1.001", 5), -1);
    CHECK_EQ_INT(qvalue("0.", 2), 0);
}

static void test_types(void)
{
    char *v[] = {"text/*", "application/json"};
    fy_conf_strlist_t l = {v, 2};
    CHECK(fy_compress_type_matches(FY_STR_LIT("text/html; charset=utf-8"), &l));
    CHECK(fy_compress_type_matches(FY_STR_LIT("Application/JSON"), &l));
    CHECK(!fy_compress_type_matches(FY_STR_LIT("application/jsonx"), &l));
    CHECK(!fy_compress_type_matches(FY_STR_LIT("image/png"), &l));
    CHECK(!fy_compress_type_matches(FY_STR_LIT("text/"), &l));
    CHECK(!fy_compress_type_matches(FY_STR_LIT(""), &l));
}

FY_TEST_MAIN(test_negotiate(); test_types())
