/* Unit tests of one-shot compression: gzip and zstd round-trip through their decoders (zlib
 * for gzip, every libdeflate level 1..12), an empty body is a valid stream, a short output buffer
 * or a bad level fails with 0, and a thread's compressors are freed at its exit. */
#include "policy/compress_oneshot.c"

#include <string.h>
#include <zlib.h>

#include "core/test.h"

static unsigned char src[70000];
static unsigned char out[80000];
static unsigned char back[70001];

static void fill(void)
{
    static const char *const w[] = {"ferry ", "gzip ", "one ", "shot ", "proxy ", "body "};
    size_t o = 0;
    unsigned x = 1;
    while (o < sizeof src) {
        x = x * 1103515245u + 12345u;
        const char *s = w[(x >> 16) % 6];
        for (size_t i = 0; s[i] && o < sizeof src; i++) src[o++] = (unsigned char)s[i];
    }
}

static size_t gunzip(const unsigned char *p, size_t n)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    CHECK(inflateInit2(&z, 31) == Z_OK);
    z.next_in = (Bytef *)p;
    z.avail_in = (uInt)n;
    z.next_out = back;
    z.avail_out = sizeof back;
    int rc = inflate(&z, Z_FINISH);
    size_t got = z.total_out;
    CHECK(rc == Z_STREAM_END && z.avail_in == 0); /* one member, nothing after it */
    inflateEnd(&z);
    return got;
}

static void test_gzip_levels(void)
{
    fill();
    for (int lv = 1; lv <= 12; lv++) {
        size_t b = fy__compress_oneshot_bound(FY_CODING_GZIP, lv, sizeof src);
        CHECK(b >= sizeof src && b <= sizeof out);
        size_t n = fy__compress_oneshot(FY_CODING_GZIP, lv, src, sizeof src, out, b);
        CHECK(n > 18 && n < sizeof src / 2);
        CHECK(out[0] == 0x1f && out[1] == 0x8b);
        CHECK(gunzip(out, n) == sizeof src && memcmp(back, src, sizeof src) == 0);
    }
    /* an empty body: a whole gzip member that inflates to nothing */
    size_t n = fy__compress_oneshot(FY_CODING_GZIP, 1, NULL, 0, out, sizeof out);
    CHECK(n >= 20 && gunzip(out, n) == 0);
    /* no room, bad levels, unknown codings */
    CHECK_EQ_INT(fy__compress_oneshot(FY_CODING_GZIP, 1, src, sizeof src, out, 100), 0);
    CHECK_EQ_INT(fy__compress_oneshot(FY_CODING_GZIP, 0, src, 10, out, sizeof out), 0);
    CHECK_EQ_INT(fy__compress_oneshot(FY_CODING_GZIP, 13, src, 10, out, sizeof out), 0);
    CHECK_EQ_INT(fy__compress_oneshot_bound(FY_CODING_GZIP, 13, 10), 0);
    CHECK_EQ_INT(fy__compress_oneshot(FY_CODING_IDENTITY, 1, src, 10, out, sizeof out), 0);
    CHECK_EQ_INT(fy__compress_oneshot_bound(FY_CODING_IDENTITY, 1, 10), 0);
}

static void test_zstd(void)
{
    fill();
    for (int lv = 1; lv <= 19; lv += 6) {
        size_t b = fy__compress_oneshot_bound(FY_CODING_ZSTD, lv, sizeof src);
        size_t n = fy__compress_oneshot(FY_CODING_ZSTD, lv, src, sizeof src, out, b);
        CHECK(n > 0 && n < sizeof src / 2);
        CHECK(ZSTD_getFrameContentSize(out, n) == sizeof src);
        size_t d = ZSTD_decompress(back, sizeof back, out, n);
        CHECK(!ZSTD_isError(d) && d == sizeof src && memcmp(back, src, d) == 0);
    }
    CHECK_EQ_INT(fy__compress_oneshot(FY_CODING_ZSTD, 23, src, 10, out, sizeof out), 0);
    CHECK_EQ_INT(fy__compress_oneshot(FY_CODING_ZSTD, 3, src, sizeof src, out, 50), 0);
    /* brotli streams (compress.c): no one-shot bound or output */
    CHECK_EQ_INT(fy__compress_oneshot_bound(FY_CODING_BR, 4, 10), 0);
    CHECK_EQ_INT(fy__compress_oneshot(FY_CODING_BR, 4, src, 10, out, sizeof out), 0);
}

static void *other_thread(void *arg)
{
    (void)arg;
    /* its own compressors, freed by the key's destructor when it returns (ASan: no leak) */
    size_t n = fy__compress_oneshot(FY_CODING_GZIP, 6, src, 1000, out, sizeof out);
    size_t z = fy__compress_oneshot(FY_CODING_ZSTD, 3, src, 1000, out + 40000, 40000);
    return (void *)(n && z && mine ? out : NULL);
}

static void test_threads(void)
{
    fill();
    fy__compress_oneshot_thread_free(); /* the tests above made level 6 here */
    CHECK(!mine);
    CHECK(fy__compress_oneshot(FY_CODING_GZIP, 1, src, 1000, out, sizeof out) > 0);
    oneshot_tls_t *t = mine;
    CHECK(t && t->gz[1] && !t->gz[6]);
    pthread_t th;
    void *r = NULL;
    CHECK(pthread_create(&th, NULL, other_thread, NULL) == 0);
    CHECK(pthread_join(th, &r) == 0);
    CHECK(r == out);
    CHECK(mine == t && !t->gz[6]); /* the other thread's level 6 was not ours */
    fy__compress_oneshot_thread_free();
    CHECK(!mine);
    /* usable again after the free */
    size_t n = fy__compress_oneshot(FY_CODING_GZIP, 1, src, 1000, out, sizeof out);
    CHECK(n > 0 && gunzip(out, n) == 1000);
    fy__compress_oneshot_thread_free();
}

FY_TEST_MAIN(test_gzip_levels(); test_zstd(); test_threads())
