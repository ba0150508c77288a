/* The top-level directive table, the embedded default config, and load/dump/doc. */
#include "config.h"

#include "conf/conf_valid.h"
#include "http/router.h"
#include "policies.h"

#include <ctype.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char fy_config_embedded[] =
    "# Ferry's built-in configuration, used when `ferry` runs without arguments, all on loopback:\n"
    "# the demo site on http://127.0.0.1:8080 (HTTP/1.1, h2c) and https://127.0.0.1:8443\n"
    "# (HTTP/1.1, h2, HTTP/3; self-signed), the same site again through the reverse proxy under\n"
    "# /proxy/ (marked with Via and X-Ferry-Demo headers), and an intercepting proxy on\n"
    "# 127.0.0.1:8888 (its CA is made on first run; trust it with `ferry ca export`), e.g.\n"
    "#   curl -x http://127.0.0.1:8888 --cacert ~/.local/share/ferry/ferry-ca.pem \\\n"
    "#        https://127.0.0.1:8443/\n"
    "workers: auto\n"
    "listeners:\n"
    "  - address: 127.0.0.1:8080\n"
    "    protocols: [h1, h2c]\n"
    "  - address: 127.0.0.1:8443\n"
    "    protocols: [h1, h2, h3]\n"
    "    tls: self-signed\n"
    "  - address: 127.0.0.1:8888\n"
    "    kind: intercept\n"
    "intercept:\n"
    "  # the demo's own TLS site has a self-signed certificate: not verified on loopback\n"
    "  # names only (every other origin is verified against the system store)\n"
    "  insecure: [127.0.0.1, localhost]\n"
    "upstreams:\n"
    "  - name: demo\n"
    "    servers: [http://127.0.0.1:8080]\n"
    "routes:\n"
    "  - match:\n"
    "      path: /proxy/\n"
    "    proxy:\n"
    "      upstream: demo\n"
    "      strip-prefix: /proxy\n"
    "      via: true\n"
    "      response-set-headers:\n"
    "        x-ferry-demo: reverse-proxy\n"
    "  - match:\n"
    "      path: /health\n"
    "    respond:\n"
    "      status: 200\n"
    "      headers:\n"
    "        content-type: text/plain\n"
    "      body: \"ok\\n\"\n"
    "  - match:\n"
    "      path: /\n"
    "    static:\n"
    "      root: \"@demo\"\n"
    "log:\n"
    "  level: info\n"
    "  access: off\n";

/* ---- workers ---- */

static int parse_workers(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field)
{
    int64_t *w = field;
    if (node->kind == FY_CONF_SCALAR && !strcmp(node->str, "auto")) {
        *w = 0;
        return 0;
    }
    int64_t v = 0;
    bool ok = node->kind == FY_CONF_SCALAR && !node->quoted && node->len > 0 && node->len <= 3;
    for (size_t i = 0; ok && i < node->len; i++) {
        if (!isdigit((unsigned char)node->str[i])) ok = false;
        v = v * 10 + (node->str[i] - '0');
    }
    if (!ok || v < 1 || v > 256) {
        fy_conf_error(ctx, node, NULL, "expected 'auto' or a number from 1 to 256, got %s%.40s%s",
                      node->kind == FY_CONF_SCALAR ? "'" : "",
                      node->kind == FY_CONF_SCALAR ? node->str
                      : node->kind == FY_CONF_MAP  ? "a map"
                                                   : "a list",
                      node->kind == FY_CONF_SCALAR ? "'" : "");
        return -1;
    }
    *w = v;
    return 0;
}

static void dump_workers(const void *field, void *file)
{
    int64_t w = *(const int64_t *)field;
    if (w == 0)
        fputs("auto", file);
    else
        fprintf(file, "%lld", (long long)w);
}

/* ---- routes ---- */

/* "example.com" or "*.example.com": letters, digits, '-', '_' in non-empty dot-separated
   labels. Lowercased in place, as hosts are compared case-insensitively. */
static bool host_pattern_ok(char *h)
{
    char *p = h;
    if (p[0] == '*' && p[1] == '.') p += 2;
    size_t len = strlen(p), label = 0;
    if (len == 0 || len > 253) return false;
    for (; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '.') {
            if (label == 0) return false;
            label = 0;
            continue;
        }
        if (!(isalnum(c) || c == '-' || c == '_') || ++label > 63) return false;
        *p = (char)tolower(c);
    }
    return label > 0;
}

static int validate_hosts(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_conf_strlist_t *l = field;
    int rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (!host_pattern_ok(l->v[i])) {
            fy_conf_error(ctx, node, NULL,
                          "bad host '%.80s'; expected a name like example.com or *.example.com",
                          l->v[i]);
            rc = -1;
        }
    }
    return rc;
}

static int validate_path(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *p = *(char **)field;
    if (p[0] != '/') {
        fy_conf_error(ctx, node, NULL, "must start with '/', got '%.80s'", p);
        return -1;
    }
    for (const unsigned char *c = (const unsigned char *)p; *c; c++) {
        if (*c <= 0x20 || *c == 0x7f || *c == '?' || *c == '#') {
            fy_conf_error(ctx, node, NULL, "'%.80s' has a character not allowed in a path", p);
            return -1;
        }
    }
    return 0;
}

static int validate_methods(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strlist_t *l = field;
    for (size_t i = 0; i < l->n; i++) {
        bool ok = l->v[i][0] != '\0';
        for (const unsigned char *c = (const unsigned char *)l->v[i]; *c; c++)
            ok = ok && (isalnum(*c) || strchr("!#$%&'*+-.^_`|~", *c));
        if (!ok) {
            fy_conf_error(ctx, node, NULL, "bad method '%.40s'", l->v[i]);
            return -1;
        }
    }
    return 0;
}

static int validate_regex(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *re = *(char **)field;
    char msg[256];
    if (fy_regex_check(re, msg, sizeof msg) < 0) {
        fy_conf_error(ctx, node, NULL, "invalid regular expression '%s': %s", re, msg);
        return -1;
    }
    return 0;
}

static const fy_conf_directive_t match_table[] = {
    {.key = "host",
     .type = FY_CT_STRLIST,
     .offset = offsetof(fy_route_match_t, host),
     .validate = validate_hosts,
     .doc = "Host names (`example.com`) or wildcards (`*.example.com`); any host when unset. "
            "Compared without case and port."},
    {.key = "path",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_route_match_t, path),
     .dflt = "/",
     .validate = validate_path,
     .doc = "Path prefix; must start with `/`."},
    {.key = "method",
     .type = FY_CT_STRLIST,
     .offset = offsetof(fy_route_match_t, methods),
     .validate = validate_methods,
     .doc = "Request methods, e.g. `[GET, HEAD]`; any method when unset."},
    {.key = "path-exact",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_route_match_t, path_exact),
     .validate = validate_path,
     .doc = "The whole path (without the query) must equal this."},
    {.key = "path-regex",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_route_match_t, path_regex),
     .validate = validate_regex,
     .doc = "PCRE2 pattern the path (without the query) must match (JIT-compiled at start)."},
    {.key = "header",
     .type = FY_CT_STRMAP,
     .offset = offsetof(fy_route_match_t, headers),
     .doc = "Request headers that must be present with exactly this value (`\"*\"`: any "
            "value), e.g. `{x-canary: \"1\"}`."},
    {.key = "query",
     .type = FY_CT_STRMAP,
     .offset = offsetof(fy_route_match_t, query),
     .doc = "Query parameters that must be present with exactly this raw value (`\"*\"`: any "
            "value)."},
    {.key = NULL},
};

static int check_route(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const fy_route_conf_t *r = obj;
    int n = (r->static_ != NULL) + (r->respond != NULL) + (r->echo != NULL) + (r->proxy != NULL) +
            (r->webtransport != NULL);
    if (n == 1) return 0;
    fy_conf_error(ctx, map, NULL,
                  n ? "has more than one handler (static, respond, echo, proxy, webtransport); "
                      "use one per route"
                    : "needs a handler: one of static, respond, echo, proxy, webtransport");
    return -1;
}

static const fy_conf_directive_t echo_table[] = {
    {.key = NULL},
};

static const fy_conf_directive_t route_table[] = {
    {.key = "match",
     .type = FY_CT_TABLE,
     .offset = offsetof(fy_route_conf_t, match),
     .sub = match_table,
     .doc = "Which requests this route takes; all of them when absent. Routes are tried in "
            "order and the first match wins."},
    {.key = "static",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, static_),
     .sub = fy_static_conf_table,
     .sub_size = sizeof(fy_static_conf_t),
     .shorthand_key = "root",
     .doc = "Serve files from a directory."},
    {.key = "respond",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, respond),
     .sub = fy_respond_conf_table,
     .sub_size = sizeof(fy_respond_conf_t),
     .doc = "Answer with a fixed response."},
    {.key = "echo",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, echo),
     .sub = echo_table,
     .sub_size = sizeof(struct fy_echo_conf),
     .doc = "Stream the request body back as the response body; written `echo: {}`."},
    {.key = "proxy",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, proxy),
     .sub = fy_proxy_conf_table,
     .sub_size = sizeof(fy_proxy_conf_t),
     .shorthand_key = "upstream",
     .doc = "Reverse-proxy to an upstream; shorthand `proxy: NAME`."},
    {.key = "jwt",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, jwt),
     .sub = fy_jwt_conf_table,
     .sub_size = sizeof(fy_jwt_conf_t),
     .doc = "Require a valid JWT bearer token (policy/jwt.c)."},
    {.key = "transform",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, transform),
     .sub = fy_transform_conf_table,
     .sub_size = sizeof(fy_transform_conf_t),
     .doc = "Redirect, rewrite the path, edit request and response headers (policy/transform.c)."},
    {.key = "compress",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, compress),
     .sub = fy_compress_conf_table,
     .sub_size = sizeof(fy_compress_conf_t),
     .shorthand_key = "enabled",
     .doc = "Compress responses on the fly with gzip, br or zstd (policy/compress.c); "
            "`compress: enabled` takes the defaults."},
    {.key = "waf",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, waf),
     .sub = fy_waf_conf_table,
     .sub_size = sizeof(fy_waf_conf_t),
     .shorthand_key = "mode",
     .doc = "Inspect requests with ModSecurity and the OWASP Core Rule Set (policy/waf.c); "
            "`waf: blocking` or `waf: detection` takes the defaults."},
    {.key = "cidr",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, cidr),
     .sub = fy_cidr_conf_table,
     .sub_size = sizeof(fy_cidr_conf_t),
     .shorthand_key = "use",
     .doc = "Allow or deny clients by address (policy/cidr_conf.c); `cidr: NAME` uses a "
            "`cidr-lists` entry."},
    {.key = "rate-limit",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, rate_limit),
     .sub = fy_ratelimit_conf_table,
     .sub_size = sizeof(fy_ratelimit_conf_t),
     .doc = "Limit the request rate per key, in this process or through Redis (429)."},
    {.key = "client-limits",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, client_limits),
     .sub = fy_client_limits_conf_table,
     .sub_size = sizeof(fy_client_limits_conf_t),
     .shorthand_key = "use",
     .doc = "Concurrent requests per client address; `client-limits: NAME` uses a named entry."},
    {.key = "capture",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, capture),
     .sub = fy_capture_route_conf_table,
     .sub_size = sizeof(fy_capture_route_conf_t),
     .doc = "Store this route's flows in the inspector (sampled, or those matching)."},
    {.key = "webtransport",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, webtransport),
     .sub = fy_wt_conf_table,
     .sub_size = sizeof(fy_wt_conf_t),
     .shorthand_key = "handler",
     .doc = "Serve WebTransport sessions (HTTP/3 extended CONNECT); `webtransport: echo`."},
    {.key = "cache",
     .type = FY_CT_TABLE_PTR,
     .offset = offsetof(fy_route_conf_t, cache),
     .sub = fy_cache_conf_table,
     .sub_size = sizeof(fy_cache_conf_t),
     .doc = "A shared HTTP cache (RFC 9111) in front of the handler; `cache: {}` for the "
            "defaults (docs/CACHE.md)."},
    {.key = NULL, .check = check_route},
};

/* ---- top level ---- */

void fy_config_default_data_dir(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_DATA_HOME");
    const char *home = getenv("HOME");
    if (xdg && xdg[0] == '/') { /* the XDG spec ignores relative values */
        snprintf(buf, len, "%s/ferry", xdg);
    } else {
        if (!home || !*home) {
            struct passwd *pw = getpwuid(getuid());
            home = pw && pw->pw_dir ? pw->pw_dir : "/tmp";
        }
        snprintf(buf, len, "%s/.local/share/ferry", home);
    }
}

static char *default_data_dir(fy_conf_arena_t *a)
{
    char buf[4096];
    fy_config_default_data_dir(buf, sizeof buf);
    return fy_conf_strdup(a, buf);
}

/* Item i of the top-level list `key`, or `map` when it is not there (for positions). */
static const fy_conf_node_t *item_at(const fy_conf_node_t *map, const char *key, size_t i)
{
    const fy_conf_node_t *seq = fy_conf_map_at(map, key);
    return seq != map && seq->kind == FY_CONF_SEQ && i < seq->n ? seq->items[i] : map;
}

/* l4 targets naming an upstream group: resolve to its index */
static int resolve_l4_target(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, const fy_config_t *cfg,
                             fy_l4_target_t *t, size_t i)
{
    if (!t->upstream) return 0;
    const fy_upstream_conf_t *ups = cfg->upstreams.v;
    for (size_t j = 0; j < cfg->upstreams.n; j++)
        if (ups[j].name && strcmp(ups[j].name, t->upstream) == 0) {
            t->upstream_index = (int)j;
            return 0;
        }
    char key[64];
    snprintf(key, sizeof key, "l4[%zu].upstream", i);
    fy_conf_error(ctx, fy_conf_map_at(item_at(map, "l4", i), "upstream"), key,
                  "no upstream named '%s'", t->upstream);
    return -1;
}

static int resolve_l4(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, fy_config_t *cfg)
{
    int rc = 0;
    fy_l4_conf_t *l = cfg->l4.v;
    for (size_t i = 0; i < cfg->l4.n; i++) {
        if (resolve_l4_target(ctx, map, cfg, &l[i].to, i) < 0) rc = -1;
        fy_l4_sni_conf_t *s = l[i].sni.v;
        for (size_t k = 0; k < l[i].sni.n; k++)
            if (resolve_l4_target(ctx, map, cfg, &s[k].to, i) < 0) rc = -1;
    }
    return rc;
}

/* One socket a config binds: two of them on the same address, port and transport would both
   bind (SO_REUSEPORT) and split the clients between two configurations. */
struct bind {
    const struct sockaddr_storage *addr;
    bool udp;
    const char *list; /* "listeners" or "l4" */
    size_t index;
    const fy_conf_node_t *at;
};

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family) return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr);
    }
    return false;
}

static int check_binds(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, const fy_config_t *cfg)
{
    size_t cap = 2 * (cfg->listeners.n + cfg->l4.n) + 1, n = 0;
    struct bind *b = fy_conf_alloc(fy_conf_ctx_arena(ctx), cap * sizeof(*b));
    const fy_listener_conf_t *ls = cfg->listeners.v;
    for (size_t i = 0; i < cfg->listeners.n; i++) {
        const fy_conf_node_t *at = fy_conf_map_at(item_at(map, "listeners", i), "address");
        b[n++] = (struct bind){&ls[i].addr, false, "listeners", i, at};
        if (ls[i].protocols & FY_PROTO_H3)
            b[n++] = (struct bind){&ls[i].addr, true, "listeners", i, at};
    }
    const fy_l4_conf_t *l4 = cfg->l4.v;
    for (size_t i = 0; i < cfg->l4.n; i++) {
        bool udp = l4[i].mode == FY_L4_UDP || l4[i].mode == FY_L4_QUIC_PASSTHROUGH;
        const fy_conf_node_t *at = fy_conf_map_at(item_at(map, "l4", i), "listen");
        b[n++] = (struct bind){&l4[i].addr, udp, "l4", i, at};
    }
    int rc = 0;
    for (size_t i = 1; i < n; i++)
        for (size_t j = 0; j < i; j++) {
            if (b[i].udp != b[j].udp || !same_addr(b[i].addr, b[j].addr)) continue;
            if (b[i].list == b[j].list && b[i].index == b[j].index) continue;
            char key[64];
            snprintf(key, sizeof key, "%s[%zu].%s", b[i].list, b[i].index,
                     b[i].list[0] == 'l' && b[i].list[1] == '4' ? "listen" : "address");
            fy_conf_error(ctx, b[i].at, key,
                          "%s (%s) is already taken by %s[%zu] at line %d; two listeners on one "
                          "address would split its clients",
                          b[i].at->str ? b[i].at->str : "this address", b[i].udp ? "UDP" : "TCP",
                          b[j].list, b[j].index, b[j].at->line);
            rc = -1;
            break;
        }
    return rc;
}

static int check_config(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_config_t *cfg = obj;
    if (!cfg->data_dir) cfg->data_dir = default_data_dir(fy_conf_ctx_arena(ctx));
    if (!cfg->intercept.ca_dir) cfg->intercept.ca_dir = cfg->data_dir;
    int rc = 0;
    const fy_upstream_conf_t *ups = cfg->upstreams.v;
    for (size_t i = 0; i < cfg->upstreams.n; i++)
        for (size_t j = 0; j < i; j++)
            if (ups[i].name && ups[j].name && strcmp(ups[i].name, ups[j].name) == 0) {
                fy_conf_error(ctx, map, "upstreams", "two upstreams are named '%s'", ups[i].name);
                rc = -1;
            }
    /* `listeners` is required unless the file only relays at layer 4 */
    if (cfg->listeners.n == 0 && cfg->l4.n == 0) {
        const fy_conf_node_t *at = map;
        for (size_t i = 0; i < map->n; i++)
            if (!strcmp(map->keys[i]->str, "listeners") && map->items[i]->kind == FY_CONF_SEQ)
                at = map->items[i];
        fy_conf_error(ctx, at, "listeners", at == map ? "is required" : "needs at least one item");
        rc = -1;
    }
    if (resolve_l4(ctx, map, cfg) < 0) rc = -1;
    fy_route_conf_t *routes = cfg->routes.v;
    for (size_t i = 0; i < cfg->routes.n; i++) {
        if (!routes[i].proxy) continue;
        for (size_t j = 0; j < cfg->upstreams.n; j++)
            if (ups[j].name && strcmp(ups[j].name, routes[i].proxy->upstream) == 0)
                routes[i].proxy_upstream = &ups[j];
        if (!routes[i].proxy_upstream) {
            const fy_conf_node_t *at = fy_conf_map_at(item_at(map, "routes", i), "proxy");
            if (at->kind == FY_CONF_MAP) at = fy_conf_map_at(at, "upstream");
            char key[64];
            snprintf(key, sizeof key, "routes[%zu].proxy.upstream", i);
            fy_conf_error(ctx, at, key, "no upstream named '%s'%s", routes[i].proxy->upstream,
                          cfg->upstreams.n ? "" : " (the config has no upstreams:)");
            rc = -1;
        }
    }
    /* `webtransport: {handler: proxy, upstream: NAME}`: an upstream of h3:// servers */
    for (size_t i = 0; i < cfg->routes.n; i++) {
        const fy_wt_conf_t *wt = routes[i].webtransport;
        if (!wt || wt->handler != FY_WT_PROXY) continue;
        const fy_conf_node_t *at = fy_conf_map_at(item_at(map, "routes", i), "webtransport");
        const char *why = NULL;
        for (size_t j = 0; wt->upstream && j < cfg->upstreams.n; j++)
            if (ups[j].name && strcmp(ups[j].name, wt->upstream) == 0)
                routes[i].proxy_upstream = &ups[j];
        const fy_upstream_conf_t *u = routes[i].proxy_upstream;
        if (!wt->upstream)
            why = "proxy needs `upstream`";
        else if (!u)
            why = "no such upstream";
        for (size_t k = 0; u && !why && k < u->servers.n; k++)
            if (!((const fy_upstream_server_conf_t *)u->servers.v)[k].h3)
                why = "proxies only to h3:// servers";
        if (why) {
            char key[64];
            snprintf(key, sizeof key, "routes[%zu].webtransport.upstream", i);
            fy_conf_error(ctx, at, key, "%s", why);
            rc = -1;
        }
    }
    if (rc == 0 && check_binds(ctx, map, cfg) < 0) rc = -1;
    if (fy_policies_check(ctx, map, cfg) < 0) rc = -1;
    return rc;
}

#define C(f) offsetof(fy_config_t, f)

const fy_conf_directive_t fy_config_table[] = {
    {.key = "workers",
     .type = FY_CT_CUSTOM,
     .offset = C(workers),
     .dflt = "auto",
     .parse = parse_workers,
     .dump = dump_workers,
     .type_name = "`auto` or integer 1..256",
     .doc = "Worker threads; `auto` is one per online CPU."},
    {.key = "listeners",
     .type = FY_CT_TABLE_LIST,
     .offset = C(listeners),
     .sub = fy_listener_conf_table,
     .sub_size = sizeof(fy_listener_conf_t),
     .doc = "HTTP addresses to accept connections on; at least one unless `l4` has one."},
    {.key = "routes",
     .type = FY_CT_TABLE_LIST,
     .offset = C(routes),
     .sub = route_table,
     .sub_size = sizeof(fy_route_conf_t),
     .doc = "Request routing: the first route whose `match` fits answers; 404 when none does."},
    {.key = "upstreams",
     .type = FY_CT_TABLE_LIST,
     .offset = C(upstreams),
     .sub = fy_upstream_conf_table,
     .sub_size = sizeof(fy_upstream_conf_t),
     .doc = "Origin server groups that `proxy` routes send requests to."},
    {.key = "l4",
     .type = FY_CT_TABLE_LIST,
     .offset = C(l4),
     .sub = fy_l4_conf_table,
     .sub_size = sizeof(fy_l4_conf_t),
     .doc = "Layer-4 relays: TCP, UDP, TLS passthrough by SNI, TLS termination, QUIC "
            "passthrough by SNI."},
    {.key = "cidr-lists",
     .type = FY_CT_TABLE_LIST,
     .offset = C(cidr_lists),
     .sub = fy_cidr_list_conf_table,
     .sub_size = sizeof(fy_cidr_conf_t),
     .doc = "Named CIDR allow/deny lists for listeners and routes (`cidr: NAME`)."},
    {.key = "client-limits",
     .type = FY_CT_TABLE_LIST,
     .offset = C(client_limits),
     .sub = fy_client_limits_list_conf_table,
     .sub_size = sizeof(fy_client_limits_conf_t),
     .doc = "Named per-client connection-rate and concurrency limits (`client-limits: NAME`)."},
    {.key = "rate-limits",
     .type = FY_CT_TABLE_LIST,
     .offset = C(rate_limits),
     .sub = fy_ratelimit_conf_table,
     .sub_size = sizeof(fy_ratelimit_conf_t),
     .doc = "Named rate limits for listeners (`listeners[].rate-limit: NAME`); `name` required."},
    {.key = "waf-policies",
     .type = FY_CT_TABLE_LIST,
     .offset = C(waf_policies),
     .sub = fy_waf_conf_table,
     .sub_size = sizeof(fy_waf_conf_t),
     .doc = "Named WAF policies for listeners (`listeners[].waf: NAME`); `name` required."},
    {.key = "limits",
     .type = FY_CT_TABLE,
     .offset = C(limits),
     .sub = fy_http_limits_table,
     .doc = "HTTP limits and timeouts, shared by every listener."},
    {.key = "http2",
     .type = FY_CT_TABLE,
     .offset = C(http2),
     .sub = fy_h2_conf_table,
     .doc = "HTTP/2 settings and abuse limits (h2c and h2 listeners)."},
    {.key = "quic",
     .type = FY_CT_TABLE,
     .offset = C(quic),
     .sub = fy_quic_conf_table,
     .doc = "QUIC transport and HTTP/3 settings (listeners with `h3`)."},
    {.key = "log",
     .type = FY_CT_TABLE,
     .offset = C(log),
     .sub = fy_log_conf_table,
     .doc = "Error and access logs."},
    {.key = "tracing",
     .type = FY_CT_TABLE,
     .offset = C(tracing),
     .sub = fy_trace_conf_table,
     .doc = "W3C Trace Context: `traceparent`/`tracestate` to origins, the trace id in the "
            "access log."},
    {.key = "intercept",
     .type = FY_CT_TABLE,
     .offset = C(intercept),
     .sub = fy_intercept_conf_table,
     .doc = "The intercepting proxy: CA, origin verification, access, passthrough."},
    {.key = "admin",
     .type = FY_CT_TABLE_PTR,
     .offset = C(admin),
     .sub = fy_admin_conf_table,
     .sub_size = sizeof(fy_admin_conf_t),
     .doc = "The admin listener (off when absent): Prometheus metrics and the JSON API."},
    {.key = "inspector",
     .type = FY_CT_TABLE_PTR,
     .offset = C(inspector),
     .sub = fy_inspector_conf_table,
     .sub_size = sizeof(fy_inspector_conf_t),
     .doc = "The inspector: a disk capture store of flows and its web UI (docs/INSPECTOR.md)."},
    {.key = "data-dir",
     .type = FY_CT_STRING,
     .offset = C(data_dir),
     .validate = fy_conf_valid_state_dir,
     .doc = "Where generated state (self-signed certificates) is kept; default "
            "`$XDG_DATA_HOME/ferry`, else `~/.local/share/ferry`."},
    {.key = NULL, .check = check_config},
};

/* ---- load / free / dump / doc ---- */

static fy_config_t *load(fy_conf_arena_t *a, const char *name, const fy_conf_node_t *root,
                         const char *err, FILE *errf)
{
    if (!root) {
        if (errf) fprintf(errf, "%s\n", err);
        fy_conf_arena_free(a);
        return NULL;
    }
    fy_conf_ctx_t *ctx = fy_conf_ctx_new(a);
    fy_config_t *cfg = fy_conf_alloc(a, sizeof(*cfg));
    if (fy_conf_apply(ctx, fy_config_table, root, cfg) < 0) {
        if (errf) fputs(fy_conf_errors(ctx), errf);
        fy_conf_arena_free(a);
        return NULL;
    }
    cfg->arena = a;
    cfg->source = fy_conf_strdup(a, name);
    return cfg;
}

fy_config_t *fy_config_load_file(const char *path, FILE *errf)
{
    char err[512];
    fy_conf_arena_t *a = fy_conf_arena_new();
    const fy_conf_node_t *root = fy_conf_parse_file(a, path, err, sizeof err);
    return load(a, path, root, err, errf);
}

fy_config_t *fy_config_load_text(const char *name, const char *text, size_t len, FILE *errf)
{
    char err[512];
    fy_conf_arena_t *a = fy_conf_arena_new();
    const fy_conf_node_t *root = fy_conf_parse(a, name, text, len, err, sizeof err);
    return load(a, name, root, err, errf);
}

void fy_config_free(fy_config_t *cfg)
{
    if (cfg) fy_conf_arena_free(cfg->arena);
}

void fy_config_dump(const fy_config_t *cfg, FILE *out)
{
    fprintf(out, "# effective configuration of %s (defaults included)\n", cfg->source);
    fy_conf_dump(fy_config_table, cfg, 0, out);
}

void fy_config_doc(FILE *out)
{
    fy_conf_doc(fy_config_table, "", 3, out);
}

void fy_config_doc_man(FILE *out, const char *version)
{
    fprintf(out,
            ".\\\" generated by `ferry doc-config --man` from the directive tables\n"
            ".TH FERRY.YAML 5 \"\" \"ferry %s\" \"File Formats\"\n"
            ".ad l\n"
            ".SH NAME\n"
            "ferry.yaml \\- configuration file of the ferry traffic server\n"
            ".SH SYNOPSIS\n"
            ".B /etc/ferry/ferry.yaml\n"
            ".SH DESCRIPTION\n"
            "\\fBferry run \\-c\\fR \\fIFILE\\fR reads one YAML file.\n"
            "\\fBferry check \\-c\\fR \\fIFILE\\fR validates it and prints the "
            "effective configuration with every default filled in.\n"
            ".PP\n"
            "The file is strict: an unknown key, a value of the wrong type or out of range, "
            "or a missing required key is an error, reported as\n"
            ".IR file : line : col : \" key: message\".\n"
            "Anchors, aliases, tags and duplicate keys are refused; an absent key and a null "
            "one both mean the default.\n"
            ".PP\n"
            "Sizes are written like \\fB16k\\fR, \\fB1m\\fR or \\fB2g\\fR; "
            "durations like \\fB500ms\\fR, \\fB30s\\fR, \\fB5m\\fR or "
            "\\fB1h\\fR; booleans are \\fBtrue\\fR or \\fBfalse\\fR.\n"
            ".SH KEYS\n"
            "Each section below is one map of the file; \\fBa.b\\fR is key \\fBb\\fR "
            "inside \\fBa\\fR, and \\fBa[]\\fR a list of such maps.\n",
            version);
    fy_conf_doc_man(fy_config_table, "", out);
    fputs(".SH FILES\n"
          ".TP\n"
          ".I /etc/ferry/ferry.yaml\n"
          "the configuration of the packaged service (ferry.service)\n"
          ".SH SEE ALSO\n"
          ".BR ferry (1),\n"
          ".BR systemd.service (5)\n",
          out);
}
