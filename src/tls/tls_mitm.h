/* The OpenSSL side of interception that is not minting (tls/mint.h): the origin probe's
 * client contexts and handshake, what a handshake agreed and the certificates it showed (for
 * the inspector), and the CA certificate as PEM. The intercepting proxy (handler/mitm*.c)
 * calls these instead of OpenSSL.
 * Threads: contexts are shared read-only once made; an SSL is used by one thread. */
#ifndef FY_TLS_TLS_MITM_H
#define FY_TLS_TLS_MITM_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h>

/* What the inspector shows of one side of an intercepted TLS flow (NUL-terminated, "" when
   unknown). */
struct fy_tls_peer_desc {
    char version[16], cipher[64], alpn[16];
    char subject[256], issuer[256]; /* the peer's (origin) or our (forged) certificate */
    char sha256[96];                /* its fingerprint, hex with colons */
    char not_after[32];
};

/* A client context offering h2 and http/1.1, TLS >= 1.2, verifying against `ca` (a PEM file;
   NULL: the system store) unless `insecure`. NULL after logging. */
SSL_CTX *fy_tls_mitm_probe_ctx(const char *ca, bool insecure);
void fy_tls_mitm_ctx_free(SSL_CTX *c);
/* A client SSL on fd (borrowed) for `name` (SNI unless an IP literal; the certificate must
   match it when `verify`). NULL on OOM. */
SSL *fy_tls_mitm_probe_new(SSL_CTX *c, int fd, const char *name, bool verify);
void fy_tls_mitm_ssl_free(SSL *s);

typedef enum {
    FY_TLS_PROBE_UNTRUSTED = 1, /* the certificate did not verify: msg says why */
    FY_TLS_PROBE_CLOSED,        /* the connection failed or closed: msg is the socket error */
    FY_TLS_PROBE_FAILED         /* a TLS error: msg is OpenSSL's */
} fy_tls_probe_fail_t;

/* Step the probe's handshake: 1 done (*h2: the origin chose h2), 0 would block (*want
   FY_WANT_READ/WRITE), or -fy_tls_probe_fail_t with msg filled. */
int fy_tls_mitm_probe_step(SSL *s, int fd, unsigned *want, bool *h2, char *msg, size_t cap);

/* Version, cipher, ALPN and certificate (the peer's when `peer`, else our own) of s. */
void fy_tls_mitm_describe(SSL *s, bool peer, struct fy_tls_peer_desc *out);
/* The name of a TLS alert that says the client refused our certificate (unknown_ca,
   bad_certificate, certificate_unknown), or NULL for any other. */
const char *fy_tls_mitm_refusal_alert(int alert);
/* The certificate x as PEM into a new buffer (*len bytes, NUL-terminated); NULL on OOM. */
char *fy_tls_mitm_cert_pem(X509 *x, size_t *len);

#endif
