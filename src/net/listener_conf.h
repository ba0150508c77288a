/* Typed configuration of one listener (`listeners:` items). Table: net/listener_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_NET_LISTENER_CONF_H
#define FY_NET_LISTENER_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf.h"
#include "net/net_cidr.h"
#include "tls/tls_conf.h"

/* Protocol bits for `protocols: [h1, h2c, h2, h3]`. */
#define FY_PROTO_H1 0x1u
#define FY_PROTO_H2C 0x2u
#define FY_PROTO_H2 0x4u
#define FY_PROTO_H3 0x8u

/* `kind:` what a listener is for. */
enum fy_listener_kind {
    FY_LISTENER_HTTP = 0,  /* routes (web server, reverse proxy) */
    FY_LISTENER_INTERCEPT, /* explicit intercepting proxy (`intercept:`): CONNECT, absolute-form */
    FY_LISTENER_SOCKS5,    /* SOCKS5 proxy feeding the same interception (`intercept:`) */
    FY_LISTENER_TRANSPARENT, /* redirected traffic (SO_ORIGINAL_DST), or SNI/Host when direct */
};
/* `sni:` items of a TLS listener: server names that do not go to the HTTP routes. Names not
   listed are terminated here and served by the routes, as without the map. */
typedef struct fy_listener_sni_conf {
    fy_conf_strlist_t names;      /* `server-name`: exact, "*.example.com" or "*" */
    char *passthrough;            /* `passthrough: HOST:PORT`: relay the TLS bytes untouched */
    char *relay;                  /* `relay: HOST:PORT`: end TLS here, relay the plaintext (L4) */
    struct sockaddr_storage addr; /* resolved from the one that is set */
    socklen_t addrlen;
} fy_listener_sni_conf_t;

typedef struct fy_listener_conf {
    char *address;                /* as written: "127.0.0.1:8080", "[::1]:8443", ":8080" */
    struct sockaddr_storage addr; /* resolved from `address` while loading (numeric only) */
    socklen_t addrlen;
    unsigned protocols; /* FY_PROTO_* bits; default h1 (+h2c/h2 once they exist) */
    fy_tls_conf_t *tls; /* NULL: plain TCP */
    int64_t backlog;    /* listen(2) backlog, default 4096 */
    char *name;         /* optional label used in logs; default = address */
    int kind;           /* enum fy_listener_kind, default http */
    fy_conf_list_t sni; /* of fy_listener_sni_conf_t; needs tls */
    bool share;         /* `share: true`: bind even if another process holds the port */
    /* `accept-proxy`: CIDRs of trusted fronts whose TCP connections must start with a PROXY
     * v1/v2 header (its source address is then the client's); others connect as usual */
    fy_conf_strlist_t accept_proxy;
    fy_net_cidr_t *accept_proxy_cidrs; /* parsed (config arena) */
    size_t n_accept_proxy;

    /* policies, by the names of top-level entries (net/ is below policy/), or NULL */
    char *cidr;          /* `cidr`: a cidr-lists entry */
    char *client_limits; /* `client-limits`: a client-limits entry */
    char *rate_limit;    /* `rate-limit`: a rate-limits entry */
    char *waf;           /* `waf`: a waf-policies entry */
} fy_listener_conf_t;

extern const fy_conf_directive_t fy_listener_conf_table[];

/* Parse "HOST:PORT", "[V6]:PORT", ":PORT" or "PORT" (numeric hosts and "localhost" only).
 * Returns 0, or -1 (nothing written). */
int fy_listener_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len);

/* Resolve "HOST:PORT" (names through getaddrinfo, at load time) for `socktype`.
 * Returns 0 or -1. */
int fy_listener_resolve(const char *s, int socktype, struct sockaddr_storage *ss, socklen_t *len);

/* An `accept-proxy` list (HTTP and layer-4 listeners) parsed into *out (n entries, config
 * arena); a bad CIDR is a config error at `node`. Returns 0 or -1. */
int fy_listener_conf_cidrs(fy_conf_ctx_t *ctx, const fy_conf_node_t *node,
                           const fy_conf_strlist_t *sl, fy_net_cidr_t **out, size_t *n);

#endif
