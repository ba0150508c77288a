/* QUIC cross-worker inbox: packets for another worker's connection are queued for it.
 * Threads: forward runs on any worker, on_inbox on the owner; eps[] and inboxes: qs->lock. */
#include "quic/quic_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/log.h"

/* A packet for another worker's connection (by the CID's marks): queue it for that worker.
 * Returns true when the packet was taken (queued, or dropped because the queue is full). */
/* ---- forwarding ---- */

bool fy__quic_forward(fy_quic_endpoint_t *ep, const ngtcp2_version_cid *vc, const uint8_t *data,
                      size_t len, const struct sockaddr *sa, socklen_t salen)
{
    fy_quic_server_t *qs = ep->qs;
    if (ep->index < 0 || vc->dcidlen != CIDLEN || vc->dcid[CID_TAG] != qs->tag ||
        vc->dcid[CID_EP] == ep->index)
        return false;
    bool taken = false, full = false;
    pthread_mutex_lock(&qs->lock);
    fy_quic_endpoint_t *to = vc->dcid[CID_EP] < qs->neps ? qs->eps[vc->dcid[CID_EP]] : NULL;
    if (to && to->ninbox < INBOX_MAX) {
        fwd_pkt_t *f = malloc(sizeof *f + len);
        if (f) {
            memcpy(&f->from, sa, salen);
            f->fromlen = salen;
            f->len = len;
            memcpy(f->data, data, len);
            f->next = to->inbox;
            to->inbox = f;
            to->ninbox++;
            uint64_t one = 1;
            if (write(to->inbox_io.fd, &one, sizeof one) < 0) { /* counter saturated: it is awake */
            }
        }
        taken = true;
    } else if (to) {
        taken = full = true; /* that worker is flooded: drop, loss recovery resends */
    }
    pthread_mutex_unlock(&qs->lock);
    if (full && ep->fwd_dropped++ == 0)
        fy_warn("listener %s: h3: worker %d's inbox of forwarded packets is full (%d); dropping",
                qs->name, vc->dcid[CID_EP], INBOX_MAX);
    if (taken && ep->forwarded++ == 0)
        fy_info("listener %s: h3: packets of worker %d's connections reach worker %d (client "
                "address changed); forwarding them",
                qs->name, vc->dcid[CID_EP], ep->index);
    return taken;
}

static void on_inbox(fy_io_t *io, uint32_t events)
{
    fy_quic_endpoint_t *ep = io->data;
    uint64_t v;
    if (read(io->fd, &v, sizeof v) < 0) { /* nothing: spurious wake-up */
    }
    pthread_mutex_lock(&ep->qs->lock);
    fwd_pkt_t *l = ep->inbox;
    ep->inbox = NULL;
    ep->ninbox = 0;
    pthread_mutex_unlock(&ep->qs->lock);
    fwd_pkt_t *rev = NULL; /* queued newest first: put back in arrival order */
    while (l) {
        fwd_pkt_t *n = l->next;
        l->next = rev;
        rev = l;
        l = n;
    }
    while (rev) {
        fwd_pkt_t *n = rev->next;
        fy__quic_handle_packet(ep, rev->data, rev->len, (struct sockaddr *)&rev->from,
                               rev->fromlen);
        free(rev);
        rev = n;
    }
}

/* Make the endpoint findable by the listener's other workers (server endpoints only). */
void fy__quic_ep_register(fy_quic_endpoint_t *ep)
{
    fy_quic_server_t *qs = ep->qs;
    ep->index = -1;
    ep->inbox_io.fd = -1;
    if (!qs->shared) return;
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) return;
    ep->inbox_io.fd = fd;
    ep->inbox_io.cb = on_inbox;
    ep->inbox_io.data = ep;
    if (fy_io_set(ep->loop, &ep->inbox_io, EPOLLIN) < 0) {
        close(fd);
        ep->inbox_io.fd = -1;
        return;
    }
    pthread_mutex_lock(&qs->lock);
    if (qs->neps < MAX_EPS) {
        ep->index = qs->neps++;
        qs->eps[ep->index] = ep;
    }
    pthread_mutex_unlock(&qs->lock);
}

void fy__quic_ep_unregister(fy_quic_endpoint_t *ep)
{
    fy_quic_server_t *qs = ep->qs;
    if (ep->inbox_io.fd < 0) return;
    pthread_mutex_lock(&qs->lock);
    if (ep->index >= 0) qs->eps[ep->index] = NULL;
    fwd_pkt_t *l = ep->inbox;
    ep->inbox = NULL;
    pthread_mutex_unlock(&qs->lock);
    while (l) {
        fwd_pkt_t *n = l->next;
        free(l);
        l = n;
    }
    fy_io_set(ep->loop, &ep->inbox_io, 0);
    close(ep->inbox_io.fd);
    ep->inbox_io.fd = -1;
}
