/* Unit tests of the QUIC Initial decoder: a ClientHello too big for one packet is sent as
 * CRYPTO frames in three Initials (three datagrams, out of order), encrypted here with the
 * same key schedule, and must come out whole; a bound smaller than the hello is hit; a packet
 * with one flipped bit does not decrypt. (Interop with a real client: tests/test_l4.py.) */
#include "l4/l4_quic.c"

#include "core/test.h"

static size_t put_varint(uint8_t *p, uint64_t v)
{
    if (v < 64) {
        p[0] = (uint8_t)v;
        return 1;
    }
    p[0] = (uint8_t)(0x40 | v >> 8);
    p[1] = (uint8_t)v;
    return 2;
}

static const uint8_t dcid[8] = {0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08};

/* One client Initial (pn, 2-byte packet number) carrying CRYPTO[off, off+len) of `hs`,
 * padded to 1200 bytes. Returns its length. */
static size_t seal(uint8_t *out, uint64_t pn, const uint8_t *hs, size_t off, size_t len)
{
    keys_t k;
    if (derive(dcid, sizeof dcid, &k) < 0) abort();
    uint8_t pt[1200];
    size_t o = 0;
    pt[o++] = 0x06;
    o += put_varint(pt + o, off);
    o += put_varint(pt + o, len);
    memcpy(pt + o, hs + off, len);
    o += len;
    size_t hdr = 1 + 4 + 1 + sizeof dcid + 1 + 1 + 2; /* token len 0, length: 2-byte varint */
    size_t ptlen = 1200 - hdr - 2 - 16;
    memset(pt + o, 0, ptlen - o); /* PADDING */
    size_t h = 0;
    out[h++] = 0xc1; /* Initial, pn length 2 */
    out[h++] = 0, out[h++] = 0, out[h++] = 0, out[h++] = 1;
    out[h++] = sizeof dcid;
    memcpy(out + h, dcid, sizeof dcid), h += sizeof dcid;
    out[h++] = 0;                                       /* scid */
    out[h++] = 0;                                       /* token */
    out[h++] = (uint8_t)(0x40 | (2 + ptlen + 16) >> 8); /* Length: 2-byte varint */
    out[h++] = (uint8_t)(2 + ptlen + 16);
    size_t pn_off = h;
    out[h++] = (uint8_t)(pn >> 8), out[h++] = (uint8_t)pn;
    uint8_t nonce[12];
    memcpy(nonce, k.iv, 12);
    for (int i = 0; i < 8; i++) nonce[11 - i] ^= (uint8_t)(pn >> (8 * i));
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int n = 0;
    EVP_EncryptInit_ex(c, EVP_aes_128_gcm(), NULL, NULL, NULL);
    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, 12, NULL);
    EVP_EncryptInit_ex(c, NULL, NULL, k.key, nonce);
    EVP_EncryptUpdate(c, NULL, &n, out, (int)h);
    EVP_EncryptUpdate(c, out + h, &n, pt, (int)ptlen);
    EVP_EncryptFinal_ex(c, out + h + n, &n);
    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, out + h + ptlen);
    EVP_CIPHER_CTX_free(c);
    uint8_t mask[16];
    hp_mask(k.hp, out + pn_off + 4, mask);
    out[0] ^= mask[0] & 0x0f;
    out[pn_off] ^= mask[1], out[pn_off + 1] ^= mask[2];
    return h + ptlen + 16;
}

static uint8_t hs[3000];
static size_t hs_len;

/* A ClientHello handshake message of ~2,600 bytes (a big key share, as with post-quantum
 * groups) with SNI "pq.example". */
static void make_big_hello(void)
{
    uint8_t *p = hs + 4;
    *p++ = 3, *p++ = 3;
    memset(p, 7, 32), p += 32;
    *p++ = 0;
    *p++ = 0, *p++ = 2, *p++ = 0x13, *p++ = 1;
    *p++ = 1, *p++ = 0;
    uint8_t *el = p;
    p += 2;
    static const char sni[] = "pq.example";
    size_t sl = sizeof sni - 1;
    *p++ = 0, *p++ = 0, *p++ = 0, *p++ = (uint8_t)(sl + 5), *p++ = 0, *p++ = (uint8_t)(sl + 3);
    *p++ = 0, *p++ = 0, *p++ = (uint8_t)sl;
    memcpy(p, sni, sl), p += sl;
    size_t ks = 2500; /* key_share: one opaque blob */
    *p++ = 0, *p++ = 51, *p++ = (uint8_t)(ks >> 8), *p++ = (uint8_t)ks;
    memset(p, 0xab, ks), p += ks;
    size_t ext = (size_t)(p - el - 2);
    el[0] = (uint8_t)(ext >> 8), el[1] = (uint8_t)ext;
    size_t body = (size_t)(p - hs - 4);
    hs[0] = 1, hs[1] = 0, hs[2] = (uint8_t)(body >> 8), hs[3] = (uint8_t)body;
    hs_len = body + 4;
}

static void test_reassembly(void)
{
    make_big_hello();
    static uint8_t d[3][1200];
    size_t per = (hs_len + 2) / 3, dl[3];
    for (int i = 0; i < 3; i++) {
        size_t off = per * (size_t)i, len = i == 2 ? hs_len - off : per;
        dl[i] = seal(d[i], (uint64_t)i, hs, off, len);
        CHECK_EQ_INT(dl[i], 1200);
    }
    /* FY_L4_QUIC_DUMP=FILE: write the three datagrams joined by ff fe fd (the fuzz corpus
       format; tests/test_l4.py sends the first one alone to hit peek-timeout) */
    const char *dump = getenv("FY_L4_QUIC_DUMP");
    FILE *df = dump ? fopen(dump, "wb") : NULL;
    for (int i = 0; df && i < 3; i++) {
        if (i) fwrite("\xff\xfe\xfd", 1, 3, df);
        fwrite(d[i], 1, dl[i], df);
    }
    if (df) fclose(df);
    fy_quic_crypto_t c;
    fy_l4_hello_t h;
    CHECK_EQ_INT(fy_quic_crypto_init(&c, 16384), 0);
    /* out of order: the last part first */
    CHECK_EQ_INT(fy_quic_initial_feed(&c, d[2], dl[2], &h), FY_L4_HELLO_NEED_MORE);
    CHECK_EQ_INT(fy_quic_initial_feed(&c, d[0], dl[0], &h), FY_L4_HELLO_NEED_MORE);
    CHECK_EQ_INT(fy_quic_initial_feed(&c, d[1], dl[1], &h), 1);
    CHECK(strcmp(h.sni, "pq.example") == 0);
    fy_quic_crypto_free(&c);
    /* a bound below the hello's size: known from the first fragment's handshake header */
    CHECK_EQ_INT(fy_quic_crypto_init(&c, 1024), 0);
    CHECK_EQ_INT(fy_quic_initial_feed(&c, d[0], dl[0], &h), FY_L4_HELLO_ELIMIT);
    fy_quic_crypto_free(&c);
    /* a fragment beyond the bound */
    CHECK_EQ_INT(fy_quic_crypto_init(&c, 1024), 0);
    CHECK_EQ_INT(fy_quic_initial_feed(&c, d[2], dl[2], &h), FY_L4_HELLO_ELIMIT);
    fy_quic_crypto_free(&c);
    /* one bit flipped in the ciphertext: the tag fails */
    CHECK_EQ_INT(fy_quic_crypto_init(&c, 16384), 0);
    d[0][600] ^= 1;
    CHECK_EQ_INT(fy_quic_initial_feed(&c, d[0], dl[0], &h), FY_L4_HELLO_EBAD);
    /* truncated */
    CHECK_EQ_INT(fy_quic_initial_feed(&c, d[1], 500, &h), FY_L4_HELLO_EBAD);
    fy_quic_crypto_free(&c);
}

FY_TEST_MAIN(test_reassembly())
