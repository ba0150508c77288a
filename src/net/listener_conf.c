/* Directive table of one listener (`listeners:` items), and numeric address parsing. */
#include "net/listener_conf.h"
#include "net/net_cidr.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

int fy_listener_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[64];
    const char *port;
    if (s[0] == '[') {
        const char *e = strchr(s, ']');
        if (!e || e[1] != ':' || (size_t)(e - s - 1) >= sizeof host) return -1;
        memcpy(host, s + 1, (size_t)(e - s - 1));
        host[e - s - 1] = '\0';
        port = e + 2;
    } else {
        const char *c = strrchr(s, ':');
        if (!c) { /* "8080" */
            host[0] = '\0';
            port = s;
        } else {
            if ((size_t)(c - s) >= sizeof host || memchr(s, ':', (size_t)(c - s))) return -1;
            memcpy(host, s, (size_t)(c - s));
            host[c - s] = '\0';
            port = c + 1;
        }
    }
    /* port: 1..65535, decimal digits only */
    unsigned p = 0;
    if (!*port || strlen(port) > 5) return -1;
    for (const char *q = port; *q; q++) {
        if (*q < '0' || *q > '9') return -1;
        p = p * 10 + (unsigned)(*q - '0');
    }
    if (p == 0 || p > 65535) return -1;

    struct sockaddr_storage tmp;
    memset(&tmp, 0, sizeof tmp);
    if (s[0] == '[') {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&tmp;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)p);
        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1) return -1;
        *len = sizeof *a6;
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&tmp;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)p);
        if (!host[0])
            a4->sin_addr.s_addr = htonl(INADDR_ANY);
        else if (!strcmp(host, "localhost"))
            a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        else if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
            return -1;
        *len = sizeof *a4;
    }
    *ss = tmp;
    return 0;
}

int fy_listener_resolve(const char *s, int socktype, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256];
    const char *port;
    if (s[0] == '[') {
        const char *e = strchr(s, ']');
        if (!e || e[1] != ':' || (size_t)(e - s - 1) >= sizeof host) return -1;
        memcpy(host, s + 1, (size_t)(e - s - 1));
        host[e - s - 1] = '\0';
        port = e + 2;
    } else {
        const char *c = strrchr(s, ':');
        if (!c || c == s || (size_t)(c - s) >= sizeof host) return -1;
        memcpy(host, s, (size_t)(c - s));
        host[c - s] = '\0';
        port = c + 1;
    }
    if (!*port || strlen(port) > 5 || strspn(port, "0123456789") != strlen(port)) return -1;
    long p = strtol(port, NULL, 10);
    if (p < 1 || p > 65535) return -1;
    struct addrinfo hints = {.ai_socktype = socktype}, *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0 || !res) return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static int validate_sni_names(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                              void *obj)
{
    fy_conf_strlist_t *l = field;
    for (size_t i = 0; i < l->n; i++) {
        char *p = l->v[i];
        if (!strcmp(p, "*")) continue;
        if (p[0] == '*' && p[1] == '.') p += 2;
        bool ok = *p != '\0' && strlen(p) <= 253;
        for (char *c = p; ok && *c; c++) {
            if (!(isalnum((unsigned char)*c) || *c == '-' || *c == '.' || *c == '_')) ok = false;
            *c = (char)tolower((unsigned char)*c);
        }
        if (!ok) {
            fy_conf_error(ctx, node, NULL,
                          "bad server name '%.80s'; expected example.com, *.example.com or *",
                          l->v[i]);
            return -1;
        }
    }
    return 0;
}

static int check_sni(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_listener_sni_conf_t *s = obj;
    if (!s->passthrough == !s->relay) {
        fy_conf_error(ctx, map, NULL, "needs exactly one of passthrough, relay");
        return -1;
    }
    const char *t = s->passthrough ? s->passthrough : s->relay;
    if (fy_listener_resolve(t, SOCK_STREAM, &s->addr, &s->addrlen) < 0) {
        fy_conf_error(ctx, map, s->passthrough ? "passthrough" : "relay",
                      "cannot use '%s'; expected HOST:PORT with a resolvable host", t);
        return -1;
    }
    return 0;
}

int fy_listener_conf_cidrs(fy_conf_ctx_t *ctx, const fy_conf_node_t *node,
                           const fy_conf_strlist_t *sl, fy_net_cidr_t **out, size_t *n)
{
    *out = fy_conf_alloc(fy_conf_ctx_arena(ctx), (sl->n + 1) * sizeof(fy_net_cidr_t));
    *n = sl->n;
    for (size_t i = 0; i < sl->n; i++)
        if (fy_net_cidr_parse(sl->v[i], &(*out)[i]) < 0) {
            fy_conf_error(ctx, node, NULL, "bad CIDR '%.60s'; expected like 10.0.0.0/8 or ::1",
                          sl->v[i]);
            return -1;
        }
    return 0;
}

static int validate_accept_proxy(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                                 void *obj)
{
    fy_listener_conf_t *l = obj;
    return fy_listener_conf_cidrs(ctx, node, field, &l->accept_proxy_cidrs, &l->n_accept_proxy);
}

static const fy_conf_directive_t sni_table[] = {
    {.key = "server-name",
     .type = FY_CT_STRLIST,
     .offset = offsetof(fy_listener_sni_conf_t, names),
     .required = true,
     .validate = validate_sni_names,
     .doc = "Server names (SNI) of this entry: exact, `*.example.com` or `*`."},
    {.key = "passthrough",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_listener_sni_conf_t, passthrough),
     .doc = "`HOST:PORT` to relay these connections to without decrypting them (the origin "
            "terminates TLS)."},
    {.key = "relay",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_listener_sni_conf_t, relay),
     .doc = "`HOST:PORT` of a plain TCP service: TLS ends here with the listener's "
            "certificate and the plaintext is relayed at layer 4."},
    {.key = NULL, .check = check_sni},
};

static int validate_address(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_listener_conf_t *l = obj;
    if (fy_listener_parse_addr(l->address, &l->addr, &l->addrlen) < 0) {
        fy_conf_error(ctx, node, NULL,
                      "bad address '%s'; expected HOST:PORT with a numeric host, like "
                      "127.0.0.1:8080, [::1]:8443 or :8080",
                      l->address);
        return -1;
    }
    return 0;
}

static const struct {
    const char *name;
    unsigned bit;
} protos[] = {{"h1", FY_PROTO_H1}, {"h2c", FY_PROTO_H2C}, {"h2", FY_PROTO_H2}, {"h3", FY_PROTO_H3}};

static int add_proto(fy_conf_ctx_t *ctx, const fy_conf_node_t *at, const char *s, size_t len,
                     unsigned *bits)
{
    for (size_t i = 0; i < sizeof protos / sizeof *protos; i++) {
        if (strlen(protos[i].name) == len && !memcmp(protos[i].name, s, len)) {
            *bits |= protos[i].bit;
            return 0;
        }
    }
    fy_conf_error(ctx, at, NULL, "unknown protocol '%.*s'; expected one of: h1, h2c, h2, h3",
                  (int)(len > 40 ? 40 : len), s);
    return -1;
}

/* `protocols: [h1, h2]` or `protocols: h1,h2` -> FY_PROTO_* bits */
static int parse_protocols(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field)
{
    unsigned bits = 0;
    int rc = 0;
    if (node->kind == FY_CONF_SCALAR) {
        const char *p = node->str;
        for (;;) {
            const char *e = strchr(p, ',');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            while (l && *p == ' ') p++, l--;
            while (l && p[l - 1] == ' ') l--;
            if (add_proto(ctx, node, p, l, &bits) < 0) rc = -1;
            if (!e) break;
            p = e + 1;
        }
    } else if (node->kind == FY_CONF_SEQ) {
        for (size_t i = 0; i < node->n; i++) {
            const fy_conf_node_t *it = node->items[i];
            if (it->kind != FY_CONF_SCALAR) {
                fy_conf_error(ctx, it, NULL, "expected a protocol name, got a %s",
                              it->kind == FY_CONF_MAP ? "map" : "list");
                rc = -1;
                continue;
            }
            if (add_proto(ctx, it, it->str, it->len, &bits) < 0) rc = -1;
        }
    } else {
        fy_conf_error(ctx, node, NULL, "expected a list of protocols like [h1, h2], got a map");
        return -1;
    }
    if (rc == 0 && !bits) {
        fy_conf_error(ctx, node, NULL, "needs at least one protocol");
        return -1;
    }
    if (rc == 0) *(unsigned *)field = bits;
    return rc;
}

static void dump_protocols(const void *field, void *file)
{
    unsigned bits = *(const unsigned *)field;
    int n = 0;
    fputc('[', file);
    for (size_t i = 0; i < sizeof protos / sizeof *protos; i++)
        if (bits & protos[i].bit) fprintf(file, "%s%s", n++ ? ", " : "", protos[i].name);
    fputc(']', file);
}

static int check_listener(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_listener_conf_t *l = obj;
    if (!l->name) l->name = l->address;
    /* DESIGN.md §6 defaults: h1,h2c without TLS, h1,h2 with TLS */
    if (l->protocols == 0)
        l->protocols = l->tls ? FY_PROTO_H1 | FY_PROTO_H2 : FY_PROTO_H1 | FY_PROTO_H2C;
    if (l->kind != FY_LISTENER_HTTP && l->tls) {
        fy_conf_error(
            ctx, map, "tls",
            "intercept, socks5 and transparent listeners take plain TCP (TLS is intercepted "
            "inside); remove tls");
        return -1;
    }
    if (l->sni.n && !l->tls) {
        fy_conf_error(ctx, map, "sni", "needs tls (the map routes TLS connections by SNI)");
        return -1;
    }
    if ((l->protocols & FY_PROTO_H2) && !l->tls) {
        fy_conf_error(ctx, map, "protocols", "h2 needs tls (use h2c for cleartext HTTP/2)");
        return -1;
    }
    if ((l->protocols & FY_PROTO_H3) && !l->tls) {
        fy_conf_error(ctx, map, "protocols", "h3 needs tls (QUIC is always encrypted)");
        return -1;
    }
    return 0;
}

#define L(f) offsetof(fy_listener_conf_t, f)

static const char *const kinds[] = {[FY_LISTENER_HTTP] = "http",
                                    [FY_LISTENER_INTERCEPT] = "intercept",
                                    [FY_LISTENER_SOCKS5] = "socks5",
                                    [FY_LISTENER_TRANSPARENT] = "transparent",
                                    NULL};

const fy_conf_directive_t fy_listener_conf_table[] = {
    {.key = "address",
     .type = FY_CT_STRING,
     .offset = L(address),
     .required = true,
     .validate = validate_address,
     .doc = "Where to listen: `HOST:PORT`, `[V6]:PORT` or `:PORT` (all IPv4 addresses). "
            "Numeric hosts and `localhost` only."},
    {.key = "protocols",
     .type = FY_CT_CUSTOM,
     .offset = L(protocols),
     .parse = parse_protocols,
     .dump = dump_protocols,
     .type_name = "list of `h1` `h2c` `h2` `h3` (or comma-separated)",
     .doc = "HTTP versions served on this address; default `h1,h2c` without `tls`, `h1,h2` with "
            "it. `h2`/`h3` need `tls`; `h3` is served over UDP on the same port (QUIC), and TCP "
            "responses then carry `Alt-Svc: h3=\":PORT\"`."},
    {.key = "tls",
     .type = FY_CT_TABLE_PTR,
     .offset = L(tls),
     .sub = fy_tls_conf_table,
     .sub_size = sizeof(fy_tls_conf_t),
     .shorthand_key = "self-signed",
     .doc = "TLS for this listener; absent means plain TCP."},
    {.key = "backlog",
     .type = FY_CT_INT,
     .offset = L(backlog),
     .dflt = "4096",
     .min = 1,
     .max = 65535,
     .doc = "listen(2) backlog."},
    {.key = "name",
     .type = FY_CT_STRING,
     .offset = L(name),
     .doc = "Label used in logs and metrics; default: the address."},
    {.key = "kind",
     .type = FY_CT_ENUM,
     .offset = L(kind),
     .dflt = "http",
     .enums = kinds,
     .doc = "`http`: requests go to `routes`. `intercept`: an explicit intercepting proxy "
            "(CONNECT and absolute-form requests, configured by `intercept:`). `socks5`: a "
            "SOCKS5 proxy (CONNECT; no auth, or username/password = `intercept.auth`) feeding "
            "the same interception. `transparent`: connections redirected here (iptables "
            "REDIRECT: the original destination from SO_ORIGINAL_DST), or pointed here directly "
            "(the destination from SNI or Host), or `intercept.forward`."},
    {.key = "sni",
     .type = FY_CT_TABLE_LIST,
     .offset = L(sni),
     .sub = sni_table,
     .sub_size = sizeof(fy_listener_sni_conf_t),
     .doc = "Per-SNI exceptions on a TLS listener: pass some names through untouched, or end "
            "TLS and relay them at layer 4; other names go to the HTTP routes."},
    {.key = "share",
     .type = FY_CT_BOOL,
     .offset = L(share),
     .dflt = "false",
     .doc = "Share the port with another process that already listens on it (SO_REUSEPORT: "
            "the kernel splits new connections between them), as when a new Ferry takes over "
            "from a draining one. By default a port held by another process (or by another "
            "listener of this file) is an error at start."},
    {.key = "cidr",
     .type = FY_CT_STRING,
     .offset = L(cidr),
     .doc = "Name of a top-level `cidr-lists` entry checked for every request of this listener "
            "before routing."},
    {.key = "client-limits",
     .type = FY_CT_STRING,
     .offset = L(client_limits),
     .doc = "Name of a top-level `client-limits` entry: connection rate (at accept, TCP) and "
            "concurrent requests per client address on this listener."},
    {.key = "rate-limit",
     .type = FY_CT_STRING,
     .offset = L(rate_limit),
     .doc = "Name of a top-level `rate-limits` entry applied to every request of this listener "
            "(intercepted flows included; a CONNECT is a request) before routing."},
    {.key = "waf",
     .type = FY_CT_STRING,
     .offset = L(waf),
     .doc = "Name of a top-level `waf-policies` entry (ModSecurity + CRS) run on every request "
            "of this listener, intercepted flows included, before the route's filters."},
    {.key = "accept-proxy",
     .type = FY_CT_STRLIST,
     .offset = L(accept_proxy),
     .validate = validate_accept_proxy,
     .doc = "CIDRs of trusted fronts (HAProxy `send-proxy`, a load balancer) whose TCP "
            "connections must start with a PROXY protocol v1/v2 header, read before TLS and "
            "HTTP within `limits.header-timeout`; its source address is then the client's "
            "address everywhere (CIDR lists, X-Forwarded-For, rate limits, the access log). "
            "A peer in the list that sends no valid header is closed and logged; peers not in "
            "the list connect as usual and a PROXY header from them is not believed. Not for "
            "QUIC (h3)."},
    {.key = NULL, .check = check_listener},
};
