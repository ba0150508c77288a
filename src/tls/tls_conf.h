/* Typed TLS configuration of a listener (`tls:` inside a listener). Table: tls/tls_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_TLS_TLS_CONF_H
#define FY_TLS_TLS_CONF_H

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"

/* TLS 1.2 suites offered by default: forward-secret AEAD only (no CBC, no RSA key exchange),
 * AES-128-GCM first as for TLS 1.3. */
#define FY_TLS_DEFAULT_CIPHERS                                                                     \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:"     \
    "ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384"

typedef struct fy_tls_cert_conf {
    char *cert; /* PEM chain path */
    char *key;  /* PEM private key path */
} fy_tls_cert_conf_t;

enum fy_tls_version { FY_TLS_V12 = 0, FY_TLS_V13 = 1 };

typedef struct fy_tls_conf {
    /* `tls: self-signed` (shorthand) or `self-signed: true`: generate at first start and keep
       under the data dir ($XDG_DATA_HOME/ferry or ~/.local/share/ferry). */
    bool self_signed;
    /* `cert:`/`key:` for one certificate, and/or `certificates: [{cert, key}, ...]` for SNI:
       the loader merges both forms into this list; the first is the default. */
    char *cert;
    char *key;
    fy_conf_list_t certificates; /* of fy_tls_cert_conf_t */
    int min_version;             /* enum fy_tls_version, `min-version: "1.2"|"1.3"`, default 1.2 */
    bool session_tickets;        /* default true */
    uint64_t handshake_timeout_ms; /* `handshake-timeout`, default 10s */
    char *ciphers;     /* TLS 1.2 cipher list (OpenSSL syntax); NULL = FY_TLS_DEFAULT_CIPHERS */
    char *ticket_keys; /* `ticket-keys`: shared key file (tls/tickets.h); NULL: random per start */
} fy_tls_conf_t;

extern const fy_conf_directive_t fy_tls_conf_table[];

#endif
