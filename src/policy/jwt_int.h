/* Inside the JWT filter: keys, key sets, signature checks (jwt_keys.c) shared with jwt.c. */
#ifndef FY_POLICY_JWT_INT_H
#define FY_POLICY_JWT_INT_H

#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum jwt_alg {
    ALG_NONE = 0,
    ALG_HS256,
    ALG_HS384,
    ALG_HS512,
    ALG_RS256,
    ALG_RS384,
    ALG_RS512,
    ALG_PS256,
    ALG_PS384,
    ALG_PS512,
    ALG_ES256,
    ALG_ES384,
    ALG_EDDSA,
    ALG_COUNT,
};

/* What a key can verify: the "alg" family is decided by the key's own type, never by the
 * token (no HS with an RSA public key's bytes as the secret). */
enum jwt_kty { KTY_OCT = 1, KTY_RSA, KTY_EC256, KTY_EC384, KTY_ED25519 };

typedef struct fy__jwt_key {
    char kid[128];         /* "" = none */
    int kty;               /* enum jwt_kty */
    int alg;               /* enum jwt_alg from the JWK's "alg", or ALG_NONE = any of its family */
    EVP_PKEY *pkey;        /* owned reference (not KTY_OCT) */
    unsigned char *secret; /* owned (KTY_OCT) */
    size_t secret_len;
} fy__jwt_key_t;

typedef struct fy__jwt_keyset {
    atomic_uint refs;
    uint64_t gen; /* bumped on each new set: cached verdicts of older sets are misses */
    size_t n;
    fy__jwt_key_t v[];
} fy__jwt_keyset_t;

/* "HS256" -> ALG_HS256; ALG_NONE for anything unknown (including "none"). */
int fy__jwt_alg_id(const char *s, size_t n);
/* Can a key of type kty verify alg? */
bool fy__jwt_key_fits(const fy__jwt_key_t *k, int alg);
/* Verify `sig` over `msg` with key k for alg (k fits alg). true when valid. */
bool fy__jwt_verify(const fy__jwt_key_t *k, int alg, const unsigned char *msg, size_t mlen,
                    const unsigned char *sig, size_t slen);

/* Parse a JWKS document into keys appended to v[*n..cap). Keys that are not for signatures,
 * of unsupported types or malformed are skipped (counted in *skipped). 0, or -1 with err when
 * the document itself is invalid. */
int fy__jwt_jwks_parse(const char *text, size_t len, fy__jwt_key_t *v, size_t *n, size_t cap,
                       size_t *skipped, char *err, size_t errlen);
/* One PEM file (public key, certificate or private key) as a key; kid = base name without
 * ".pem". 0, or -1 with err. */
int fy__jwt_pem_load(const char *path, fy__jwt_key_t *k, char *err, size_t errlen);
void fy__jwt_key_clear(fy__jwt_key_t *k);
/* Copy (references) a key. */
void fy__jwt_key_copy(fy__jwt_key_t *dst, const fy__jwt_key_t *src);

/* Read at most max bytes of a file into a malloc'd NUL-terminated buffer. NULL with err. */
char *fy__jwt_read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen);
/* GET an https:// URL with a blocking OpenSSL client (a background thread only): the body of a
 * 200 answer, at most max bytes, malloc'd and NUL-terminated. NULL with err. */
char *fy__jwt_https_get(const char *url, const char *ca_file, uint64_t timeout_ms, size_t max,
                        size_t *len, char *err, size_t errlen);

#endif
