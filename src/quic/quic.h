/* QUIC endpoint on ngtcp2 0.12 + GnuTLS (the only folder that touches the QUIC crypto
 * backend). One fy_quic_server_t per h3 listener holds what every worker shares (GnuTLS
 * credentials, the stateless-reset and Retry-token secret, the settings); one
 * fy_quic_endpoint_t per worker owns that worker's SO_REUSEPORT UDP socket, its connection-ID
 * map and its connections.
 *
 * The application above (the h3 codec) sees connections and streams through
 * fy_quic_app_ops_t. Stream data to send is copied into a per-stream queue that the endpoint
 * keeps until the peer acknowledges it (ngtcp2 references, never copies, stream data); the
 * application watches fy_quic_stream_buffered for backpressure and gets `acked` when the queue
 * shrinks. Received stream data is given in order; the application returns flow-control
 * credit with fy_quic_stream_consumed once it has used the bytes.
 *
 * Nothing here calls the application re-entrantly from its own calls: writes only queue and
 * schedule a flush (a deferred callback), and closing a connection completes in a deferred
 * callback. */
#ifndef FY_QUIC_QUIC_H
#define FY_QUIC_QUIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/fwd.h"
#include "quic/quic_conf.h"

typedef struct fy_quic_server fy_quic_server_t;
typedef struct fy_quic_endpoint fy_quic_endpoint_t;
typedef struct fy_quic_conn fy_quic_conn_t;
typedef struct fy_quic_stream fy_quic_stream_t;

struct fy_quic_stream {
    int64_t id;
    void *app;    /* the application's per-stream state (owned by it) */
    int app_kind; /* the application's tag for what `app` is (0 at creation) */
};

typedef struct fy_quic_app_ops {
    /* The handshake completed (ALPN h3). Return the application's connection state, or NULL
       to close the connection (H3 internal error). */
    void *(*open)(fy_quic_conn_t *qc, void *ud);
    /* A peer-opened stream appeared (before its first data). */
    void (*stream_open)(void *app, fy_quic_stream_t *s);
    /* In-order stream data (`fin`: the peer finished sending). Return 0, or -1 after having
       called fy_quic_conn_close. */
    int (*recv)(void *app, fy_quic_stream_t *s, const uint8_t *p, size_t n, bool fin);
    /* The peer reset its sending side (RESET_STREAM) or asked us to stop (STOP_SENDING). */
    void (*reset)(void *app, fy_quic_stream_t *s, uint64_t code);
    /* Queued bytes of `s` were acknowledged (fy_quic_stream_buffered went down). */
    void (*acked)(void *app, fy_quic_stream_t *s);
    /* The stream is gone; `s` is freed after this returns. */
    void (*stream_close)(void *app, fy_quic_stream_t *s, uint64_t code);
    /* A QUIC DATAGRAM frame (RFC 9221). May be NULL. */
    void (*datagram)(void *app, const uint8_t *p, size_t n);
    /* Client connections: the server gave credit for more bidirectional streams. May be NULL. */
    void (*credit)(void *app);
    /* The connection is gone (closed by either side, timed out, or the endpoint closed);
       every stream got stream_close before. The application frees its state here. */
    void (*close)(void *app);
} fy_quic_app_ops_t;

/* Load the PEM chain/key pairs (`certs`/`keys`, n of them; GnuTLS picks one by SNI) and make
 * the listener-wide state. `conf` is borrowed for the server's life. Returns NULL after
 * logging why. Thread-safe to use from every worker once made. */
fy_quic_server_t *fy_quic_server_new(const fy_quic_conf_t *conf, const char *const *certs,
                                     const char *const *keys, size_t n, const char *name);
void fy_quic_server_free(fy_quic_server_t *qs);
/* A reload with rotated certificate files: connections accepted from now on get these (same
 * form as fy_quic_server_new); the replaced credentials are kept until fy_quic_server_free,
 * as a handshake on another worker may still use them. One thread at a time (the main
 * thread). Returns 0, or -1 after logging (the current certificates stay). */
int fy_quic_server_set_certs(fy_quic_server_t *qs, const char *const *certs,
                             const char *const *keys, size_t n);
/* Session tickets (resumption; 0-RTT stays off). `on` false: no NewSessionTicket is sent.
 * `secret` (len > 0): GnuTLS's ticket master key is derived from it (SHA-512 under a label),
 * so instances given the same secret resume each other's sessions (GnuTLS rotates the keys it
 * derives by time: their clocks must agree); len 0: a random key made once for this server,
 * shared by its workers. Connections accepted from now on use the result. Main thread.
 * Returns 0, or -1 after logging (the current key stays). */
int fy_quic_server_set_tickets(fy_quic_server_t *qs, bool on, const void *secret, size_t len);

/* A UDP socket bound to `sa` with SO_REUSEPORT (before the worker threads start). Returns
 * the fd or -errno after logging. */
int fy_quic_socket(const struct sockaddr *sa, socklen_t salen, const char *name);

/* Start serving QUIC on `fd` (the endpoint owns it from now on) in `loop`. `ops`/`ud` are the
 * application's. Returns NULL on allocation failure (fd closed). */
fy_quic_endpoint_t *fy_quic_endpoint_new(fy_loop_t *loop, fy_quic_server_t *qs, int fd,
                                         const fy_quic_app_ops_t *ops, void *ud);
/* The `ud` that `ops->open` gets for connections accepted from now on (a config reload);
 * connections already open keep theirs. Endpoint's thread only. */
void fy_quic_endpoint_set_ud(fy_quic_endpoint_t *ep, void *ud);
/* Stop reading new connections' Initials (graceful shutdown): existing ones go on. */
void fy_quic_endpoint_stop_accepting(fy_quic_endpoint_t *ep);
/* Close every connection at once (each gets `close`) and free the endpoint. */
void fy_quic_endpoint_free(fy_quic_endpoint_t *ep);

/* ---- client connections ---- */
typedef struct fy_quic_client_opts {
    const fy_quic_conf_t *conf; /* borrowed for the connection's life */
    const char *sni;            /* server name to send and to verify (NULL: neither) */
    const char *ca_file;        /* PEM CA bundle (NULL: the system store) */
    bool insecure;              /* do not verify the certificate */
    const char *cert_file;      /* PEM client certificate chain to offer (NULL: none) */
    const char *key_file;       /* its private key (with cert_file) */
    const char *name;           /* label for logs */
} fy_quic_client_opts_t;

/* Connect to `sa` (a private connected UDP socket, ALPN h3, TLS 1.3 on GnuTLS). ops->open(ud)
 * runs when the handshake completes; ops->close on any failure after this returns. Returns
 * NULL (logged) if the connection could not even start. */
fy_quic_conn_t *fy_quic_connect(fy_loop_t *loop, const struct sockaddr *sa, socklen_t salen,
                                const fy_quic_client_opts_t *o, const fy_quic_app_ops_t *ops,
                                void *ud);
/* Open a bidirectional stream (client side). NULL when the server's stream credit is used up
 * (ops->credit tells when more comes). */
fy_quic_stream_t *fy_quic_open_bidi(fy_quic_conn_t *qc);
uint64_t fy_quic_streams_bidi_left(fy_quic_conn_t *qc);

/* ---- connections ---- */
const struct sockaddr *fy_quic_conn_remote(const fy_quic_conn_t *qc);
const fy_quic_conf_t *fy_quic_conn_conf(const fy_quic_conn_t *qc);
/* The CONNECTION_CLOSE the peer sent, if any: returns true and its error code (*app: an
 * application code of frame type 0x1d, else a transport one). Meaningful inside ops->close. */
bool fy_quic_conn_peer_close(const fy_quic_conn_t *qc, uint64_t *code, bool *app);
/* Close with an application error code (CONNECTION_CLOSE of type 0x1d); completes in a
 * deferred callback that calls ops->stream_close for every stream and ops->close. */
void fy_quic_conn_close(fy_quic_conn_t *qc, uint64_t app_code, const char *reason);
/* Close at once with `app_code`: streams and the application are closed before this returns,
 * except when called from inside one of the app callbacks (then as fy_quic_conn_close). */
void fy_quic_conn_abort(fy_quic_conn_t *qc, uint64_t app_code);
/* Open a unidirectional stream of ours. Returns it, or NULL (no credit). */
fy_quic_stream_t *fy_quic_open_uni(fy_quic_conn_t *qc);
/* Send one DATAGRAM frame (copied; may be lost). Returns 0, -EMSGSIZE (peer's limit), -EAGAIN
 * (queue full) or -ENOTSUP (peer does not accept DATAGRAM). */
int fy_quic_send_datagram(fy_quic_conn_t *qc, const void *p, size_t n);
/* How many more datagrams the send queue takes now (0: the next send gets -EAGAIN). The queue
 * drains as congestion control lets packets out; an application that must not lose datagrams
 * to it checks this first and holds or paces its own. */
size_t fy_quic_datagram_room(const fy_quic_conn_t *qc);
/* Datagrams fy_quic_send_datagram refused (-EAGAIN) on this connection so far. */
uint64_t fy_quic_datagrams_dropped(const fy_quic_conn_t *qc);

/* For test tools that misbehave on purpose: send `n` raw TLS handshake bytes (copied) in
 * CRYPTO frames at `level` (1: Handshake, 2: 1-RTT) as if TLS had produced them. Returns 0,
 * -EINVAL (no such level or no keys for it yet) or -ENOMEM. */
int fy_quic_conn_send_crypto(fy_quic_conn_t *qc, int level, const void *p, size_t n);

/* ---- streams ---- */
/* Queue bytes (copied). Returns 0 or -EPIPE once the stream's sending side is finished. */
int fy_quic_stream_write(fy_quic_conn_t *qc, fy_quic_stream_t *s, const void *p, size_t n);
/* Space to write into directly: returns a pointer to *avail (>0) bytes; then commit n <= avail. */
uint8_t *fy_quic_stream_wbuf(fy_quic_conn_t *qc, fy_quic_stream_t *s, size_t *avail);
void fy_quic_stream_commit(fy_quic_conn_t *qc, fy_quic_stream_t *s, size_t n);
/* Finish the sending side after the queued bytes (FIN). */
void fy_quic_stream_finish(fy_quic_conn_t *qc, fy_quic_stream_t *s);
/* The sending side was reset (by us, or by ngtcp2 after the peer's STOP_SENDING). */
bool fy_quic_stream_is_write_closed(const fy_quic_stream_t *s);
/* Bytes queued and not yet acknowledged. */
size_t fy_quic_stream_buffered(const fy_quic_stream_t *s);
/* The application used `n` received bytes: give that much flow-control credit back. */
void fy_quic_stream_consumed(fy_quic_conn_t *qc, fy_quic_stream_t *s, size_t n);
/* Connection-level credit only: for bytes of a stream that QUIC already closed (all received)
 * which the application used later. */
void fy_quic_conn_consumed(fy_quic_conn_t *qc, size_t n);
/* Abort the sending side (RESET_STREAM) and/or the receiving side (STOP_SENDING). */
void fy_quic_stream_reset(fy_quic_conn_t *qc, fy_quic_stream_t *s, uint64_t code);
void fy_quic_stream_stop_reading(fy_quic_conn_t *qc, fy_quic_stream_t *s, uint64_t code);

#endif
