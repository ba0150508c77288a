/* Leaf forging with a shared LRU, and the paused server handshake for interception. */
/* EC_KEY, deprecated in OpenSSL 3.0, gives the leaves' public key a legacy twin: see spki_key */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "tls/mint.h"
#include "tls/tls_conf.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <fcntl.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/transport.h"
#include "tls/tls.h"

typedef struct leaf {
    char *host;
    X509 *cert; /* owned (one reference) */
    uint64_t hash;
    struct leaf *hnext;       /* hash chain */
    struct leaf *prev, *next; /* LRU: head = most recent */
} leaf_t;

struct fy_mint {
    fy_ca_t *ca;   /* borrowed */
    EVP_PKEY *key; /* owned: one key for every leaf (as mitmproxy does) */
    /* owned: the same key as a legacy (EC_KEY) EVP_PKEY, or NULL; used only for the leaves'
       SubjectPublicKeyInfo. OpenSSL 3.0's X509_set_pubkey encodes a provider key through a
       new OSSL_ENCODER context every time: ~2.1M instructions, three quarters of forging a
       leaf; a legacy key is encoded by its ASN.1 method in ~75k. */
    EVP_PKEY *spki_key;
    SSL_CTX *ctx; /* owned: server context of intercepted handshakes */
    pthread_mutex_t lock;
    leaf_t **buckets; /* owned */
    size_t nbuckets, n, max;
    leaf_t *head, *tail;
    uint64_t issued;
    char *disk; /* owned, or NULL */
};

typedef struct hs_state {
    fy_mint_t *m;
    int phase; /* 0: before the ClientHello; 1: paused; 2: resumed */
    bool allow_h2;
    char sni[256];
    X509 *leaf; /* owned reference until SSL_use_certificate took its own */
} hs_state_t;

static int ex_index = -1;
static pthread_once_t ex_once = PTHREAD_ONCE_INIT;

static void free_state(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
    (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
    hs_state_t *st = ptr;
    if (!st) return;
    X509_free(st->leaf);
    free(st);
}

static void make_index(void)
{
    ex_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, free_state);
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* ---- SNI ---- */

int fy_mint_parse_sni(const unsigned char *p, size_t len, char *out, size_t outlen)
{
    if (len < 2) return -1;
    size_t list = (size_t)p[0] << 8 | p[1];
    if (list + 2 != len) return -1;
    size_t i = 2;
    while (i + 3 <= len) {
        unsigned type = p[i];
        size_t nl = (size_t)p[i + 1] << 8 | p[i + 2];
        i += 3;
        if (nl > len - i) return -1;
        if (type == 0) {
            if (nl == 0 || nl + 1 > outlen) return -1;
            for (size_t k = 0; k < nl; k++) {
                unsigned char c = p[i + k];
                if (!(isalnum(c) || c == '.' || c == '-' || c == '_')) return -1;
                out[k] = (char)tolower(c);
            }
            out[nl] = '\0';
            return (int)nl;
        }
        i += nl;
    }
    return -1;
}

/* ---- leaves ---- */

static bool is_ip(const char *h)
{
    return strspn(h, "0123456789.") == strlen(h) || strchr(h, ':') != NULL;
}

static X509 *issue(fy_mint_t *m, const char *host)
{
    X509 *x = X509_new();
    X509 *ca = fy_ca_cert(m->ca);
    if (!x) return NULL;
    X509_set_version(x, 2);
    unsigned char serial[16];
    if (RAND_bytes(serial, sizeof serial) != 1) goto fail;
    serial[0] = (serial[0] & 0x7f) | 0x01;
    BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
    if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x))) {
        BN_free(bn);
        goto fail;
    }
    BN_free(bn);
    X509_gmtime_adj(X509_getm_notBefore(x), -2L * 86400);
    X509_gmtime_adj(X509_getm_notAfter(x), 397L * 86400); /* browsers cap leaves at 398 days */
    X509_set_pubkey(x, m->spki_key ? m->spki_key : m->key);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, (const unsigned char *)"Ferry", -1, -1, 0);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)host,
                               strlen(host) > 64 ? 64 : -1, -1, 0);
    X509_set_issuer_name(x, X509_get_subject_name(ca));
    char san[300];
    snprintf(san, sizeof san, "%s:%s", is_ip(host) ? "IP" : "DNS", host);
    const char *exts[][2] = {
        {"basicConstraints", "critical,CA:FALSE"}, {"keyUsage", "critical,digitalSignature"},
        {"extendedKeyUsage", "serverAuth"},        {"subjectAltName", san},
        {"authorityKeyIdentifier", "keyid"},
    };
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, ca, x, NULL, NULL, 0);
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        X509_EXTENSION *e = X509V3_EXT_conf(NULL, &v3, exts[i][0], exts[i][1]);
        if (!e) goto fail;
        int ok = X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
        if (!ok) goto fail;
    }
    if (!X509_sign(x, fy_ca_key(m->ca), EVP_sha256())) goto fail;
    fy_counter_inc(fy_cid_certs_forged);
    return x;
fail:
    fy_tls_log_errors(FY_LOG_ERROR, "forging a certificate");
    X509_free(x);
    return NULL;
}

/* ---- disk cache ---- */

static void disk_path(const fy_mint_t *m, const char *host, char *buf, size_t len)
{
    /* host names are [a-z0-9.-_] (SNI parser) or IP literals; ':' of IPv6 becomes '_' */
    int n = snprintf(buf, len, "%s/", m->disk);
    for (const char *p = host; *p && (size_t)n + 8 < len; p++) buf[n++] = *p == ':' ? '_' : *p;
    snprintf(buf + n, len - (size_t)n, ".pem");
}

static X509 *disk_load(fy_mint_t *m, const char *host)
{
    char path[4400];
    disk_path(m, host, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    time_t soon = time(NULL) + 86400;
    /* ours, for this key, not about to expire: else forge again */
    if (!x || X509_cmp_time(X509_get0_notAfter(x), &soon) <= 0 ||
        X509_check_private_key(x, m->key) != 1 ||
        X509_verify(x, X509_get0_pubkey(fy_ca_cert(m->ca))) != 1) {
        ERR_clear_error();
        X509_free(x);
        return NULL;
    }
    return x;
}

static void disk_store(fy_mint_t *m, const char *host, X509 *x)
{
    char path[4400], tmp[4410];
    disk_path(m, host, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    int ok = PEM_write_X509(f, x);
    if (fclose(f) != 0 || !ok || rename(tmp, path) < 0) unlink(tmp);
}

static EVP_PKEY *disk_key(const char *dir)
{
    if (fy_ca_mkdir_p(dir) < 0) return NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/leaf-key.pem", dir);
    FILE *f = fopen(path, "r");
    if (f) {
        EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        fclose(f);
        return k;
    }
    EVP_PKEY *k = EVP_EC_gen("P-256");
    int fd = k ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        if (fd >= 0) close(fd);
        EVP_PKEY_free(k);
        return NULL;
    }
    if (!PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL)) {
        fclose(f);
        unlink(path);
        EVP_PKEY_free(k);
        return NULL;
    }
    fclose(f);
    return k;
}

static void lru_unlink(fy_mint_t *m, leaf_t *l)
{
    if (l->prev)
        l->prev->next = l->next;
    else
        m->head = l->next;
    if (l->next)
        l->next->prev = l->prev;
    else
        m->tail = l->prev;
    l->prev = l->next = NULL;
}

static void lru_push(fy_mint_t *m, leaf_t *l)
{
    l->next = m->head;
    l->prev = NULL;
    if (m->head) m->head->prev = l;
    m->head = l;
    if (!m->tail) m->tail = l;
}

static void evict_tail(fy_mint_t *m)
{
    leaf_t *l = m->tail;
    if (!l) return;
    lru_unlink(m, l);
    leaf_t **pp = &m->buckets[l->hash % m->nbuckets];
    while (*pp != l) pp = &(*pp)->hnext;
    *pp = l->hnext;
    X509_free(l->cert);
    free(l->host);
    free(l);
    m->n--;
}

X509 *fy_mint_leaf(fy_mint_t *m, const char *host, bool *issued)
{
    uint64_t h = hash_str(host);
    *issued = false;
    pthread_mutex_lock(&m->lock);
    leaf_t *l = m->buckets[h % m->nbuckets];
    while (l && (l->hash != h || strcmp(l->host, host) != 0)) l = l->hnext;
    if (l) {
        lru_unlink(m, l);
        lru_push(m, l);
        X509_up_ref(l->cert);
        X509 *x = l->cert;
        pthread_mutex_unlock(&m->lock);
        return x;
    }
    /* issued under the lock: a host is signed once even when many workers ask at once (a
       P-256 signature is tens of microseconds) */
    X509 *x = m->disk ? disk_load(m, host) : NULL;
    if (!x && (x = issue(m, host)) != NULL) {
        m->issued++;
        *issued = true;
        if (m->disk) disk_store(m, host, x);
    }
    if (x) {
        if (m->n >= m->max) evict_tail(m);
        l = fy_xcalloc(1, sizeof *l);
        l->host = fy_xstrdup(host);
        l->cert = x;
        l->hash = h;
        l->hnext = m->buckets[h % m->nbuckets];
        m->buckets[h % m->nbuckets] = l;
        lru_push(m, l);
        m->n++;
        X509_up_ref(x);
    }
    pthread_mutex_unlock(&m->lock);
    return x;
}

uint64_t fy_mint_issued(fy_mint_t *m)
{
    pthread_mutex_lock(&m->lock);
    uint64_t n = m->issued;
    pthread_mutex_unlock(&m->lock);
    return n;
}

size_t fy_mint_cached(fy_mint_t *m)
{
    pthread_mutex_lock(&m->lock);
    size_t n = m->n;
    pthread_mutex_unlock(&m->lock);
    return n;
}

/* ---- handshake ---- */

static int client_hello_cb(SSL *ssl, int *alert, void *arg)
{
    (void)arg;
    hs_state_t *st = SSL_get_ex_data(ssl, ex_index);
    if (!st) return SSL_CLIENT_HELLO_ERROR;
    if (st->phase == 0) {
        const unsigned char *p;
        size_t len;
        st->sni[0] = '\0';
        if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &p, &len) &&
            fy_mint_parse_sni(p, len, st->sni, sizeof st->sni) < 0) {
            *alert = SSL_AD_UNRECOGNIZED_NAME;
            return SSL_CLIENT_HELLO_ERROR;
        }
        st->phase = 1;
        return SSL_CLIENT_HELLO_RETRY;
    }
    if (st->phase == 1) return SSL_CLIENT_HELLO_RETRY; /* not resumed yet */
    if (!st->leaf || SSL_use_certificate(ssl, st->leaf) != 1 ||
        SSL_use_PrivateKey(ssl, st->m->key) != 1 ||
        SSL_add1_chain_cert(ssl, fy_ca_cert(st->m->ca)) != 1) {
        *alert = SSL_AD_INTERNAL_ERROR;
        return SSL_CLIENT_HELLO_ERROR;
    }
    return SSL_CLIENT_HELLO_SUCCESS;
}

static int alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)arg;
    hs_state_t *st = SSL_get_ex_data(ssl, ex_index);
    static const unsigned char h2h1[] = "\x02h2\x08http/1.1";
    static const unsigned char h1[] = "\x08http/1.1";
    const unsigned char *mine = st && st->allow_h2 ? h2h1 : h1;
    unsigned mlen = st && st->allow_h2 ? sizeof h2h1 - 1 : sizeof h1 - 1;
    unsigned char *o;
    if (SSL_select_next_proto(&o, outlen, mine, mlen, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK; /* a client that offers neither: no ALPN, HTTP/1.1 */
    *out = o;
    return SSL_TLSEXT_ERR_OK;
}

SSL *fy_mint_ssl_new(fy_mint_t *m, int fd)
{
    SSL *ssl = SSL_new(m->ctx);
    if (!ssl) return NULL;
    hs_state_t *st = calloc(1, sizeof *st);
    if (!st) {
        SSL_free(ssl);
        return NULL;
    }
    st->m = m;
    SSL_set_ex_data(ssl, ex_index, st);
    SSL_set_fd(ssl, fd);
    SSL_set_accept_state(ssl);
    SSL_set_read_ahead(ssl, 1); /* the ClientHello in one read; see fy_mint_resume */
    return ssl;
}

int fy_mint_handshake(SSL *ssl, unsigned *want, int *alert)
{
    hs_state_t *st = SSL_get_ex_data(ssl, ex_index);
    ERR_clear_error();
    int r = SSL_do_handshake(ssl);
    if (r == 1) return 1;
    int e = SSL_get_error(ssl, r);
    switch (e) {
    case SSL_ERROR_WANT_READ:
        *want = FY_WANT_READ;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        *want = FY_WANT_WRITE;
        return 0;
    case SSL_ERROR_WANT_CLIENT_HELLO_CB:
        if (st && st->phase == 1) return FY_MINT_HELLO;
        return FY_ETLS;
    default: {
        unsigned long le = ERR_peek_last_error();
        *alert = 0;
        /* a received alert is reported as reason 1000 + alert code */
        if (ERR_GET_LIB(le) == ERR_LIB_SSL && ERR_GET_REASON(le) >= 1000 &&
            ERR_GET_REASON(le) < 1256)
            *alert = ERR_GET_REASON(le) - 1000;
        ERR_clear_error();
        return FY_ETLS;
    }
    }
}

void fy_mint_handed_over(SSL *ssl)
{
    SSL_set_read_ahead(ssl, 1);
}

const char *fy_mint_sni(SSL *ssl)
{
    hs_state_t *st = SSL_get_ex_data(ssl, ex_index);
    return st ? st->sni : "";
}

int fy_mint_resume(fy_mint_t *m, SSL *ssl, const char *name, bool allow_h2)
{
    hs_state_t *st = SSL_get_ex_data(ssl, ex_index);
    if (!st) return -1;
    bool issued;
    X509_free(st->leaf);
    st->leaf = fy_mint_leaf(m, name, &issued);
    if (!st->leaf) return -1;
    if (issued) fy_info("mitm: forged a certificate for %s", name);
    st->allow_h2 = allow_h2;
    /* An h1 codec takes over whatever the client sent with its Finished (fy_h1_conn_start
       reads it); an h2 one only reads on readiness, so when h2 may be chosen the rest of the
       handshake is read record by record and nothing is left in OpenSSL's buffer. The client
       sends nothing between its ClientHello and our reply: the buffer is empty here. */
    SSL_set_read_ahead(ssl, !allow_h2);
    st->phase = 2;
    return 0;
}

/* `k` as a legacy EVP_PKEY, or NULL (then the leaves are given `k` itself). */
static EVP_PKEY *legacy_twin(EVP_PKEY *k)
{
    EC_KEY *ec = k ? EVP_PKEY_get1_EC_KEY(k) : NULL;
    EVP_PKEY *p = ec ? EVP_PKEY_new() : NULL;
    if (!p || EVP_PKEY_assign_EC_KEY(p, ec) != 1) {
        EVP_PKEY_free(p);
        EC_KEY_free(ec);
        ERR_clear_error();
        return NULL;
    }
    return p;
}

fy_mint_t *fy_mint_new(fy_ca_t *ca, size_t max, const char *disk)
{
    pthread_once(&ex_once, make_index);
    fy_mint_t *m = fy_xcalloc(1, sizeof *m);
    m->ca = ca;
    m->max = max ? max : 1;
    m->nbuckets = m->max < 16 ? 16 : m->max;
    m->buckets = fy_xcalloc(m->nbuckets, sizeof *m->buckets);
    pthread_mutex_init(&m->lock, NULL);
    if (disk) {
        m->disk = fy_xstrdup(disk);
        m->key = disk_key(disk);
        if (!m->key) fy_log(FY_LOG_EMERG, "intercept: certificate cache %s: unusable", disk);
    } else {
        m->key = EVP_EC_gen("P-256");
    }
    m->ctx = SSL_CTX_new(TLS_server_method());
    if (!m->key || !m->ctx || ex_index < 0) {
        fy_tls_log_errors(FY_LOG_EMERG, "interception TLS context");
        fy_mint_free(m);
        return NULL;
    }
    m->spki_key = legacy_twin(m->key);
    SSL_CTX_set_min_proto_version(m->ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(m->ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                    SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* record settings as a TLS listener's (tls.c), so that a decrypted tunnel costs what a
       reverse-proxied connection costs: buffers released when empty (an idle tunnel holds
       none; tls.c's slab makes taking them back cheap), AES-128-GCM
       first (under server preference OpenSSL's default order picks AES-256: more rounds per
       record for nothing). Read-ahead is set per SSL (fy_mint_ssl_new, fy_mint_resume,
       fy_mint_handed_over). */
    SSL_CTX_set_mode(m->ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_ciphersuites(m->ctx, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:"
                                     "TLS_AES_256_GCM_SHA384");
    SSL_CTX_set_cipher_list(m->ctx, FY_TLS_DEFAULT_CIPHERS); /* TLS 1.2: AEAD only */
    SSL_CTX_set_session_cache_mode(m->ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(m->ctx, 0);
    SSL_CTX_set_client_hello_cb(m->ctx, client_hello_cb, m);
    SSL_CTX_set_alpn_select_cb(m->ctx, alpn_cb, m);
    return m;
}

void fy_mint_free(fy_mint_t *m)
{
    if (!m) return;
    while (m->n) evict_tail(m);
    free(m->buckets);
    SSL_CTX_free(m->ctx);
    EVP_PKEY_free(m->spki_key);
    EVP_PKEY_free(m->key);
    free(m->disk);
    pthread_mutex_destroy(&m->lock);
    free(m);
}
