/* The whole typed configuration of one ferry process (one generation), and its loader.
 * Composes the modules' directive tables; the top-level table lives in config.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_CONFIG_H
#define FY_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "conf/conf.h"
#include "h2/h2_conf.h"
#include "handler/mitm_conf.h"
#include "handler/proxy_conf.h"
#include "handler/respond_conf.h"
#include "handler/static_conf.h"
#include "handler/wt_conf.h"
#include "http/http_conf.h"
#include "l4/l4_conf.h"
#include "net/listener_conf.h"
#include "ops/admin_conf.h"
#include "ops/inspector_conf.h"
#include "ops/log_conf.h"
#include "policy/trace_conf.h"
#include "policy/compress_conf.h"
#include "policy/jwt_conf.h"
#include "policy/transform_conf.h"
#include "policy/cidr_conf.h"
#include "policy/ratelimit_conf.h"
#include "policy/cache_conf.h"
#include "policy/waf_conf.h"
#include "quic/quic_conf.h"
#include "upstream/upstream_conf.h"

typedef struct fy_route_match {
    fy_conf_strlist_t host;    /* `host`: exact names or "*.example.com" wildcards; empty = any.
                                  One scalar or a list. Compared case-insensitively, port ignored */
    char *path;                /* `path`: prefix, must start with "/"; default "/" */
    fy_conf_strlist_t methods; /* `method`: optional list, e.g. [GET, HEAD] */
    char *path_exact;          /* `path-exact`: the whole path must be this */
    char *path_regex;          /* `path-regex`: PCRE2 pattern the path must match */
    fy_conf_strmap_t headers;  /* `header`: name -> exact value, or "*" for present */
    fy_conf_strmap_t query;    /* `query`: parameter -> exact (raw) value, or "*" */
} fy_route_match_t;

typedef struct fy_route_conf {
    fy_route_match_t match;                   /* `match` (optional: absent = everything) */
    fy_static_conf_t *static_;                /* `static` */
    fy_respond_conf_t *respond;               /* `respond` */
    fy_proxy_conf_t *proxy;                   /* `proxy` */
    const fy_upstream_conf_t *proxy_upstream; /* resolved from proxy->upstream */
    struct fy_echo_conf {
        int unused;
    } * echo;                       /* `echo: {}`: request body streamed back */
    fy_jwt_conf_t *jwt;             /* `jwt` (policy/jwt_conf.h) */
    fy_transform_conf_t *transform; /* `transform` (policy/transform_conf.h) */
    fy_compress_conf_t *compress;   /* `compress` (policy/compress_conf.h) */

    fy_cidr_conf_t *cidr;                   /* `cidr` (policy/cidr_conf.h), or NULL */
    fy_ratelimit_conf_t *rate_limit;        /* `rate-limit` (policy/ratelimit_conf.h), or NULL */
    fy_client_limits_conf_t *client_limits; /* `client-limits`, or NULL */
    fy_capture_route_conf_t *capture; /* `capture`: the inspector's flight recorder, or NULL */
    fy_wt_conf_t *webtransport; /* `webtransport`: WebTransport sessions (handler/wt_conf.c) */
    fy_cache_conf_t *cache;     /* `cache` (policy/cache_conf.h): NULL when absent */
    fy_waf_conf_t *waf;         /* `waf` (policy/waf_conf.h): NULL when absent */
    /* exactly one handler key must be present (checked) */
} fy_route_conf_t;

typedef struct fy_config {
    int64_t workers;                /* `workers`: "auto" (= online CPUs) or 1..256 */
    fy_conf_list_t listeners;       /* of fy_listener_conf_t; at least one unless `l4` has one */
    fy_conf_list_t routes;          /* of fy_route_conf_t; first match wins */
    fy_conf_list_t upstreams;       /* of fy_upstream_conf_t */
    fy_conf_list_t l4;              /* of fy_l4_conf_t: layer-4 relays */
    fy_conf_list_t cidr_lists;      /* of fy_cidr_conf_t: named CIDR lists */
    fy_conf_list_t client_limits;   /* of fy_client_limits_conf_t: named per-client limits */
    fy_conf_list_t rate_limits;     /* of fy_ratelimit_conf_t: named rate limits (listeners) */
    fy_conf_list_t waf_policies;    /* of fy_waf_conf_t: named WAF policies (listeners) */
    fy_http_limits_t limits;        /* `limits` */
    fy_h2_conf_t http2;             /* `http2` */
    fy_quic_conf_t quic;            /* `quic` (QUIC and HTTP/3 settings of h3 listeners) */
    fy_log_conf_t log;              /* `log` */
    fy_trace_conf_t tracing;        /* `tracing` (policy/trace_conf.c) */
    fy_intercept_conf_t intercept;  /* `intercept` (listeners of kind intercept) */
    fy_admin_conf_t *admin;         /* `admin`: the admin listener (ops/admin.c), NULL = off */
    fy_inspector_conf_t *inspector; /* `inspector`: capture store and web UI, or NULL */
    char *data_dir;                 /* `data-dir`: default $XDG_DATA_HOME/ferry or
                                       ~/.local/share/ferry (self-signed certs live there) */
    fy_conf_arena_t *arena;         /* owned: everything above lives in it */
    const char *source;             /* file name or "<embedded>" */
} fy_config_t;

/* The top-level directive table (config.c); its nested tables come from the modules. */
extern const fy_conf_directive_t fy_config_table[];

/* The embedded default config (`ferry` / `make run`): demo site on 127.0.0.1:8080 and
 * https://127.0.0.1:8443 with a self-signed certificate. NUL-terminated YAML. */
extern const char fy_config_embedded[];

/* Load and validate a config from a file (path) or from text (name, text). Returns the config
 * or NULL with every error ("file:line:col: key: message", one per line) written to `errf`. */
fy_config_t *fy_config_load_file(const char *path, FILE *errf);
fy_config_t *fy_config_load_text(const char *name, const char *text, size_t len, FILE *errf);
void fy_config_free(fy_config_t *cfg);

/* $XDG_DATA_HOME/ferry, else ~/.local/share/ferry (the `data-dir` default). */
void fy_config_default_data_dir(char *buf, size_t len);

/* Print the effective configuration as YAML (every key, defaults included). */
void fy_config_dump(const fy_config_t *cfg, FILE *out);

/* Markdown reference of every directive (docs/CONFIG.md). */
void fy_config_doc(FILE *out);
/* The same reference as the man page ferry.yaml(5) (`ferry doc-config --man`). */
void fy_config_doc_man(FILE *out, const char *version);

#endif
