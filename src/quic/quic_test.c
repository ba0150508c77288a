/* Unit tests of the TLS handshake-message guard on CRYPTO data (tls_rx_check in quic_tls.c):
 * messages fed whole, byte by byte, in uneven pieces and ending at a guard page; KeyUpdate
 * at every level, anything after Finished at the Handshake level, 1-RTT messages by side. */
#include "quic/quic_tls.c"

#include "core/test.h"
#include "core/test_guard.h"

/* Feed `m` in pieces of `step` bytes (0: whole); returns the first complaint or NULL. */
static const char *feed(tls_rx_t *st, ngtcp2_crypto_level level, bool server, const uint8_t *m,
                        size_t n, size_t step)
{
    for (size_t at = 0; at < n;) {
        size_t k = step && step < n - at ? step : n - at;
        const uint8_t *piece = m + at;
        if (k <= 4096) piece = (const uint8_t *)at_guard((const char *)piece, k);
        const char *bad = tls_rx_check(st, level, server, piece, k);
        if (bad) return bad;
        at += k;
    }
    return NULL;
}

static const char *run(ngtcp2_crypto_level level, bool server, const uint8_t *m, size_t n,
                       size_t step)
{
    tls_rx_t st;
    memset(&st, 0, sizeof st);
    return feed(&st, level, server, m, n, step);
}

static void test_key_update_everywhere(void)
{
    /* a ClientHello-sized message whose body holds 0x18 bytes, then a KeyUpdate */
    static const uint8_t m[] = {1, 0, 0, 6, 0x18, 0x18, 0, 0, 0, 0x18, 24, 0, 0, 1, 0};
    static const size_t steps[] = {0, 1, 2, 3, 4, 5, 7, 11};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        CHECK(run(NGTCP2_CRYPTO_LEVEL_INITIAL, true, m, 10, steps[i]) == NULL);
        const char *b = run(NGTCP2_CRYPTO_LEVEL_INITIAL, true, m, sizeof m, steps[i]);
        CHECK(b && !strcmp(b, "KeyUpdate"));
        b = run(NGTCP2_CRYPTO_LEVEL_INITIAL, false, m, sizeof m, steps[i]);
        CHECK(b && !strcmp(b, "KeyUpdate"));
    }
    static const uint8_t ku[] = {24, 0, 0, 1, 0};
    CHECK(run(NGTCP2_CRYPTO_LEVEL_HANDSHAKE, true, ku, sizeof ku, 0) != NULL);
    const char *b = run(NGTCP2_CRYPTO_LEVEL_APPLICATION, false, ku, 1, 0); /* type byte alone */
    CHECK(b && !strcmp(b, "KeyUpdate"));
    b = run(NGTCP2_CRYPTO_LEVEL_APPLICATION, true, ku, sizeof ku, 1);
    CHECK(b && !strcmp(b, "KeyUpdate"));
}

static void test_after_finished(void)
{
    /* Certificate (empty body), CertificateVerify (2 bytes), Finished (4 bytes) */
    static const uint8_t hs[] = {11, 0, 0, 0, 15, 0, 0, 2, 0x14, 0x14, 20, 0, 0, 4, 1, 2, 3, 4, 4};
    for (size_t step = 0; step < 6; step++) {
        CHECK(run(NGTCP2_CRYPTO_LEVEL_HANDSHAKE, true, hs, sizeof hs - 1, step) == NULL);
        const char *b = run(NGTCP2_CRYPTO_LEVEL_HANDSHAKE, true, hs, sizeof hs, step);
        CHECK(b && !strcmp(b, "message after Finished"));
    }
    /* the state carries over between calls: Finished in one, the next message in another */
    tls_rx_t st;
    memset(&st, 0, sizeof st);
    CHECK(feed(&st, NGTCP2_CRYPTO_LEVEL_HANDSHAKE, false, hs, sizeof hs - 1, 0) == NULL);
    CHECK(feed(&st, NGTCP2_CRYPTO_LEVEL_HANDSHAKE, false, hs + sizeof hs - 1, 1, 0) != NULL);
}

static void test_long_body_across_calls(void)
{
    /* a 70000-byte Certificate given in uneven pieces: its 0x18 bytes are body, not headers */
    size_t n = 4 + 70000 + 5;
    uint8_t *m = malloc(n);
    memset(m, 0x18, n);
    m[0] = 11;
    m[1] = 0x01;
    m[2] = 0x11;
    m[3] = 0x70; /* 0x011170 = 70000 */
    memcpy(m + 4 + 70000, (const uint8_t[]){24, 0, 0, 1, 0}, 5);
    CHECK(run(NGTCP2_CRYPTO_LEVEL_HANDSHAKE, true, m, n - 5, 997) == NULL);
    CHECK(run(NGTCP2_CRYPTO_LEVEL_HANDSHAKE, true, m, n, 997) != NULL);
    CHECK(run(NGTCP2_CRYPTO_LEVEL_HANDSHAKE, true, m, n, 0) != NULL);
    free(m);
}

static void test_one_rtt_by_side(void)
{
    static const uint8_t nst[] = {4, 0, 0, 2, 0, 0};
    CHECK(run(NGTCP2_CRYPTO_LEVEL_APPLICATION, false, nst, sizeof nst, 1) == NULL);
    const char *b = run(NGTCP2_CRYPTO_LEVEL_APPLICATION, true, nst, sizeof nst, 0);
    CHECK(b && !strcmp(b, "post-handshake message"));
    static const uint8_t cr[] = {13, 0, 0, 0};
    CHECK(run(NGTCP2_CRYPTO_LEVEL_APPLICATION, false, cr, sizeof cr, 0) != NULL);
    CHECK(run(NGTCP2_CRYPTO_LEVEL_APPLICATION, true, cr, sizeof cr, 0) != NULL);
}

FY_TEST_MAIN(guard_init(); test_key_update_everywhere(); test_after_finished();
             test_long_body_across_calls(); test_one_rtt_by_side())
