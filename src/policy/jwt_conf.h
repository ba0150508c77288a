/* Typed config of the JWT filter (`jwt:` in a route). Table: jwt_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_POLICY_JWT_CONF_H
#define FY_POLICY_JWT_CONF_H

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"

typedef struct fy_jwt_conf {
    fy_conf_strlist_t algorithms; /* `algorithms`: allowed "alg" values; empty = any the keys fit */
    char *secret;                 /* `secret`: HS* shared secret (text) */
    char *secret_file;            /* `secret-file`: HS* secret read from a file (raw bytes) */
    fy_conf_strlist_t keys;       /* `keys`: PEM public key files (RSA, EC, Ed25519) */
    char *jwks_file;              /* `jwks-file`: a JWKS document on disk */
    char *jwks_url;               /* `jwks-url`: https:// URL of a JWKS document */
    char *jwks_ca;                /* `jwks-ca`: CA bundle to verify the JWKS server with */
    uint64_t jwks_refresh_ms;     /* `jwks-refresh` */
    uint64_t jwks_min_refresh_ms; /* `jwks-min-refresh`: unknown-kid refetch floor */
    uint64_t jwks_timeout_ms;     /* `jwks-timeout` */
    uint64_t jwks_max_size;       /* `jwks-max-size` */
    int64_t max_keys;             /* `max-keys`: bound of the key set */
    fy_conf_strlist_t issuer;     /* `issuer`: accepted "iss" values; empty = not checked */
    fy_conf_strlist_t audience;   /* `audience`: "aud" must hold one of these; empty = no check */
    uint64_t leeway_ms;           /* `leeway`: clock skew allowed for exp/nbf/iat */
    bool require_exp;             /* `require-exp` */
    uint64_t max_age_ms;          /* `max-age`: iat must be this recent (0 = not checked) */
    fy_conf_strlist_t require;    /* `require`: claims that must be present */
    fy_conf_strmap_t claims;      /* `claims`: claim -> required value (string, or in an array) */
    fy_conf_strmap_t claims_to_headers; /* `claims-to-headers`: claim -> request header */
    char *header;            /* `header`: where the Bearer token is (default authorization) */
    char *cookie;            /* `cookie`: cookie holding the token */
    char *query;             /* `query`: query parameter holding the token */
    char *realm;             /* `realm`: WWW-Authenticate realm */
    uint64_t max_token_size; /* `max-token-size` */
    int64_t cache_size;      /* `cache-size`: verified tokens kept per worker (0 = none) */
} fy_jwt_conf_t;

extern const fy_conf_directive_t fy_jwt_conf_table[];

#endif
