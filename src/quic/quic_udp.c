/* QUIC UDP I/O: the listening socket, sendto/sendmmsg/UDP GSO out, recvmmsg in.
 * Threads: the endpoint's worker loop thread only. */
#include "quic/quic_int.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/udp.h>

#include "core/log.h"

/* ---- socket ---- */

int fy_quic_socket(const struct sockaddr *sa, socklen_t salen, const char *name)
{
    int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
    if (fd < 0) goto fail;
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) goto fail;
    /* lets a draining connection bind a connected socket of its own to this address without
       joining the reuseport group (fy_quic_endpoint_stop_accepting) */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) goto fail;
    if (sa->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    /* room for a congestion window of packets in both directions; the kernel caps it at
       net.core.[rw]mem_max unless we may force it */
    int sz = 4 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz) < 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    if (bind(fd, sa, salen) < 0) goto fail;
    return fd;
fail:;
    int e = errno;
    fy_log(FY_LOG_EMERG, "listen udp %s: %s", name, strerror(e));
    if (fd >= 0) close(fd);
    return -e;
}

/* ---- UDP output ---- */

void fy__quic_send_one_fd(fy_quic_endpoint_t *ep, int fd, const struct sockaddr *to,
                          socklen_t tolen, const uint8_t *p, size_t n)
{
    if (sendto(fd, p, n, 0, to, tolen) < 0) ep->dropped_tx++;
}

void fy__quic_send_one(fy_quic_endpoint_t *ep, const struct sockaddr *to, socklen_t tolen,
                       const uint8_t *p, size_t n)
{
    fy__quic_send_one_fd(ep, ep->io.fd, to, tolen, p, n);
}

/* The socket a connection's packets leave by (its own while the endpoint drains). */
int fy__quic_conn_fd(const fy_quic_conn_t *c)
{
    return c->pio.fd >= 0 ? c->pio.fd : c->ep->io.fd;
}

/* Send n packets laid out back to back in buf. With GSO, runs of equal-sized packets (the
 * last of a run may be shorter) leave in one sendmsg; else one sendmmsg. A full socket
 * buffer drops packets: QUIC's loss recovery resends them. */
void fy__quic_send_packets(fy_quic_endpoint_t *ep, int fd, const struct sockaddr *to,
                           socklen_t tolen, const uint8_t *buf, const size_t *sizes, size_t n)
{
    size_t i = 0, off = 0;
    while (i < n && ep->gso) {
        size_t seg = sizes[i], j = i, len = 0;
        while (j < n && sizes[j] <= seg && len + sizes[j] <= 65000) {
            len += sizes[j];
            j++;
            if (sizes[j - 1] < seg) break;
        }
        if (j - i == 1) {
            fy__quic_send_one_fd(ep, fd, to, tolen, buf + off, sizes[i]);
        } else {
            struct iovec iov = {(void *)(buf + off), len};
            union {
                char b[CMSG_SPACE(sizeof(uint16_t))];
                struct cmsghdr align;
            } ctl;
            memset(&ctl, 0, sizeof ctl);
            struct msghdr mh = {.msg_name = (void *)to,
                                .msg_namelen = tolen,
                                .msg_iov = &iov,
                                .msg_iovlen = 1,
                                .msg_control = ctl.b,
                                .msg_controllen = sizeof ctl.b};
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_UDP;
            cm->cmsg_type = UDP_SEGMENT;
            cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t s16 = (uint16_t)seg;
            memcpy(CMSG_DATA(cm), &s16, sizeof s16);
            if (sendmsg(fd, &mh, 0) < 0) {
                if (errno == EIO || errno == EINVAL || errno == ENOPROTOOPT) {
                    ep->gso = false; /* no GSO here: send the rest one by one */
                    break;
                }
                ep->dropped_tx += j - i;
            }
        }
        off += len;
        i = j;
    }
    if (i == n) return;
    struct mmsghdr mm[TX_MAX_PKTS];
    struct iovec iov[TX_MAX_PKTS];
    size_t k = 0;
    for (; i < n; i++) {
        iov[k] = (struct iovec){(void *)(buf + off), sizes[i]};
        mm[k] = (struct mmsghdr){
            .msg_hdr = {
                .msg_name = (void *)to, .msg_namelen = tolen, .msg_iov = &iov[k], .msg_iovlen = 1}};
        off += sizes[i];
        k++;
    }
    size_t done = 0;
    while (done < k) {
        int r = sendmmsg(fd, mm + done, (unsigned)(k - done), 0);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            ep->dropped_tx += k - done;
            break;
        }
        done += (size_t)r;
    }
}

/* ---- UDP input ---- */

/* Read what `fd` holds (bounded rounds; level-triggered epoll calls again) and dispatch it.
 * `c`: the connection owning `fd` (its private drain socket), NULL for the endpoint's. */
void fy__quic_rx_fd(fy_quic_endpoint_t *ep, int fd, fy_quic_conn_t *c)
{
    struct mmsghdr mm[RX_BATCH];
    struct iovec iov[RX_BATCH];
    struct sockaddr_storage from[RX_BATCH];
    for (int round = 0; round < 8; round++) {
        for (int i = 0; i < RX_BATCH; i++) {
            iov[i] = (struct iovec){ep->rx + (size_t)i * RX_SIZE, RX_SIZE};
            mm[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &from[i],
                                                 .msg_namelen = sizeof from[i],
                                                 .msg_iov = &iov[i],
                                                 .msg_iovlen = 1}};
        }
        int n = recvmmsg(fd, mm, RX_BATCH, MSG_DONTWAIT, NULL);
        if (n <= 0) return;
        for (int i = 0; i < n; i++) {
            if (mm[i].msg_hdr.msg_flags & MSG_TRUNC) continue;
            fy__quic_handle_packet(ep, iov[i].iov_base, mm[i].msg_len, (struct sockaddr *)&from[i],
                                   mm[i].msg_hdr.msg_namelen);
            if (c && c->pio.fd != fd) return; /* the connection closed (its memory is deferred) */
        }
        if (n < RX_BATCH) return;
    }
}

void fy__quic_on_io(fy_io_t *io, uint32_t events)
{
    fy_quic_endpoint_t *ep = io->data;
    fy__quic_rx_fd(ep, io->fd, NULL);
}

void fy__quic_on_conn_io(fy_io_t *io, uint32_t events)
{
    fy_quic_conn_t *c = io->data;
    fy__quic_rx_fd(c->ep, io->fd, c);
}
