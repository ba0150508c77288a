/* Typed configuration of layer-4 listeners (`l4:` items). Table: l4/l4_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_L4_L4_CONF_H
#define FY_L4_L4_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf.h"
#include "tls/tls_conf.h"
#include "net/net_cidr.h"

enum fy_l4_mode {
    FY_L4_TCP = 0,
    FY_L4_UDP,
    FY_L4_TLS_PASSTHROUGH,
    FY_L4_TLS_TERMINATE,
    FY_L4_QUIC_PASSTHROUGH,
};

enum fy_l4_pp { FY_L4_PP_OFF = 0, FY_L4_PP_V1, FY_L4_PP_V2 };
enum fy_l4_unknown { FY_L4_UNKNOWN_DROP = 0, FY_L4_UNKNOWN_DEFAULT };

/* Where a session goes: one address, or a balanced `upstreams:` group. */
typedef struct fy_l4_target {
    char *target;   /* `target: HOST:PORT` (resolved at load) */
    char *upstream; /* `upstream: NAME` */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int upstream_index; /* resolved by config.c: index in cfg->upstreams; -1 none */
} fy_l4_target_t;

/* `sni:` items of passthrough listeners */
typedef struct fy_l4_sni_conf {
    fy_conf_strlist_t names; /* `server-name`: exact or "*.example.com"; "*" = default */
    fy_l4_target_t to;       /* `target` / `upstream` */
    bool terminate;          /* `terminate`: TLS is ended here with the listener's `tls` and the
                                plaintext relayed (tls-passthrough listeners only) */
} fy_l4_sni_conf_t;

typedef fy_net_cidr_t fy_l4_cidr_t; /* net/net_cidr.h */

typedef struct fy_l4_conf {
    char *listen; /* `listen`: HOST:PORT */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *name;
    int mode;           /* enum fy_l4_mode */
    fy_l4_target_t to;  /* default target (`target` / `upstream` at the listener level) */
    fy_conf_list_t sni; /* of fy_l4_sni_conf_t */
    fy_tls_conf_t *tls; /* tls-terminate, or `terminate: true` SNI routes */
    uint64_t connect_timeout_ms;
    uint64_t idle_timeout_ms;
    uint64_t peek_timeout_ms;
    uint64_t peek_max;
    int proxy_protocol;               /* enum fy_l4_pp, toward the origin */
    fy_conf_strlist_t accept_proxy;   /* CIDRs allowed to send a PROXY header */
    fy_l4_cidr_t *accept_proxy_cidrs; /* parsed */
    size_t n_accept_proxy;
    int64_t max_sessions; /* per worker: TCP sessions pause accepting; UDP new flows dropped */
    int unknown_version;  /* enum fy_l4_unknown (quic-passthrough) */
    int64_t backlog;
    bool share; /* `share: true`: bind even if another process holds the port */
} fy_l4_conf_t;

extern const fy_conf_directive_t fy_l4_conf_table[];

/* Resolve "HOST:PORT" (names through getaddrinfo, at load). Returns 0 or -1. */
int fy_l4_resolve(const char *s, int socktype, struct sockaddr_storage *ss, socklen_t *len);

/* Does `addr` fall inside one of the CIDRs? */
bool fy_l4_cidr_match(const fy_l4_cidr_t *c, size_t n, const struct sockaddr *addr);

/* Does `name` (lower case) match the pattern (exact, "*.example.com", "*")? */
bool fy_l4_sni_match(const char *pattern, const char *name);

#endif
