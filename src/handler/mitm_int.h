/* Folder-internal contract of the intercepting proxy (handler/mitm*.c): the handler and tunnel
 * types and the calls its files make into one another.
 * Thread rules: a tunnel and everything it points to belong to the worker whose loop runs it
 * (t->loop); the handler (fy__mitm_t) is shared by all workers and read-only after
 * fy_mitm_handler_new, except pins[] and probed[], which are taken only under pin_lock. */
#ifndef FY_HANDLER_MITM_INT_H
#define FY_HANDLER_MITM_INT_H

#include <openssl/ssl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/tunnel_relay.h"
#include "handler/mitm.h"
#include "handler/mitm_conf.h"
#include "handler/mitm_dest.h"
#include "handler/mitm_rules.h"
#include "handler/proxy.h"
#include "http/exchange.h"
#include "net/resolve.h"
#include "tls/mint.h"
#include "upstream/upstream_dyn.h"

#define FY__MITM_MAX_PINS 256
#define FY__MITM_PROBE_CACHE 1024 /* origins whose probe succeeded, remembered (shared) */
#define FY__MITM_RELAY_BUF 16384

typedef struct fy__mitm_pin {
    char host[256];
    int fails;
    uint64_t until_ms; /* passed through until then; 0: not bypassed */
} fy__mitm_pin_t;

typedef struct fy__mitm_probed {
    uint64_t hash;
    uint64_t until_ms;
    bool h2;
    fy_mitm_peer_tls_t *tls; /* owned: what the probe saw of the origin, or NULL */
} fy__mitm_probed_t;

typedef struct fy__mitm {
    fy_handler_t h;
    const fy_intercept_conf_t *conf; /* borrowed */
    fy_ca_t *ca;                     /* owned */
    fy_mint_t *mint;                 /* owned */
    fy_upstream_dyn_t *dyn;          /* owned */
    fy_resolver_t *resolver;         /* owned: origins' names, off the worker threads */
    fy_proxy_conf_t pconf;           /* of the proxy handlers over ad-hoc origins */
    fy_cidr_t *allow;                /* owned */
    size_t nallow;
    char *auth_b64; /* owned: base64(user:password), or NULL */
    SSL_CTX *probe, *probe_insecure;
    pthread_mutex_t pin_lock;
    fy__mitm_pin_t pins[FY__MITM_MAX_PINS];
    fy__mitm_probed_t probed[FY__MITM_PROBE_CACHE]; /* under pin_lock */
    fy_mitm_rules_t *rules;                         /* owned */
    fy_mitm_dest_t *dest;                           /* owned: intercept.destinations */
    struct sockaddr_storage own[16]; /* our proxy listeners: requests to them would loop */
    size_t nown;
    char fwd_host[256]; /* intercept.forward, split; fwd_port 0: none */
    int fwd_port;
    ferry_hooks_t hooks; /* include/ferry/mitm.h; all NULL when not embedded */
    bool any_hook;
    char *ca_pem; /* owned: the certificate served on the info page */
    size_t ca_pem_len;
} fy__mitm_t;

/* What the nested codec's exchanges carry as ex->tunnel. */
typedef struct fy__mitm_tunnel_info {
    char host[256]; /* CONNECT host */
    int port;
    char name[256]; /* SNI, else the CONNECT host: certificate name and origin SNI */
    bool insecure;
    char error[400];     /* origin failure: every request gets a 502 page saying this */
    int status;          /* of that page: 502, or 403 (intercept.destinations) */
    bool origin_h2;      /* the origin chose h2 in the probe and the listener speaks h2: the client
                            is offered h2 too */
    bool origin_alpn_h2; /* the origin chose h2 in the probe: requests go to it over h2 */
    bool plain;          /* transparent plain HTTP: no TLS either side; host "" = use Host */
    fy_mitm_tls_facts_t tls; /* for the inspector (mitm_tls.c) */
} fy__mitm_tunnel_info_t;

enum {
    FY__MITM_S_PEEK,
    FY__MITM_S_HELLO,
    FY__MITM_S_PROBE,
    FY__MITM_S_FINISH,
    FY__MITM_S_RELAY_CONNECT,
    FY__MITM_S_RELAY,
    FY__MITM_S_SOCKS,
    FY__MITM_S_SOCKS_CONNECT
};

typedef struct fy__mitm_tunnel {
    fy_conn_node_t node; /* in ctx->conns: drained and closed with the listener's conns */
    fy__mitm_t *m;
    fy_http_ctx_t *ctx;
    fy_loop_t *loop;
    struct sockaddr_storage remote;
    fy_io_t cio, oio; /* client and origin sockets */
    fy_timer_t timer;
    fy_defer_t defer;
    int state;
    bool closed;
    char host[256];
    int port;
    SSL *cssl, *ossl;
    fy__mitm_tunnel_info_t *info; /* owned until handed to the nested codec */
    char *c2o;                    /* client bytes read before the relay (owned) */
    size_t c2o_len;
    bool relaying;        /* state RELAY: the sockets moved into crt/ort, joined by relay */
    fy_tio_fd_t crt, ort; /* client and origin as tunnel transports (core/tunnel_io.h) */
    fy_tio_t *ct;         /* the client's: &crt.t, or a CONNECT stream's (http/exchange_tio.h) */
    fy_tio_relay_t relay;
    int socks_stage;     /* enum fy_socks5_stage while state == FY__MITM_S_SOCKS */
    bool transparent;    /* kind: transparent; host "" until SNI/Host tell it (direct mode) */
    fy_resolve_req_t rq; /* the origin's name, while resolving */
    void (*connected)(struct fy__mitm_tunnel *t,
                      const char *err); /* after connect_origin: fd in oio or err */
    int oerrno;    /* why connect_origin failed: an errno, ELOOP to ourselves, EACCES denied by
                      intercept.destinations, 0 the name */
    char why[400]; /* connect_origin's error text when it is not static */
} fy__mitm_tunnel_t;

/* mitm.c: the handler */
/* Split "host:port", "[v6]:port" or "host" (port dflt) into host (lower-cased) and *port.
   Returns 0, or -1 when malformed or the host does not fit in hlen. */
int fy__mitm_split_authority(fy_str_t a, int dflt, char *host, size_t hlen, int *port);
/* intercept.destinations for an exchange's destination (addr NULL: by name). False after
   answering ex with 403. */
bool fy__mitm_dest_allowed(fy__mitm_t *m, fy_exchange_t *ex, const char *host, int port,
                           const struct sockaddr *addr);
/* intercept.allow admits the client at sa (logs a warning when not). */
bool fy__mitm_client_allowed(fy__mitm_t *m, const struct sockaddr *sa);
/* Answer ex with status and a plain-text body "status reason: <fmt...>"; ex->error = error. */
void fy__mitm_refuse(fy_exchange_t *ex, int status, const char *error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* mitm_connect.c: CONNECT to the proxy (origin connected before the 200), ex answered or taken
   over. */
void fy__mitm_connect_start(fy__mitm_t *m, fy_exchange_t *ex);

/* mitm_bridge.c: a CONNECT on a connection that cannot be detached (h2, h3): the stream is the
   tunnel's client transport; only an intercepted one is joined to the forged TLS by a
   socketpair. Takes ofd (the connected origin) in every case. */
void fy__mitm_h2_connect_start(fy__mitm_t *m, fy_exchange_t *ex, const char *host, int port,
                               int ofd);

/* mitm_tunnel.c: tunnel lifecycle, origin connect, relay, forged-TLS client side */
/* A tunnel for the client socket fd (owned from here), in ctx->conns, state 0, no events. */
/* The length of an exchange's borrowed peer address: codecs keep only what its family needs. */
static inline socklen_t fy__mitm_addr_len(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET6  ? (socklen_t)sizeof(struct sockaddr_in6)
           : sa->sa_family == AF_INET ? (socklen_t)sizeof(struct sockaddr_in)
                                      : (socklen_t)sizeof(struct sockaddr);
}

fy__mitm_tunnel_t *fy__mitm_tunnel_new(fy__mitm_t *m, fy_http_ctx_t *ctx, int fd,
                                       const struct sockaddr *sa, socklen_t salen);
/* Close both sockets; freed in a deferred callback. Idempotent. */
void fy__mitm_tunnel_close(fy__mitm_tunnel_t *t);
/* Resolve t->host and start a non-blocking connect; `connected` gets the outcome (maybe
   before this returns): fd in t->oio, or err with t->oerrno. */
void fy__mitm_connect_origin(fy__mitm_tunnel_t *t,
                             void (*connected)(fy__mitm_tunnel_t *t, const char *err));
/* Relay the client's bytes to the origin as they are (connected now, or after connecting). */
void fy__mitm_start_relay(fy__mitm_tunnel_t *t);
/* Should a tunnel whose client's first byte is `first` be relayed as it is (not TLS, passed
   through by name or hook, pinned)? Calls the on_tunnel hook. */
bool fy__mitm_relays(fy__mitm_tunnel_t *t, unsigned char first);
/* Forge the client's TLS on t->cio (the hello, the probe, the hand-over follow). */
void fy__mitm_intercept(fy__mitm_tunnel_t *t);
/* The client's first byte is known: intercept (TLS), relay, or serve plain HTTP. */
void fy__mitm_decide(fy__mitm_tunnel_t *t, unsigned char first);
/* Step the forged TLS handshake with the client (hello, then finish and hand over). */
void fy__mitm_drive_client(fy__mitm_tunnel_t *t);

/* mitm_probe.c: the origin TLS probe and its cache */
/* The client's hello is in: verify the origin (or use a cached probe), then resume. */
void fy__mitm_probe_start(fy__mitm_tunnel_t *t);
/* Step the probe's handshake (origin socket ready). */
void fy__mitm_probe_drive(fy__mitm_tunnel_t *t);
/* The probes' client context: ca NULL the system store; NULL after logging on error. */
SSL_CTX *fy__mitm_probe_ctx(const char *ca, bool insecure);

/* mitm_tls.c: what ssl's handshake agreed (version, cipher, ALPN) and the certificate of the
   peer (peer true) or our own into *out. */
void fy__mitm_tls_describe(SSL *ssl, bool peer, fy_mitm_peer_tls_t *out);

/* mitm_pin.c: certificate-pinning bypass (under pin_lock) */
bool fy__mitm_pinned(fy__mitm_t *m, const char *host, uint64_t now);
void fy__mitm_pin_fail(fy__mitm_t *m, const char *host, uint64_t now);

/* mitm_socks5.c: SOCKS5 listeners' handshake */
void fy__mitm_socks_read(fy__mitm_tunnel_t *t);
/* The SOCKS5 CONNECT's origin connected (why NULL) or not: reply, then on as a CONNECT. */
void fy__mitm_socks_reply(fy__mitm_tunnel_t *t, int err, const char *why);

/* mitm_transparent.c: transparent plain HTTP: hand the socket to the h1 codec. */
void fy__mitm_transparent_http(fy__mitm_tunnel_t *t);

/* mitm_capture.c: push the HAR body-capture filter onto ex's sink (when configured). */
void fy__mitm_capture_begin(fy__mitm_t *m, fy_exchange_t *ex);

/* mitm_loop.c: would a connection to sa reach one of our own proxy listeners? */
bool fy__mitm_loops(const fy__mitm_t *m, const struct sockaddr *sa);

#endif
