/* TLS over TCP with OpenSSL 3: server contexts with SNI certificate selection and ALPN, and the
 * TLS transport (core/transport.h) stacked on a socket. */
#ifndef FY_TLS_TLS_H
#define FY_TLS_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/transport.h"
#include "tls/tls_conf.h"

typedef struct fy_tls_ctx fy_tls_ctx_t;

/* Build the server context for one listener: load every certificate (or generate/load the
 * self-signed one under data_dir), index their names for SNI, set ALPN from `alpn` (a
 * NULL-terminated list in preference order, e.g. {"http/1.1", NULL}), versions, tickets.
 * Shared by all workers (OpenSSL contexts are thread-safe once built).
 * Returns the context, or NULL after logging a reason that names the file and the problem. */
fy_tls_ctx_t *fy_tls_ctx_new(const fy_tls_conf_t *conf, const char *data_dir,
                             const char *const *alpn);
void fy_tls_ctx_free(fy_tls_ctx_t *ctx);
/* Clients must present a certificate that a CA in `ca_file` (PEM) signed, or the handshake
 * fails (the admin listener's client-ca). Before any transport. 0, or -1 after logging. */
int fy_tls_ctx_require_client_cert(fy_tls_ctx_t *ctx, const char *ca_file);
/* Handshake timeout from the config (ms). */
uint64_t fy_tls_ctx_handshake_timeout(const fy_tls_ctx_t *ctx);

/* A server-side TLS transport over `fd` (borrowed). Returns NULL on OOM. Free with
 * t->ops->destroy(t). The handshake runs in t->ops->handshake. */
fy_transport_t *fy_tls_transport_new(fy_tls_ctx_t *ctx, int fd);

/* Read tracking (layer 4's tls-terminate relay): after fy_tls_track_reads(t), a read that
 * returned bytes tells with fy_tls_read_drained(t) whether the socket had nothing more at
 * the library's last socket read (it got fewer bytes than it asked for) and the library holds
 * no record either, so an edge-triggered caller may wait for the next event instead of
 * reading again only to hear WANT_READ. False when unsure. */
void fy_tls_track_reads(fy_transport_t *t);
bool fy_tls_read_drained(const fy_transport_t *t);

/* A transport over an SSL already set up by the caller (interception: tls/mint.c), which
 * passes ownership of `ssl` (freed by destroy). `fd` is borrowed. NULL on OOM (ssl freed). */
struct ssl_st;
fy_transport_t *fy_tls_transport_from_ssl(struct ssl_st *ssl, int fd);

/* ---- client side (origins) ---- */

typedef struct fy_tls_client_ctx fy_tls_client_ctx_t;

/* A client context: verification against `ca` (PEM file) or the system store, unless
 * `insecure`; a client certificate `cert`/`key` (PEM) for mTLS when not NULL; ALPN http/1.1.
 * Returns NULL after logging (bad CA, certificate or key file). Thread-safe once built. */
fy_tls_client_ctx_t *fy_tls_client_ctx_new(const char *ca, bool insecure, const char *cert,
                                           const char *key);
void fy_tls_client_ctx_free(fy_tls_client_ctx_t *ctx);
/* Offer ALPN "h2" only (HTTP/2 origins) instead of "http/1.1". Call before any transport. */
void fy_tls_client_ctx_alpn_h2(fy_tls_client_ctx_t *ctx);

/* A client TLS transport over `fd` (borrowed) that sends `sni` and, unless the context is
 * insecure, verifies the certificate for that name. Handshake in t->ops->handshake. */
fy_transport_t *fy_tls_client_transport_new(fy_tls_client_ctx_t *ctx, int fd, const char *sni);

/* Make sure `dir` holds selfsigned.crt/selfsigned.key (ECDSA P-256, SAN localhost, 127.0.0.1,
 * ::1, valid 1 year), generating them (key mode 0600) when missing or expired.
 * Writes the paths into cert/key (each `len` bytes). Returns 0 or -1 after logging. */
int fy_tls_selfsigned_ensure(const char *dir, char *cert, char *key, size_t len);

/* The connection is idle (keep-alive, nothing buffered in either direction as far as the
 * codec knows): free the record buffers and the staging buffer now; they are taken again
 * by the next read or write. No-op for a transport that is not TLS, or while OpenSSL holds
 * part of a record. */
void fy_tls_transport_idle(fy_transport_t *t);
/* Bytes a TLS transport holds for its connection: itself, what OpenSSL allocated inside this
 * connection's own calls (SSL object, handshake state, record buffers while held; 0 in
 * FY_NO_POOL builds, which do not replace OpenSSL's allocator) and its staging buffer. 0 for
 * a transport that is not TLS. Loop thread of the connection. */
size_t fy_tls_transport_mem(const fy_transport_t *t);

/* Bytes of TLS record buffers (OpenSSL's read and write buffers, which every connection
 * takes while a record is in flight and gives back when they are empty) held on the calling
 * thread, by connections of either side. 0 in FY_NO_POOL builds (not counted there). */
size_t fy_tls_record_buffer_bytes(void);
/* Give the calling thread's free OpenSSL blocks back to malloc, and from now on free the ones
 * it gives back at once: at a worker's exit, after its last connection (OpenSSL's own
 * thread-exit handlers free more after that). Returns how many it freed (0 in FY_NO_POOL
 * builds). The main thread's run at process exit (a destructor). */
size_t fy_tls_thread_cleanup(void);

/* Log the OpenSSL error queue with a prefix at `level` and clear it. */
void fy_tls_log_errors(int level, const char *prefix);

#endif
