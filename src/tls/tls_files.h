/* Load-time checks of the PEM files a config names, so `ferry check` refuses what `ferry run`
 * could not start, with the config's file:line:col instead of OpenSSL's error stack.
 * Pure functions of the files (no global state besides OpenSSL's error queue, which they
 * leave empty); callable from any thread. */
#ifndef FY_TLS_TLS_FILES_H
#define FY_TLS_TLS_FILES_H

#include <stddef.h>

#include "conf/conf.h"

/* The certificate chain in `cert` and the private key in `key` are readable PEM and belong
   together. Returns 0, or -1 with a one-line reason naming the file in msg, e.g.
   "'site.key' does not hold the private key of 'site.pem'". */
int fy_tls_check_cert_key(const char *cert, const char *key, char *msg, size_t len);
/* `path` is a readable PEM file holding at least one certificate (a CA bundle). */
int fy_tls_check_ca_file(const char *path, char *msg, size_t len);

/* FY_CT_STRING validator of a TLS 1.2 cipher list (OpenSSL syntax) that selects at least one
   cipher this OpenSSL knows (NULL passes). */
int fy_tls_valid_ciphers(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj);
/* FY_CT_STRING validator of a CA bundle (fy_tls_check_ca_file; NULL passes). */
int fy_tls_valid_ca_file(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj);
/* For a table's check: cert and key (both set) as fy_tls_check_cert_key, reported at the
   position of `cert_key` in `map` ("cert" when NULL). Returns 0 or -1 after fy_conf_error. */
int fy_tls_conf_check_pair(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, const char *cert,
                           const char *key, const char *cert_key);

#endif
