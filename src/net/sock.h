/* Sockets: listening sockets (one per worker with SO_REUSEPORT), and the plain-TCP transport.
 * Threads: sockets belong to the worker that created them; the functions keep no shared state. */
#ifndef FY_NET_SOCK_H
#define FY_NET_SOCK_H

#include <sys/socket.h>

#include "core/transport.h"

/* Create a non-blocking, close-on-exec TCP listening socket bound to `addr` with
 * SO_REUSEADDR and SO_REUSEPORT (each worker binds its own; the kernel spreads connections).
 * Returns the fd or -errno; on error writes a reason to the log naming the address. */
int fy_sock_listen(const struct sockaddr *addr, socklen_t len, int backlog, const char *name);

/* Whether `addr` is free for a socket of `type` (SOCK_STREAM or SOCK_DGRAM) of ours: one bind
 * without SO_REUSEPORT, closed at once. Returns 0, or -EADDRINUSE after logging a line naming
 * the address and the `share` option (another process, or one of our own sockets bound
 * earlier, holds it). Other errors return 0: the real bind reports them. */
int fy_sock_probe(const struct sockaddr *addr, socklen_t len, int type, const char *name);

/* Format an address as "1.2.3.4:80" / "[::1]:80" into buf (NUL-terminated). */
const char *fy_sock_addr_str(const struct sockaddr *sa, char *buf, size_t len);
/* Just the host part ("1.2.3.4", "::1"). */
const char *fy_sock_host_str(const struct sockaddr *sa, char *buf, size_t len);

/* Plain TCP transport over `fd` (borrowed). The struct is caller-owned. */
void fy_sock_transport_init(fy_transport_t *t, int fd);
extern const struct fy_transport_ops fy_sock_transport_ops;

#endif
