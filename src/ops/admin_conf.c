/* Directive table of `admin:` (the admin listener: metrics and the JSON API). */
#include "ops/admin_conf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "conf/conf_valid.h"
#include "net/listener_conf.h"

#define A(f) offsetof(fy_admin_conf_t, f)

static int validate_address(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_admin_conf_t *a = obj;
    if (fy_listener_parse_addr(a->address, &a->addr, &a->addrlen) < 0) {
        fy_conf_error(ctx, node, NULL,
                      "bad address '%s'; expected HOST:PORT with a numeric host, like "
                      "127.0.0.1:9901 or [::1]:9901",
                      a->address);
        return -1;
    }
    return 0;
}

/* The token is the file's first line (without the newline); an empty one is refused. */
static int validate_token_file(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                               void *obj)
{
    fy_admin_conf_t *a = obj;
    FILE *f = fopen(a->token_file, "r");
    if (!f) {
        fy_conf_error(ctx, node, NULL, "%s: %s", a->token_file, strerror(errno));
        return -1;
    }
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    if (!buf[0]) {
        fy_conf_error(ctx, node, NULL, "%s: the first line (the token) is empty", a->token_file);
        return -1;
    }
    a->token = fy_conf_strdup(fy_conf_ctx_arena(ctx), buf);
    return 0;
}

static int validate_token(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *t = *(char **)field;
    for (const unsigned char *p = (const unsigned char *)t; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f) {
            fy_conf_error(ctx, node, NULL, "may hold only visible ASCII characters");
            return -1;
        }
    if (!t[0]) {
        fy_conf_error(ctx, node, NULL, "is empty; leave it out for no token");
        return -1;
    }
    return 0;
}

bool fy_admin_conf_is_loopback(const fy_admin_conf_t *c)
{
    if (c->addr.ss_family == AF_INET) {
        const struct sockaddr_in *s = (const void *)&c->addr;
        return (ntohl(s->sin_addr.s_addr) >> 24) == 127;
    }
    if (c->addr.ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const void *)&c->addr;
        return IN6_IS_ADDR_LOOPBACK(&s->sin6_addr);
    }
    return false;
}

bool fy_admin_conf_is_exposed(const fy_admin_conf_t *c)
{
    return !fy_admin_conf_is_loopback(c) && !c->token && !c->client_ca;
}

static int check_admin(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_admin_conf_t *a = obj;
    int rc = 0;
    if (a->addrlen && !fy_admin_conf_is_loopback(a) && !a->allow_remote) {
        fy_conf_error(ctx, fy_conf_map_at(map, "address"), "address",
                      "%s is not a loopback address; the admin API can change the "
                      "configuration: set allow-remote: true (with a token or client-ca) to "
                      "serve it to other hosts",
                      a->address);
        rc = -1;
    }
    if (a->token && a->token_file && fy_conf_map_at(map, "token") != map) {
        fy_conf_error(ctx, fy_conf_map_at(map, "token-file"), "token-file",
                      "give token or token-file, not both");
        rc = -1;
    }
    if (a->client_ca && !a->tls) {
        fy_conf_error(ctx, fy_conf_map_at(map, "client-ca"), "client-ca",
                      "needs tls (client certificates are checked in the TLS handshake)");
        rc = -1;
    }
    return rc;
}

const fy_conf_directive_t fy_admin_conf_table[] = {
    {.key = "address",
     .type = FY_CT_STRING,
     .offset = A(address),
     .dflt = "127.0.0.1:9901",
     .validate = validate_address,
     .doc = "Where the admin listener accepts (GET /metrics, the JSON API); numeric HOST:PORT."},
    {.key = "allow-remote",
     .type = FY_CT_BOOL,
     .offset = A(allow_remote),
     .dflt = "false",
     .doc = "Allow a non-loopback `address` (then give `token` or `client-ca`: `ferry check` "
            "warns without either)."},
    {.key = "token",
     .type = FY_CT_STRING,
     .offset = A(token),
     .validate = validate_token,
     .doc = "Bearer token: every request needs `Authorization: Bearer TOKEN` (else 401)."},
    {.key = "token-file",
     .type = FY_CT_STRING,
     .offset = A(token_file),
     .validate = validate_token_file,
     .doc = "Read the bearer token from the first line of this file (at load and reload)."},
    {.key = "tls",
     .type = FY_CT_TABLE_PTR,
     .offset = A(tls),
     .sub = fy_tls_conf_table,
     .sub_size = sizeof(fy_tls_conf_t),
     .shorthand_key = "self-signed",
     .doc = "Serve the admin listener over TLS (the keys of a listener's `tls`)."},
    {.key = "client-ca",
     .type = FY_CT_STRING,
     .offset = A(client_ca),
     .validate = fy_conf_valid_readable_file,
     .doc = "PEM file of CAs: TLS clients must present a certificate one of them signed "
            "(needs `tls`)."},
    {.key = "max-body",
     .type = FY_CT_SIZE,
     .offset = A(max_body),
     .dflt = "1m",
     .min = 1024,
     .max = 64 << 20,
     .doc = "Largest request body (a config for POST /config); over it: 413."},
    {.key = "timeout",
     .type = FY_CT_DURATION,
     .offset = A(timeout_ms),
     .dflt = "10s",
     .min = 100,
     .max = 3600000,
     .doc = "A request's head and body must arrive within this; also the keep-alive idle "
            "time."},
    {.key = NULL, .check = check_admin},
};
