/* Directive tables of `l4:` listeners and their `sni:` routes. */
#include "l4/l4_conf.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/listener_conf.h"
#include "net/net_cidr.h"

int fy_l4_resolve(const char *s, int socktype, struct sockaddr_storage *ss, socklen_t *len)
{
    return fy_listener_resolve(s, socktype, ss, len);
}

bool fy_l4_cidr_match(const fy_l4_cidr_t *c, size_t n, const struct sockaddr *addr)
{
    return fy_net_cidr_match(c, n, addr);
}

bool fy_l4_sni_match(const char *pattern, const char *name)
{
    if (!strcmp(pattern, "*")) return true;
    if (pattern[0] == '*' && pattern[1] == '.') {
        size_t pl = strlen(pattern + 1), nl = strlen(name);
        /* "*.example.com" matches "a.example.com", not "example.com" nor "a.b.example.com" */
        if (nl <= pl || strcmp(name + nl - pl, pattern + 1)) return false;
        return memchr(name, '.', nl - pl) == NULL;
    }
    return strcmp(pattern, name) == 0;
}

static int validate_listen(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_l4_conf_t *l = obj;
    if (fy_listener_parse_addr(l->listen, &l->addr, &l->addrlen) < 0) {
        fy_conf_error(ctx, node, NULL,
                      "bad address '%s'; expected HOST:PORT with a numeric host, like "
                      "127.0.0.1:9000, [::1]:9000 or :9000",
                      l->listen);
        return -1;
    }
    return 0;
}

static int validate_cidrs(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_l4_conf_t *l = obj;
    return fy_listener_conf_cidrs(ctx, node, field, &l->accept_proxy_cidrs, &l->n_accept_proxy);
}

static int validate_names(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
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

static const char *const modes[] = {
    "tcp", "udp", "tls-passthrough", "tls-terminate", "quic-passthrough", NULL};
static const char *const pps[] = {"off", "v1", "v2", NULL};
static const char *const unknowns[] = {"drop", "default", NULL};

static int check_sni(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_l4_sni_conf_t *s = obj;
    s->to.upstream_index = -1;
    if (!s->to.target == !s->to.upstream) {
        fy_conf_error(ctx, map, NULL, "needs exactly one of target, upstream");
        return -1;
    }
    return 0;
}

#define N(f) offsetof(fy_l4_sni_conf_t, f)

static const fy_conf_directive_t sni_table[] = {
    {.key = "server-name",
     .type = FY_CT_STRLIST,
     .offset = N(names),
     .required = true,
     .validate = validate_names,
     .doc = "Server names this route takes: exact (`a.example.com`), one-label wildcard "
            "(`*.example.com`) or `*` (any name, and clients that send none)."},
    {.key = "target",
     .type = FY_CT_STRING,
     .offset = N(to) + offsetof(fy_l4_target_t, target),
     .doc = "Origin `HOST:PORT`."},
    {.key = "upstream",
     .type = FY_CT_STRING,
     .offset = N(to) + offsetof(fy_l4_target_t, upstream),
     .doc = "Name of an `upstreams:` group to balance over (its servers' host and port)."},
    {.key = "terminate",
     .type = FY_CT_BOOL,
     .offset = N(terminate),
     .dflt = "false",
     .doc = "End TLS here with the listener's `tls` and relay the plaintext (tls-passthrough "
            "listeners)."},
    {.key = NULL, .check = check_sni},
};

static int resolve_to(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, fy_l4_target_t *t, int st)
{
    if (!t->target) return 0;
    if (fy_l4_resolve(t->target, st, &t->addr, &t->addrlen) < 0) {
        fy_conf_error(ctx, map, "target",
                      "cannot use '%s'; expected HOST:PORT with a resolvable host, like "
                      "127.0.0.1:7000",
                      t->target);
        return -1;
    }
    return 0;
}

static int check_l4(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_l4_conf_t *l = obj;
    int rc = 0;
    if (!l->name) l->name = l->listen;
    l->to.upstream_index = -1;
    bool udp = l->mode == FY_L4_UDP || l->mode == FY_L4_QUIC_PASSTHROUGH;
    bool sni_mode = l->mode == FY_L4_TLS_PASSTHROUGH || l->mode == FY_L4_QUIC_PASSTHROUGH;
    int st = udp ? SOCK_DGRAM : SOCK_STREAM;
    if (l->to.target && l->to.upstream) {
        fy_conf_error(ctx, map, NULL, "has both target and upstream; use one");
        rc = -1;
    }
    if (resolve_to(ctx, map, &l->to, st) < 0) rc = -1;
    fy_l4_sni_conf_t *s = l->sni.v;
    for (size_t i = 0; i < l->sni.n; i++) {
        if (resolve_to(ctx, map, &s[i].to, st) < 0) rc = -1;
        if (s[i].terminate && (l->mode != FY_L4_TLS_PASSTHROUGH || !l->tls)) {
            fy_conf_error(ctx, map, "sni",
                          "item %zu: terminate needs mode tls-passthrough and a tls section", i);
            rc = -1;
        }
    }
    if (!sni_mode && l->sni.n) {
        fy_conf_error(ctx, map, "sni", "only tls-passthrough and quic-passthrough route by SNI");
        rc = -1;
    }
    if (!sni_mode && !l->to.target && !l->to.upstream) {
        fy_conf_error(ctx, map, NULL, "needs a target or an upstream");
        rc = -1;
    }
    if (sni_mode && !l->sni.n && !l->to.target && !l->to.upstream) {
        fy_conf_error(ctx, map, NULL, "needs sni routes or a default target/upstream");
        rc = -1;
    }
    if (l->mode == FY_L4_TLS_TERMINATE && !l->tls) {
        fy_conf_error(ctx, map, "tls", "is required for mode tls-terminate");
        rc = -1;
    }
    if (udp && (l->proxy_protocol != FY_L4_PP_OFF || l->accept_proxy.n)) {
        fy_conf_error(ctx, map, "proxy-protocol",
                      "PROXY protocol is for TCP modes only (udp/quic-passthrough relay bare "
                      "datagrams)");
        rc = -1;
    }
    if (udp && l->tls) {
        fy_conf_error(ctx, map, "tls", "udp and quic-passthrough listeners take no tls");
        rc = -1;
    }
    return rc;
}

#define L(f) offsetof(fy_l4_conf_t, f)

const fy_conf_directive_t fy_l4_conf_table[] = {
    {.key = "listen",
     .type = FY_CT_STRING,
     .offset = L(listen),
     .required = true,
     .validate = validate_listen,
     .doc = "Address to accept on: `HOST:PORT`, `[V6]:PORT` or `:PORT` (TCP, or UDP for "
            "`udp`/`quic-passthrough`)."},
    {.key = "mode",
     .type = FY_CT_ENUM,
     .offset = L(mode),
     .dflt = "tcp",
     .enums = modes,
     .doc = "`tcp` relay; `udp` relay; `tls-passthrough` (route by the ClientHello's SNI "
            "without decrypting); `tls-terminate` (end TLS with `tls`, relay plaintext); "
            "`quic-passthrough` (route QUIC by the SNI in its Initial)."},
    {.key = "target",
     .type = FY_CT_STRING,
     .offset = L(to) + offsetof(fy_l4_target_t, target),
     .doc = "Origin `HOST:PORT` (the default for SNI modes when no `sni:` route matches)."},
    {.key = "upstream",
     .type = FY_CT_STRING,
     .offset = L(to) + offsetof(fy_l4_target_t, upstream),
     .doc = "Name of an `upstreams:` group instead of `target`: its balancing and passive "
            "health (failed connects eject a server) apply; the servers' URL scheme is ignored "
            "at layer 4. Give it `health-check: {type: tcp}` for connect probes (a TLS "
            "handshake probe with `https://` server URLs); the default probe is an HTTP GET."},
    {.key = "sni",
     .type = FY_CT_TABLE_LIST,
     .offset = L(sni),
     .sub = sni_table,
     .sub_size = sizeof(fy_l4_sni_conf_t),
     .doc = "SNI routes of `tls-passthrough` and `quic-passthrough`: exact names first, then "
            "wildcards, then `*`, then the listener's own `target`; no match closes the "
            "connection."},
    {.key = "tls",
     .type = FY_CT_TABLE_PTR,
     .offset = L(tls),
     .sub = fy_tls_conf_table,
     .sub_size = sizeof(fy_tls_conf_t),
     .shorthand_key = "self-signed",
     .doc = "Certificates for `tls-terminate` and `terminate: true` SNI routes."},
    {.key = "connect-timeout",
     .type = FY_CT_DURATION,
     .offset = L(connect_timeout_ms),
     .dflt = "5s",
     .min = 1,
     .max = 3600000,
     .doc = "Connecting to the origin (then the next server of an upstream, or close)."},
    {.key = "idle-timeout",
     .type = FY_CT_DURATION,
     .offset = L(idle_timeout_ms),
     .dflt = "10m",
     .min = 1,
     .max = 86400000,
     .doc = "A session with no byte (datagram) either way for this long is closed."},
    {.key = "peek-timeout",
     .type = FY_CT_DURATION,
     .offset = L(peek_timeout_ms),
     .dflt = "5s",
     .min = 1,
     .max = 3600000,
     .doc = "Time to receive the whole ClientHello (and PROXY header) before closing."},
    {.key = "peek-max",
     .type = FY_CT_SIZE,
     .offset = L(peek_max),
     .dflt = "16k",
     .min = 128,
     .max = 65536,
     .doc = "Largest ClientHello (TLS records, or QUIC CRYPTO bytes) read for routing; a "
            "larger one closes the connection (QUIC: drops the flow)."},
    {.key = "proxy-protocol",
     .type = FY_CT_ENUM,
     .offset = L(proxy_protocol),
     .dflt = "off",
     .enums = pps,
     .doc = "Send a PROXY protocol header (`v1` text, `v2` binary) to the origin with the "
            "client's address."},
    {.key = "accept-proxy",
     .type = FY_CT_STRLIST,
     .offset = L(accept_proxy),
     .validate = validate_cidrs,
     .doc = "CIDRs of trusted fronts whose connections must start with a PROXY v1/v2 header; "
            "their client address is then used. Others connect as usual."},
    {.key = "max-sessions",
     .type = FY_CT_INT,
     .offset = L(max_sessions),
     .dflt = "10000",
     .min = 1,
     .max = 10000000,
     .doc = "Sessions per worker: TCP stops accepting at it; UDP drops datagrams of new "
            "clients."},
    {.key = "unknown-version",
     .type = FY_CT_ENUM,
     .offset = L(unknown_version),
     .dflt = "drop",
     .enums = unknowns,
     .doc = "quic-passthrough: a new flow whose first packet has a QUIC version other than 1 "
            "is dropped, or sent to the default target (`target`/`upstream`; the origin's "
            "Version Negotiation then goes back to the client). Version Negotiation packets "
            "from clients are always dropped: only servers send them (RFC 9000 §6)."},
    {.key = "backlog",
     .type = FY_CT_INT,
     .offset = L(backlog),
     .dflt = "4096",
     .min = 1,
     .max = 65535,
     .doc = "listen(2) backlog (TCP modes)."},
    {.key = "share",
     .type = FY_CT_BOOL,
     .offset = L(share),
     .dflt = "false",
     .doc = "Share the port (TCP or UDP) with another process that already has it "
            "(SO_REUSEPORT: the kernel splits new connections and flows between them). By "
            "default a port held by another process or listener is an error at start."},
    {.key = "name",
     .type = FY_CT_STRING,
     .offset = L(name),
     .doc = "Label used in logs; default: the address."},
    {.key = NULL, .check = check_l4},
};
