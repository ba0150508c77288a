/* The JWT filter (stage FY_STAGE_AUTH, `jwt:` per route): checks a bearer token's signature
 * (HS256/384/512, RS256/384/512, PS256/384/512, ES256/384, EdDSA through OpenSSL 3 EVP) and
 * claims, copies chosen claims into request headers, and answers 401 with an RFC 6750
 * `WWW-Authenticate: Bearer` challenge naming what was wrong (403 insufficient_scope when a
 * required claim value does not match).
 *
 * Keys come from `secret`/`secret-file` (HS*), PEM files, a JWKS file (re-read when a token
 * names an unknown kid and the file changed) and a JWKS URL (fetched by one background thread
 * per filter with a blocking OpenSSL client, so no worker waits on the network). The key set is
 * an immutable refcounted snapshot swapped under a mutex. Verified tokens are remembered per
 * worker in a bounded 2-way set-associative table keyed by the whole token until their exp, so
 * a repeated token costs a hash and a memcmp.
 *
 * Threads: made and destroyed on the main thread (config build); on_request runs on workers
 * and touches only the exchange, its worker's cache slot and the key-set mutex on a miss. */
#ifndef FY_POLICY_JWT_H
#define FY_POLICY_JWT_H

#include <stddef.h>

#include "http/filter.h"
#include "policy/jwt_conf.h"

/* The filter for `conf` (borrowed: it lives as long as the config generation). Reads the key
 * files and does the first JWKS fetch now. NULL with the reason in err when a key source is
 * unusable (a JWKS URL that cannot be fetched at start is only logged: its thread retries). */
fy_filter_t *fy_jwt_filter_new(const fy_jwt_conf_t *conf, char *err, size_t errlen);

#endif
