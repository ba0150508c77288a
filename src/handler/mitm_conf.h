/* Typed config of the intercepting proxy (`intercept:`), used by listeners of
 * `kind: intercept`. Table: handler/mitm_conf.c. */
#ifndef FY_HANDLER_MITM_CONF_H
#define FY_HANDLER_MITM_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf.h"

/* Header edits of a rule (`request-headers` / `response-headers`). */
typedef struct fy_mitm_hdr_edit {
    fy_conf_strmap_t set;     /* replace (or add) */
    fy_conf_strmap_t append;  /* add another field */
    fy_conf_strlist_t remove; /* drop every field of the name */
} fy_mitm_hdr_edit_t;

/* `replace:` items: body rewriting. */
typedef struct fy_mitm_replace {
    char *search; /* literal, or */
    char *regex;  /* PCRE2 pattern ($1 references in `with`) */
    char *with;   /* replacement, default "" */
    int in;       /* enum: 0 response, 1 request, 2 both */
} fy_mitm_replace_t;

/* `respond:` a synthetic response (map local). */
typedef struct fy_mitm_respond {
    int64_t status;           /* default 200 */
    char *body;               /* fixed body, or */
    char *file;               /* a file's contents (read at start) */
    fy_conf_strmap_t headers; /* e.g. content-type */
} fy_mitm_respond_t;

typedef struct fy_mitm_match {
    fy_conf_strlist_t host;    /* patterns; any when empty */
    char *path;                /* prefix, default "/" */
    fy_conf_strlist_t methods; /* any when empty */
    fy_conf_strmap_t headers;  /* request header -> exact value or "*" */
} fy_mitm_match_t;

typedef struct fy_mitm_rule {
    fy_mitm_match_t match;
    fy_mitm_hdr_edit_t request_headers;
    fy_mitm_hdr_edit_t response_headers;
    int64_t status;             /* `status`: override the origin's status; 0: keep */
    fy_mitm_respond_t *respond; /* `respond`: answer without the origin */
    char *map_remote;           /* `map-remote`: http(s)://host[:port] to send to instead */
    bool block;                 /* `block`: 403 */
    fy_conf_list_t replace;     /* of fy_mitm_replace_t */
} fy_mitm_rule_t;

/* `destinations:` items, checked in order; the first whose hosts and ports both match
   decides (none matches: allowed). */
typedef struct fy_mitm_dest_rule {
    int action; /* enum: 0 allow, 1 deny */
    fy_conf_strlist_t
        hosts; /* CIDRs, `loopback`, `private`, names, `*.example.com`; any if empty */
    fy_conf_strlist_t ports; /* "443", "8000-8999"; any when empty */
    int line;                /* where the rule starts (for the 403 and the log) */
} fy_mitm_dest_rule_t;

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
    bool cert_disk;                /* `cert-disk-cache`: also keep them under ca-dir/leaves */
    int64_t max_origins;           /* `max-origins`: ad-hoc origins per worker (LRU) */
    uint64_t connect_timeout_ms;   /* `connect-timeout`: origin connect + TLS, client handshake */
    uint64_t resolve_timeout_ms;   /* `resolve-timeout`: an origin's name, then 502 */
    int64_t resolve_cache;         /* `resolve-cache`: names kept (0: none) */
    uint64_t resolve_ttl_ms;       /* `resolve-ttl` */
    int64_t resolver_threads;      /* `resolver-threads` */
    uint64_t tunnel_idle_ms;       /* `tunnel-idle-timeout`: relayed tunnels with no traffic */
    char *forward;                 /* `forward`: host:port all transparent traffic goes to */
    char *generic_cert;            /* `generic-certificate`: name forged for no-SNI clients */
    fy_conf_list_t rules;          /* `rules`: of fy_mitm_rule_t, all matching ones apply */
    fy_conf_list_t destinations;   /* `destinations`: of fy_mitm_dest_rule_t, first match */
    uint64_t body_cap;             /* `body-cap`: bodies buffered for `replace` (decoded size) */
    struct fy_mitm_capture {
        char *har;         /* `har`: HAR 1.2 file written as flows complete */
        uint64_t body_cap; /* `body-cap`: body bytes kept per direction (0: none) */
    } capture;             /* `capture` */
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

/* "443" or "8000-8999" (1..65535, lo <= hi). Returns 0 or -1. */
int fy_port_range_parse(const char *s, int *lo, int *hi);

/* Does `host` (no port, any case) match a pattern of `l` ("example.com", "*.example.com",
   "*" for any)? */
bool fy_host_list_match(const fy_conf_strlist_t *l, const char *host);

#endif
