/* The intercepting proxy handler (listeners of `kind: intercept`, DESIGN.md §2 "MITM is a
 * transport trick"):
 *  - absolute-form requests (`GET http://host/...`) are proxied to that origin;
 *  - `CONNECT host:port` is checked against intercept.destinations (403 naming the rule),
 *    resolved and TCP-connected to the origin while the exchange waits (a refusal, timeout
 *    or unresolvable name is a 502 naming it, a tunnel to ourselves 508); then it takes the
 *    client connection over (sink `detach`), answers 200 and peeks: a TLS ClientHello pauses
 *    at the hello, the origin is probed over that connection first (TLS, ALPN
 *    h2,http/1.1, certificate verified), then the client handshake finishes with a leaf
 *    forged for the SNI (or the CONNECT host) and a nested h1 server codec runs on the
 *    decrypted stream; its exchanges carry ex->tunnel and come back here, to be proxied to
 *    that origin through ad-hoc upstreams (upstream/upstream_dyn.h) by the ordinary proxy
 *    handler. An origin that fails verification gets the client a 502 page per request.
 *  - anything else inside CONNECT (plain bytes, `passthrough` hosts, hosts bypassed after
 *    certificate pinning was detected) is relayed as bytes.
 * Requests without a proxy form get a small page that serves the CA certificate. */
#ifndef FY_HANDLER_MITM_H
#define FY_HANDLER_MITM_H

#include "handler/mitm_conf.h"
#include <ferry/mitm.h>
#include <sys/socket.h>

#include "http/handler.h"

/* Loads (creating when missing) the CA under conf->ca_dir. `conf` is borrowed. NULL after
 * logging when the CA or the TLS contexts cannot be set up. */
fy_handler_t *fy_mitm_handler_new(const fy_intercept_conf_t *conf, int nworkers);
/* A connection accepted on a `kind: socks5` listener: SOCKS5 greeting (no auth, or
 * username/password = intercept.auth), CONNECT request, then the same path as an HTTP
 * CONNECT (interception or relay). Takes `fd`. Returns 0 or -errno (fd closed). */
struct fy_http_ctx;
int fy_mitm_socks5_accept(fy_handler_t *h, struct fy_http_ctx *ctx, int fd,
                          const struct sockaddr *sa, socklen_t salen);
/* A connection accepted on a `kind: transparent` listener: its destination is
 * intercept.forward, else the original destination of an iptables REDIRECT (SO_ORIGINAL_DST),
 * else (pointed at directly) the SNI of its ClientHello or the Host of each request. TLS is
 * intercepted as in CONNECT (generic-certificate names the leaf for no-SNI clients), plain
 * HTTP is proxied. Takes `fd`. Returns 0 or -errno (fd closed). */
int fy_mitm_transparent_accept(fy_handler_t *h, struct fy_http_ctx *ctx, int fd,
                               const struct sockaddr *sa, socklen_t salen);
/* Bodies captured for `ex` (intercept.capture): what the client sent and what it was sent,
 * up to capture.body-cap each, and whether either was cut. False when nothing was captured.
 * Valid until the exchange's arena is reset (call it from on_done). */
#include "core/str.h"
struct fy_exchange;
bool fy_mitm_captured(const struct fy_exchange *ex, fy_str_t *req, fy_str_t *res, bool *cut);
/* What the inspector shows of an intercepted TLS flow (NUL-terminated, "" when unknown). */
#include "tls/tls_mitm.h"
typedef struct fy_tls_peer_desc fy_mitm_peer_tls_t;
typedef struct fy_mitm_tls_facts {
    char sni[256];             /* what the client asked for ("" : no SNI) */
    fy_mitm_peer_tls_t client; /* the client's handshake with us, and the certificate forged */
    fy_mitm_peer_tls_t origin; /* the probe's handshake with the origin, its certificate */
    bool origin_cached;        /* origin: from an earlier tunnel's probe (within its TTL) */
} fy_mitm_tls_facts_t;
/* The TLS facts of the intercepted tunnel ex came through, or NULL (not intercepted TLS).
 * Valid while ex's connection lives (worker's thread). */
const fy_mitm_tls_facts_t *fy_mitm_tls_facts(const struct fy_exchange *ex);

/* One of our own proxy listeners' addresses: requests and tunnels addressed to it, in any
 * spelling (IPv4-mapped, 0.0.0.0, any of this host's addresses for a wildcard listener), get
 * 508 instead of looping through the proxy (up to 16 are remembered). */
void fy_mitm_add_own_address(fy_handler_t *h, const struct sockaddr *sa, socklen_t len);
/* The embedding API's hooks (copied); before the workers start. */
void fy_mitm_set_hooks(fy_handler_t *h, const ferry_hooks_t *hooks);
/* On worker w's thread before its loop goes: close its origin pools. */
void fy_mitm_worker_close(fy_handler_t *h, int w);

#endif
