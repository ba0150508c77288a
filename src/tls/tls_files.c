/* Load-time checks of certificate, key and CA files (tls_files.h). */
#include "tls/tls_files.h"

#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "conf/conf_valid.h"

/* OpenSSL's reason for the last error, or `dflt`; the queue is left empty */
static const char *reason(const char *dflt)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    ERR_clear_error();
    return r ? r : dflt;
}

static FILE *open_pem(const char *path, char *msg, size_t len)
{
    if (fy_conf_check_readable(path, msg, len) < 0) return NULL;
    FILE *f = fopen(path, "r");
    if (!f) snprintf(msg, len, "cannot read '%.300s'", path);
    return f;
}

int fy_tls_check_cert_key(const char *cert, const char *key, char *msg, size_t len)
{
    FILE *f = open_pem(cert, msg, len);
    if (!f) return -1;
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!x) {
        snprintf(msg, len, "'%.300s' holds no PEM certificate (%s)", cert, reason("no data"));
        return -1;
    }
    f = open_pem(key, msg, len);
    if (!f) {
        X509_free(x);
        return -1;
    }
    EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    int rc = 0;
    if (!k) {
        snprintf(msg, len, "'%.300s' holds no PEM private key (%s)", key, reason("no data"));
        rc = -1;
    } else if (X509_check_private_key(x, k) != 1) {
        snprintf(msg, len, "'%.300s' is not the private key of the certificate in '%.300s'", key,
                 cert);
        ERR_clear_error();
        rc = -1;
    }
    EVP_PKEY_free(k);
    X509_free(x);
    return rc;
}

int fy_tls_check_ca_file(const char *path, char *msg, size_t len)
{
    FILE *f = open_pem(path, msg, len);
    if (!f) return -1;
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!x) {
        snprintf(msg, len, "'%.300s' holds no PEM certificate (%s)", path, reason("no data"));
        return -1;
    }
    X509_free(x);
    ERR_clear_error();
    return 0;
}

int fy_tls_valid_ca_file(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *p = *(char **)field;
    char msg[800];
    if (!p || fy_tls_check_ca_file(p, msg, sizeof msg) == 0) return 0;
    fy_conf_error(ctx, node, NULL, "%s", msg);
    return -1;
}

int fy_tls_valid_ciphers(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *c = *(char **)field;
    if (!c) return 0;
    SSL_CTX *t = SSL_CTX_new(TLS_method());
    int ok = t && SSL_CTX_set_cipher_list(t, c) == 1;
    SSL_CTX_free(t);
    ERR_clear_error();
    if (ok) return 0;
    fy_conf_error(ctx, node, NULL, "OpenSSL knows no cipher in '%.200s'", c);
    return -1;
}

int fy_tls_conf_check_pair(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, const char *cert,
                           const char *key, const char *cert_key)
{
    char msg[800];
    if (!cert || !key || fy_tls_check_cert_key(cert, key, msg, sizeof msg) == 0) return 0;
    const char *k = cert_key ? cert_key : "cert";
    fy_conf_error(ctx, fy_conf_map_at(map, k), k, "%s", msg);
    return -1;
}
