/* Directive table of the HTTP cache (policy/cache_conf.h). */
#include "policy/cache_conf.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_valid.h"

int fy_cache_cidr_parse(const char *s, fy_cache_cidr_t *out)
{
    char buf[64];
    const char *slash = strchr(s, '/');
    size_t al = slash ? (size_t)(slash - s) : strlen(s);
    if (al == 0 || al >= sizeof buf) return -1;
    memcpy(buf, s, al);
    buf[al] = '\0';
    int bits = -1;
    if (slash) {
        char *end;
        long b = strtol(slash + 1, &end, 10);
        if (!slash[1] || *end || b < 0 || b > 128) return -1;
        bits = (int)b;
    }
    memset(out, 0, sizeof *out);
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        if (bits > 32) return -1;
        out->family = AF_INET;
        out->bits = bits < 0 ? 32 : bits;
        return 0;
    }
    if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        out->family = AF_INET6;
        out->bits = bits < 0 ? 128 : bits;
        return 0;
    }
    return -1;
}

bool fy_cache_conf_purge_allowed(const fy_cache_conf_t *c, const struct sockaddr *sa)
{
    if (!sa) return false;
    for (size_t k = 0; k < c->npurge_cidrs; k++) {
        const fy_cache_cidr_t *r = &c->purge_cidrs[k];
        const unsigned char *a;
        if (sa->sa_family == AF_INET) {
            if (r->family != AF_INET) continue;
            a = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
        } else if (sa->sa_family == AF_INET6) {
            a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
            if (r->family == AF_INET) {
                static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
                if (memcmp(a, mapped, 12) != 0) continue;
                a += 12;
            }
        } else
            continue;
        bool ok = true;
        int bits = r->bits;
        for (int i = 0; bits > 0 && ok; i++, bits -= 8) {
            unsigned char m = bits >= 8 ? 0xff : (unsigned char)(0xff << (8 - bits));
            ok = (a[i] & m) == (r->addr[i] & m);
        }
        if (ok) return true;
    }
    return false;
}

static int validate_cidrs(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_cache_conf_t *c = obj;
    const fy_conf_strlist_t *l = field;
    c->npurge_cidrs = l->n;
    c->purge_cidrs = fy_conf_alloc(fy_conf_ctx_arena(ctx), (l->n + 1) * sizeof *c->purge_cidrs);
    int rc = 0;
    for (size_t i = 0; i < l->n; i++)
        if (fy_cache_cidr_parse(l->v[i], &c->purge_cidrs[i]) < 0) {
            fy_conf_error(ctx, node, NULL,
                          "bad CIDR '%.60s'; expected an address with an optional /prefix, like "
                          "127.0.0.0/8 or ::1",
                          l->v[i]);
            rc = -1;
        }
    return rc;
}

static int validate_tokens(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    fy_conf_strlist_t *l = field;
    for (size_t i = 0; i < l->n; i++) {
        const char *why = fy_conf_why_not_token(l->v[i]);
        if (why) {
            fy_conf_error(ctx, node, NULL, "'%.60s' %s", l->v[i], why);
            return -1;
        }
        for (char *p = l->v[i]; *p; p++)
            if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32); /* field names: lowercase */
    }
    return 0;
}

static int validate_methods(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    fy_conf_strlist_t *l = field;
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], "GET") && strcmp(l->v[i], "HEAD")) {
            fy_conf_error(ctx, node, NULL,
                          "'%.40s': only GET and HEAD responses are cached (RFC 9111 §2)", l->v[i]);
            return -1;
        }
    return 0;
}

static int validate_targeted(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_cache_conf_t *c = obj;
    const char *v = *(char **)field;
    if (!v || !*v) {
        c->targeted_lower = NULL;
        return 0;
    }
    const char *why = fy_conf_why_not_token(v);
    if (why) {
        fy_conf_error(ctx, node, NULL, "'%.60s' %s", v, why);
        return -1;
    }
    c->targeted_lower = fy_conf_strdup(fy_conf_ctx_arena(ctx), v);
    for (char *p = c->targeted_lower; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
    return 0;
}

#define C(f) offsetof(fy_cache_conf_t, f)

const fy_conf_directive_t fy_cache_conf_table[] = {
    {.key = "zone",
     .type = FY_CT_STRING,
     .offset = C(zone),
     .dflt = "default",
     .validate = fy_conf_valid_token,
     .doc = "Name of the store; routes naming the same zone share its objects."},
    {.key = "size",
     .type = FY_CT_SIZE,
     .offset = C(size),
     .dflt = "64m",
     .min = 4096,
     .max = (int64_t)1 << 40,
     .doc = "Bytes the zone's memory tier holds (headers and bodies); least recently used "
            "objects are evicted past it."},
    {.key = "max-object-size",
     .type = FY_CT_SIZE,
     .offset = C(max_object_size),
     .dflt = "8m",
     .min = 1,
     .max = (int64_t)1 << 40,
     .doc = "Responses larger than this stream through to the client and are not stored."},
    {.key = "methods",
     .type = FY_CT_STRLIST,
     .offset = C(methods),
     .dflt = "GET,HEAD",
     .csv = true,
     .validate = validate_methods,
     .doc = "Request methods answered from the cache (HEAD is answered from a stored GET)."},
    {.key = "key-headers",
     .type = FY_CT_STRLIST,
     .offset = C(key_headers),
     .validate = validate_tokens,
     .doc = "Request header fields whose values join the key (besides scheme, authority, "
            "path and query)."},
    {.key = "default-ttl",
     .type = FY_CT_DURATION,
     .offset = C(default_ttl_ms),
     .dflt = "0",
     .doc = "Freshness of a storable response that states none (instead of the Last-Modified "
            "heuristic); 0: the heuristic only."},
    {.key = "max-ttl",
     .type = FY_CT_DURATION,
     .offset = C(max_ttl_ms),
     .dflt = "0",
     .doc = "Upper bound on any freshness lifetime; 0: none."},
    {.key = "force-ttl",
     .type = FY_CT_DURATION,
     .offset = C(force_ttl_ms),
     .dflt = "0",
     .doc = "Store every 200/203/301/404/410 response with this lifetime whatever its "
            "Cache-Control or Expires say (an override for origins that send wrong ones; "
            "Set-Cookie and `Vary: *` still keep a response out); 0: off."},
    {.key = "heuristic-percent",
     .type = FY_CT_INT,
     .offset = C(heuristic_percent),
     .dflt = "10",
     .min = 0,
     .max = 100,
     .doc = "Heuristic freshness: this percentage of the time since Last-Modified (RFC 9111 "
            "§4.2.2)."},
    {.key = "heuristic-max",
     .type = FY_CT_DURATION,
     .offset = C(heuristic_max_ms),
     .dflt = "1h",
     .doc = "Upper bound on heuristic freshness."},
    {.key = "store-set-cookie",
     .type = FY_CT_BOOL,
     .offset = C(store_set_cookie),
     .dflt = "false",
     .doc = "Store responses that carry Set-Cookie (they are then given to other clients)."},
    {.key = "ignore-request-no-cache",
     .type = FY_CT_BOOL,
     .offset = C(ignore_request_no_cache),
     .dflt = "false",
     .doc = "Serve fresh objects even to requests with `Cache-Control: no-cache` or "
            "`max-age=0` (a shield against clients forcing origin fetches)."},
    {.key = "stale-while-revalidate",
     .type = FY_CT_DURATION,
     .offset = C(stale_while_revalidate_ms),
     .dflt = "0",
     .doc = "Stale-while-revalidate window for responses that have no such directive (RFC "
            "5861); must-revalidate and s-maxage still forbid it."},
    {.key = "stale-if-error",
     .type = FY_CT_DURATION,
     .offset = C(stale_if_error_ms),
     .dflt = "0",
     .doc = "Stale-if-error window for responses that have no such directive (RFC 5861)."},
    {.key = "collapse",
     .type = FY_CT_BOOL,
     .offset = C(collapse),
     .dflt = "true",
     .doc = "Concurrent misses for one key wait for one origin fetch and get its response as "
            "it arrives."},
    {.key = "collapse-timeout",
     .type = FY_CT_DURATION,
     .offset = C(collapse_timeout_ms),
     .dflt = "10s",
     .min = 1,
     .max = 3600000,
     .doc = "How long a collapsed miss waits for the other request's response head before it "
            "goes to the origin itself."},
    {.key = "purge-allow",
     .type = FY_CT_STRLIST,
     .offset = C(purge_allow),
     .validate = validate_cidrs,
     .doc = "Client CIDRs allowed to send `PURGE` (by key, by prefix with a trailing `*`, or "
            "by tag with a `Surrogate-Key` request field); others get 403. Empty: PURGE is "
            "passed on like any unknown method."},
    {.key = "targeted-field",
     .type = FY_CT_STRING,
     .offset = C(targeted_field),
     .dflt = "CDN-Cache-Control",
     .validate = validate_targeted,
     .doc = "Targeted cache-control field this cache obeys over Cache-Control (RFC 9213); "
            "`\"\"`: none."},
    {.key = "strip-request-headers",
     .type = FY_CT_STRLIST,
     .offset = C(strip_headers),
     .dflt = "[x-original-url, x-rewrite-url, x-forwarded-host, x-forwarded-scheme, "
             "x-forwarded-server, x-host, x-http-method-override, x-http-method, "
             "x-method-override]",
     .validate = validate_tokens,
     .doc = "Unkeyed request fields that could change a stored response (cache poisoning), "
            "removed from cacheable requests before the origin sees them."},
    {.key = "status-name",
     .type = FY_CT_STRING,
     .offset = C(status_name),
     .dflt = "ferry",
     .validate = fy_conf_valid_token,
     .doc = "This cache's name in the Cache-Status field (RFC 9211)."},
    {.key = "disk-path",
     .type = FY_CT_STRING,
     .offset = C(disk_path),
     .dflt = "",
     .doc = "Directory of the zone's disk tier (made if missing; files of other names are "
            "left alone); complete objects are written there by a thread and survive a "
            "restart; `\"\"`: memory only. The first route of a zone that names one sets it."},
    {.key = "disk-size",
     .type = FY_CT_SIZE,
     .offset = C(disk_size),
     .dflt = "1g",
     .min = 4096,
     .max = (int64_t)1 << 50,
     .doc = "Bytes of files the disk tier holds; least recently used files are removed past "
            "it."},
    {.key = "disk-queue",
     .type = FY_CT_INT,
     .offset = C(disk_queue),
     .dflt = "1024",
     .min = 1,
     .max = 1 << 20,
     .doc = "Objects waiting to be written (and loads waiting to be read), at most; past it a "
            "write is dropped (counted) and a load goes to the origin."},
    {.key = NULL},
};
