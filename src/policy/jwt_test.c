/* Unit tests of the JWT filter's pure parts: token checks (signature, alg none, algorithm
 * confusion, time claims with leeway, iss/aud, required claims), JWKS parsing, token lookup in
 * header/cookie/query, and the bounded verified-token cache. The RFC 7515 A.1 HS256 example is
 * checked as published. */
#include "policy/jwt.c"

#include <openssl/hmac.h>

#include "core/arena.h"
#include "core/test.h"

static char *b64u(const unsigned char *p, size_t n, char *o)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v =
            (unsigned)p[i] << 16 | (i + 1 < n ? p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        o[k++] = t[v >> 18 & 63];
        o[k++] = t[v >> 12 & 63];
        if (i + 1 < n) o[k++] = t[v >> 6 & 63];
        if (i + 2 < n) o[k++] = t[v & 63];
    }
    o[k] = '\0';
    return o;
}

/* header.payload.HMAC-SHA256(secret) */
static char *mint(const char *hdr, const char *pay, const char *secret, char *out)
{
    char h[512], p[1024];
    b64u((const unsigned char *)hdr, strlen(hdr), h);
    b64u((const unsigned char *)pay, strlen(pay), p);
    int n = snprintf(out, 2048, "%s.%s", h, p);
    unsigned char mac[32];
    unsigned ml = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (unsigned char *)out, (size_t)n, mac, &ml);
    out[n++] = '.';
    b64u(mac, ml, out + n);
    return out;
}

static fy_jwt_conf_t conf;
static jwt_filter_t *filt;
static fy_arena_t arena;

static void setup(void)
{
    memset(&conf, 0, sizeof conf);
    conf.secret = "s3cret-s3cret-s3cret";
    conf.realm = "ferry";
    conf.header = "authorization";
    conf.leeway_ms = 10000;
    conf.max_keys = 8;
    conf.max_token_size = 8192;
    conf.cache_size = 4;
    conf.jwks_max_size = 1 << 16;
    char err[256];
    filt = (jwt_filter_t *)fy_jwt_filter_new(&conf, err, sizeof err);
    CHECK(filt != NULL);
    fy_arena_init(&arena, NULL, 0, 0);
}

static int check(const char *tok, int64_t now, verdict_t *vd)
{
    checked_t ck;
    memset(vd, 0, sizeof *vd);
    return check_token(filt, &arena, tok, strlen(tok), now, &ck, vd);
}

static void test_tokens(void)
{
    char t[2048];
    verdict_t vd;
    const char *hs = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    CHECK(check(mint(hs, "{\"sub\":\"a\",\"exp\":2000}", conf.secret, t), 1000, &vd) == 0);
    CHECK(check(mint(hs, "{\"exp\":2000}", conf.secret, t), 2009, &vd) == 0); /* leeway */
    CHECK(check(mint(hs, "{\"exp\":2000}", conf.secret, t), 2010, &vd) < 0 &&
          !strcmp(vd.why, "token expired"));
    CHECK(check(mint(hs, "{\"nbf\":2000}", conf.secret, t), 1989, &vd) < 0 &&
          !strcmp(vd.why, "token not yet valid"));
    CHECK(check(mint(hs, "{\"nbf\":2000}", conf.secret, t), 1990, &vd) == 0);
    CHECK(check(mint(hs, "{\"exp\":\"2000\"}", conf.secret, t), 1000, &vd) < 0 &&
          !strcmp(vd.why, "exp is not a number"));
    CHECK(check(mint(hs, "{}", "other-secret", t), 1000, &vd) < 0 &&
          !strcmp(vd.why, "signature mismatch"));
    CHECK(check(mint("{\"alg\":\"none\"}", "{}", conf.secret, t), 1000, &vd) < 0 &&
          !strcmp(vd.why, "alg none is refused"));
    CHECK(check(mint("{\"alg\":\"RS256\"}", "{}", conf.secret, t), 1000, &vd) < 0 &&
          !strcmp(vd.why, "no key for this alg"));
    CHECK(check(mint("{\"alg\":\"HS256\",\"crit\":[\"x\"]}", "{}", conf.secret, t), 1000, &vd) < 0);
    CHECK(check(mint("{\"alg\":\"HS256\",\"alg\":\"none\"}", "{}", conf.secret, t), 1000, &vd) <
          0); /* duplicate keys are refused, not resolved either way */
    CHECK(check(mint(hs, "[1]", conf.secret, t), 1000, &vd) < 0);
    CHECK(check("a.b", 1000, &vd) < 0 && strstr(vd.why, "malformed"));
    CHECK(check("a.b.c.d", 1000, &vd) < 0 && strstr(vd.why, "malformed"));
    CHECK(check("!!.b.c", 1000, &vd) < 0 && strstr(vd.why, "base64url"));
}

static void test_rfc7515_a1(void)
{
    static const char k[] =
        "{\"keys\":[{\"kty\":\"oct\",\"k\":\"AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-"
        "1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow\"}]}";
    static const char tok[] =
        "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQo"
        "gImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_"
        "wW1gFWFOEjXk";
    fy__jwt_key_t v[4];
    size_t n = 0, skipped = 0;
    char err[128];
    CHECK(fy__jwt_jwks_parse(k, strlen(k), v, &n, 4, &skipped, err, sizeof err) == 0 && n == 1);
    if (n != 1) return;
    pthread_mutex_lock(&filt->mu);
    filt->fromfile = malloc(sizeof v[0]);
    filt->fromfile[0] = v[0];
    filt->nfile = 1;
    keyset_rebuild(filt);
    pthread_mutex_unlock(&filt->mu);
    verdict_t vd;
    CHECK(check(tok, 1300819000, &vd) == 0);
    CHECK(check(tok, 1300819400, &vd) < 0 && !strcmp(vd.why, "token expired"));
    conf.issuer.v = (char *[]){"joe"};
    conf.issuer.n = 1;
    CHECK(check(tok, 1300819000, &vd) == 0);
    conf.issuer.v = (char *[]){"bob"};
    CHECK(check(tok, 1300819000, &vd) < 0 && !strcmp(vd.why, "wrong issuer"));
    conf.issuer.n = 0;
    conf.audience.v = (char *[]){"api"};
    conf.audience.n = 1;
    CHECK(check(tok, 1300819000, &vd) < 0 && !strcmp(vd.why, "wrong audience"));
    conf.audience.n = 0;
    conf.require.v = (char *[]){"http://example.com/is_root"};
    conf.require.n = 1;
    CHECK(check(tok, 1300819000, &vd) == 0);
    conf.require.v = (char *[]){"sub"};
    CHECK(check(tok, 1300819000, &vd) < 0 && strstr(vd.why, "required claim sub"));
    conf.require.n = 0;
    conf.claims.keys = (char *[]){"http://example.com/is_root"};
    conf.claims.values = (char *[]){"true"};
    conf.claims.n = 1;
    CHECK(check(tok, 1300819000, &vd) == 0);
    conf.claims.values = (char *[]){"false"};
    CHECK(check(tok, 1300819000, &vd) < 0 && vd.status == 403);
    conf.claims.n = 0;
}

static void test_jwks_refusals(void)
{
    fy__jwt_key_t v[2];
    size_t n = 0, skipped = 0;
    char err[128];
    CHECK(fy__jwt_jwks_parse("[]", 2, v, &n, 2, &skipped, err, sizeof err) < 0);
    CHECK(fy__jwt_jwks_parse("{\"keys\":[", 9, v, &n, 2, &skipped, err, sizeof err) < 0);
    static const char d[] = "{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAAA\",\"use\":\"enc\"},"
                            "{\"kty\":\"EC\",\"crv\":\"P-521\",\"x\":\"AA\",\"y\":\"AA\"},"
                            "{\"kty\":\"RSA\",\"n\":\"AQAB\",\"e\":\"AQAB\"},"
                            "{\"kty\":\"oct\",\"k\":\"AAAA\",\"alg\":\"HS999\"},"
                            "{\"kty\":\"oct\",\"k\":\"AAAA\"},{\"kty\":\"oct\",\"k\":\"AAAB\"},"
                            "{\"kty\":\"oct\",\"k\":\"AAAC\"}]}";
    CHECK(fy__jwt_jwks_parse(d, strlen(d), v, &n, 2, &skipped, err, sizeof err) == 0);
    CHECK_EQ_INT(n, 2);       /* the two good oct keys that fit */
    CHECK_EQ_INT(skipped, 5); /* enc, P-521, 8-bit RSA, bad alg, over the bound */
    for (size_t i = 0; i < n; i++) fy__jwt_key_clear(&v[i]);
}

static void test_find_token(void)
{
    fy_exchange_t ex;
    memset(&ex, 0, sizeof ex);
    fy_header_t hv[2] = {{FY_STR_LIT("Authorization"), FY_STR_LIT("bEaReR  abc.def.ghi ")},
                         {FY_STR_LIT("Cookie"), FY_STR_LIT("x=1; tok=c.d.e; y=2")}};
    ex.req.headers.v = hv;
    ex.req.headers.n = 2;
    fy_str_t t = take_token(filt, &ex);
    CHECK_STRN(t.p, t.len, "abc.def.ghi");
    ex.req.headers.v = hv + 1;
    ex.req.headers.n = 1;
    conf.cookie = "tok";
    t = take_token(filt, &ex);
    CHECK_STRN(t.p, t.len, "c.d.e");
    conf.cookie = "to";
    CHECK(take_token(filt, &ex).len == 0);
    conf.query = "t";
    ex.req.query = FY_STR_LIT("tt=1&t=q.r.s&u=2");
    t = take_token(filt, &ex);
    CHECK_STRN(t.p, t.len, "q.r.s");
    conf.cookie = conf.query = NULL;
}

static void test_cache(void)
{
    wcache_t *c = cache_of(filt, 3);
    CHECK(c && c->cap == 4 && cache_of(filt, 3) == c);
    CHECK(cache_of(filt, MAX_WORKERS) == NULL && cache_of(filt, -1) == NULL);
    /* five tokens into a 4-slot table: bounded, and the older of a pair goes first */
    for (int i = 0; i < 5; i++) {
        char tok[16];
        snprintf(tok, sizeof tok, "tok%d", i);
        uint64_t h = (uint64_t)(i & 1); /* force one 2-way set */
        centry_t *e = cache_slot(c, h);
        e->tok = malloc(8);
        memcpy(e->tok, tok, 4);
        e->toklen = 4;
        e->hash = h;
        e->used = ++c->tick;
    }
    CHECK(cache_find(c, 0, "tok4", 4) != NULL);
    CHECK(cache_find(c, 1, "tok3", 4) != NULL);
    CHECK(cache_find(c, 0, "tok0", 4) == NULL);
    CHECK(cache_find(c, 0, "tok5", 4) == NULL);
    CHECK(tok_hash(1, "abcdefghij", 10) != tok_hash(1, "abcdefghik", 10));
}

FY_TEST_MAIN(setup(); test_tokens(); test_rfc7515_a1(); test_jwks_refusals(); test_find_token();
             test_cache(); fy_arena_free(&arena); destroy(&filt->f))
