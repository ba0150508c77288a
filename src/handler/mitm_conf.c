/* Directive table of `intercept:`, CIDR and host-pattern helpers. */
#include "handler/mitm_conf.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int fy_cidr_parse(const char *s, fy_cidr_t *out)
{
    char buf[64];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n + 1);
    char *slash = strchr(buf, '/');
    int bits = -1;
    if (slash) {
        *slash = '\0';
        char *end;
        long b = strtol(slash + 1, &end, 10);
        if (*end || slash[1] == '\0' || b < 0 || b > 128) return -1;
        bits = (int)b;
    }
    memset(out, 0, sizeof *out);
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        out->family = AF_INET;
        if (bits > 32) return -1;
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

bool fy_cidr_match(const fy_cidr_t *c, const struct sockaddr *sa)
{
    const unsigned char *a;
    if (sa->sa_family == AF_INET) {
        if (c->family != AF_INET) return false;
        a = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
    } else if (sa->sa_family == AF_INET6) {
        a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        if (c->family == AF_INET) {
            static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            if (memcmp(a, mapped, 12) != 0) return false;
            a += 12;
        }
    } else {
        return false;
    }
    int bits = c->bits;
    for (int i = 0; bits > 0; i++, bits -= 8) {
        unsigned char m = bits >= 8 ? 0xff : (unsigned char)(0xff << (8 - bits));
        if ((a[i] & m) != (c->addr[i] & m)) return false;
    }
    return true;
}

bool fy_host_list_match(const fy_conf_strlist_t *l, const char *host)
{
    size_t hl = strlen(host);
    for (size_t i = 0; i < l->n; i++) {
        const char *p = l->v[i];
        if (strcmp(p, "*") == 0) return true;
        if (p[0] == '*' && p[1] == '.') {
            size_t sl = strlen(p + 1); /* ".example.com" */
            if (hl > sl && strcasecmp(host + hl - sl, p + 1) == 0) return true;
            continue;
        }
        if (strcasecmp(p, host) == 0) return true;
    }
    return false;
}

static int validate_cidrs(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    const fy_conf_strlist_t *l = field;
    int rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        fy_cidr_t c;
        if (fy_cidr_parse(l->v[i], &c) < 0) {
            fy_conf_error(ctx, node, NULL,
                          "bad CIDR '%.60s'; expected an address with an optional /prefix, like "
                          "10.0.0.0/8 or ::1",
                          l->v[i]);
            rc = -1;
        }
    }
    return rc;
}

static int validate_auth(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    const char *a = *(char **)field;
    if (!strchr(a, ':') || a[0] == ':') {
        fy_conf_error(ctx, node, NULL, "expected user:password");
        return -1;
    }
    return 0;
}

#define I(f) offsetof(fy_intercept_conf_t, f)

const fy_conf_directive_t fy_intercept_conf_table[] = {
    {.key = "ca-dir",
     .type = FY_CT_STRING,
     .offset = I(ca_dir),
     .doc = "Directory of the interception CA (`ferry-ca.pem`, `ferry-ca.key` mode 0600), "
            "generated on first use; default the data dir."},
    {.key = "upstream-ca",
     .type = FY_CT_STRING,
     .offset = I(upstream_ca),
     .doc = "PEM bundle to verify origin certificates; default the system store."},
    {.key = "insecure",
     .type = FY_CT_STRLIST,
     .offset = I(insecure),
     .doc = "Hosts (`example.com`, `*.example.com`) whose origin certificate is not verified. "
            "Everything else that fails verification gets a 502 page."},
    {.key = "allow",
     .type = FY_CT_STRLIST,
     .offset = I(allow),
     .dflt = "[127.0.0.0/8, \"::1/128\"]",
     .validate = validate_cidrs,
     .doc = "Client addresses (CIDRs) that may use the proxy; others get 403. Loopback only "
            "by default: Ferry is never an open proxy unless told."},
    {.key = "auth",
     .type = FY_CT_STRING,
     .offset = I(auth),
     .validate = validate_auth,
     .doc = "`user:password`: require Basic proxy authentication (407 otherwise)."},
    {.key = "passthrough",
     .type = FY_CT_STRLIST,
     .offset = I(passthrough),
     .doc = "Hosts (`example.com`, `*.example.com`, `*`) whose CONNECT tunnels are relayed "
            "without decryption."},
    {.key = "pinning-failures",
     .type = FY_CT_INT,
     .offset = I(pin_failures),
     .dflt = "3",
     .min = 0,
     .max = 1000,
     .doc = "Client TLS handshake failures with a forged certificate (certificate pinning) "
            "after which a host is passed through undecrypted; 0: never."},
    {.key = "pinning-ttl",
     .type = FY_CT_DURATION,
     .offset = I(pin_ttl_ms),
     .dflt = "10m",
     .doc = "How long a host stays passed through after pinning was detected."},
    {.key = "cert-cache",
     .type = FY_CT_INT,
     .offset = I(cert_cache),
     .dflt = "1000",
     .min = 1,
     .max = 1000000,
     .doc = "Forged certificates kept in memory (LRU, shared by the workers)."},
    {.key = "max-origins",
     .type = FY_CT_INT,
     .offset = I(max_origins),
     .dflt = "1024",
     .min = 1,
     .max = 1000000,
     .doc = "Origins (host, port, TLS) with a connection pool per worker (LRU); past it, and "
            "all in use: 502."},
    {.key = "connect-timeout",
     .type = FY_CT_DURATION,
     .offset = I(connect_timeout_ms),
     .dflt = "10s",
     .doc = "Origin connect and TLS handshake, and the client's TLS handshake, each."},
    {.key = "tunnel-idle-timeout",
     .type = FY_CT_DURATION,
     .offset = I(tunnel_idle_ms),
     .dflt = "5m",
     .doc = "A relayed (undecrypted) tunnel with no traffic either way is closed."},
    {.key = NULL},
};
