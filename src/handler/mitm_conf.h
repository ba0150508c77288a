/* Typed config of the intercepting proxy (`intercept:`), used by listeners of
 * `kind: intercept`. Table: handler/mitm_conf.c. */
#ifndef FY_HANDLER_MITM_CONF_H
#define FY_HANDLER_MITM_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf.h"

typedef struct fy_intercept_conf {
    char *ca_dir;                  /* `ca-dir`: where ferry-ca.pem/.key live; default data-dir */
    char *upstream_ca;             /* `upstream-ca`: PEM bundle for origins; default system */
    fy_conf_strlist_t insecure;    /* `insecure`: hosts whose origin certificate is not checked */
    fy_conf_strlist_t allow;       /* `allow`: client CIDRs; default loopback only */
    char *auth;                    /* `auth`: "user:password" for Basic proxy auth; NULL: none */
    fy_conf_strlist_t passthrough; /* `passthrough`: hosts never decrypted (wildcards) */
    int64_t pin_failures;          /* `pinning-failures`: handshake failures that bypass a host */
    uint64_t pin_ttl_ms;           /* `pinning-ttl`: how long such a host is passed through */
    int64_t cert_cache;            /* `cert-cache`: forged certificates kept (LRU) */
    int64_t max_origins;           /* `max-origins`: ad-hoc origins per worker (LRU) */
    uint64_t connect_timeout_ms;   /* `connect-timeout`: origin connect + TLS, client handshake */
    uint64_t tunnel_idle_ms;       /* `tunnel-idle-timeout`: relayed tunnels with no traffic */
} fy_intercept_conf_t;

extern const fy_conf_directive_t fy_intercept_conf_table[];

/* One `allow` entry parsed: family, address bytes, prefix length. */
typedef struct fy_cidr {
    int family;
    unsigned char addr[16];
    int bits;
} fy_cidr_t;

/* "10.0.0.0/8", "::1/128", "127.0.0.1" (a host). Returns 0 or -1. */
int fy_cidr_parse(const char *s, fy_cidr_t *out);
/* Does the address match (IPv4-mapped IPv6 addresses match IPv4 entries)? */
bool fy_cidr_match(const fy_cidr_t *c, const struct sockaddr *sa);

/* Does `host` (no port, any case) match a pattern of `l` ("example.com", "*.example.com",
   "*" for any)? */
bool fy_host_list_match(const fy_conf_strlist_t *l, const char *host);

#endif
