/* Minimal unit-test support for foo_test.c files (run by ctest). A failed CHECK prints the
 * file:line and expression and the test exits non-zero; FY_TEST_MAIN prints
 * "N passed, N failed" for the checks.
 * Threads: test-only, single-threaded. */
#ifndef FY_CORE_TEST_H
#define FY_CORE_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fy_test_pass, fy_test_fail;

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        if (expr) {                                                                                \
            fy_test_pass++;                                                                        \
        } else {                                                                                   \
            fy_test_fail++;                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #expr);               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long fy_a_ = (long long)(a), fy_b_ = (long long)(b);                                  \
        if (fy_a_ == fy_b_) {                                                                      \
            fy_test_pass++;                                                                        \
        } else {                                                                                   \
            fy_test_fail++;                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__, __LINE__,  \
                    #a, #b, fy_a_, fy_b_);                                                         \
        }                                                                                          \
    } while (0)

#define CHECK_STRN(p, n, lit) CHECK((n) == strlen(lit) && memcmp((p), (lit), (n)) == 0)

#define FY_TEST_MAIN(...)                                                                          \
    int main(void)                                                                                 \
    {                                                                                              \
        __VA_ARGS__;                                                                               \
        printf("%d passed, %d failed\n", fy_test_pass, fy_test_fail);                              \
        return fy_test_fail ? 1 : 0;                                                               \
    }

#endif
