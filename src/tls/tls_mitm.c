/* Interception's OpenSSL calls outside minting: the origin probe, handshake descriptions for
 * the inspector, the CA as PEM.
 * Threads: see tls_mitm.h. */
#include "tls/tls_mitm.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/transport.h"
#include "tls/tls.h"

SSL_CTX *fy_tls_mitm_probe_ctx(const char *ca, bool insecure)
{
    SSL_CTX *c = SSL_CTX_new(TLS_client_method());
    if (!c) return NULL;
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
    static const unsigned char alpn[] = "\x02h2\x08http/1.1";
    SSL_CTX_set_alpn_protos(c, alpn, sizeof alpn - 1);
    if (!insecure) {
        SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
        if ((ca ? SSL_CTX_load_verify_locations(c, ca, NULL)
                : SSL_CTX_set_default_verify_paths(c)) != 1) {
            fy_tls_log_errors(FY_LOG_EMERG, ca ? ca : "system CA store");
            SSL_CTX_free(c);
            return NULL;
        }
    }
    return c;
}

void fy_tls_mitm_ctx_free(SSL_CTX *c)
{
    SSL_CTX_free(c);
}

SSL *fy_tls_mitm_probe_new(SSL_CTX *c, int fd, const char *name, bool verify)
{
    SSL *s = SSL_new(c);
    if (!s) return NULL;
    SSL_set_fd(s, fd);
    SSL_set_connect_state(s);
    bool ip = strspn(name, "0123456789.") == strlen(name) || strchr(name, ':');
    if (!ip) SSL_set_tlsext_host_name(s, name);
    if (verify) SSL_set1_host(s, name);
    return s;
}

void fy_tls_mitm_ssl_free(SSL *s)
{
    SSL_free(s);
}

int fy_tls_mitm_probe_step(SSL *s, int fd, unsigned *want, bool *h2, char *msg, size_t cap)
{
    ERR_clear_error();
    int r = SSL_do_handshake(s);
    if (r == 1) {
        const unsigned char *p;
        unsigned len;
        SSL_get0_alpn_selected(s, &p, &len);
        *h2 = len == 2 && memcmp(p, "h2", 2) == 0;
        return 1;
    }
    int e = SSL_get_error(s, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        *want = e == SSL_ERROR_WANT_READ ? FY_WANT_READ : FY_WANT_WRITE;
        return 0;
    }
    long v = SSL_get_verify_result(s);
    if (v != X509_V_OK) {
        snprintf(msg, cap, "%s", X509_verify_cert_error_string(v));
        ERR_clear_error();
        return -FY_TLS_PROBE_UNTRUSTED;
    }
    unsigned long le = ERR_get_error();
    ERR_clear_error();
    if (e == SSL_ERROR_SYSCALL || !le) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        snprintf(msg, cap, "%s",
                 soerr ? strerror(soerr) : "connection closed during the TLS handshake");
        return -FY_TLS_PROBE_CLOSED;
    }
    ERR_error_string_n(le, msg, cap);
    return -FY_TLS_PROBE_FAILED;
}

static void name_str(const X509_NAME *n, char *out, size_t cap)
{
    out[0] = 0;
    if (!n) return;
    BIO *b = BIO_new(BIO_s_mem());
    if (!b) return;
    X509_NAME_print_ex(b, n, 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
    int k = BIO_read(b, out, (int)cap - 1);
    out[k > 0 ? k : 0] = 0;
    BIO_free(b);
}

static void cert_describe(X509 *x, struct fy_tls_peer_desc *out)
{
    name_str(X509_get_subject_name(x), out->subject, sizeof out->subject);
    name_str(X509_get_issuer_name(x), out->issuer, sizeof out->issuer);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (X509_digest(x, EVP_sha256(), md, &n) == 1) {
        size_t at = 0;
        for (unsigned i = 0; i < n && at + 4 <= sizeof out->sha256; i++)
            at += (size_t)snprintf(out->sha256 + at, sizeof out->sha256 - at, i ? ":%02X" : "%02X",
                                   md[i]);
    }
    const ASN1_TIME *na = X509_get0_notAfter(x);
    struct tm tm;
    if (na && ASN1_TIME_to_tm(na, &tm) == 1)
        strftime(out->not_after, sizeof out->not_after, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void fy_tls_mitm_describe(SSL *s, bool peer, struct fy_tls_peer_desc *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->version, sizeof out->version, "%s", SSL_get_version(s));
    const SSL_CIPHER *c = SSL_get_current_cipher(s);
    if (c) snprintf(out->cipher, sizeof out->cipher, "%s", SSL_CIPHER_get_name(c));
    const unsigned char *p;
    unsigned len = 0;
    SSL_get0_alpn_selected(s, &p, &len);
    if (len && len < sizeof out->alpn) {
        memcpy(out->alpn, p, len);
        out->alpn[len] = 0;
    }
    if (peer) {
        X509 *x = SSL_get1_peer_certificate(s);
        if (x) {
            cert_describe(x, out);
            X509_free(x);
        }
    } else {
        X509 *x = SSL_get_certificate(s); /* borrowed */
        if (x) cert_describe(x, out);
    }
}

const char *fy_tls_mitm_refusal_alert(int alert)
{
    return alert == SSL_AD_UNKNOWN_CA            ? "unknown_ca"
           : alert == SSL_AD_BAD_CERTIFICATE     ? "bad_certificate"
           : alert == SSL_AD_CERTIFICATE_UNKNOWN ? "certificate_unknown"
                                                 : NULL;
}

char *fy_tls_mitm_cert_pem(X509 *x, size_t *len)
{
    BIO *b = BIO_new(BIO_s_mem());
    if (!b) return NULL;
    PEM_write_bio_X509(b, x);
    char *p;
    long n = BIO_get_mem_data(b, &p);
    char *out = fy_xmalloc((size_t)(n > 0 ? n : 0) + 1);
    if (n > 0) memcpy(out, p, (size_t)n);
    out[n > 0 ? n : 0] = 0;
    *len = (size_t)(n > 0 ? n : 0);
    BIO_free(b);
    return out;
}
