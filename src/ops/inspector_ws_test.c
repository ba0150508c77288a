/* WebSocket message recording: masked and unmasked frames, any split, fragmentation with a
 * control frame in between, 16- and 64-bit lengths, the payload budget, bad framing. */
#include "ops/inspector_ws.c"

#include <stdio.h>

#include "core/test.h"

/* A frame into out: masked with m when m is non-NULL. Its length. */
static size_t mkframe(uint8_t *out, bool fin, uint8_t op, const char *p, size_t n, const uint8_t *m)
{
    size_t i = 0;
    out[i++] = (uint8_t)((fin ? 0x80 : 0) | op);
    uint8_t mb = m ? 0x80 : 0;
    if (n < 126) {
        out[i++] = (uint8_t)(mb | n);
    } else if (n < 65536) {
        out[i++] = mb | 126;
        out[i++] = (uint8_t)(n >> 8);
        out[i++] = (uint8_t)n;
    } else {
        out[i++] = mb | 127;
        for (int s = 56; s >= 0; s -= 8) out[i++] = (uint8_t)((uint64_t)n >> s);
    }
    if (m) {
        memcpy(out + i, m, 4);
        i += 4;
    }
    for (size_t k = 0; k < n; k++) out[i + k] = (uint8_t)(m ? p[k] ^ m[k & 3] : p[k]);
    return i + n;
}

static uint8_t buf[200000];
static char big[70000];

static void run(size_t step)
{
    static const uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 4096);
    fy_insp_ws_t w;
    fy_insp_ws_init(&w, &a, 1000);
    size_t n = 0;
    n += mkframe(buf + n, true, 1, "hello", 5, mask);
    n += mkframe(buf + n, false, 1, "frag-", 5, mask);
    n += mkframe(buf + n, true, 9, "p", 1, mask); /* a ping between the fragments */
    n += mkframe(buf + n, true, 0, "ment", 4, mask);
    n += mkframe(buf + n, true, 2, big, 300, mask); /* 16-bit length */
    for (size_t i = 0; i < n; i += step)
        fy_insp_ws_feed(&w, true, buf + i, i + step > n ? n - i : step);
    size_t m = mkframe(buf, true, 1, "{\"a\":1}", 7, NULL);
    m += mkframe(buf + m, true, 2, big, sizeof big, NULL); /* 64-bit length, past the budget */
    m += mkframe(buf + m, true, 8, "\x03\xe8", 2, NULL);
    for (size_t i = 0; i < m; i += step)
        fy_insp_ws_feed(&w, false, buf + i, i + step > m ? m - i : step);
    CHECK_EQ_INT(w.n, 7);
    CHECK(w.msgs[0].from_client && w.msgs[0].opcode == 1 && w.msgs[0].size == 5);
    CHECK_STRN(w.msgs[0].data, w.msgs[0].len, "hello");
    CHECK_EQ_INT(w.msgs[1].opcode, 1);
    CHECK_STRN(w.msgs[1].data, w.msgs[1].len, "frag-ment");
    CHECK_EQ_INT(w.msgs[2].opcode, 9);
    CHECK_STRN(w.msgs[2].data, w.msgs[2].len, "p");
    CHECK(w.msgs[3].opcode == 2 && w.msgs[3].size == 300 && !w.msgs[3].cut);
    CHECK(memcmp(w.msgs[3].data, big, 300) == 0);
    CHECK(!w.msgs[4].from_client);
    CHECK_STRN(w.msgs[4].data, w.msgs[4].len, "{\"a\":1}");
    /* the origin's budget (1000) is spent by the big one: cut, and the Close keeps nothing */
    CHECK(w.msgs[5].size == sizeof big && w.msgs[5].cut && w.msgs[5].len == 1000 - 7);
    CHECK(w.msgs[6].opcode == 8 && w.msgs[6].size == 2 && w.msgs[6].len == 0 && w.msgs[6].cut);
    fy_arena_free(&a);
}

/* Raw deflate of p as a permessage-deflate sender makes it: sync flush, the last four bytes
 * (0x00 0x00 0xff 0xff) taken off. The context carries over between calls. */
static size_t deflate_msg(z_stream *z, const char *p, size_t n, uint8_t *out, size_t cap)
{
    z->next_in = (Bytef *)p;
    z->avail_in = (uInt)n;
    z->next_out = out;
    z->avail_out = (uInt)cap;
    CHECK(deflate(z, Z_SYNC_FLUSH) == Z_OK);
    size_t len = cap - z->avail_out;
    CHECK(len >= 4 && memcmp(out + len - 4, "\0\0\xff\xff", 4) == 0);
    return len - 4;
}

/* permessage-deflate: inflated as it streams, context kept across messages, fragmented and
 * masked, any split; an empty last frame; bad data stops inflating for that direction only */
static void test_deflate(size_t step)
{
    static const uint8_t mask[4] = {0xa1, 0xb2, 0xc3, 0xd4};
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 4096);
    fy_insp_ws_t w;
    fy_insp_ws_init(&w, &a, 1 << 20);
    z_stream z = {0};
    CHECK(deflateInit2(&z, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    static uint8_t d1[100000], d2[1000], s[200000];
    size_t n1 = deflate_msg(&z, big, sizeof big, d1, sizeof d1);
    /* the second message refers back into the first (context takeover) */
    size_t n2 = deflate_msg(&z, big, 500, d2, sizeof d2);
    CHECK(n2 < 100);
    deflateEnd(&z);
    size_t sl = 0, half = n1 / 2;
    s[0] = 0; /* first frame: RSV1, text, not final */
    sl += mkframe(s + sl, false, 1, (const char *)d1, half, mask);
    s[0] |= 0x40;
    sl += mkframe(s + sl, true, 0, (const char *)d1 + half, n1 - half, mask);
    size_t m2 = sl;
    sl += mkframe(s + sl, false, 1, (const char *)d2, n2, mask);
    s[m2] |= 0x40;
    sl += mkframe(s + sl, true, 0, "", 0, mask); /* an empty last frame */
    for (size_t off = 0; off < sl; off += step)
        fy_insp_ws_feed(&w, true, s + off, sl - off < step ? sl - off : step);
    CHECK_EQ_INT(w.n, 2);
    CHECK(w.msgs[0].compressed && w.msgs[0].inflated && !w.msgs[0].cut);
    CHECK(w.msgs[0].size == sizeof big && w.msgs[0].len == sizeof big);
    CHECK(memcmp(w.msgs[0].data, big, sizeof big) == 0);
    CHECK(w.msgs[1].inflated && w.msgs[1].size == 500 && memcmp(w.msgs[1].data, big, 500) == 0);
    /* the origin's direction has its own context: bad data there leaves the client's alone */
    uint8_t bad[] = {0xc1, 0x03, 0xff, 0xff, 0xff};
    fy_insp_ws_feed(&w, false, bad, sizeof bad);
    CHECK(w.n == 3 && w.msgs[2].cut && w.down.zoff && !w.up.zoff);
    uint8_t again[] = {0xc1, 0x02, 'h', 'i'}; /* later ones are kept as sent */
    fy_insp_ws_feed(&w, false, again, sizeof again);
    CHECK(w.n == 4 && w.msgs[3].compressed && !w.msgs[3].inflated);
    CHECK_STRN(w.msgs[3].data, w.msgs[3].len, "hi");
    fy_arena_free(&a);
}

static void test_bad_and_full(void)
{
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 4096);
    fy_insp_ws_t w;
    fy_insp_ws_init(&w, &a, 1 << 20);
    uint8_t z[] = {0xc1, 0x01, 0xff}; /* RSV1: permessage-deflate; a reserved block type */
    fy_insp_ws_feed(&w, false, z, sizeof z);
    CHECK(w.n == 1 && w.msgs[0].compressed && w.msgs[0].cut && w.down.zoff);
    w.n = 0;
    uint8_t rsv[] = {0xa1, 0x01, 'x'}; /* RSV2 set: not for us */
    fy_insp_ws_feed(&w, false, rsv, sizeof rsv);
    CHECK(w.down.bad && w.n == 0);
    uint8_t f[8];
    size_t n = mkframe(f, true, 1, "z", 1, NULL);
    for (int i = 0; i < FY_INSP_WS_MAX_MSGS + 5; i++) fy_insp_ws_feed(&w, true, f, n);
    CHECK_EQ_INT(w.n, FY_INSP_WS_MAX_MSGS);
    CHECK_EQ_INT(w.dropped, 5);
    fy_arena_free(&a);
}

FY_TEST_MAIN({
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)('a' + i % 26);
    run(1);
    run(3);
    run(sizeof buf);
    test_bad_and_full();
    test_deflate(1);
    test_deflate(7);
    test_deflate(sizeof buf);
})
