/* Internals shared by the files of src/quic/ (not part of the API: see quic.h).
 * Threads: as quic.h; an endpoint, its connections and streams belong to one worker loop
 * thread, except fy_quic_server_t (see quic_tls.c, quic_inbox.c). */
#ifndef FY_QUIC_INT_H
#define FY_QUIC_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <sys/socket.h>

#include "core/list.h"
#include "core/loop.h"
#include "core/pool.h"
#include "quic/quic.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

#define CIDLEN 16       /* length of the connection IDs we issue */
#define RX_BATCH 32     /* datagrams per recvmmsg */
#define RX_SIZE 2048    /* larger datagrams than this are not QUIC we accept */
#define TX_MAX_PKTS 64  /* packets per write round (one GSO send at most) */
#define TX_PKT_MAX 1452 /* bytes per packet we ever write */
#define MAX_CIDS 16     /* connection IDs one connection may have in the map */
/* Queued outgoing DATAGRAM frames per connection: a FIFO that drains as congestion control
 * lets packets out. Sized for an echo of a browser's burst (1,000 datagrams in one go) at the
 * cost of at most DGRAM_Q_BYTES per connection; beyond either bound a datagram is refused
 * (-EAGAIN) and counted in dgrams_dropped. */
#define DGRAM_Q_MAX 2048
#define DGRAM_Q_BYTES (1u << 20)
#define RETRY_TOKEN_TTL (10 * NGTCP2_SECONDS)
#define MAX_EPS 255    /* endpoints (workers) per listener a CID byte can name */
#define INBOX_MAX 1024 /* datagrams queued for another worker; more are dropped */

/* Connection IDs we issue: byte 0 names the endpoint (worker) that owns the connection, byte 1
 * is this process's tag, the rest is random. A short-header packet for a connection of another
 * worker (the client's address changed, so the kernel's reuseport hash picked another socket)
 * is handed to that worker instead of being answered with a stateless reset. */
#define CID_EP 0
#define CID_TAG 1

typedef struct fwd_pkt {
    struct fwd_pkt *next;
    struct sockaddr_storage from;
    socklen_t fromlen;
    size_t len;
    uint8_t data[];
} fwd_pkt_t;

struct fy_quic_server {
    const fy_quic_conf_t *conf;
    gnutls_certificate_credentials_t cred;       /* listeners: replaced by fy_quic_server_set_certs
                                                    (read with __atomic_load_n) */
    gnutls_certificate_credentials_t *old_creds; /* replaced ones, kept until the free */
    size_t nold_creds;
    gnutls_priority_t prio;
    /* session tickets: GnuTLS's master key (fy_quic_server_set_tickets), read with
       __atomic_load_n; NULL: no tickets. Replaced ones are kept until the free. */
    gnutls_datum_t *tkey;
    gnutls_datum_t **old_tkeys;
    size_t nold_tkeys;
    bool tkey_random;   /* tkey was made at random (no shared secret) */
    uint8_t secret[32]; /* stateless reset tokens and Retry tokens */
    char *name;
    /* the workers' endpoints, for packets that reach the wrong one (listeners only) */
    bool shared;
    uint8_t tag;
    pthread_mutex_t lock; /* eps[] and every endpoint's inbox */
    fy_quic_endpoint_t *eps[MAX_EPS];
    int neps;
};

typedef struct qchunk {
    struct qchunk *next;
    uint32_t len;
    uint32_t cap; /* QCHUNK_SMALL (a small block) or sizeof data (a pooled I/O chunk) */
    uint8_t data[FY_CHUNK_SIZE - 2 * sizeof(void *)];
} qchunk_t;
/* A stream's first write of at most this many bytes goes into a small block, not a 16 KiB
 * chunk: the h3 control and QPACK streams' few bytes, small responses (issue 19: each QUIC
 * connection took four chunks until the peer acknowledged a few dozen bytes). */
#define QCHUNK_SMALL 496u /* with the header: one 512-byte spool class */

typedef struct qstream {
    fy_quic_stream_t pub;
    fy_quic_conn_t *c;
    qchunk_t *head, *tail;
    size_t head_off; /* acknowledged bytes at the start of head */
    size_t buffered; /* queued, not acknowledged */
    size_t sent;     /* of `buffered`, handed to ngtcp2 */
    bool fin, fin_sent, shut_wr, blocked, in_sendq;
    bool stop_pending; /* STOP_SENDING asked for, applied outside ngtcp2's callbacks */
    uint64_t stop_code;
    size_t held;     /* request streams of server connections: bytes in ferry_stream_memory_bytes */
    fy_list_t link;  /* c->streams */
    fy_list_t qlink; /* c->sendq */
} qstream_t;

typedef struct dgram {
    struct dgram *next;
    size_t len;
    uint8_t p[];
} dgram_t;

/* TLS handshake-message framing of the peer's CRYPTO stream at one level (tls_rx_check). */
typedef struct tls_rx {
    uint8_t hdr[4]; /* type and 24-bit length of the message being read */
    uint8_t nhdr;   /* header bytes seen of it (4: in its body) */
    uint32_t left;  /* body bytes still to come */
    bool finished;  /* a Finished message went by (Handshake level) */
} tls_rx_t;

struct fy_quic_conn {
    fy_quic_endpoint_t *ep;
    ngtcp2_conn *conn;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref ref;
    struct sockaddr_storage remote;
    socklen_t remotelen;
    fy_timer_t timer;
    fy_defer_t write_defer, close_defer, free_defer;
    void *app;
    bool app_open;
    bool tickets; /* a server connection that sends a session ticket after the handshake */
    bool closing; /* close requested: no more application callbacks */
    bool closed;  /* torn down; memory goes in free_defer */
    ngtcp2_connection_close_error ccerr;
    fy_list_t streams, sendq;
    bool stops_pending;
    int in_lib; /* inside ngtcp2_conn_read_pkt: the conn must not be deleted now */
    ngtcp2_cid cids[MAX_CIDS];
    size_t ncids;
    /* while the endpoint drains: a socket of this connection's own, connected to the peer
       (fd -1 otherwise; then the endpoint's socket carries it) */
    fy_io_t pio;
    dgram_t *dg_head, **dg_tail; /* owned: outgoing DATAGRAM frames, oldest first */
    size_t ndgrams, dg_bytes;
    size_t st_bytes; /* its streams: their structs and the chunks they hold (unacknowledged) */
    uint64_t dgrams_dropped; /* refused by a full queue (fy_quic_datagrams_dropped) */
    tls_rx_t tls_rx[3];      /* per level: Initial, Handshake, 1-RTT */
    fy_list_t link;          /* ep->conns */
    /* server connections: ngtcp2 allocates through `mem`, which counts its bytes in lib_bytes;
       mem_held is what ferry_connection_memory_bytes{proto="h3"} has for this connection */
    ngtcp2_mem mem;
    size_t lib_bytes, mem_held;
};

typedef struct cid_entry {
    struct cid_entry *next;
    ngtcp2_cid cid;
    fy_quic_conn_t *c;
} cid_entry_t;

struct fy_quic_endpoint {
    fy_loop_t *loop;
    fy_quic_server_t *qs;
    const fy_quic_app_ops_t *ops;
    void *ud;
    fy_io_t io;
    struct sockaddr_storage local;
    socklen_t locallen;
    cid_entry_t **buckets;
    size_t nbuckets, nentries;
    fy_list_t conns;
    size_t nconns;
    bool accepting;
    bool gso; /* UDP_SEGMENT works on this socket */
    uint8_t *rx;
    uint8_t *tx;
    uint64_t dropped_tx; /* packets lost to a full socket buffer */
    bool detached;       /* draining: the shared socket is closed, connections have their own */
    int index;           /* in qs->eps (-1: not registered) */
    fy_io_t inbox_io;    /* eventfd: other workers queued packets for us */
    fwd_pkt_t *inbox;    /* under qs->lock */
    size_t ninbox;
    uint64_t forwarded;   /* packets we handed to another worker */
    uint64_t fwd_dropped; /* packets for another worker dropped: its inbox was full */
    bool client;          /* a client connection's private endpoint: freed with its conn */
    fy_defer_t free_defer;
};

/* quic.c */
/* ngtcp2 callbacks (ud: the fy_quic_conn_t, sud: its qstream_t), in both the server table
 * (quic.c) and the client table (quic_client.c); they call the application's ops. */
int fy__quic_cb_handshake_completed(ngtcp2_conn *conn, void *ud);
void fy__quic_cb_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx);
int fy__quic_cb_recv_datagram(ngtcp2_conn *conn, uint32_t flags, const uint8_t *p, size_t n,
                              void *ud);
int fy__quic_cb_recv_stream_data(ngtcp2_conn *conn, uint32_t flags, int64_t id, uint64_t offset,
                                 const uint8_t *data, size_t len, void *ud, void *sud);
int fy__quic_cb_stop_sending(ngtcp2_conn *conn, int64_t id, uint64_t code, void *ud, void *sud);
int fy__quic_cb_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t id, uint64_t code, void *ud,
                             void *sud);
int fy__quic_cb_stream_open(ngtcp2_conn *conn, int64_t id, void *ud);
int fy__quic_cb_stream_reset(ngtcp2_conn *conn, int64_t id, uint64_t final_size, uint64_t code,
                             void *ud, void *sud);
/* close_defer: tear down, writing CONNECTION_CLOSE with c->ccerr. */
void fy__quic_close_cb(fy_defer_t *d);
/* Tear `c` down now (never from inside an ngtcp2 call); its memory goes in free_defer.
 * `send_close`: write CONNECTION_CLOSE with c->ccerr first. */
void fy__quic_conn_destroy(fy_quic_conn_t *c, bool send_close);
/* A library error from ngtcp2: close with the matching transport error (never while
 * inside an ngtcp2 call). */
void fy__quic_conn_fail(fy_quic_conn_t *c, int liberr);
/* ngtcp2 log_printf when FERRY_QUIC_DEBUG is set: one line on stderr. */
void fy__quic_debug_log(void *ud, const char *fmt, ...);
/* One received datagram: version negotiation, stateless reset, forwarding, Retry,
 * accepting, then ngtcp2_conn_read_pkt. May destroy the connection it reaches. */
void fy__quic_handle_packet(fy_quic_endpoint_t *ep, const uint8_t *data, size_t len,
                            const struct sockaddr *sa, socklen_t salen);
/* CLOCK_MONOTONIC in ns (ngtcp2 timestamps). */
uint64_t fy__quic_now_ns(void);
/* Cryptographic random bytes; aborts if the RNG fails. */
void fy__quic_rand_bytes(void *p, size_t n);

/* quic_udp.c */
/* The socket a connection's packets leave by (its own while the endpoint drains). */
int fy__quic_conn_fd(const fy_quic_conn_t *c);
/* Read handlers: the endpoint's socket (io->data: endpoint), a draining connection's own
 * socket (io->data: conn). */
void fy__quic_on_conn_io(fy_io_t *io, uint32_t events);
void fy__quic_on_io(fy_io_t *io, uint32_t events);
/* Read and dispatch what `fd` holds; `c`: the connection owning `fd`, or NULL. */
void fy__quic_rx_fd(fy_quic_endpoint_t *ep, int fd, fy_quic_conn_t *c);
/* Send one packet (a full socket buffer drops it and counts ep->dropped_tx). */
void fy__quic_send_one(fy_quic_endpoint_t *ep, const struct sockaddr *to, socklen_t tolen,
                       const uint8_t *p, size_t n);
void fy__quic_send_one_fd(fy_quic_endpoint_t *ep, int fd, const struct sockaddr *to,
                          socklen_t tolen, const uint8_t *p, size_t n);
/* Send n packets laid out back to back in buf (GSO runs, else sendmmsg). */
void fy__quic_send_packets(fy_quic_endpoint_t *ep, int fd, const struct sockaddr *to,
                           socklen_t tolen, const uint8_t *buf, const size_t *sizes, size_t n);

/* quic_cid.c */
/* ngtcp2 callbacks: issue a new worker-marked CID with its reset token; retire one. */
int fy__quic_cb_get_new_cid(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token, size_t len,
                            void *ud);
int fy__quic_cb_remove_cid(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *ud);
/* Mark CID bytes with the endpoint's worker index and the process tag. */
void fy__quic_cid_mark(const fy_quic_endpoint_t *ep, uint8_t *b, size_t len);
/* CID map of c->ep: add (-1 if taken by another conn or c has MAX_CIDS), delete, find;
 * map_slot: where `cid` is or would go. */
int fy__quic_map_add(fy_quic_conn_t *c, const ngtcp2_cid *cid);
void fy__quic_map_del(fy_quic_conn_t *c, const ngtcp2_cid *cid);
fy_quic_conn_t *fy__quic_map_find(fy_quic_endpoint_t *ep, const uint8_t *id, size_t len);
cid_entry_t **fy__quic_map_slot(fy_quic_endpoint_t *ep, const ngtcp2_cid *cid);
/* Answer an Initial with a Retry carrying an address-validation token. */
void fy__quic_send_retry(fy_quic_endpoint_t *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *sa,
                         socklen_t salen);
/* Answer a short-header packet for an unknown CID with a stateless reset (if big enough). */
void fy__quic_send_stateless_reset(fy_quic_endpoint_t *ep, const uint8_t *dcid, size_t dcidlen,
                                   size_t pktlen, const struct sockaddr *sa, socklen_t salen);

/* quic_stream.c */
/* ngtcp2 callbacks: acknowledged stream data frees chunks; more stream credit unblocks. */
int fy__quic_cb_acked(ngtcp2_conn *conn, int64_t id, uint64_t offset, uint64_t len, void *ud,
                      void *sud);
int fy__quic_cb_extend_max_stream_data(ngtcp2_conn *conn, int64_t id, uint64_t max, void *ud,
                                       void *sud);
/* The connection timer: ngtcp2 expiry, then write. */
void fy__quic_on_timer(fy_timer_t *t);
/* Write the connection's packets at the end of this loop turn (write_defer). */
void fy__quic_schedule_write(fy_quic_conn_t *c);
/* Free a stream and its buffers (no callback). */
void fy__quic_stream_free(qstream_t *s);
/* A stream of `c` with id `id`, set as ngtcp2's stream user data. */
qstream_t *fy__quic_stream_new(fy_quic_conn_t *c, int64_t id);
/* write_defer callback: conn_write. */
void fy__quic_write_cb(fy_defer_t *d);

/* quic_tls.c */
/* ngtcp2 recv_crypto_data: the TLS message guard, then ngtcp2_crypto's own callback. */
int fy__quic_cb_recv_crypto_data(ngtcp2_conn *conn, ngtcp2_crypto_level level, uint64_t offset,
                                 const uint8_t *data, size_t len, void *ud);
/* ngtcp2_crypto_conn_ref.get_conn of our connections. */
ngtcp2_conn *fy__quic_get_conn(ngtcp2_crypto_conn_ref *ref);
/* The server GnuTLS session of a new connection; -1 on failure (caller deinits c->tls). */
int fy__quic_setup_tls(fy_quic_conn_t *c);

/* quic_inbox.c */
/* Make a server endpoint findable by its listener's other workers; and undo it. */
void fy__quic_ep_register(fy_quic_endpoint_t *ep);
void fy__quic_ep_unregister(fy_quic_endpoint_t *ep);
/* A packet for another worker's connection: queue it there. True when taken. */
bool fy__quic_forward(fy_quic_endpoint_t *ep, const ngtcp2_version_cid *vc, const uint8_t *data,
                      size_t len, const struct sockaddr *sa, socklen_t salen);

#endif
