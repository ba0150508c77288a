/* Unit tests of the word-at-a-time field-name comparison (policy/hname.h) against the byte
 * loop it replaces, fy_str_ieq: every length from 1 to 40, each byte in either case, and the
 * non-letters that a letter's case bit would confuse ('_' and DEL, '^' and '~', '@' and '`'). */
#include "policy/hname.h"

#include "core/test.h"

static void test_against_ieq(void)
{
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyz0123456789-_^!#$%&'*+.|~`";
    char lower[48], peer[48];
    for (size_t len = 1; len <= 40; len++) {
        for (size_t i = 0; i < len; i++) lower[i] = alpha[(i * 7 + len) % (sizeof alpha - 1)];
        lower[len] = '\0';
        fy_hname_t h;
        fy_hname_init(&h, lower);
        /* the same name in mixed case matches */
        for (size_t i = 0; i < len; i++)
            peer[i] =
                (i % 2 && lower[i] >= 'a' && lower[i] <= 'z') ? (char)(lower[i] - 32) : lower[i];
        CHECK(fy_hname_eq(&h, fy_str(peer, len)));
        CHECK(!fy_hname_eq(&h, fy_str(peer, len - 1)));
        /* one byte changed anywhere: both comparisons agree */
        for (size_t i = 0; i < len; i++) {
            static const char sub[] = {'X', 'x', '_', 0x7f, '^', '~', '@', '`', '-', '\r', 'A'};
            for (size_t s = 0; s < sizeof sub; s++) {
                memcpy(peer, lower, len);
                peer[i] = sub[s];
                CHECK(fy_hname_eq(&h, fy_str(peer, len)) ==
                      fy_str_ieq(fy_str(peer, len), lower, len));
            }
        }
    }
}

static void test_names(void)
{
    fy_hname_t h;
    fy_hname_init(&h, "x-frame-options");
    CHECK(fy_hname_eq(&h, FY_STR_LIT("X-Frame-Options")));
    CHECK(fy_hname_eq(&h, FY_STR_LIT("x-frame-options")));
    CHECK(!fy_hname_eq(&h, FY_STR_LIT("x-frame-optionz")));
    CHECK(!fy_hname_eq(&h, FY_STR_LIT("y-frame-options")));
    fy_hname_init(&h, "authorization");
    CHECK(fy_hname_eq(&h, FY_STR_LIT("AUTHORIZATION")));
    CHECK(!fy_hname_eq(&h, FY_STR_LIT("authorisation")));
    fy_hname_init(&h, "x_a");
    CHECK(!fy_hname_eq(&h, fy_str("x\x7f"
                                  "a",
                                  3)));
}

FY_TEST_MAIN(test_against_ieq(); test_names())
