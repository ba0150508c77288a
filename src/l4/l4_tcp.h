/* Layer-4 TCP sessions' private parts, shared by the session code (l4.c) and the byte relay
 * (l4_relay.c). Thread rules: a session lives on the worker that accepted it. */
#ifndef FY_L4_TCP_H
#define FY_L4_TCP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/loop.h"
#include "core/pool.h"
#include "core/transport.h"
#include "l4/l4_int.h"
#include "l4/l4_proxy.h"

#define PIPE_CHUNK 65536
/* Plain sessions read into 64 KiB buffers: a message up to that size is read whole by a
   short recv (the queue is then known empty: no read that only says EAGAIN) and sent on;
   only a read that fills it switches the direction to splice. TLS sessions use the 16 KiB
   chunks (one record at most per read or write). */
#define PLAIN_BUF 65536

enum { S_PROXY_HDR, S_PEEK, S_HANDSHAKE, S_CONNECT, S_RELAY };

typedef struct end {
    fy_io_t io;
    fy_transport_t sock; /* plain */
    fy_transport_t *t;   /* &sock or TLS over it (owned) */
    uint32_t events;
    bool fin; /* epoll reported the peer's FIN (edge-triggered: no later edge will) */
} end_t;

/* one direction: bytes from `src` to `dst` */
typedef struct dir {
    int pipe[2]; /* made when a read fills the buffer and both ends are plain sockets */
    size_t inpipe;
    bool use_pipe;
    uint8_t *buf;    /* a pooled buffer while bytes are in flight: small messages (and everything
                        with TLS) go through it; an idle direction holds none */
    fy_pool_t *pool; /* buf's pool (its size is pool->size) */
    size_t off, len;
    bool eof;  /* src ended */
    bool shut; /* dst half-closed after eof */
    uint32_t wait_src, wait_dst;
} dir_t;

typedef struct tcp_sess {
    fy_list_t node;
    fy__l4_wl_t *wl;
    end_t c, o;
    dir_t up, down; /* up: client -> origin */
    int state;
    bool splice; /* both ends plain: a direction moving bulk switches to splice(2) */
    bool closed;
    fy_timer_t timer;
    fy_defer_t defer;
    struct sockaddr_storage peer, local; /* client and listener addresses (maybe from PROXY) */
    uint8_t *peek;                       /* owned: peek_max bytes while peeking */
    const fy_l4_target_t *to;
    fy_upstream_t *up_grp;
    int server;
    uint64_t tried;
    int attempts;
    bool terminate;
    uint8_t pphdr[FY_L4_PROXY_MAX];
    size_t pplen;
    fy_l4_fallback_cb fallback; /* fronts: names not in the map go back to HTTP */
    void *fallback_ud;
    size_t mem_held; /* bytes counted in ferry_l4_session_memory_bytes */
} tcp_sess_t;

void fy__l4_sess_close(tcp_sess_t *s, const char *why);
void fy__l4_mem_sync(tcp_sess_t *s, bool closing);
void fy__l4_set_events(tcp_sess_t *s, end_t *e, uint32_t ev);
void fy__l4_relay(tcp_sess_t *s, bool up, bool down);
int fy__l4_pump(tcp_sess_t *s, dir_t *d, end_t *src, end_t *dst);
fy_pool_t *fy__l4_plain_pool(void);
void fy__l4_relay_tls(tcp_sess_t *s, bool client, uint32_t ev);
void fy__l4_handshake(tcp_sess_t *s);

#endif
