/* Unit tests of the body codecs behind `replace` rules: gzip, br and zstd round trips, the
 * decoded-size cap, corrupt and truncated input. */
#include "handler/mitm_rules.h"

#include <stdlib.h>
#include <string.h>

#include "core/test.h"

static void roundtrip(const char *enc)
{
    size_t n = 100000;
    char *in = malloc(n);
    for (size_t i = 0; i < n; i++) in[i] = (char)("hello world "[i % 12]);
    char *z = NULL, *back = NULL;
    long zl = fy__mitm_encode(enc, in, n, &z);
    CHECK(zl > 0 && (size_t)zl < n);
    long bl = fy__mitm_decode(enc, z, (size_t)zl, n, &back);
    CHECK_EQ_INT(bl, (long)n);
    CHECK(back && memcmp(back, in, n) == 0);
    free(back);
    /* over the cap: refused */
    CHECK_EQ_INT(fy__mitm_decode(enc, z, (size_t)zl, n - 1, &back), -1);
    CHECK(back == NULL);
    /* truncated */
    CHECK_EQ_INT(fy__mitm_decode(enc, z, (size_t)zl / 2, n, &back), -1);
    /* garbage */
    CHECK_EQ_INT(fy__mitm_decode(enc, "not compressed at all", 21, n, &back), -1);
    /* empty body */
    char *e = NULL;
    long el = fy__mitm_encode(enc, "", 0, &e);
    CHECK(el > 0);
    CHECK_EQ_INT(fy__mitm_decode(enc, e, (size_t)el, 10, &back), 0);
    free(back);
    free(e);
    free(z);
    free(in);
}

FY_TEST_MAIN(roundtrip("gzip"); roundtrip("br"); roundtrip("zstd");
             CHECK_EQ_INT(fy__mitm_encode("deflate", "x", 1, &(char *){NULL}), -1))
