/* The admin API's cache endpoints (ops/admin_cache.h). */
#include "ops/admin_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/admin.h"
#include "policy/cache_disk.h"
#include "policy/cache_key.h"
#include "policy/cache_store.h"

static void reply(fy_exchange_t *ex, int status, char *buf, size_t len)
{
    char *body = fy_arena_alloc(ex->arena, len ? len : 1); /* lives as long as the exchange */
    memcpy(body, buf, len);
    free(buf);
    fy_exchange_respond(ex, status, "application/json", body, len);
}

static void error(fy_exchange_t *ex, int status, const char *msg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) abort();
    fputs("{\"ok\": false, \"errors\": [", f);
    fy_admin_json_str(f, msg);
    fputs("]}\n", f);
    fclose(f);
    reply(ex, status, buf, len);
}

static void zone_json(fy_cache_zone_t *z, void *arg)
{
    FILE *f = arg;
    long pos = ftell(f);
    fputs(pos > 11 ? ", " : "", f);
    fputs("{\"name\": ", f);
    fy_admin_json_str(f, fy_cache_zone_name(z));
    fprintf(f, ", \"objects\": %zu, \"bytes\": %zu, \"disk\": ", fy_cache_zone_count(z),
            fy_cache_zone_bytes(z));
    fy_cache_disk_t *d = fy_cache_zone_disk(z);
    if (!d) {
        fputs("null}", f);
        return;
    }
    fy_cache_disk_stats_t s;
    fy_cache_disk_stats(d, &s);
    fputs("{\"dir\": ", f);
    fy_admin_json_str(f, fy_cache_disk_dir(d));
    fprintf(f,
            ", \"files\": %llu, \"bytes\": %llu, \"max-bytes\": %llu, \"writes\": %llu, "
            "\"write-drops\": %llu, \"write-errors\": %llu, \"write-skips\": %llu, "
            "\"reads\": %llu, \"read-drops\": %llu, \"read-errors\": %llu, \"corrupt\": %llu, "
            "\"evictions\": %llu, \"removed\": %llu}}",
            (unsigned long long)s.entries, (unsigned long long)s.bytes,
            (unsigned long long)s.max_bytes, (unsigned long long)s.writes,
            (unsigned long long)s.write_drops, (unsigned long long)s.write_errors,
            (unsigned long long)s.write_skips, (unsigned long long)s.reads,
            (unsigned long long)s.read_drops, (unsigned long long)s.read_errors,
            (unsigned long long)s.corrupt, (unsigned long long)s.evictions,
            (unsigned long long)s.removed);
}

/* Percent-decode [p, e) into the arena (NUL-terminated); NULL on a bad escape. */
static char *decode(fy_arena_t *a, const char *p, const char *e, size_t *len)
{
    char *out = fy_arena_alloc(a, (size_t)(e - p) + 1), *w = out;
    while (p < e) {
        if (*p == '%') {
            int v = 0;
            for (int i = 1; i <= 2; i++) {
                char c = p + i < e ? p[i] : 0;
                int x = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
                if (x < 0) return NULL;
                v = v * 16 + x;
            }
            *w++ = (char)v;
            p += 3;
        } else
            *w++ = *p == '+' ? ' ' : *p, p++;
    }
    *w = '\0';
    *len = (size_t)(w - out);
    return out;
}

typedef struct purge {
    int kind; /* 'u' url, 'p' prefix, 't' tag */
    const char *zone;
    char *key; /* url, prefix: the cache key; tag: the tag */
    size_t klen;
    size_t n;
} purge_t;

static void zone_purge(fy_cache_zone_t *z, void *arg)
{
    purge_t *pg = arg;
    if (pg->zone && strcmp(pg->zone, fy_cache_zone_name(z))) return;
    if (pg->kind == 't')
        pg->n += fy_cache_purge_tag(z, pg->key, pg->klen);
    else if (pg->kind == 'p')
        pg->n += fy_cache_purge_prefix(z, pg->key, pg->klen);
    else {
        pg->n += fy_cache_invalidate(z, fy_cache_hash(pg->key, pg->klen), pg->key, pg->klen);
        pg->key[pg->klen] = '\n'; /* the variants keyed by key-headers too */
        pg->n += fy_cache_purge_prefix(z, pg->key, pg->klen + 1);
    }
}

/* "http://host[:port]/path[?query]" as the cache's primary key (arena, one spare byte). */
static char *url_key(fy_arena_t *a, const char *u, size_t ul, size_t *klen)
{
    fy_request_t q;
    memset(&q, 0, sizeof q);
    const char *s = memchr(u, ':', ul);
    if (!s || s + 3 > u + ul || memcmp(s, "://", 3)) return NULL;
    q.scheme = fy_str(u, (size_t)(s - u));
    if (!fy_str_ieq(q.scheme, "http", 4) && !fy_str_ieq(q.scheme, "https", 5)) return NULL;
    const char *h = s + 3, *e = u + ul, *sl = h;
    while (sl < e && *sl != '/') sl++;
    if (sl == h || sl == e) return NULL;
    q.authority = fy_str(h, (size_t)(sl - h));
    const char *qm = memchr(sl, '?', (size_t)(e - sl));
    q.path = fy_str(sl, (size_t)((qm ? qm : e) - sl));
    q.query = qm ? fy_str(qm + 1, (size_t)(e - qm - 1)) : FY_STR_NULL;
    size_t l;
    char *k = fy_cache_key(a, &q, NULL, 0, &l);
    char *out = fy_arena_alloc(a, l + 1);
    memcpy(out, k, l);
    *klen = l;
    return out;
}

static void purge(fy_exchange_t *ex)
{
    fy_str_t t = ex->req.target;
    const char *qm = memchr(t.p, '?', t.len), *e = t.p + t.len;
    purge_t pg = {0};
    while (qm && qm < e) {
        const char *p = qm + 1, *amp = memchr(p, '&', (size_t)(e - p)), *end = amp ? amp : e;
        const char *eq = memchr(p, '=', (size_t)(end - p));
        qm = amp;
        if (!eq) continue;
        size_t vl;
        char *v = decode(ex->arena, eq + 1, end, &vl);
        fy_str_t name = fy_str(p, (size_t)(eq - p));
        if (!v) return error(ex, 400, "bad percent-escape in the query");
        if (fy_str_eq(name, "zone", 4)) {
            pg.zone = v;
            continue;
        }
        int kind = fy_str_eq(name, "url", 3)      ? 'u'
                   : fy_str_eq(name, "prefix", 6) ? 'p'
                   : fy_str_eq(name, "tag", 3)    ? 't'
                                                  : 0;
        if (!kind) continue;
        if (pg.kind) return error(ex, 400, "one of url=, prefix=, tag= at a time");
        pg.kind = kind;
        if (kind == 't') {
            if (!vl || strpbrk(v, " ,\t")) return error(ex, 400, "tag= takes one tag");
            pg.key = v;
            pg.klen = vl;
        } else if (!(pg.key = url_key(ex->arena, v, vl, &pg.klen)))
            return error(ex, 400, "url= and prefix= take http[s]://authority/path[?query]");
    }
    if (!pg.kind) return error(ex, 400, "POST /cache/purge?url=URL | prefix=URL | tag=TAG");
    fy_cache_zone_foreach(zone_purge, &pg);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) abort();
    fprintf(f, "{\"ok\": true, \"purged\": %zu}\n", pg.n);
    fclose(f);
    reply(ex, 200, buf, len);
}

void fy_admin_cache(fy_exchange_t *ex, const char **seg, int n)
{
    int m = ex->req.method_id;
    if (n == 1) {
        if (m != FY_M_GET) {
            FY_HDR_ADD(ex->arena, &ex->res.headers, "allow", "GET", 3);
            return error(ex, 405, "method not allowed here");
        }
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f) abort();
        fputs("{\"zones\": [", f); /* 11 bytes: zone_json's "first?" test */
        fy_cache_zone_foreach(zone_json, f);
        fputs("]}\n", f);
        fclose(f);
        return reply(ex, 200, buf, len);
    }
    if (n == 2 && !strcmp(seg[1], "purge")) {
        if (m != FY_M_POST) {
            FY_HDR_ADD(ex->arena, &ex->res.headers, "allow", "POST", 4);
            return error(ex, 405, "method not allowed here");
        }
        return purge(ex);
    }
    error(ex, 404, "no such cache endpoint (GET /cache, POST /cache/purge?url=|prefix=|tag=)");
}
