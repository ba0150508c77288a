/* QUIC v1 Initial decryption for SNI routing. Only the client's Initial keys are derived; the
 * packet number is used as sent (a client's first Initials have small numbers, so the
 * truncated value is the full one). */
#include "l4/l4_quic.h"

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>

static const uint8_t v1_salt[20] = {0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17,
                                    0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a};

/* Variable-length integer (RFC 9000 §16). Returns bytes used or 0. */
static size_t varint(const uint8_t *p, size_t len, uint64_t *v)
{
    if (len < 1) return 0;
    size_t n = (size_t)1 << (p[0] >> 6);
    if (len < n) return 0;
    uint64_t x = p[0] & 0x3f;
    for (size_t i = 1; i < n; i++) x = x << 8 | p[i];
    *v = x;
    return n;
}

int fy_quic_parse_hdr(const uint8_t *d, size_t len, fy_quic_hdr_t *h)
{
    memset(h, 0, sizeof *h);
    if (len < 1) return -1;
    if (!(d[0] & 0x80)) {
        h->is_long = false;
        return 0;
    }
    h->is_long = true;
    if (len < 7) return -1;
    h->version = (uint32_t)d[1] << 24 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 8 | d[4];
    h->type = (d[0] >> 4) & 3;
    size_t o = 5;
    h->dcid_len = d[o++];
    if (h->dcid_len > FY_QUIC_CID_MAX || o + h->dcid_len + 1 > len) return -1;
    memcpy(h->dcid, d + o, h->dcid_len);
    o += h->dcid_len;
    h->scid_len = d[o++];
    if (h->scid_len > FY_QUIC_CID_MAX || o + h->scid_len > len) return -1;
    memcpy(h->scid, d + o, h->scid_len);
    return 0;
}

static int hkdf(int mode, const uint8_t *salt, size_t saltlen, const uint8_t *key, size_t keylen,
                const uint8_t *info, size_t infolen, uint8_t *out, size_t outlen)
{
    EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    int ok = pc && EVP_PKEY_derive_init(pc) > 0 && EVP_PKEY_CTX_set_hkdf_mode(pc, mode) > 0 &&
             EVP_PKEY_CTX_set_hkdf_md(pc, EVP_sha256()) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_key(pc, key, (int)keylen) > 0;
    if (ok && salt) ok = EVP_PKEY_CTX_set1_hkdf_salt(pc, salt, (int)saltlen) > 0;
    if (ok && info) ok = EVP_PKEY_CTX_add1_hkdf_info(pc, info, (int)infolen) > 0;
    size_t ol = outlen;
    if (ok) ok = EVP_PKEY_derive(pc, out, &ol) > 0 && ol == outlen;
    EVP_PKEY_CTX_free(pc);
    return ok ? 0 : -1;
}

/* HKDF-Expand-Label(secret, label, "", len) (RFC 8446 §7.1) */
static int expand_label(const uint8_t *secret, const char *label, uint8_t *out, size_t len)
{
    uint8_t info[64];
    size_t ll = strlen(label), o = 0;
    info[o++] = 0;
    info[o++] = (uint8_t)len;
    info[o++] = (uint8_t)(6 + ll);
    memcpy(info + o, "tls13 ", 6);
    o += 6;
    memcpy(info + o, label, ll);
    o += ll;
    info[o++] = 0;
    return hkdf(EVP_PKEY_HKDEF_MODE_EXPAND_ONLY, NULL, 0, secret, 32, info, o, out, len);
}

typedef struct keys {
    uint8_t key[16], iv[12], hp[16];
} keys_t;

static int derive(const uint8_t *dcid, size_t dcid_len, keys_t *k)
{
    uint8_t initial[32], client[32];
    if (hkdf(EVP_PKEY_HKDEF_MODE_EXTRACT_ONLY, v1_salt, sizeof v1_salt, dcid, dcid_len, NULL, 0,
             initial, 32) < 0)
        return -1;
    if (expand_label(initial, "client in", client, 32) < 0) return -1;
    if (expand_label(client, "quic key", k->key, 16) < 0) return -1;
    if (expand_label(client, "quic iv", k->iv, 12) < 0) return -1;
    return expand_label(client, "quic hp", k->hp, 16);
}

static int hp_mask(const uint8_t *hp, const uint8_t *sample, uint8_t *mask)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int n = 0, ok = c && EVP_EncryptInit_ex(c, EVP_aes_128_ecb(), NULL, hp, NULL) > 0 &&
                    EVP_CIPHER_CTX_set_padding(c, 0) > 0 &&
                    EVP_EncryptUpdate(c, mask, &n, sample, 16) > 0 && n == 16;
    EVP_CIPHER_CTX_free(c);
    return ok ? 0 : -1;
}

static int aead_open(const keys_t *k, uint64_t pn, const uint8_t *aad, size_t aadlen,
                     const uint8_t *ct, size_t ctlen, uint8_t *pt)
{
    if (ctlen < 16) return -1;
    uint8_t nonce[12];
    memcpy(nonce, k->iv, 12);
    for (int i = 0; i < 8; i++) nonce[11 - i] ^= (uint8_t)(pn >> (8 * i));
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int n = 0, n2 = 0;
    int ok = c && EVP_DecryptInit_ex(c, EVP_aes_128_gcm(), NULL, NULL, NULL) > 0 &&
             EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) > 0 &&
             EVP_DecryptInit_ex(c, NULL, NULL, k->key, nonce) > 0 &&
             EVP_DecryptUpdate(c, NULL, &n, aad, (int)aadlen) > 0 &&
             EVP_DecryptUpdate(c, pt, &n, ct, (int)(ctlen - 16)) > 0 &&
             EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, (void *)(ct + ctlen - 16)) > 0 &&
             EVP_DecryptFinal_ex(c, pt + n, &n2) > 0;
    EVP_CIPHER_CTX_free(c);
    return ok ? 0 : -1;
}

int fy_quic_crypto_init(fy_quic_crypto_t *c, size_t cap)
{
    memset(c, 0, sizeof *c);
    c->buf = malloc(cap);
    c->have = calloc((cap + 7) / 8, 1);
    c->cap = cap;
    if (!c->buf || !c->have) {
        fy_quic_crypto_free(c);
        return -ENOMEM;
    }
    return 0;
}

void fy_quic_crypto_free(fy_quic_crypto_t *c)
{
    free(c->buf);
    free(c->have);
    c->buf = c->have = NULL;
}

static int crypto_store(fy_quic_crypto_t *c, uint64_t off, const uint8_t *p, uint64_t len)
{
    if (off > c->cap || len > c->cap - off) return FY_L4_HELLO_ELIMIT;
    memcpy(c->buf + off, p, len);
    for (uint64_t i = off; i < off + len; i++) c->have[i / 8] |= (uint8_t)(1u << (i % 8));
    while (c->contig < c->cap && (c->have[c->contig / 8] >> (c->contig % 8) & 1)) c->contig++;
    return 0;
}

/* Frames of a decrypted Initial payload: PADDING, PING, ACK, CRYPTO, CONNECTION_CLOSE. */
static int frames(fy_quic_crypto_t *c, const uint8_t *p, size_t len)
{
    size_t o = 0;
    while (o < len) {
        uint64_t type, a, b, x;
        size_t n = varint(p + o, len - o, &type);
        if (!n) return FY_L4_HELLO_EBAD;
        o += n;
        if (type == 0x00 || type == 0x01) continue;
        if (type == 0x02 || type == 0x03) { /* ACK: largest, delay, range count, first range */
            uint64_t count;
            if (!(n = varint(p + o, len - o, &x))) return FY_L4_HELLO_EBAD;
            o += n;
            if (!(n = varint(p + o, len - o, &x))) return FY_L4_HELLO_EBAD;
            o += n;
            if (!(n = varint(p + o, len - o, &count))) return FY_L4_HELLO_EBAD;
            o += n;
            if (!(n = varint(p + o, len - o, &x))) return FY_L4_HELLO_EBAD;
            o += n;
            if (count > len) return FY_L4_HELLO_EBAD;
            for (uint64_t i = 0; i < count * 2; i++) {
                if (!(n = varint(p + o, len - o, &x))) return FY_L4_HELLO_EBAD;
                o += n;
            }
            if (type == 0x03)
                for (int i = 0; i < 3; i++) {
                    if (!(n = varint(p + o, len - o, &x))) return FY_L4_HELLO_EBAD;
                    o += n;
                }
            continue;
        }
        if (type == 0x06) { /* CRYPTO: offset, length, data */
            if (!(n = varint(p + o, len - o, &a))) return FY_L4_HELLO_EBAD;
            o += n;
            if (!(n = varint(p + o, len - o, &b))) return FY_L4_HELLO_EBAD;
            o += n;
            if (b > len - o) return FY_L4_HELLO_EBAD;
            int r = crypto_store(c, a, p + o, b);
            if (r < 0) return r;
            o += b;
            continue;
        }
        if (type == 0x1c) return FY_L4_HELLO_EBAD; /* the client gave up */
        return FY_L4_HELLO_EBAD;                   /* not allowed in an Initial */
    }
    return 0;
}

int fy_quic_initial_feed(fy_quic_crypto_t *c, const uint8_t *d, size_t len, fy_l4_hello_t *out)
{
    bool any = false;
    while (len > 0) {
        if (!(d[0] & 0x80)) break; /* a short header packet ends the datagram's long ones */
        fy_quic_hdr_t h;
        if (fy_quic_parse_hdr(d, len, &h) < 0 || h.version != FY_QUIC_V1)
            return any ? FY_L4_HELLO_NEED_MORE : FY_L4_HELLO_EBAD;
        size_t o = 5 + 1 + h.dcid_len + 1 + h.scid_len;
        uint64_t tl = 0, pl = 0;
        size_t n;
        if (h.type == 0) {
            if (!(n = varint(d + o, len - o, &tl)) || tl > len - o - n) return FY_L4_HELLO_EBAD;
            o += n + tl;
        }
        if (!(n = varint(d + o, len - o, &pl)) || pl > len - o - n) return FY_L4_HELLO_EBAD;
        o += n;
        size_t pn_off = o, end = o + pl;
        if (h.type != 0) { /* 0-RTT / Handshake coalesced after the Initial: skip */
            d += end, len -= end;
            continue;
        }
        if (pl < 4 + 16 || pl > 1500 * 4) return FY_L4_HELLO_EBAD;
        keys_t k;
        uint8_t mask[16], pt[1500 * 4];
        if (derive(h.dcid, h.dcid_len, &k) < 0 || hp_mask(k.hp, d + pn_off + 4, mask) < 0)
            return FY_L4_HELLO_EBAD;
        uint8_t *aad = malloc(pn_off + 4);
        if (!aad) return FY_L4_HELLO_EBAD;
        memcpy(aad, d, pn_off + 4);
        aad[0] ^= mask[0] & 0x0f;
        size_t pnl = (aad[0] & 3) + 1;
        uint64_t pn = 0;
        for (size_t i = 0; i < pnl; i++) {
            aad[pn_off + i] ^= mask[1 + i];
            pn = pn << 8 | aad[pn_off + i];
        }
        int r = aead_open(&k, pn, aad, pn_off + pnl, d + pn_off + pnl, pl - pnl, pt);
        free(aad);
        if (r < 0) return FY_L4_HELLO_EBAD;
        r = frames(c, pt, pl - pnl - 16);
        if (r < 0) return r;
        any = true;
        d += end, len -= end;
    }
    if (!any) return FY_L4_HELLO_EBAD;
    return fy_l4_hello_parse_handshake(c->buf, c->contig, c->cap, out);
}
