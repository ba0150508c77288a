/* The JWT filter (policy/jwt.h). */
#include "policy/jwt.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/log.h"
#include "core/str.h"
#include "policy/hname.h"
#include "policy/json.h"
#include "policy/jwt_int.h"

#define MAX_WORKERS 256

/* One remembered verdict: the token, its time window and the claim values to copy. */
typedef struct centry {
    uint64_t hash, keygen, used;
    char *tok; /* owned copy (malloc), NULL = empty slot */
    size_t toklen;
    int64_t exp, nbf; /* seconds; INT64_MAX / INT64_MIN when absent */
    char *vals;       /* owned: the claims-to-headers values, packed */
    size_t vals_len;
    uint16_t vlen[32]; /* length of each value in vals (0: absent) */
} centry_t;

typedef struct wcache {
    centry_t *v;
    size_t cap; /* power of two, >= 2 */
    uint64_t tick;
} wcache_t;

typedef struct jwt_filter {
    fy_filter_t f;
    const fy_jwt_conf_t *conf;
    unsigned allowed; /* bit per enum jwt_alg; 0 = any the key fits */
    uint64_t seed;
    size_t realm_len;
    int64_t leeway_s;
    fy_hname_t hdr;    /* `header` */
    size_t nch;        /* claims-to-headers entries used (32 at most) */
    fy_hname_t ch[32]; /* their header names */
    /* key sources */
    fy__jwt_key_t *fixed; /* secret and PEM keys (owned) */
    size_t nfixed;
    fy__jwt_key_t *fromfile, *fromurl; /* JWKS keys (owned; under mu) */
    size_t nfile, nurl;
    struct stat file_st; /* of the JWKS file when last read */
    pthread_mutex_t mu;
    fy__jwt_keyset_t *keys;   /* current snapshot (one reference; under mu) */
    atomic_uint_fast64_t gen; /* of the newest set (read by workers without mu) */
    /* the JWKS URL thread */
    pthread_t thr;
    bool thr_running, stop, poke;
    pthread_cond_t cv;
    uint64_t last_fetch_ms;
    wcache_t *caches[MAX_WORKERS]; /* slot w: made and used by worker w only */
} jwt_filter_t;

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- key sets ---- */

static void keyset_unref(fy__jwt_keyset_t *ks)
{
    if (!ks || atomic_fetch_sub(&ks->refs, 1) != 1) return;
    for (size_t i = 0; i < ks->n; i++) fy__jwt_key_clear(&ks->v[i]);
    free(ks);
}

/* Make a new snapshot from the sources (under mu, or before any worker runs). */
static void keyset_rebuild(jwt_filter_t *j)
{
    size_t n = j->nfixed + j->nfile + j->nurl;
    fy__jwt_keyset_t *ks = calloc(1, sizeof *ks + n * sizeof ks->v[0]);
    if (!ks) return;
    atomic_init(&ks->refs, 1);
    ks->gen = atomic_fetch_add(&j->gen, 1) + 1;
    for (size_t i = 0; i < j->nfixed; i++) fy__jwt_key_copy(&ks->v[ks->n++], &j->fixed[i]);
    for (size_t i = 0; i < j->nfile; i++) fy__jwt_key_copy(&ks->v[ks->n++], &j->fromfile[i]);
    for (size_t i = 0; i < j->nurl; i++) fy__jwt_key_copy(&ks->v[ks->n++], &j->fromurl[i]);
    fy__jwt_keyset_t *old = j->keys;
    j->keys = ks;
    keyset_unref(old);
}

static fy__jwt_keyset_t *keyset_get(jwt_filter_t *j)
{
    pthread_mutex_lock(&j->mu);
    fy__jwt_keyset_t *ks = j->keys;
    if (ks) atomic_fetch_add(&ks->refs, 1);
    pthread_mutex_unlock(&j->mu);
    return ks;
}

static void free_keys(fy__jwt_key_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) fy__jwt_key_clear(&v[i]);
    free(v);
}

/* Parse a JWKS text into a fresh array (max-keys bound). */
static int load_jwks(jwt_filter_t *j, const char *what, const char *text, size_t len,
                     fy__jwt_key_t **out, size_t *nout, char *err, size_t errlen)
{
    size_t cap = (size_t)j->conf->max_keys, n = 0, skipped = 0;
    fy__jwt_key_t *v = calloc(cap, sizeof *v);
    if (!v) return -1;
    if (fy__jwt_jwks_parse(text, len, v, &n, cap, &skipped, err, errlen) < 0) {
        free_keys(v, n);
        return -1;
    }
    if (skipped)
        fy_log(FY_LOG_WARN,
               "jwt: %s: %zu key(s) skipped (not for signatures, unsupported, "
               "malformed, or over max-keys %zu)",
               what, skipped, cap);
    *out = v;
    *nout = n;
    return 0;
}

static int read_jwks_file(jwt_filter_t *j, char *err, size_t errlen)
{
    size_t len = 0;
    struct stat st;
    if (stat(j->conf->jwks_file, &st) < 0) {
        snprintf(err, errlen, "cannot stat '%s'", j->conf->jwks_file);
        return -1;
    }
    char *text = fy__jwt_read_file(j->conf->jwks_file, j->conf->jwks_max_size, &len, err, errlen);
    if (!text) return -1;
    fy__jwt_key_t *v = NULL;
    size_t n = 0;
    int rc = load_jwks(j, j->conf->jwks_file, text, len, &v, &n, err, errlen);
    free(text);
    if (rc < 0) return -1;
    free_keys(j->fromfile, j->nfile);
    j->fromfile = v;
    j->nfile = n;
    j->file_st = st;
    return 0;
}

/* A token named a kid no key has: the JWKS file may have been rotated. stat is cheap; the file
 * is read again (on this worker, a local file of at most jwks-max-size) only when it changed. */
static bool reload_file_if_changed(jwt_filter_t *j)
{
    struct stat st;
    if (!j->conf->jwks_file || stat(j->conf->jwks_file, &st) < 0) return false;
    bool changed = false;
    pthread_mutex_lock(&j->mu);
    if (st.st_ino != j->file_st.st_ino || st.st_size != j->file_st.st_size ||
        st.st_mtim.tv_sec != j->file_st.st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != j->file_st.st_mtim.tv_nsec) {
        char err[256];
        if (read_jwks_file(j, err, sizeof err) == 0) {
            keyset_rebuild(j);
            changed = true;
            fy_log(FY_LOG_INFO, "jwt: %s re-read: %zu key(s)", j->conf->jwks_file, j->nfile);
        } else {
            j->file_st = st; /* do not retry a broken file on every token */
            fy_log(FY_LOG_WARN, "jwt: %s", err);
        }
    }
    pthread_mutex_unlock(&j->mu);
    return changed;
}

static int fetch_url(jwt_filter_t *j, char *err, size_t errlen)
{
    const fy_jwt_conf_t *c = j->conf;
    size_t len = 0;
    char *text = fy__jwt_https_get(c->jwks_url, c->jwks_ca, c->jwks_timeout_ms, c->jwks_max_size,
                                   &len, err, errlen);
    if (!text) return -1;
    fy__jwt_key_t *v = NULL;
    size_t n = 0;
    int rc = load_jwks(j, c->jwks_url, text, len, &v, &n, err, errlen);
    free(text);
    if (rc < 0) return -1;
    pthread_mutex_lock(&j->mu);
    free_keys(j->fromurl, j->nurl);
    j->fromurl = v;
    j->nurl = n;
    keyset_rebuild(j);
    pthread_mutex_unlock(&j->mu);
    return 0;
}

static void *jwks_thread(void *arg)
{
    jwt_filter_t *j = arg;
    const fy_jwt_conf_t *c = j->conf;
    pthread_mutex_lock(&j->mu);
    while (!j->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t wait = c->jwks_refresh_ms;
        ts.tv_sec += (time_t)(wait / 1000);
        ts.tv_nsec += (long)(wait % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        while (!j->stop && !j->poke)
            if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) != 0) break;
        if (j->stop) break;
        j->poke = false;
        j->last_fetch_ms = mono_ms();
        pthread_mutex_unlock(&j->mu);
        char err[256];
        if (fetch_url(j, err, sizeof err) < 0)
            fy_log(FY_LOG_WARN, "jwt: fetching %s: %s (keeping the keys we have)", c->jwks_url,
                   err);
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* An unknown kid: ask the thread for an early fetch, at most once per jwks-min-refresh. */
static void poke_url(jwt_filter_t *j)
{
    if (!j->thr_running) return;
    pthread_mutex_lock(&j->mu);
    if (mono_ms() - j->last_fetch_ms >= j->conf->jwks_min_refresh_ms) {
        j->last_fetch_ms = mono_ms();
        j->poke = true;
        pthread_cond_signal(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
}

/* ---- the verified-token cache ---- */

/* The bucket of a token. The tail of a token is its signature's last bytes: as good as random
 * for genuine tokens, so 16 of them (mixed with a per-filter secret seed and the length) are
 * hash enough; forged tokens made to share a tail only collide with each other, and the full
 * memcmp decides every hit. */
static uint64_t tok_hash(uint64_t seed, const char *p, size_t n)
{
    uint64_t a = 0, b = 0;
    if (n >= 16) {
        memcpy(&a, p + n - 16, 8);
        memcpy(&b, p + n - 8, 8);
    } else {
        memcpy(&a, p, n < 8 ? n : 8);
        if (n > 8) memcpy(&b, p + 8, n - 8);
    }
    uint64_t h = (a ^ seed) * 0xff51afd7ed558ccdull;
    h ^= (b + n) ^ (h >> 31);
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

static wcache_t *cache_of(jwt_filter_t *j, int worker)
{
    if (j->conf->cache_size <= 0 || worker < 0 || worker >= MAX_WORKERS) return NULL;
    wcache_t *c = j->caches[worker];
    if (c) return c;
    size_t cap = 2;
    while (cap < (size_t)j->conf->cache_size) cap <<= 1;
    c = calloc(1, sizeof *c);
    if (c) c->v = calloc(cap, sizeof *c->v);
    if (!c || !c->v) {
        free(c);
        return NULL;
    }
    c->cap = cap;
    j->caches[worker] = c;
    return c;
}

static void centry_clear(centry_t *e)
{
    free(e->tok);
    free(e->vals);
    memset(e, 0, sizeof *e);
}

static centry_t *cache_find(wcache_t *c, uint64_t h, const char *tok, size_t n)
{
    size_t s = (size_t)h & (c->cap - 1) & ~(size_t)1;
    for (size_t k = s; k < s + 2; k++) {
        centry_t *e = &c->v[k];
        if (e->tok && e->hash == h && e->toklen == n && memcmp(e->tok, tok, n) == 0) return e;
    }
    return NULL;
}

static centry_t *cache_slot(wcache_t *c, uint64_t h)
{
    size_t s = (size_t)h & (c->cap - 1) & ~(size_t)1;
    centry_t *a = &c->v[s], *b = &c->v[s + 1];
    centry_t *e = !a->tok ? a : !b->tok ? b : a->used <= b->used ? a : b;
    centry_clear(e);
    return e;
}

/* ---- the request ---- */

typedef struct verdict {
    int status;       /* 0 = pass; 401 / 403 */
    const char *code; /* RFC 6750 error code */
    const char *why;  /* error_description */
} verdict_t;

#define FAIL(v, s, c, w) ((v)->status = (s), (v)->code = (c), (v)->why = (w), -1)

static fy_str_t bearer(fy_str_t v)
{
    /* "bearer " in any case, as one word: the 8th byte is the token's first */
    static const unsigned char lit[8] = "bearer ", low[8] = {32, 32, 32, 32, 32, 32, 0, 0},
                               keep[8] = {255, 255, 255, 255, 255, 255, 255, 0};
    uint64_t w, l, m, k;
    memcpy(&l, lit, 8);
    memcpy(&m, low, 8);
    memcpy(&k, keep, 8);
    if (v.len > 7 && (memcpy(&w, v.p, 8), ((w | m) & k) == l)) {
        size_t i = 7;
        while (i < v.len && v.p[i] == ' ') i++;
        size_t e = v.len;
        while (e > i && (v.p[e - 1] == ' ' || v.p[e - 1] == '\t')) e--;
        return fy_str(v.p + i, e - i);
    }
    return FY_STR_NULL;
}

/* The cookie or the query parameter (after the header). */
static fy_str_t find_token_rest(const fy_jwt_conf_t *c, const fy_exchange_t *ex)
{
    if (c->cookie) {
        size_t cl = strlen(c->cookie);
        for (size_t k = 0; k < ex->req.headers.n; k++) {
            if (!fy_str_ieq(ex->req.headers.v[k].name, "cookie", 6)) continue;
            fy_str_t v = ex->req.headers.v[k].value;
            size_t i = 0;
            while (i < v.len) {
                while (i < v.len && (v.p[i] == ' ' || v.p[i] == ';')) i++;
                size_t s = i;
                while (i < v.len && v.p[i] != ';') i++;
                if (i - s > cl && memcmp(v.p + s, c->cookie, cl) == 0 && v.p[s + cl] == '=')
                    return fy_str(v.p + s + cl + 1, i - s - cl - 1);
            }
        }
    }
    if (c->query && ex->req.query.len) {
        size_t ql = strlen(c->query);
        fy_str_t q = ex->req.query;
        size_t i = 0;
        while (i < q.len) {
            size_t s = i;
            while (i < q.len && q.p[i] != '&') i++;
            if (i - s > ql && memcmp(q.p + s, c->query, ql) == 0 && q.p[s + ql] == '=')
                return fy_str(q.p + s + ql + 1, i - s - ql - 1);
            i++;
        }
    }
    return FY_STR_NULL;
}

static bool num_claim(const fy_json_t *v, int64_t *out)
{
    if (!v || v->type != FY_JSON_NUMBER) return false;
    *out = v->is_int           ? v->i
           : v->num >= 9.2e18  ? INT64_MAX
           : v->num <= -9.2e18 ? INT64_MIN
                               : (int64_t)v->num;
    return true;
}

/* A claim's value as text for matching and headers: strings as they are, numbers and booleans
 * by their JSON spelling; NULL for null, arrays and objects. */
static const char *claim_text(const fy_json_t *v, char *buf, size_t cap)
{
    switch (v->type) {
    case FY_JSON_STRING:
        return v->str;
    case FY_JSON_TRUE:
        return "true";
    case FY_JSON_FALSE:
        return "false";
    case FY_JSON_NUMBER:
        if (v->is_int)
            snprintf(buf, cap, "%lld", (long long)v->i);
        else
            snprintf(buf, cap, "%.17g", v->num);
        return buf;
    }
    return NULL;
}

static bool claim_has(const fy_json_t *v, const char *want)
{
    char buf[32];
    if (v->type == FY_JSON_ARRAY) {
        for (const fy_json_t *c = v->child; c; c = c->next) {
            const char *t = claim_text(c, buf, sizeof buf);
            if (t && !strcmp(t, want)) return true;
        }
        return false;
    }
    const char *t = claim_text(v, buf, sizeof buf);
    return t && (v->type != FY_JSON_STRING || strlen(t) == v->len) && !strcmp(t, want);
}

static bool in_list(const fy_conf_strlist_t *l, const char *s, size_t n)
{
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->v[i]) == n && memcmp(l->v[i], s, n) == 0) return true;
    return false;
}

static bool field_value_ok(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 && *s != '\t') return false;
    return true;
}

typedef struct checked {
    int64_t exp, nbf;
    const char *vals[32]; /* per claims-to-headers entry (first 32), NULL = absent */
} checked_t;

/* Decode, verify and check a token. */
static int check_token(jwt_filter_t *j, fy_arena_t *a, const char *tok, size_t n, int64_t now,
                       checked_t *out, verdict_t *vd)
{
    const fy_jwt_conf_t *c = j->conf;
    const char *d1 = memchr(tok, '.', n);
    const char *d2 = d1 ? memchr(d1 + 1, '.', (size_t)(tok + n - d1 - 1)) : NULL;
    if (!d2 || memchr(d2 + 1, '.', (size_t)(tok + n - d2 - 1)))
        return FAIL(vd, 401, "invalid_token", "malformed token (not three base64url parts)");
    size_t hl = (size_t)(d1 - tok), pl = (size_t)(d2 - d1 - 1), sl = (size_t)(tok + n - d2 - 1);
    unsigned char *hb = fy_arena_alloc(a, hl + 4), *pb = fy_arena_alloc(a, pl + 4);
    unsigned char *sb = fy_arena_alloc(a, sl + 4);
    int hn = fy_base64url_decode(tok, hl, hb, hl + 4);
    int pn = fy_base64url_decode(d1 + 1, pl, pb, pl + 4);
    int sn = fy_base64url_decode(d2 + 1, sl, sb, sl + 4);
    if (hn <= 0 || pn <= 0 || sn < 0)
        return FAIL(vd, 401, "invalid_token", "malformed token (bad base64url)");
    size_t hmem = (size_t)hn * 8 + 1024, pmem = (size_t)pn * 8 + 2048;
    const char *why = NULL;
    fy_json_t *hdr =
        fy_json_parse((char *)hb, (size_t)hn, fy_arena_alloc(a, hmem), hmem, 4, &why, NULL);
    if (!hdr || hdr->type != FY_JSON_OBJECT)
        return FAIL(vd, 401, "invalid_token", "malformed token header (not a JSON object)");
    const fy_json_t *algv = fy_json_get(hdr, "alg");
    if (!algv || algv->type != FY_JSON_STRING)
        return FAIL(vd, 401, "invalid_token", "token header has no alg");
    if (algv->len == 4 && !strcmp(algv->str, "none"))
        return FAIL(vd, 401, "invalid_token", "alg none is refused");
    int alg = fy__jwt_alg_id(algv->str, algv->len);
    if (alg == ALG_NONE) return FAIL(vd, 401, "invalid_token", "unsupported alg");
    if (j->allowed && !(j->allowed & (1u << alg)))
        return FAIL(vd, 401, "invalid_token", "alg not allowed here");
    if (fy_json_get(hdr, "crit"))
        return FAIL(vd, 401, "invalid_token", "token header has crit extensions we do not know");
    const fy_json_t *kidv = fy_json_get(hdr, "kid");
    if (kidv && kidv->type != FY_JSON_STRING)
        return FAIL(vd, 401, "invalid_token", "kid is not a string");
    /* signature */
    const unsigned char *msg = (const unsigned char *)tok;
    size_t mlen = (size_t)(d2 - tok);
    bool ok = false, fits = false, kid_known = false;
    for (int round = 0; round < 2 && !ok; round++) {
        fy__jwt_keyset_t *ks = keyset_get(j);
        for (size_t i = 0; ks && i < ks->n && !ok; i++) {
            const fy__jwt_key_t *k = &ks->v[i];
            if (kidv && k->kid[0]) {
                if (strlen(k->kid) != kidv->len || memcmp(k->kid, kidv->str, kidv->len)) continue;
                kid_known = true;
            }
            if (!fy__jwt_key_fits(k, alg)) continue;
            fits = true;
            ok = fy__jwt_verify(k, alg, msg, mlen, sb, (size_t)sn);
        }
        keyset_unref(ks);
        if (ok || !kidv || kid_known || round == 1) break;
        poke_url(j);
        if (!reload_file_if_changed(j)) break;
    }
    if (!ok) {
        if (kidv && !kid_known && !fits) return FAIL(vd, 401, "invalid_token", "unknown kid");
        if (!fits) return FAIL(vd, 401, "invalid_token", "no key for this alg");
        return FAIL(vd, 401, "invalid_token", "signature mismatch");
    }
    /* claims */
    fy_json_t *pay =
        fy_json_parse((char *)pb, (size_t)pn, fy_arena_alloc(a, pmem), pmem, 16, &why, NULL);
    if (!pay || pay->type != FY_JSON_OBJECT)
        return FAIL(vd, 401, "invalid_token", "malformed token payload (not a JSON object)");
    int64_t leeway = (int64_t)(c->leeway_ms / 1000), t;
    out->exp = INT64_MAX;
    out->nbf = INT64_MIN;
    const fy_json_t *v = fy_json_get(pay, "exp");
    if (v) {
        if (!num_claim(v, &t)) return FAIL(vd, 401, "invalid_token", "exp is not a number");
        out->exp = t;
        if (now >= t + leeway) return FAIL(vd, 401, "invalid_token", "token expired");
    } else if (c->require_exp) {
        return FAIL(vd, 401, "invalid_token", "token has no exp");
    }
    if ((v = fy_json_get(pay, "nbf"))) {
        if (!num_claim(v, &t)) return FAIL(vd, 401, "invalid_token", "nbf is not a number");
        out->nbf = t;
        if (now + leeway < t) return FAIL(vd, 401, "invalid_token", "token not yet valid");
    }
    if ((v = fy_json_get(pay, "iat"))) {
        if (!num_claim(v, &t)) return FAIL(vd, 401, "invalid_token", "iat is not a number");
        if (t > now + leeway) return FAIL(vd, 401, "invalid_token", "token issued in the future");
        if (c->max_age_ms && now - t > (int64_t)(c->max_age_ms / 1000) + leeway)
            return FAIL(vd, 401, "invalid_token", "token too old (max-age)");
        if (c->max_age_ms) {
            int64_t lim = t + (int64_t)(c->max_age_ms / 1000);
            if (lim < out->exp) out->exp = lim;
        }
    } else if (c->max_age_ms) {
        return FAIL(vd, 401, "invalid_token", "token has no iat");
    }
    if (c->issuer.n) {
        v = fy_json_get(pay, "iss");
        if (!v || v->type != FY_JSON_STRING || !in_list(&c->issuer, v->str, v->len))
            return FAIL(vd, 401, "invalid_token", "wrong issuer");
    }
    if (c->audience.n) {
        v = fy_json_get(pay, "aud");
        bool aok = false;
        if (v && v->type == FY_JSON_STRING) aok = in_list(&c->audience, v->str, v->len);
        if (v && v->type == FY_JSON_ARRAY)
            for (const fy_json_t *e = v->child; e && !aok; e = e->next)
                aok = e->type == FY_JSON_STRING && in_list(&c->audience, e->str, e->len);
        if (!aok) return FAIL(vd, 401, "invalid_token", "wrong audience");
    }
    for (size_t i = 0; i < c->require.n; i++)
        if (!fy_json_get(pay, c->require.v[i])) {
            char *m = fy_arena_alloc(a, 96);
            snprintf(m, 96, "required claim %.60s missing", c->require.v[i]);
            return FAIL(vd, 401, "invalid_token", m);
        }
    for (size_t i = 0; i < c->claims.n; i++) {
        v = fy_json_get(pay, c->claims.keys[i]);
        if (!v || !claim_has(v, c->claims.values[i])) {
            char *m = fy_arena_alloc(a, 96);
            snprintf(m, 96, "claim %.60s does not match", c->claims.keys[i]);
            return FAIL(vd, 403, "insufficient_scope", m);
        }
    }
    for (size_t i = 0; i < c->claims_to_headers.n && i < 32; i++) {
        out->vals[i] = NULL;
        v = fy_json_get(pay, c->claims_to_headers.keys[i]);
        char *buf = fy_arena_alloc(a, 32);
        const char *s = v ? claim_text(v, buf, 32) : NULL;
        if (s && (v->type != FY_JSON_STRING || strlen(s) == v->len) && field_value_ok(s))
            out->vals[i] = s;
    }
    return 0;
}

/* Add the claim values (lens[i] bytes at vals[i]; 0 = absent) as request headers, the client's
 * own headers of those names dropped by take_token. `packed`: the values are vals_len bytes
 * owned elsewhere (a cache entry that a later miss may evict while this request still holds
 * its headers), copied into the arena in the same allocation as the grown header array. */
static void add_claim_headers(jwt_filter_t *j, fy_exchange_t *ex, const char *const *vals,
                              const uint16_t *lens, const char *packed, size_t vals_len)
{
    fy_headers_t *hs = &ex->req.headers;
    size_t np = 0;
    for (size_t i = 0; i < j->nch; i++) np += lens[i] != 0;
    if (!np) return;
    size_t need = hs->n + np, asz = hs->cap >= need ? 0 : need * sizeof(fy_header_t);
    char *mem = (asz || packed) ? fy_arena_alloc(ex->arena, asz + (packed ? vals_len : 0)) : NULL;
    if (asz) { /* exactly the room needed: no doubling for the few headers a filter adds */
        if (hs->n) memcpy(mem, hs->v, hs->n * sizeof(fy_header_t));
        hs->v = (fy_header_t *)(void *)mem;
        hs->cap = need;
    }
    const char *vp = NULL;
    if (packed) {
        memcpy(mem + asz, packed, vals_len);
        vp = mem + asz;
    }
    for (size_t i = 0; i < j->nch; i++) {
        if (!lens[i]) continue;
        fy_header_t *h = &hs->v[hs->n++];
        h->name = fy_str(j->ch[i].lower, j->ch[i].len);
        h->value = fy_str(packed ? vp : vals[i], lens[i]);
        vp += packed ? lens[i] : 0;
    }
}

/* One pass over the request headers: the bearer token of `header`, and the headers that
 * claims-to-headers will set dropped (harmless when the token is then refused: the exchange
 * ends with a 401). Cookie and query are looked at only when the header has no token. */
static fy_str_t take_token(jwt_filter_t *j, fy_exchange_t *ex)
{
    const fy_jwt_conf_t *c = j->conf;
    fy_headers_t *hs = &ex->req.headers;
    fy_str_t tok = FY_STR_NULL;
    if (!j->nch) { /* nothing to drop: the first field of that name decides */
        for (size_t i = 0; i < hs->n; i++)
            if (fy_hname_eq(&j->hdr, hs->v[i].name)) {
                tok = bearer(hs->v[i].value);
                if (tok.len) return tok;
            }
        return find_token_rest(c, ex);
    }
    size_t k = 0;
    for (size_t i = 0; i < hs->n; i++) {
        fy_str_t nm = hs->v[i].name;
        if (!tok.len && fy_hname_eq(&j->hdr, nm)) tok = bearer(hs->v[i].value);
        bool drop = false;
        for (size_t x = 0; x < j->nch && !drop; x++) drop = fy_hname_eq(&j->ch[x], nm);
        if (drop) continue;
        if (k != i) hs->v[k] = hs->v[i];
        k++;
    }
    hs->n = k;
    return tok.len ? tok : find_token_rest(c, ex);
}

static fy_filter_verdict_t refuse(jwt_filter_t *j, fy_exchange_t *ex, const verdict_t *vd)
{
    const char *realm = j->conf->realm;
    size_t cap = j->realm_len + 160;
    char *h = fy_arena_alloc(ex->arena, cap);
    int n;
    if (vd->code)
        n = snprintf(h, cap, "Bearer realm=\"%s\", error=\"%s\", error_description=\"%s\"", realm,
                     vd->code, vd->why);
    else
        n = snprintf(h, cap, "Bearer realm=\"%s\"", realm);
    if (n < 0 || (size_t)n >= cap) n = (int)cap - 1;
    FY_HDR_ADD(ex->arena, &ex->res.headers, "www-authenticate", h, (size_t)n);
    fy_exchange_fail(ex, vd->status, vd->why ? vd->why : "no bearer token");
    return FY_FILTER_DONE;
}

static fy_filter_verdict_t on_request(fy_filter_t *f, fy_exchange_t *ex)
{
    jwt_filter_t *j = (jwt_filter_t *)f;
    const fy_jwt_conf_t *c = j->conf;
    fy_str_t tok = take_token(j, ex);
    verdict_t vd = {401, NULL, NULL};
    if (tok.len == 0) return refuse(j, ex, &vd);
    if (tok.len > c->max_token_size) {
        vd.code = "invalid_token";
        vd.why = "token too large";
        return refuse(j, ex, &vd);
    }
    /* the loop's wall clock, cached per turn (a second's resolution is what exp/nbf have) */
    int64_t now = ex->ctx->loop->now_sec ? (int64_t)ex->ctx->loop->now_sec : (int64_t)time(NULL);
    int64_t leeway = j->leeway_s;
    wcache_t *wc = cache_of(j, ex->ctx->worker_id);
    uint64_t h = 0;
    if (wc) {
        h = tok_hash(j->seed, tok.p, tok.len);
        centry_t *e = cache_find(wc, h, tok.p, tok.len);
        if (e) {
            bool fresh = e->keygen == atomic_load_explicit(&j->gen, memory_order_relaxed);
            if (fresh && now < e->exp + leeway && now + leeway >= e->nbf) {
                e->used = ++wc->tick;
                if (j->nch) add_claim_headers(j, ex, NULL, e->vlen, e->vals, e->vals_len);
                return FY_FILTER_NEXT;
            }
            centry_clear(e); /* expired or verified with keys since replaced: check again */
        }
    }
    checked_t ck;
    /* read before the check: a set swapped meanwhile makes the entry stale, not wrong */
    uint64_t gen = atomic_load(&j->gen);
    if (check_token(j, ex->arena, tok.p, tok.len, now, &ck, &vd) < 0) return refuse(j, ex, &vd);
    uint16_t lens[32];
    size_t vl = 0;
    for (size_t i = 0; i < j->nch; i++) {
        size_t l = ck.vals[i] ? strlen(ck.vals[i]) : 0;
        lens[i] = (uint16_t)(l > 4096 ? 0 : l); /* absurdly long values are not copied */
        vl += lens[i];
    }
    if (j->nch) add_claim_headers(j, ex, ck.vals, lens, NULL, 0);
    if (wc) {
        centry_t *e = cache_slot(wc, h);
        e->tok = malloc(tok.len);
        e->vals = malloc(vl ? vl : 1);
        if (!e->tok || !e->vals) {
            centry_clear(e);
            return FY_FILTER_NEXT;
        }
        memcpy(e->tok, tok.p, tok.len);
        size_t o = 0;
        for (size_t i = 0; i < j->nch; i++) {
            if (lens[i]) memcpy(e->vals + o, ck.vals[i], lens[i]);
            e->vlen[i] = lens[i];
            o += lens[i];
        }
        e->vals_len = vl;
        e->toklen = tok.len;
        e->hash = h;
        e->exp = ck.exp;
        e->nbf = ck.nbf;
        e->keygen = gen;
        e->used = ++wc->tick;
    }
    return FY_FILTER_NEXT;
}

static void destroy(fy_filter_t *f)
{
    jwt_filter_t *j = (jwt_filter_t *)f;
    if (j->thr_running) {
        pthread_mutex_lock(&j->mu);
        j->stop = true;
        pthread_cond_signal(&j->cv);
        pthread_mutex_unlock(&j->mu);
        pthread_join(j->thr, NULL);
    }
    for (size_t w = 0; w < MAX_WORKERS; w++) {
        wcache_t *c = j->caches[w];
        if (!c) continue;
        for (size_t i = 0; i < c->cap; i++) centry_clear(&c->v[i]);
        free(c->v);
        free(c);
    }
    keyset_unref(j->keys);
    free_keys(j->fixed, j->nfixed);
    free_keys(j->fromfile, j->nfile);
    free_keys(j->fromurl, j->nurl);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static const fy_filter_ops_t jwt_ops = {
    .name = "jwt",
    .stage = FY_STAGE_AUTH,
    .on_request = on_request,
    .destroy = destroy,
};

fy_filter_t *fy_jwt_filter_new(const fy_jwt_conf_t *conf, char *err, size_t errlen)
{
    jwt_filter_t *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    j->f.ops = &jwt_ops;
    j->conf = conf;
    j->realm_len = strlen(conf->realm);
    j->leeway_s = (int64_t)(conf->leeway_ms / 1000);
    for (char *p = conf->header; *p; p++) /* compared in any case with the request's names */
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
    fy_hname_init(&j->hdr, conf->header);
    j->nch = conf->claims_to_headers.n < 32 ? conf->claims_to_headers.n : 32;
    for (size_t i = 0; i < j->nch; i++) {
        /* header names go on the wire lowercase (h2 and h3 require it) */
        for (char *p = conf->claims_to_headers.values[i]; *p; p++)
            if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
        fy_hname_init(&j->ch[i], conf->claims_to_headers.values[i]);
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    if (RAND_bytes((unsigned char *)&j->seed, sizeof j->seed) != 1) j->seed = (uint64_t)mono_ms();
    for (size_t i = 0; i < conf->algorithms.n; i++)
        j->allowed |= 1u << fy__jwt_alg_id(conf->algorithms.v[i], strlen(conf->algorithms.v[i]));
    j->fixed = calloc(conf->keys.n + 1, sizeof *j->fixed);
    if (!j->fixed) goto fail_oom;
    if (conf->secret || conf->secret_file) {
        fy__jwt_key_t *k = &j->fixed[j->nfixed];
        size_t len = 0;
        char *s;
        if (conf->secret) {
            len = strlen(conf->secret);
            s = malloc(len + 1);
            if (s) memcpy(s, conf->secret, len + 1);
        } else {
            s = fy__jwt_read_file(conf->secret_file, 64 << 10, &len, err, errlen);
            if (!s) goto fail;
            if (len && s[len - 1] == '\n') len--;
            if (len && s[len - 1] == '\r') len--;
        }
        if (!s) goto fail_oom;
        if (len == 0) {
            free(s);
            snprintf(err, errlen, "the HS secret is empty");
            goto fail;
        }
        k->kty = KTY_OCT;
        k->secret = (unsigned char *)s;
        k->secret_len = len;
        j->nfixed++;
    }
    for (size_t i = 0; i < conf->keys.n; i++) {
        if (fy__jwt_pem_load(conf->keys.v[i], &j->fixed[j->nfixed], err, errlen) < 0) goto fail;
        j->nfixed++;
    }
    if (conf->jwks_file && read_jwks_file(j, err, errlen) < 0) goto fail;
    keyset_rebuild(j);
    if (conf->jwks_url) {
        char why[256];
        j->last_fetch_ms = mono_ms();
        if (fetch_url(j, why, sizeof why) < 0)
            fy_log(FY_LOG_WARN,
                   "jwt: fetching %s: %s (tokens it signs are refused until a "
                   "fetch succeeds)",
                   conf->jwks_url, why);
        if (pthread_create(&j->thr, NULL, jwks_thread, j) != 0) {
            snprintf(err, errlen, "cannot start the JWKS thread");
            goto fail;
        }
        j->thr_running = true;
    }
    if (!j->keys) goto fail_oom;
    return &j->f;
fail_oom:
    snprintf(err, errlen, "out of memory");
fail:
    destroy(&j->f);
    return NULL;
}
