/* Ticket keys from a shared file and the OpenSSL 3 ticket callback that uses them. */
#include "tls/tickets.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

typedef struct tkey {
    unsigned char name[16];
    unsigned char hmac[32];
    unsigned char aes[32];
    size_t klen; /* 16 (AES-128, 48-byte records) or 32 (AES-256, 80-byte records) */
} tkey_t;

struct fy_tls_tickets {
    tkey_t v[FY_TLS_TICKET_KEYS_MAX];
    size_t n;
};

fy_tls_tickets_t *fy_tls_tickets_parse(const unsigned char *buf, size_t len, char *msg,
                                       size_t msglen)
{
    /* a length that both sizes divide (240, 480...) is read as 80-byte records: the stronger
       kind, and what `openssl rand 80` makes */
    size_t rec = len % 80 == 0 ? 80 : len % 48 == 0 ? 48 : 0;
    if (len == 0) {
        snprintf(msg, msglen, "no key (the file is empty)");
        return NULL;
    }
    if (!rec) {
        snprintf(msg, msglen, "expected 48 or 80 bytes per key, got %zu bytes", len);
        return NULL;
    }
    if (len / rec > FY_TLS_TICKET_KEYS_MAX) {
        snprintf(msg, msglen, "%zu keys, at most %d", len / rec, FY_TLS_TICKET_KEYS_MAX);
        return NULL;
    }
    fy_tls_tickets_t *k = fy_xcalloc(1, sizeof *k);
    size_t kl = rec == 80 ? 32 : 16;
    for (size_t off = 0; off < len; off += rec) {
        tkey_t *t = &k->v[k->n++];
        memcpy(t->name, buf + off, 16);
        memcpy(t->hmac, buf + off + 16, kl);
        memcpy(t->aes, buf + off + 16 + kl, kl);
        t->klen = kl;
    }
    return k;
}

fy_tls_tickets_t *fy_tls_tickets_load(const char *path, char *msg, size_t msglen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(msg, msglen, "cannot read ticket keys '%s': %s", path, strerror(errno));
        return NULL;
    }
    unsigned char buf[80 * FY_TLS_TICKET_KEYS_MAX + 1];
    size_t n = fread(buf, 1, sizeof buf, f);
    bool err = ferror(f);
    fclose(f);
    if (err) {
        snprintf(msg, msglen, "cannot read ticket keys '%s'", path);
        return NULL;
    }
    char why[200];
    fy_tls_tickets_t *k = fy_tls_tickets_parse(buf, n, why, sizeof why);
    if (!k) snprintf(msg, msglen, "ticket keys '%s': %s", path, why);
    return k;
}

void fy_tls_tickets_free(fy_tls_tickets_t *k)
{
    if (k) OPENSSL_cleanse(k, sizeof *k);
    free(k);
}

size_t fy_tls_tickets_count(const fy_tls_tickets_t *k)
{
    return k ? k->n : 0;
}

size_t fy_tls_tickets_first(const fy_tls_tickets_t *k, unsigned char out[80])
{
    if (!k || !k->n) return 0;
    const tkey_t *t = &k->v[0];
    memcpy(out, t->name, 16);
    memcpy(out + 16, t->hmac, t->klen);
    memcpy(out + 16 + t->klen, t->aes, t->klen);
    return 16 + 2 * t->klen;
}

static int ex_index = -1;
static pthread_once_t ex_once = PTHREAD_ONCE_INIT;

static void make_index(void)
{
    ex_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static int set_mac(EVP_MAC_CTX *hctx, const tkey_t *t)
{
    OSSL_PARAM p[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                      OSSL_PARAM_construct_end()};
    return EVP_MAC_init(hctx, t->hmac, t->klen, p);
}

/* OpenSSL's contract: enc: fill name and iv, init both contexts, 1 (or -1 on error).
   Decrypt: 0 unknown name (full handshake), 1 ok, 2 ok but issue a new ticket. */
static int ticket_cb(SSL *ssl, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx,
                     EVP_MAC_CTX *hctx, int enc)
{
    const fy_tls_tickets_t *k = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ex_index);
    if (!k || !k->n) return enc ? -1 : 0;
    if (enc) {
        const tkey_t *t = &k->v[0];
        if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1) return -1;
        memcpy(name, t->name, 16);
        const EVP_CIPHER *c = t->klen == 32 ? EVP_aes_256_cbc() : EVP_aes_128_cbc();
        if (EVP_EncryptInit_ex(cctx, c, NULL, t->aes, iv) != 1) return -1;
        return set_mac(hctx, t) == 1 ? 1 : -1;
    }
    for (size_t i = 0; i < k->n; i++) {
        const tkey_t *t = &k->v[i];
        if (memcmp(name, t->name, 16) != 0) continue;
        const EVP_CIPHER *c = t->klen == 32 ? EVP_aes_256_cbc() : EVP_aes_128_cbc();
        if (EVP_DecryptInit_ex(cctx, c, NULL, t->aes, iv) != 1) return -1;
        if (set_mac(hctx, t) != 1) return -1;
        return i == 0 ? 1 : 2;
    }
    return 0;
}

int fy_tls_tickets_attach(void *ssl_ctx, const fy_tls_tickets_t *k)
{
    pthread_once(&ex_once, make_index);
    if (ex_index < 0) return -1;
    SSL_CTX *c = ssl_ctx;
    if (SSL_CTX_set_ex_data(c, ex_index, (void *)k) != 1) return -1;
    return SSL_CTX_set_tlsext_ticket_key_evp_cb(c, ticket_cb) == 1 ? 0 : -1;
}

int fy_tls_valid_ticket_keys(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    const char *p = *(char **)field;
    if (!p) return 0;
    char msg[600];
    fy_tls_tickets_t *k = fy_tls_tickets_load(p, msg, sizeof msg);
    if (!k) {
        fy_conf_error(ctx, node, NULL, "%s", msg);
        return -1;
    }
    fy_tls_tickets_free(k);
    return 0;
}
