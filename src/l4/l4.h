/* Layer 4 at run time: TCP sessions (plain relay with splice, TLS passthrough routed by the
 * peeked SNI, TLS termination relayed as plaintext, PROXY protocol both ways) and UDP
 * sessions (per-client-address table, recvmmsg/sendmmsg, QUIC passthrough routed by the SNI
 * in the Initial). Listeners are bound per worker with SO_REUSEPORT; all session state is per
 * worker: no locks. */
#ifndef FY_L4_L4_H
#define FY_L4_L4_H

#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>

#include "conf/conf.h"
#include "core/loop.h"
#include "upstream/upstream.h"

typedef struct fy_l4 fy_l4_t;

/* Build from `confs` (a list of fy_l4_conf_t; borrowed, must outlive the l4) for `nworkers`;
 * `upstreams` (borrowed) is indexed by fy_l4_target_t.upstream_index. Binds every socket now.
 * `http_listeners` (fy_listener_conf_t, borrowed) with an `sni:` map get a front here: see
 * fy_l4_adopt. Returns NULL after logging the reason (address in use, bad certificate). An
 * empty list gives a valid, idle l4. */
fy_l4_t *fy_l4_new(const fy_conf_list_t *confs, const fy_conf_list_t *http_listeners,
                   fy_upstream_t *const *upstreams, int nworkers, const char *data_dir);
/* After every worker is joined: closes the sockets still open. */
void fy_l4_free(fy_l4_t *l4);

/* On worker w's thread: start accepting / receiving on `loop`. `on_idle(ud)` is called when the
 * worker's last session closes while draining. */
void fy_l4_worker_start(fy_l4_t *l4, int w, fy_loop_t *loop, void (*on_idle)(void *ud), void *ud);
/* Stop accepting (close the worker's listening sockets) and drop UDP sessions; TCP sessions
 * run on until they end or fy_l4_worker_close_all. */
void fy_l4_worker_drain(fy_l4_t *l4, int w);
/* Open sessions of worker w. */
size_t fy_l4_worker_nsessions(const fy_l4_t *l4, int w);
/* Close every session of worker w now (drain deadline, worker exit); memory is freed by
 * deferred callbacks of the loop. */
void fy_l4_worker_close_all(fy_l4_t *l4, int w);

/* The front of HTTP listener `listener` (index in http_listeners), or -1 when it has no `sni:`
 * map. */
int fy_l4_front(const fy_l4_t *l4, size_t listener);

/* Called with a connection whose server name is not in the `sni:` map: the caller serves it
 * as HTTP (the ClientHello was only peeked, so TLS starts from the first byte). Owns `fd`. */
typedef void (*fy_l4_fallback_cb)(void *ud, int fd, const struct sockaddr *sa, socklen_t salen);

/* Take an accepted connection of an HTTP listener with an `sni:` map (front from fy_l4_front):
 * peek its ClientHello, then pass it through, terminate and relay it, or give it back through
 * `cb` (on this worker's loop, maybe before this returns). Owns `fd` from now on. */
void fy_l4_adopt(fy_l4_t *l4, int w, int front, int fd, const struct sockaddr *sa, socklen_t salen,
                 fy_l4_fallback_cb cb, void *ud);

/* One line per listener ("ferry: relaying tcp 127.0.0.1:9000 -> 127.0.0.1:7000"). */
void fy_l4_print(const fy_l4_t *l4, FILE *out);

#endif
