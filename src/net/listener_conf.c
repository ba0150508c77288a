/* Directive table of one listener (`listeners:` items), and numeric address parsing. */
#include "net/listener_conf.h"

#include <arpa/inet.h>
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
    {.key = NULL, .check = check_listener},
};
