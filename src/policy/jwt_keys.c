/* JWT keys (policy/jwt_int.h): PEM and JWKS loading, signature checks through OpenSSL 3 EVP,
 * and the blocking https client of the JWKS thread. */
#include "policy/jwt_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/str.h"
#include "policy/json.h"

static const char *const alg_names[ALG_COUNT] = {
    "",      "HS256", "HS384", "HS512", "RS256", "RS384", "RS512",
    "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
};

int fy__jwt_alg_id(const char *s, size_t n)
{
    for (int i = 1; i < ALG_COUNT; i++)
        if (strlen(alg_names[i]) == n && memcmp(alg_names[i], s, n) == 0) return i;
    return ALG_NONE;
}

bool fy__jwt_key_fits(const fy__jwt_key_t *k, int alg)
{
    if (k->alg != ALG_NONE && k->alg != alg) return false;
    switch (alg) {
    case ALG_HS256:
    case ALG_HS384:
    case ALG_HS512:
        return k->kty == KTY_OCT;
    case ALG_RS256:
    case ALG_RS384:
    case ALG_RS512:
    case ALG_PS256:
    case ALG_PS384:
    case ALG_PS512:
        return k->kty == KTY_RSA;
    case ALG_ES256:
        return k->kty == KTY_EC256;
    case ALG_ES384:
        return k->kty == KTY_EC384;
    case ALG_EDDSA:
        return k->kty == KTY_ED25519;
    }
    return false;
}

static const EVP_MD *alg_md(int alg)
{
    switch (alg) {
    case ALG_HS256:
    case ALG_RS256:
    case ALG_PS256:
    case ALG_ES256:
        return EVP_sha256();
    case ALG_HS384:
    case ALG_RS384:
    case ALG_PS384:
    case ALG_ES384:
        return EVP_sha384();
    case ALG_HS512:
    case ALG_RS512:
    case ALG_PS512:
        return EVP_sha512();
    }
    return NULL;
}

static bool verify_evp(EVP_PKEY *pk, const EVP_MD *md, bool pss, const unsigned char *msg,
                       size_t mlen, const unsigned char *sig, size_t slen)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pc = NULL;
    bool ok = false;
    if (!c) return false;
    if (EVP_DigestVerifyInit(c, &pc, md, NULL, pk) != 1) goto out;
    if (pss && (EVP_PKEY_CTX_set_rsa_padding(pc, RSA_PKCS1_PSS_PADDING) != 1 ||
                EVP_PKEY_CTX_set_rsa_pss_saltlen(pc, RSA_PSS_SALTLEN_DIGEST) != 1))
        goto out;
    ok = EVP_DigestVerify(c, sig, slen, msg, mlen) == 1;
out:
    EVP_MD_CTX_free(c);
    ERR_clear_error();
    return ok;
}

bool fy__jwt_verify(const fy__jwt_key_t *k, int alg, const unsigned char *msg, size_t mlen,
                    const unsigned char *sig, size_t slen)
{
    switch (alg) {
    case ALG_HS256:
    case ALG_HS384:
    case ALG_HS512: {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int ml = 0;
        if (!HMAC(alg_md(alg), k->secret, (int)k->secret_len, msg, mlen, mac, &ml)) return false;
        return ml == slen && CRYPTO_memcmp(mac, sig, ml) == 0;
    }
    case ALG_RS256:
    case ALG_RS384:
    case ALG_RS512:
        return verify_evp(k->pkey, alg_md(alg), false, msg, mlen, sig, slen);
    case ALG_PS256:
    case ALG_PS384:
    case ALG_PS512:
        return verify_evp(k->pkey, alg_md(alg), true, msg, mlen, sig, slen);
    case ALG_ES256:
    case ALG_ES384: {
        /* JWS carries R || S of fixed width (RFC 7518 §3.4); OpenSSL wants DER */
        size_t w = alg == ALG_ES256 ? 32 : 48;
        if (slen != 2 * w) return false;
        ECDSA_SIG *es = ECDSA_SIG_new();
        BIGNUM *r = BN_bin2bn(sig, (int)w, NULL), *s = BN_bin2bn(sig + w, (int)w, NULL);
        unsigned char *der = NULL;
        bool ok = false;
        if (es && r && s && ECDSA_SIG_set0(es, r, s) == 1) {
            r = s = NULL;
            int dl = i2d_ECDSA_SIG(es, &der);
            if (dl > 0) ok = verify_evp(k->pkey, alg_md(alg), false, msg, mlen, der, (size_t)dl);
        }
        BN_free(r);
        BN_free(s);
        ECDSA_SIG_free(es);
        OPENSSL_free(der);
        return ok;
    }
    case ALG_EDDSA:
        return slen == 64 && verify_evp(k->pkey, NULL, false, msg, mlen, sig, slen);
    }
    return false;
}

void fy__jwt_key_clear(fy__jwt_key_t *k)
{
    EVP_PKEY_free(k->pkey);
    if (k->secret) OPENSSL_cleanse(k->secret, k->secret_len);
    free(k->secret);
    memset(k, 0, sizeof *k);
}

void fy__jwt_key_copy(fy__jwt_key_t *dst, const fy__jwt_key_t *src)
{
    *dst = *src;
    if (src->pkey) EVP_PKEY_up_ref(src->pkey);
    if (src->secret) {
        dst->secret = malloc(src->secret_len ? src->secret_len : 1);
        if (dst->secret) memcpy(dst->secret, src->secret, src->secret_len);
    }
}

/* The key type of an EVP public key, or 0 (unsupported: DSA, small RSA, other curves). */
static int pkey_kty(EVP_PKEY *pk, char *err, size_t errlen)
{
    switch (EVP_PKEY_get_base_id(pk)) {
    case EVP_PKEY_RSA:
        if (EVP_PKEY_get_bits(pk) < 2048) {
            snprintf(err, errlen, "RSA key of %d bits (2048 at least)", EVP_PKEY_get_bits(pk));
            return 0;
        }
        return KTY_RSA;
    case EVP_PKEY_EC: {
        char g[64];
        size_t gl = 0;
        if (EVP_PKEY_get_utf8_string_param(pk, OSSL_PKEY_PARAM_GROUP_NAME, g, sizeof g, &gl) != 1)
            break;
        if (!strcmp(g, "prime256v1") || !strcmp(g, "P-256")) return KTY_EC256;
        if (!strcmp(g, "secp384r1") || !strcmp(g, "P-384")) return KTY_EC384;
        snprintf(err, errlen, "EC curve %s (P-256 and P-384 only)", g);
        return 0;
    }
    case EVP_PKEY_ED25519:
        return KTY_ED25519;
    }
    snprintf(err, errlen, "unsupported key type (RSA, EC P-256/P-384, Ed25519)");
    return 0;
}

char *fy__jwt_read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = 0;
    while (buf) {
        ssize_t r = read(fd, buf + n, max + 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
            free(buf);
            buf = NULL;
            break;
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n > max) {
            snprintf(err, errlen, "'%s' is larger than %zu bytes", path, max);
            free(buf);
            buf = NULL;
            break;
        }
    }
    close(fd);
    if (!buf) return NULL;
    buf[n] = '\0';
    *len = n;
    return buf;
}

int fy__jwt_pem_load(const char *path, fy__jwt_key_t *k, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    size_t len = 0;
    char *text = fy__jwt_read_file(path, 1 << 20, &len, err, errlen);
    if (!text) return -1;
    EVP_PKEY *pk = NULL;
    BIO *b = BIO_new_mem_buf(text, (int)len);
    if (b) pk = PEM_read_bio_PUBKEY(b, NULL, NULL, NULL);
    if (!pk && b) {
        BIO_free(b);
        b = BIO_new_mem_buf(text, (int)len);
        X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
        if (x) pk = X509_get_pubkey(x);
        X509_free(x);
    }
    if (!pk && b) {
        BIO_free(b);
        b = BIO_new_mem_buf(text, (int)len);
        pk = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    }
    BIO_free(b);
    free(text);
    ERR_clear_error();
    if (!pk) {
        snprintf(err, errlen, "'%s' holds no PEM public key, certificate or private key", path);
        return -1;
    }
    char why[128];
    int kty = pkey_kty(pk, why, sizeof why);
    if (!kty) {
        snprintf(err, errlen, "'%s': %s", path, why);
        EVP_PKEY_free(pk);
        return -1;
    }
    k->kty = kty;
    k->pkey = pk;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t bl = strlen(base);
    if (bl > 4 && !strcmp(base + bl - 4, ".pem")) bl -= 4;
    if (bl >= sizeof k->kid) bl = sizeof k->kid - 1;
    memcpy(k->kid, base, bl);
    k->kid[bl] = '\0';
    return 0;
}

/* ---- JWKS ---- */

static int b64(const char *s, unsigned char *out, size_t cap)
{
    return s ? fy_base64url_decode(s, strlen(s), out, cap) : -1;
}

static EVP_PKEY *from_params(const char *type, OSSL_PARAM_BLD *bld)
{
    EVP_PKEY *pk = NULL;
    OSSL_PARAM *p = OSSL_PARAM_BLD_to_param(bld);
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
    if (p && c && EVP_PKEY_fromdata_init(c) == 1)
        if (EVP_PKEY_fromdata(c, &pk, EVP_PKEY_PUBLIC_KEY, p) != 1) pk = NULL;
    EVP_PKEY_CTX_free(c);
    OSSL_PARAM_free(p);
    return pk;
}

static int jwk_key(const fy_json_t *j, fy__jwt_key_t *k)
{
    memset(k, 0, sizeof *k);
    const char *kty = fy_json_get_str(j, "kty"), *use = fy_json_get_str(j, "use");
    const char *kid = fy_json_get_str(j, "kid"), *alg = fy_json_get_str(j, "alg");
    if (!kty || (use && strcmp(use, "sig") != 0)) return -1;
    if (kid) {
        size_t l = strlen(kid);
        if (l >= sizeof k->kid) return -1;
        memcpy(k->kid, kid, l + 1);
    }
    if (alg) {
        k->alg = fy__jwt_alg_id(alg, strlen(alg));
        if (k->alg == ALG_NONE) return -1;
    }
    unsigned char buf[2][1024];
    if (!strcmp(kty, "oct")) {
        const char *ks = fy_json_get_str(j, "k");
        int n = ks ? fy_base64url_decode(ks, strlen(ks), buf[0], sizeof buf[0]) : -1;
        if (n <= 0) return -1;
        k->kty = KTY_OCT;
        k->secret = malloc((size_t)n);
        if (!k->secret) return -1;
        memcpy(k->secret, buf[0], (size_t)n);
        k->secret_len = (size_t)n;
        return 0;
    }
    char why[128];
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    if (!bld) return -1;
    EVP_PKEY *pk = NULL;
    if (!strcmp(kty, "RSA")) {
        int nl = b64(fy_json_get_str(j, "n"), buf[0], sizeof buf[0]);
        int el = b64(fy_json_get_str(j, "e"), buf[1], 16);
        BIGNUM *n = nl > 0 ? BN_bin2bn(buf[0], nl, NULL) : NULL;
        BIGNUM *e = el > 0 ? BN_bin2bn(buf[1], el, NULL) : NULL;
        if (n && e && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) == 1 &&
            OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e) == 1)
            pk = from_params("RSA", bld);
        BN_free(n);
        BN_free(e);
    } else if (!strcmp(kty, "EC")) {
        const char *crv = fy_json_get_str(j, "crv");
        size_t w = crv && !strcmp(crv, "P-256") ? 32 : crv && !strcmp(crv, "P-384") ? 48 : 0;
        unsigned char pub[1 + 2 * 48];
        int xl = b64(fy_json_get_str(j, "x"), buf[0], 64);
        int yl = b64(fy_json_get_str(j, "y"), buf[1], 64);
        if (w && xl == (int)w && yl == (int)w) {
            pub[0] = 4;
            memcpy(pub + 1, buf[0], w);
            memcpy(pub + 1 + w, buf[1], w);
            if (OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME,
                                                w == 32 ? "prime256v1" : "secp384r1", 0) == 1 &&
                OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub, 1 + 2 * w) == 1)
                pk = from_params("EC", bld);
        }
    } else if (!strcmp(kty, "OKP")) {
        const char *crv = fy_json_get_str(j, "crv");
        int xl = b64(fy_json_get_str(j, "x"), buf[0], 64);
        if (crv && !strcmp(crv, "Ed25519") && xl == 32)
            pk = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, buf[0], 32);
    }
    OSSL_PARAM_BLD_free(bld);
    ERR_clear_error();
    if (!pk) return -1;
    k->kty = pkey_kty(pk, why, sizeof why);
    if (!k->kty) {
        EVP_PKEY_free(pk);
        return -1;
    }
    k->pkey = pk;
    return 0;
}

int fy__jwt_jwks_parse(const char *text, size_t len, fy__jwt_key_t *v, size_t *n, size_t cap,
                       size_t *skipped, char *err, size_t errlen)
{
    size_t memcap = len * 8 + 4096;
    void *mem = malloc(memcap);
    if (!mem) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *why = NULL;
    size_t at = 0;
    fy_json_t *root = fy_json_parse(text, len, mem, memcap, 16, &why, &at);
    const fy_json_t *keys = root ? fy_json_get(root, "keys") : NULL;
    if (!root || !keys || keys->type != FY_JSON_ARRAY) {
        if (root)
            snprintf(err, errlen, "not a JWKS document (no \"keys\" array)");
        else
            snprintf(err, errlen, "invalid JSON at byte %zu: %s", at, why);
        free(mem);
        return -1;
    }
    for (const fy_json_t *j = keys->child; j; j = j->next) {
        if (*n == cap) {
            (*skipped)++;
            continue;
        }
        if (j->type == FY_JSON_OBJECT && jwk_key(j, &v[*n]) == 0)
            (*n)++;
        else
            (*skipped)++;
    }
    free(mem);
    return 0;
}

/* ---- the JWKS thread's https client ---- */

static int connect_to(const char *host, const char *port, int timeout_ms, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
            struct pollfd p = {fd, POLLOUT, 0};
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (poll(&p, 1, timeout_ms) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                break;
            snprintf(err, errlen, "cannot connect to %s:%s: %s", host, port,
                     soerr ? strerror(soerr) : "timed out");
        } else {
            snprintf(err, errlen, "cannot connect to %s:%s: %s", host, port, strerror(errno));
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    return fd;
}

char *fy__jwt_https_get(const char *url, const char *ca_file, uint64_t timeout_ms, size_t max,
                        size_t *len, char *err, size_t errlen)
{
    if (strncmp(url, "https://", 8) != 0) {
        snprintf(err, errlen, "not an https:// URL");
        return NULL;
    }
    const char *h = url + 8, *slash = strchr(h, '/');
    size_t hl = slash ? (size_t)(slash - h) : strlen(h);
    const char *path = slash ? slash : "/";
    char host[256], port[8] = "443";
    if (hl == 0 || hl >= sizeof host) {
        snprintf(err, errlen, "bad host in URL");
        return NULL;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    char *hostname = host;
    if (host[0] == '[') { /* [v6]:port */
        char *e = strchr(host, ']');
        if (!e) {
            snprintf(err, errlen, "bad host in URL");
            return NULL;
        }
        *e = '\0';
        hostname = host + 1;
        if (e[1] == ':') snprintf(port, sizeof port, "%.5s", e + 2);
    } else {
        char *c = strrchr(host, ':');
        if (c) {
            *c = '\0';
            snprintf(port, sizeof port, "%.5s", c + 1);
        }
    }
    int fd = connect_to(hostname, port, (int)timeout_ms, err, errlen);
    if (fd < 0) return NULL;
    char *body = NULL, *buf = NULL;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = NULL;
    if (!ctx) goto tls_fail;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* many servers close without close_notify; Content-Length below catches a truncation */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if ((ca_file ? SSL_CTX_load_verify_file(ctx, ca_file)
                 : SSL_CTX_set_default_verify_paths(ctx)) != 1)
        goto tls_fail;
    ssl = SSL_new(ctx);
    if (!ssl || SSL_set_fd(ssl, fd) != 1) goto tls_fail;
    SSL_set_tlsext_host_name(ssl, hostname);
    SSL_set1_host(ssl, hostname);
    if (SSL_connect(ssl) != 1) {
        long vr = SSL_get_verify_result(ssl);
        snprintf(err, errlen, "TLS handshake with %s failed%s%s", hostname,
                 vr != X509_V_OK ? ": " : "",
                 vr != X509_V_OK ? X509_verify_cert_error_string(vr) : "");
        goto out;
    }
    char req[1024];
    int rl = snprintf(req, sizeof req,
                      "GET %s HTTP/1.0\r\nHost: %s\r\nAccept: application/json\r\n"
                      "User-Agent: ferry-jwks\r\nConnection: close\r\n\r\n",
                      path, host);
    if (rl <= 0 || (size_t)rl >= sizeof req || SSL_write(ssl, req, rl) != rl) {
        snprintf(err, errlen, "cannot send the request");
        goto out;
    }
    size_t cap = max + 16384, n = 0;
    buf = malloc(cap + 1);
    if (!buf) goto out;
    for (;;) {
        int r = SSL_read(ssl, buf + n, (int)(cap - n > 16384 ? 16384 : cap - n));
        if (r <= 0) {
            int e = SSL_get_error(ssl, r);
            if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0))
                break;
            snprintf(err, errlen, "read failed or timed out");
            goto out;
        }
        n += (size_t)r;
        if (n == cap) {
            snprintf(err, errlen, "answer larger than %zu bytes", max);
            goto out;
        }
    }
    buf[n] = '\0';
    char *hend = strstr(buf, "\r\n\r\n");
    if (!hend || n < 12 || memcmp(buf, "HTTP/1.", 7) != 0) {
        snprintf(err, errlen, "not an HTTP response");
        goto out;
    }
    if (memcmp(buf + 9, "200", 3) != 0) {
        snprintf(err, errlen, "status %.3s", buf + 9);
        goto out;
    }
    *hend = '\0';
    for (char *p = buf; *p; p++) *p = (char)fy_lower(*p);
    if (strstr(buf, "\ntransfer-encoding:")) {
        snprintf(err, errlen, "chunked answers are not supported (HTTP/1.0 was asked)");
        goto out;
    }
    size_t bl = n - (size_t)(hend + 4 - buf);
    const char *clh = strstr(buf, "\ncontent-length:");
    if (clh && strtoull(clh + 16, NULL, 10) != bl) {
        snprintf(err, errlen, "answer shorter or longer than its Content-Length");
        goto out;
    }
    if (bl > max) {
        snprintf(err, errlen, "answer larger than %zu bytes", max);
        goto out;
    }
    body = malloc(bl + 1);
    if (body) {
        memcpy(body, hend + 4, bl);
        body[bl] = '\0';
        *len = bl;
    }
    goto out;
tls_fail:
    snprintf(err, errlen, "TLS setup failed");
out:
    free(buf);
    if (ssl) SSL_free(ssl);
    SSL_CTX_free(ctx);
    ERR_clear_error();
    close(fd);
    return body;
}
