/* TLS session ticket keys shared by several instances (`tls: {ticket-keys: PATH}`): a file of
 * binary records in nginx's ssl_session_ticket_key layout, 80 bytes (name[16], HMAC-SHA256
 * key[32], AES-256-CBC key[32]) or 48 bytes (name[16], HMAC key[16], AES-128-CBC key[16]).
 * The first record encrypts new tickets; every record decrypts (a ticket under a later one is
 * accepted and renewed under the first). Read when a listener's TLS context is built (start,
 * and every reload), so rotating means: put the new key first, keep the old one listed until
 * its tickets have expired, reload. Pure file parsing plus an OpenSSL callback; the keys are
 * immutable once loaded and read by any worker.
 * Threads: loaded on the main thread; the keys are immutable and the callback runs on any
 * worker. */
#ifndef FY_TLS_TICKETS_H
#define FY_TLS_TICKETS_H

#include <stddef.h>

#include "conf/conf.h"

#define FY_TLS_TICKET_KEYS_MAX 16 /* records in one file */

typedef struct fy_tls_tickets fy_tls_tickets_t;

/* Parse key-file bytes. Returns the keys (free with fy_tls_tickets_free), or NULL with a
 * one-line reason in msg ("48 or 80 bytes per key: 50 bytes", "no key"). */
fy_tls_tickets_t *fy_tls_tickets_parse(const unsigned char *buf, size_t len, char *msg,
                                       size_t msglen);
/* Read and parse `path`; reasons name the file. */
fy_tls_tickets_t *fy_tls_tickets_load(const char *path, char *msg, size_t msglen);
void fy_tls_tickets_free(fy_tls_tickets_t *k);
size_t fy_tls_tickets_count(const fy_tls_tickets_t *k);
/* The encrypting (first) key's bytes as the file holds them (name, HMAC secret, AES key; 80 or
 * 48): the secret HTTP/3 derives GnuTLS's ticket key from. Returns the length written. */
size_t fy_tls_tickets_first(const fy_tls_tickets_t *k, unsigned char out[80]);

/* Make `ssl_ctx` (an SSL_CTX *) encrypt and decrypt its tickets with `k` (borrowed: it must
 * outlive the context's use; the listener's fy_tls_ctx_t owns both). Returns 0 or -1. */
int fy_tls_tickets_attach(void *ssl_ctx, const fy_tls_tickets_t *k);

/* FY_CT_STRING validator: the file parses (NULL passes). */
int fy_tls_valid_ticket_keys(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                             void *obj);

#endif
