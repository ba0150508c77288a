/* Typed config of the admin listener (`admin:`; absent = off). Table: ops/admin_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_OPS_ADMIN_CONF_H
#define FY_OPS_ADMIN_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conf/conf.h"
#include "tls/tls_conf.h"

typedef struct fy_admin_conf {
    char *address;                /* `address`, default 127.0.0.1:9901 */
    struct sockaddr_storage addr; /* resolved from address (numeric) */
    socklen_t addrlen;
    bool allow_remote;   /* `allow-remote`: a non-loopback address is an error without it */
    char *token;         /* `token`: the bearer token every request must carry, or NULL */
    char *token_file;    /* `token-file`: the token read from this file (first line) at load */
    fy_tls_conf_t *tls;  /* `tls`: serve the admin API over TLS (NULL: plain) */
    char *client_ca;     /* `client-ca`: PEM CAs; TLS clients must present a certificate one
                            of them signed (needs tls) */
    uint64_t max_body;   /* `max-body`: largest request body (POST /config), default 1m: 413 */
    uint64_t timeout_ms; /* `timeout`: a request's head and body must arrive in this, 10s */
} fy_admin_conf_t;

extern const fy_conf_directive_t fy_admin_conf_table[];

/* Is the address loopback (127.0.0.0/8, ::1)? */
bool fy_admin_conf_is_loopback(const fy_admin_conf_t *c);
/* Does the admin listener accept anyone who can reach it: a non-loopback address with neither
 * a token nor client certificates? (`ferry check` warns.) */
bool fy_admin_conf_is_exposed(const fy_admin_conf_t *c);

#endif
