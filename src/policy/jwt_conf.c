/* Directive table of the JWT filter (`jwt:`). */
#include "policy/jwt_conf.h"

#include <stddef.h>
#include <string.h>

#include "conf/conf_valid.h"

static const char *const algs[] = {"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256",
                                   "PS384", "PS512", "ES256", "ES384", "EdDSA", NULL};

static int validate_algs(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strlist_t *l = field;
    for (size_t i = 0; i < l->n; i++) {
        bool ok = false;
        for (size_t k = 0; algs[k]; k++) ok = ok || !strcmp(algs[k], l->v[i]);
        if (!ok) {
            fy_conf_error(ctx, node, NULL,
                          "unknown algorithm '%.40s' (HS256/384/512, RS256/384/512, "
                          "PS256/384/512, ES256, ES384, EdDSA; `none` is never accepted)",
                          l->v[i]);
            return -1;
        }
    }
    return 0;
}

static int validate_files(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strlist_t *l = field;
    for (size_t i = 0; i < l->n; i++) {
        char msg[512];
        if (fy_conf_check_readable(l->v[i], msg, sizeof msg) < 0) {
            fy_conf_error(ctx, node, NULL, "%s", msg);
            return -1;
        }
    }
    return 0;
}

static int validate_url(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *u = *(char **)field;
    if (u && strncmp(u, "https://", 8) != 0) {
        fy_conf_error(ctx, node, NULL, "must be an https:// URL, got '%.80s'", u);
        return -1;
    }
    return 0;
}

static int validate_hdrmap(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strmap_t *m = field;
    for (size_t i = 0; i < m->n; i++) {
        const char *why = fy_conf_why_not_token(m->values[i]);
        if (why) {
            fy_conf_error(ctx, node, NULL, "header name '%.60s' %s", m->values[i], why);
            return -1;
        }
    }
    return 0;
}

static int check_jwt(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const fy_jwt_conf_t *j = obj;
    if (!j->secret && !j->secret_file && !j->keys.n && !j->jwks_file && !j->jwks_url) {
        fy_conf_error(ctx, map, NULL,
                      "needs keys: one or more of secret, secret-file, keys, jwks-file, jwks-url");
        return -1;
    }
    if (j->secret && j->secret_file) {
        fy_conf_error(ctx, map, NULL, "has both secret and secret-file; use one");
        return -1;
    }
    return 0;
}

#define J(f) offsetof(fy_jwt_conf_t, f)

const fy_conf_directive_t fy_jwt_conf_table[] = {
    {.key = "algorithms",
     .type = FY_CT_STRLIST,
     .offset = J(algorithms),
     .validate = validate_algs,
     .doc = "Accepted `alg` values, e.g. `[ES256]`; default: any that fits a key (an HS secret "
            "only verifies HS*, an RSA key RS*/PS*, ...). `none` is always refused."},
    {.key = "secret",
     .type = FY_CT_STRING,
     .offset = J(secret),
     .doc = "Shared secret for HS256/384/512, as text."},
    {.key = "secret-file",
     .type = FY_CT_STRING,
     .offset = J(secret_file),
     .validate = fy_conf_valid_readable_file,
     .doc = "File holding the HS* shared secret (its bytes, a trailing newline removed)."},
    {.key = "keys",
     .type = FY_CT_STRLIST,
     .offset = J(keys),
     .validate = validate_files,
     .doc = "PEM public key (or certificate) files: RSA (RS*/PS*), EC P-256/P-384 (ES256/384), "
            "Ed25519 (EdDSA). Their `kid` is the file's base name without `.pem`."},
    {.key = "jwks-file",
     .type = FY_CT_STRING,
     .offset = J(jwks_file),
     .validate = fy_conf_valid_readable_file,
     .doc = "A JWKS document (RFC 7517) on disk; re-read when a token names an unknown `kid` "
            "and the file changed."},
    {.key = "jwks-url",
     .type = FY_CT_STRING,
     .offset = J(jwks_url),
     .validate = validate_url,
     .doc = "An https:// URL serving a JWKS document: fetched at start, then every "
            "`jwks-refresh` by a background thread (never on a worker), and early when a token "
            "names an unknown `kid`."},
    {.key = "jwks-ca",
     .type = FY_CT_STRING,
     .offset = J(jwks_ca),
     .validate = fy_conf_valid_readable_file,
     .doc = "CA bundle the JWKS server's certificate is verified with; default: the system "
            "store."},
    {.key = "jwks-refresh",
     .type = FY_CT_DURATION,
     .offset = J(jwks_refresh_ms),
     .dflt = "5m",
     .min = 1000,
     .max = 86400000,
     .doc = "How often the JWKS URL is fetched again."},
    {.key = "jwks-min-refresh",
     .type = FY_CT_DURATION,
     .offset = J(jwks_min_refresh_ms),
     .dflt = "10s",
     .max = 3600000,
     .doc = "Least time between two fetches caused by unknown `kid`s (a flood of made-up kids "
            "costs one fetch per this interval)."},
    {.key = "jwks-timeout",
     .type = FY_CT_DURATION,
     .offset = J(jwks_timeout_ms),
     .dflt = "5s",
     .min = 100,
     .max = 120000,
     .doc = "Connect, TLS and read timeout of one JWKS fetch."},
    {.key = "jwks-max-size",
     .type = FY_CT_SIZE,
     .offset = J(jwks_max_size),
     .dflt = "256k",
     .min = 64,
     .max = 16 << 20,
     .doc = "Largest JWKS document accepted (file or URL)."},
    {.key = "max-keys",
     .type = FY_CT_INT,
     .offset = J(max_keys),
     .dflt = "64",
     .min = 1,
     .max = 4096,
     .doc = "Most keys kept from the JWKS sources; further keys are ignored and logged."},
    {.key = "issuer",
     .type = FY_CT_STRLIST,
     .offset = J(issuer),
     .doc = "Accepted `iss` values; not checked when unset."},
    {.key = "audience",
     .type = FY_CT_STRLIST,
     .offset = J(audience),
     .doc = "The token's `aud` (string or array) must hold one of these; not checked when unset."},
    {.key = "leeway",
     .type = FY_CT_DURATION,
     .offset = J(leeway_ms),
     .dflt = "30s",
     .max = 86400000,
     .doc = "Clock skew allowed when checking `exp`, `nbf` and `iat`."},
    {.key = "require-exp",
     .type = FY_CT_BOOL,
     .offset = J(require_exp),
     .dflt = "false",
     .doc = "Refuse tokens without `exp`."},
    {.key = "max-age",
     .type = FY_CT_DURATION,
     .offset = J(max_age_ms),
     .dflt = "0",
     .doc = "When set, `iat` is required and must be at most this old."},
    {.key = "require",
     .type = FY_CT_STRLIST,
     .offset = J(require),
     .doc = "Claims that must be present, e.g. `[sub, email]`."},
    {.key = "claims",
     .type = FY_CT_STRMAP,
     .offset = J(claims),
     .doc = "Claim values required: `{role: admin}` passes when `role` is the string `admin` "
            "or an array holding it (numbers and booleans compare by their JSON text)."},
    {.key = "claims-to-headers",
     .type = FY_CT_STRMAP,
     .offset = J(claims_to_headers),
     .validate = validate_hdrmap,
     .doc = "Claims copied into request headers for the handler and the origin, e.g. `{sub: "
            "x-user}`; a header of that name from the client is removed first."},
    {.key = "header",
     .type = FY_CT_STRING,
     .offset = J(header),
     .dflt = "authorization",
     .validate = fy_conf_valid_token,
     .doc = "Request header carrying `Bearer <token>`."},
    {.key = "cookie",
     .type = FY_CT_STRING,
     .offset = J(cookie),
     .validate = fy_conf_valid_token,
     .doc = "Cookie carrying the token (tried after the header)."},
    {.key = "query",
     .type = FY_CT_STRING,
     .offset = J(query),
     .validate = fy_conf_valid_token,
     .doc = "Query parameter carrying the token (tried last)."},
    {.key = "realm",
     .type = FY_CT_STRING,
     .offset = J(realm),
     .dflt = "ferry",
     .validate = fy_conf_valid_field_value,
     .doc = "The `realm` of the `WWW-Authenticate: Bearer` challenge."},
    {.key = "max-token-size",
     .type = FY_CT_SIZE,
     .offset = J(max_token_size),
     .dflt = "8k",
     .min = 64,
     .max = 64 << 10,
     .doc = "Longer tokens are refused (401 invalid_token) before any decoding."},
    {.key = "cache-size",
     .type = FY_CT_INT,
     .offset = J(cache_size),
     .dflt = "1024",
     .min = 0,
     .max = 1 << 20,
     .doc = "Verified tokens remembered per worker (until their `exp`), so a repeated token "
            "costs a hash lookup instead of a signature check; 0 turns the cache off."},
    {.key = NULL, .check = check_jwt},
};
