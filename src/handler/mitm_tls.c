/* What an intercepted tunnel's TLS looked like, for the inspector's detail view: the client's
 * handshake with us and the certificate we forged for it, and the probe's handshake with the
 * origin and the origin's certificate. Filled once per tunnel (hand-over, probe), read per
 * exchange. */
#include "handler/mitm_int.h"

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>

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

static void cert_describe(X509 *x, fy_mitm_peer_tls_t *out)
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

void fy__mitm_tls_describe(SSL *ssl, bool peer, fy_mitm_peer_tls_t *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->version, sizeof out->version, "%s", SSL_get_version(ssl));
    const SSL_CIPHER *c = SSL_get_current_cipher(ssl);
    if (c) snprintf(out->cipher, sizeof out->cipher, "%s", SSL_CIPHER_get_name(c));
    const unsigned char *p;
    unsigned len = 0;
    SSL_get0_alpn_selected(ssl, &p, &len);
    if (len && len < sizeof out->alpn) {
        memcpy(out->alpn, p, len);
        out->alpn[len] = 0;
    }
    if (peer) {
        X509 *x = SSL_get1_peer_certificate(ssl);
        if (x) {
            cert_describe(x, out);
            X509_free(x);
        }
    } else {
        X509 *x = SSL_get_certificate(ssl); /* borrowed */
        if (x) cert_describe(x, out);
    }
}

const fy_mitm_tls_facts_t *fy_mitm_tls_facts(const fy_exchange_t *ex)
{
    const fy__mitm_tunnel_info_t *ti = ex->tunnel;
    return ti && !ti->plain && ti->tls.client.version[0] ? &ti->tls : NULL;
}
