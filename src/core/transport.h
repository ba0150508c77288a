/* Transport: a byte stream with read/write/shutdown over some fd (a socket, TLS over a
 * socket, later a tunnel inside an exchange). Codecs talk to transports only through these ops,
 * so stacking TLS on a tunnel (MITM) needs no codec change.
 * I/O convention: >0 bytes moved, 0 would block (see `want`), <0 error (FY_EEOF on a clean
 * end of stream, -errno or FY_ETLS otherwise).
 * Threads: a transport belongs to one connection and is used only on that connection's worker
 * thread. */
#ifndef FY_CORE_TRANSPORT_H
#define FY_CORE_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "core/fwd.h"

/* What the transport waits for after returning 0 (TLS may need to write to read). */
#define FY_WANT_READ 0x1u
#define FY_WANT_WRITE 0x2u

struct fy_transport_ops {
    const char *name;
    /* Finish any handshake. 1 done, 0 would block (see want), <0 error. */
    int (*handshake)(fy_transport_t *t);
    ssize_t (*read)(fy_transport_t *t, void *buf, size_t len);
    ssize_t (*writev)(fy_transport_t *t, const struct iovec *iov, int iovcnt);
    /* Zero-copy file send; NULL when the transport cannot (TLS without kTLS). */
    ssize_t (*sendfile)(fy_transport_t *t, int fd, off_t *off, size_t len);
    /* Bytes already decrypted/buffered inside the transport (readable without the fd). */
    size_t (*pending)(fy_transport_t *t);
    /* Half-close the sending side (TLS: close_notify then shutdown(SHUT_WR)). */
    int (*shutdown)(fy_transport_t *t);
    /* Release the transport's resources; the fd is closed by the owner of the transport. */
    void (*destroy)(fy_transport_t *t);
};

struct fy_transport {
    const struct fy_transport_ops *ops;
    int fd;        /* borrowed: the socket readiness is watched on */
    unsigned want; /* FY_WANT_* after a call returned 0 */
    bool is_tls;
    const char *alpn; /* negotiated ALPN protocol (static string) or NULL */
    const char *sni;  /* server name sent by the client, or NULL (owned by the transport) */
};

#endif
