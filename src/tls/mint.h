/* Certificate minting for interception: leaf certificates forged per host name (DNS or IP
 * SAN), signed by the interception CA (tls/ca.h), kept in a bounded LRU shared by all workers
 * (one mutex; a host is issued at most once while it stays cached), and the server side of an
 * intercepted TLS handshake that pauses at the ClientHello so that the caller can learn the
 * origin's ALPN before choosing what to offer the client. */
#ifndef FY_TLS_MINT_H
#define FY_TLS_MINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "tls/ca.h"

typedef struct fy_mint fy_mint_t;

/* `ca` is borrowed and must outlive the minter; `max` bounds the cache (>= 1). With `disk`
 * (a directory, made 0700) forged leaves are also kept there (HOST.pem) with their shared key
 * (leaf-key.pem, 0600), so a restart reuses them instead of signing again. NULL after logging
 * when the leaf key or the TLS context cannot be made. */
fy_mint_t *fy_mint_new(fy_ca_t *ca, size_t max, const char *disk);
void fy_mint_free(fy_mint_t *m);

/* The leaf for `host` (a DNS name or an IP literal), from the cache or issued now. The caller
 * gets a reference (X509_free it). *issued tells whether this call signed it. NULL on
 * failure (logged). Thread-safe. */
X509 *fy_mint_leaf(fy_mint_t *m, const char *host, bool *issued);
/* Certificates signed so far (disk hits are not signed), and entries in the cache. */
uint64_t fy_mint_issued(fy_mint_t *m);
size_t fy_mint_cached(fy_mint_t *m);

/* Server name from a ClientHello's server_name extension body (RFC 6066 §3): the first
 * host_name entry, lowercased into out (NUL-terminated). Returns its length, or -1 when the
 * extension is malformed, has no host_name, or the name does not fit or has bytes outside
 * [A-Za-z0-9.-_]. Pure function of peer bytes (fuzzed: fuzz/fuzz_sni.c). */
int fy_mint_parse_sni(const unsigned char *p, size_t len, char *out, size_t outlen);

/* ---- the intercepted handshake ---- */

/* A server SSL on `fd` (borrowed). NULL on OOM. Free with SSL_free (or hand it to
 * fy_tls_transport_from_ssl). */
SSL *fy_mint_ssl_new(fy_mint_t *m, int fd);

#define FY_MINT_HELLO 2 /* paused at the ClientHello: fy_mint_sni() is known */

/* Drive the handshake: 1 done, FY_MINT_HELLO paused (call fy_mint_resume, then again),
 * 0 would block (*want = FY_WANT_READ/WRITE), <0 failed (FY_ETLS; `alert` set when the client
 * sent one: unknown_ca / bad_certificate tell a client that refused our certificate). */
int fy_mint_handshake(SSL *ssl, unsigned *want, int *alert);
/* The client's SNI, or "" when it sent none. */
const char *fy_mint_sni(SSL *ssl);
/* The handshake is done and `ssl` goes to a codec: from now on it reads ahead (whole socket
 * reads, not a header and a body per record), as a listener's connections do. */
void fy_mint_handed_over(SSL *ssl);
/* Continue a paused handshake with the leaf for `name`, offering the client h2 only when
 * `allow_h2` (else http/1.1, or no ALPN when the client offered neither). Returns 0 or -1
 * (leaf could not be made). */
int fy_mint_resume(fy_mint_t *m, SSL *ssl, const char *name, bool allow_h2);

#endif
