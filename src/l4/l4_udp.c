/* UDP sessions: one per client address (bounded table per worker and listener), each with its
 * own connected socket to the origin so that replies come back to the right client.
 * Datagrams are read with recvmmsg on both sides and written with sendmmsg; their boundaries
 * are kept exactly. Both sockets have UDP_GRO on: a run of equal-sized datagrams (a peer's
 * UDP_SEGMENT send, or NIC GRO) arrives as one buffer with its segment size and leaves as one
 * message with UDP_SEGMENT, which the kernel cuts into the same datagrams again. quic-passthrough
 * sessions first decrypt the client's Initials (l4_quic.c) until the ClientHello's SNI picks the
 * origin, holding the datagrams (bounded) meanwhile. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/counters.h"
#include "core/log.h"
#include "l4/l4_int.h"
#include "l4/l4_quic.h"
#include "upstream/upstream.h"

#define BATCH 16
#define DGRAM_MAX 65536
#define QUEUE_MAX 32   /* datagrams held while a QUIC flow's ClientHello is incomplete */
#define HASH_MAX 65536 /* buckets */
#define SEG_MAX 64     /* datagrams per sendmmsg when a coalesced buffer is taken apart */

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

struct fy__l4_udp_sess {
    fy__l4_udp_sess_t *hnext;
    fy_list_t node;
    fy__l4_wl_t *wl;
    struct sockaddr_storage client;
    socklen_t clen;
    uint32_t hash;
    fy_io_t io; /* connected socket to the origin; -1 while peeking */
    fy_timer_t timer;
    fy_defer_t defer;
    bool closed;
    fy_upstream_t *up;
    int server;
    bool peeking;
    fy_quic_crypto_t crypto;
    uint8_t *q; /* owned: held datagrams, each [len:2][bytes] */
    size_t qlen, qn;
    /* QUIC: the connection ID the origin chose (the SCID of its first long-header reply);
       clients address the connection by it, so a client whose address changed (NAT
       rebinding) is found again by it */
    fy__l4_udp_sess_t *cnext;
    uint8_t scid[FY_QUIC_CID_MAX];
    size_t scid_len;
    uint32_t cid_hash;
    bool nogso[2]; /* UDP_SEGMENT refused towards the origin [0], the client [1] */
};

static uint32_t addr_hash(const struct sockaddr_storage *a, socklen_t len)
{
    const uint8_t *p = (const uint8_t *)a;
    uint32_t h = 2166136261u;
    size_t n = a->ss_family == AF_INET ? sizeof(struct sockaddr_in) : len;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

static uint32_t cid_hash(const uint8_t *cid, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ cid[i]) * 16777619u;
    return h;
}

static bool addr_eq(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family) return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
    return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
}

static void normalise(struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET) {
        struct sockaddr_in *x = (void *)a;
        memset(x->sin_zero, 0, sizeof x->sin_zero);
    }
}

static void gro_on(int fd)
{
    int one = 1;
    /* refused by a kernel before 5.0: every datagram then arrives alone */
    (void)setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
}

void fy__l4_udp_init(fy__l4_wl_t *wl)
{
    size_t want = (size_t)wl->l->conf->max_sessions, n = 16;
    while (n < want && n < HASH_MAX) n <<= 1;
    wl->hash = calloc(n, sizeof *wl->hash);
    wl->cids = calloc(n, sizeof *wl->cids);
    wl->hmask = wl->hash && wl->cids ? n - 1 : 0;
    if (!wl->cids) {
        free(wl->hash);
        wl->hash = NULL;
    }
    /* one scratch buffer per worker, whatever the number of sessions */
    if (!wl->w->rx) wl->w->rx = malloc((size_t)BATCH * DGRAM_MAX);
    if (wl->io.fd >= 0) gro_on(wl->io.fd);
}

static void sess_free(fy_defer_t *d)
{
    free(d->data);
}

static void sess_close(fy__l4_udp_sess_t *s, const char *why)
{
    if (s->closed) return;
    s->closed = true;
    fy__l4_wl_t *wl = s->wl;
    fy__l4_worker_t *w = wl->w;
    if (why) fy_debug("l4 %s: udp session closed: %s", wl->l->conf->name, why);
    fy_timer_stop(w->loop, &s->timer);
    if (s->io.fd >= 0) {
        fy_io_set(w->loop, &s->io, 0);
        close(s->io.fd);
        s->io.fd = -1;
    }
    fy__l4_udp_sess_t **pp = &wl->hash[s->hash & wl->hmask];
    while (*pp && *pp != s) pp = &(*pp)->hnext;
    if (*pp) *pp = s->hnext;
    if (s->scid_len) {
        pp = &wl->cids[s->cid_hash & wl->hmask];
        while (*pp && *pp != s) pp = &(*pp)->cnext;
        if (*pp) *pp = s->cnext;
    }
    fy_quic_crypto_free(&s->crypto);
    free(s->q);
    s->q = NULL;
    fy_list_remove(&s->node);
    wl->nsessions--;
    w->nsessions--;
    fy_gauge_add(fy_cid_l4_sessions_active, -1);
    s->defer.cb = sess_free;
    s->defer.data = s;
    fy_defer(w->loop, &s->defer);
    fy__l4_session_gone(wl);
}

static void on_timer(fy_timer_t *t)
{
    fy__l4_udp_sess_t *s = t->data;
    if (s->peeking)
        fy_info("l4 %s: QUIC ClientHello incomplete after peek-timeout: flow dropped",
                s->wl->l->conf->name);
    sess_close(s, s->peeking ? "peek timeout" : "idle timeout");
}

/* The origin's first long-header reply names the connection ID clients will use. */
static void learn_cid(fy__l4_udp_sess_t *s, const uint8_t *d, size_t len)
{
    fy_quic_hdr_t h;
    if (fy_quic_parse_hdr(d, len, &h) < 0 || !h.is_long || h.scid_len == 0) return;
    fy__l4_wl_t *wl = s->wl;
    memcpy(s->scid, h.scid, h.scid_len);
    s->scid_len = h.scid_len;
    s->cid_hash = cid_hash(h.scid, h.scid_len);
    s->cnext = wl->cids[s->cid_hash & wl->hmask];
    wl->cids[s->cid_hash & wl->hmask] = s;
    wl->cid_lens |= 1u << h.scid_len;
}

/* A datagram from an unknown address that carries the connection ID of a routed QUIC flow:
   the client's address changed (NAT rebinding). Returns the flow, moved to the new address. */
static fy__l4_udp_sess_t *find_by_cid(fy__l4_wl_t *wl, const uint8_t *d, size_t len,
                                      const struct sockaddr_storage *client, socklen_t clen,
                                      uint32_t ah)
{
    if (!wl->cid_lens || len < 2) return NULL;
    fy__l4_udp_sess_t *s = NULL;
    if (d[0] & 0x80) {
        fy_quic_hdr_t h;
        if (fy_quic_parse_hdr(d, len, &h) < 0 || h.version != FY_QUIC_V1) return NULL;
        uint32_t ch = cid_hash(h.dcid, h.dcid_len);
        for (s = wl->cids[ch & wl->hmask]; s; s = s->cnext)
            if (s->scid_len == h.dcid_len && !memcmp(s->scid, h.dcid, h.dcid_len)) break;
    } else { /* short header: the DCID length is not on the wire; try the lengths in use */
        for (size_t l = 1; l <= FY_QUIC_CID_MAX && !s; l++) {
            if (!(wl->cid_lens >> l & 1) || 1 + l > len) continue;
            uint32_t ch = cid_hash(d + 1, l);
            for (s = wl->cids[ch & wl->hmask]; s; s = s->cnext)
                if (s->scid_len == l && !memcmp(s->scid, d + 1, l)) break;
        }
    }
    if (!s || s->closed || s->peeking) return NULL;
    fy__l4_udp_sess_t **pp = &wl->hash[s->hash & wl->hmask];
    while (*pp && *pp != s) pp = &(*pp)->hnext;
    if (*pp) *pp = s->hnext;
    s->client = *client;
    s->clen = clen;
    s->hash = ah;
    s->hnext = wl->hash[ah & wl->hmask];
    wl->hash[ah & wl->hmask] = s;
    fy_debug("l4 %s: QUIC flow found by connection ID at a new client address", wl->l->conf->name);
    return s;
}

/* ---- batches: coalesced receive (UDP_GRO) and segmented send (UDP_SEGMENT) ---- */

/* Control space of one received buffer (the UDP_GRO segment size, an int) and of one sent
   message (the UDP_SEGMENT size, a u16). */
typedef union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
} gro_ctl_t;

typedef union {
    char b[CMSG_SPACE(sizeof(uint16_t))];
    struct cmsghdr align;
} gso_ctl_t;

/* BATCH slots of the worker's scratch buffer (rx), each DGRAM_MAX bytes: a datagram, or up to
   64 KiB of equal-sized datagrams the kernel coalesced. */
static void rx_prepare(uint8_t *rx, struct mmsghdr *m, struct iovec *iov, gro_ctl_t *ctl,
                       struct sockaddr_storage *from)
{
    memset(m, 0, sizeof *m * BATCH);
    for (int i = 0; i < BATCH; i++) {
        iov[i].iov_base = rx + (size_t)i * DGRAM_MAX;
        iov[i].iov_len = DGRAM_MAX;
        m[i].msg_hdr.msg_iov = &iov[i];
        m[i].msg_hdr.msg_iovlen = 1;
        m[i].msg_hdr.msg_control = ctl[i].b;
        m[i].msg_hdr.msg_controllen = sizeof ctl[i].b;
        if (from) {
            m[i].msg_hdr.msg_name = &from[i];
            m[i].msg_hdr.msg_namelen = sizeof from[i];
        }
    }
}

/* The datagram size of a coalesced buffer of `len` bytes (every datagram but the last has
   it; the last may be shorter), or 0 when the buffer is one datagram. */
static size_t rx_seg(struct msghdr *mh, size_t len)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_UDP || c->cmsg_type != UDP_GRO ||
            c->cmsg_len < CMSG_LEN(sizeof(int)))
            continue;
        int g;
        memcpy(&g, CMSG_DATA(c), sizeof g);
        return g > 0 && (size_t)g < len ? (size_t)g : 0;
    }
    return 0;
}

/* Messages for one socket: each a datagram, or a coalesced buffer sent with UDP_SEGMENT so
   that the kernel cuts it into the same datagrams again. */
typedef struct {
    struct mmsghdr m[BATCH];
    struct iovec iov[BATCH];
    gso_ctl_t ctl[BATCH];
    size_t seg[BATCH];
    unsigned n;
} tx_t;

static void tx_add(tx_t *t, uint8_t *buf, size_t len, size_t seg, struct sockaddr_storage *to,
                   socklen_t tolen)
{
    unsigned k = t->n++;
    t->iov[k] = (struct iovec){buf, len};
    memset(&t->m[k], 0, sizeof t->m[k]);
    struct msghdr *mh = &t->m[k].msg_hdr;
    mh->msg_iov = &t->iov[k];
    mh->msg_iovlen = 1;
    mh->msg_name = to;
    mh->msg_namelen = to ? tolen : 0;
    t->seg[k] = seg && seg < len ? seg : 0;
    if (!t->seg[k]) return;
    mh->msg_control = t->ctl[k].b;
    mh->msg_controllen = sizeof t->ctl[k].b;
    struct cmsghdr *c = CMSG_FIRSTHDR(mh);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    uint16_t s16 = (uint16_t)seg;
    memcpy(CMSG_DATA(c), &s16, sizeof s16);
}

/* A coalesced buffer as one datagram per segment. Returns false when the socket refused
   them (full: the rest is dropped, as the network would). */
static bool tx_split(fy__l4_wl_t *wl, int fd, const struct msghdr *mh, size_t seg, const char *to)
{
    uint8_t *p = mh->msg_iov[0].iov_base;
    size_t len = mh->msg_iov[0].iov_len;
    struct mmsghdr m[SEG_MAX];
    struct iovec iov[SEG_MAX];
    if (!seg) seg = len;
    for (size_t off = 0; off < len;) {
        unsigned n = 0;
        for (; n < SEG_MAX && off < len; n++) {
            size_t l = len - off < seg ? len - off : seg;
            iov[n] = (struct iovec){p + off, l};
            m[n] = (struct mmsghdr){.msg_hdr = {.msg_name = mh->msg_name,
                                                .msg_namelen = mh->msg_namelen,
                                                .msg_iov = &iov[n],
                                                .msg_iovlen = 1}};
            off += l;
        }
        for (unsigned done = 0; done < n;) {
            int r = sendmmsg(fd, m + done, n - done, MSG_DONTWAIT);
            if (r > 0) {
                done += (unsigned)r;
                continue;
            }
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                fy_debug("l4 %s: sendmmsg to %s: %s", wl->l->conf->name, to, strerror(errno));
            return false;
        }
    }
    return true;
}

/* Messages i..j-1 in sendmmsg calls. A path that refuses segmentation offload (EIO: no
   checksum offload; EINVAL/EMSGSIZE: a segment larger than its MTU; ENOBUFS) gets that buffer
   as single datagrams, and no UDP_SEGMENT again unless the refusal was ENOBUFS. */
static bool tx_send(fy__l4_wl_t *wl, int fd, tx_t *t, unsigned i, unsigned j, bool *nogso,
                    const char *to)
{
    while (i < j) {
        int r = sendmmsg(fd, t->m + i, j - i, MSG_DONTWAIT);
        if (r > 0) {
            i += (unsigned)r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && t->seg[i] &&
            (errno == EIO || errno == EINVAL || errno == EMSGSIZE || errno == ENOBUFS ||
             errno == ENOPROTOOPT)) {
            if (errno != ENOBUFS && !*nogso) {
                *nogso = true;
                fy_debug("l4 %s: UDP_SEGMENT to %s refused (%s): datagrams sent one by one",
                         wl->l->conf->name, to, strerror(errno));
            }
            if (!tx_split(wl, fd, &t->m[i].msg_hdr, t->seg[i], to)) return false;
            i++;
            continue;
        }
        /* a full socket buffer drops the rest, as the network would */
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            fy_debug("l4 %s: sendmmsg to %s: %s", wl->l->conf->name, to, strerror(errno));
        return false;
    }
    return true;
}

static void tx_flush(fy__l4_wl_t *wl, int fd, tx_t *t, bool *nogso, const char *to)
{
    unsigned n = t->n;
    t->n = 0;
    for (unsigned i = 0; i < n;) {
        if (t->seg[i] && *nogso) {
            if (!tx_split(wl, fd, &t->m[i].msg_hdr, t->seg[i], to)) return;
            i++;
            continue;
        }
        unsigned j = i + 1;
        while (j < n && !(t->seg[j] && *nogso)) j++;
        if (!tx_send(wl, fd, t, i, j, nogso, to)) return;
        i = j;
    }
}

/* origin -> client: recvmmsg on the session socket, sendmmsg on the listener's; a coalesced
   buffer crosses as one message each way */
static void on_origin_read(fy_io_t *io, uint32_t ev)
{
    fy__l4_udp_sess_t *s = io->data;
    fy__l4_wl_t *wl = s->wl;
    struct mmsghdr m[BATCH];
    struct iovec iov[BATCH];
    gro_ctl_t ctl[BATCH];
    tx_t tx;
    for (int round = 0; round < 4; round++) {
        rx_prepare(wl->w->rx, m, iov, ctl, NULL);
        int n = recvmmsg(io->fd, m, BATCH, MSG_DONTWAIT, NULL);
        if (n <= 0) {
            if (n < 0 && errno == ECONNREFUSED && s->up)
                fy_upstream_report(s->up, wl->w->id, s->server, false, wl->w->loop->now_ms);
            break;
        }
        tx.n = 0;
        for (int i = 0; i < n; i++) {
            size_t len = m[i].msg_len, seg = rx_seg(&m[i].msg_hdr, len);
            if (i == 0 && !s->scid_len && wl->l->conf->mode == FY_L4_QUIC_PASSTHROUGH)
                learn_cid(s, iov[0].iov_base, seg ? seg : len);
            fy_counter_add(wl->l->cid_bytes[1], len);
            tx_add(&tx, iov[i].iov_base, len, seg, &s->client, s->clen);
        }
        tx_flush(wl, wl->io.fd, &tx, &s->nogso[1], "client");
        fy_timer_start(wl->w->loop, &s->timer, wl->l->conf->idle_timeout_ms);
        if (n < BATCH) break;
    }
}

static int sess_connect(fy__l4_udp_sess_t *s, const fy_l4_target_t *to, fy_upstream_t *up)
{
    fy__l4_worker_t *w = s->wl->w;
    const struct sockaddr *addr = (const struct sockaddr *)&to->addr;
    socklen_t alen = to->addrlen;
    s->up = up;
    if (up) {
        s->server = fy_upstream_pick(up, w->id, 0, w->loop->now_ms);
        const fy_upstream_server_conf_t *sv = fy_upstream_conf(up)->servers.v;
        addr = (const struct sockaddr *)&sv[s->server].addr;
        alen = sv[s->server].addrlen;
    }
    int fd = socket(addr->sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, addr, alen) < 0) {
        fy_error("l4 %s: udp socket to origin: %s", s->wl->l->conf->name, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    gro_on(fd);
    s->io.fd = fd;
    s->io.cb = on_origin_read;
    s->io.data = s;
    fy_io_set(w->loop, &s->io, EPOLLIN);
    return 0;
}

static fy__l4_udp_sess_t *sess_new(fy__l4_wl_t *wl, const struct sockaddr_storage *client,
                                   socklen_t clen, uint32_t h)
{
    fy__l4_udp_sess_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->wl = wl;
    s->client = *client;
    s->clen = clen;
    s->hash = h;
    s->io.fd = -1;
    fy_timer_init(&s->timer, on_timer, s);
    s->hnext = wl->hash[h & wl->hmask];
    wl->hash[h & wl->hmask] = s;
    fy_list_insert_tail(&wl->w->udp, &s->node);
    wl->nsessions++;
    wl->w->nsessions++;
    fy_counters_l4_open();
    fy_counter_inc(wl->l->cid_sessions);
    return s;
}

static void drop(fy__l4_wl_t *wl, const char *why)
{
    /* the first drop of each kind is worth a line; a flood is not */
    if (wl->dropped++ % 10000 == 0)
        fy_info("l4 %s: datagram dropped: %s (%llu so far)", wl->l->conf->name, why,
                (unsigned long long)wl->dropped);
}

/* Route a QUIC flow whose ClientHello is complete, and send what was held. */
static void quic_route(fy__l4_udp_sess_t *s, const fy_l4_hello_t *h)
{
    fy_upstream_t *up = NULL;
    bool term;
    const fy_l4_target_t *to = fy__l4_route(s->wl->l, h->sni, &up, &term);
    if (!to) {
        fy_info("l4 %s: no route for QUIC server name '%s': flow dropped", s->wl->l->conf->name,
                h->sni_len ? h->sni : "(none)");
        sess_close(s, "no SNI route");
        return;
    }
    if (sess_connect(s, to, up) < 0) {
        sess_close(s, "connect failed");
        return;
    }
    s->peeking = false;
    fy_quic_crypto_free(&s->crypto);
    for (size_t o = 0; o < s->qlen;) {
        size_t l = (size_t)s->q[o] << 8 | s->q[o + 1];
        if (send(s->io.fd, s->q + o + 2, l, MSG_DONTWAIT) < 0) break;
        o += 2 + l;
    }
    free(s->q);
    s->q = NULL;
    s->qlen = s->qn = 0;
    fy_timer_start(s->wl->w->loop, &s->timer, s->wl->l->conf->idle_timeout_ms);
}

/* One more datagram of a flow still looking for its ClientHello. */
static void quic_feed(fy__l4_udp_sess_t *s, const uint8_t *d, size_t len)
{
    const fy_l4_conf_t *c = s->wl->l->conf;
    fy_l4_hello_t h;
    int r = fy_quic_initial_feed(&s->crypto, d, len, &h);
    if (r == FY_L4_HELLO_EBAD) {
        if (s->qn == 0) sess_close(s, "undecodable Initial");
        drop(s->wl, "not a decodable QUIC v1 Initial");
        return;
    }
    if (r == FY_L4_HELLO_ELIMIT) {
        fy_info("l4 %s: QUIC ClientHello larger than peek-max (%llu bytes): flow dropped", c->name,
                (unsigned long long)c->peek_max);
        sess_close(s, "peek-max");
        return;
    }
    if (s->qn >= QUEUE_MAX || len > 0xffff) {
        fy_info("l4 %s: more than %d datagrams before the QUIC ClientHello was complete: flow "
                "dropped",
                c->name, QUEUE_MAX);
        sess_close(s, "too many datagrams before the ClientHello");
        return;
    }
    uint8_t *q = realloc(s->q, s->qlen + 2 + len);
    if (!q) {
        sess_close(s, "out of memory");
        return;
    }
    s->q = q;
    q[s->qlen] = (uint8_t)(len >> 8);
    q[s->qlen + 1] = (uint8_t)len;
    memcpy(q + s->qlen + 2, d, len);
    s->qlen += 2 + len;
    s->qn++;
    if (r == 1) quic_route(s, &h);
}

/* A datagram from a client without a session. Returns the new session or NULL (dropped). */
static fy__l4_udp_sess_t *new_flow(fy__l4_wl_t *wl, const uint8_t *d, size_t len,
                                   const struct sockaddr_storage *client, socklen_t clen,
                                   uint32_t h)
{
    const fy_l4_conf_t *c = wl->l->conf;
    if (wl->w->draining) return NULL;
    if ((int64_t)wl->nsessions >= c->max_sessions) {
        if (wl->dropped % 10000 == 0)
            fy_warn("l4 %s: max-sessions (%lld) reached: new client dropped", c->name,
                    (long long)c->max_sessions);
        wl->dropped++;
        return NULL;
    }
    if (c->mode == FY_L4_UDP) {
        fy__l4_udp_sess_t *s = sess_new(wl, client, clen, h);
        if (s && sess_connect(s, &c->to, wl->l->up) < 0) {
            sess_close(s, "connect failed");
            return NULL;
        }
        if (s) fy_timer_start(wl->w->loop, &s->timer, c->idle_timeout_ms);
        return s;
    }
    /* quic-passthrough */
    fy_quic_hdr_t hdr;
    if (fy_quic_parse_hdr(d, len, &hdr) < 0 || !hdr.is_long) {
        drop(wl, "not the start of a QUIC connection");
        return NULL;
    }
    if (hdr.version == 0) {
        /* RFC 9000 §6.1, §17.2.1: only servers send Version Negotiation, in answer to a
           client's packet; one arriving from a client starts nothing (never relayed, even with
           unknown-version: default). An origin's VN travels back through the client's flow. */
        drop(wl, "Version Negotiation from a client");
        return NULL;
    }
    if (hdr.version != FY_QUIC_V1) {
        if (c->unknown_version == FY_L4_UNKNOWN_DEFAULT && (c->to.target || c->to.upstream)) {
            fy__l4_udp_sess_t *s = sess_new(wl, client, clen, h);
            if (s && sess_connect(s, &c->to, wl->l->up) < 0) {
                sess_close(s, "connect failed");
                return NULL;
            }
            if (s) fy_timer_start(wl->w->loop, &s->timer, c->idle_timeout_ms);
            return s;
        }
        drop(wl, "QUIC version other than 1");
        return NULL;
    }
    if (hdr.type != 0 || len < 1200) { /* RFC 9000 §14.1: client Initials are padded */
        drop(wl, hdr.type != 0 ? "QUIC packet other than Initial from a new client"
                               : "QUIC Initial shorter than 1200 bytes");
        return NULL;
    }
    fy__l4_udp_sess_t *s = sess_new(wl, client, clen, h);
    if (!s) return NULL;
    if (fy_quic_crypto_init(&s->crypto, c->peek_max) < 0) {
        sess_close(s, "out of memory");
        return NULL;
    }
    s->peeking = true;
    fy_timer_start(wl->w->loop, &s->timer, c->peek_timeout_ms);
    quic_feed(s, d, len);
    return NULL; /* the datagram was consumed (held or dropped) */
}

/* The session a client datagram goes to; NULL when it was consumed (held until a QUIC
   ClientHello is complete) or dropped. */
static fy__l4_udp_sess_t *classify(fy__l4_wl_t *wl, const uint8_t *d, size_t len,
                                   const struct sockaddr_storage *from, socklen_t fl, uint32_t h)
{
    fy__l4_udp_sess_t *s = wl->hash[h & wl->hmask];
    while (s && !addr_eq(&s->client, from)) s = s->hnext;
    if (s && s->peeking) {
        quic_feed(s, d, len);
        return NULL;
    }
    if (!s && wl->l->conf->mode == FY_L4_QUIC_PASSTHROUGH) s = find_by_cid(wl, d, len, from, fl, h);
    if (!s) s = new_flow(wl, d, len, from, fl, h);
    return s;
}

/* client -> origin: recvmmsg on the listener; runs of buffers for one session leave with one
 * sendmmsg on its socket. A coalesced buffer (all from one client address) is taken apart
 * only while its flow is unknown or peeking: from the first datagram that has a session on,
 * the rest crosses as one UDP_SEGMENT message. */
void fy__l4_udp_on_read(fy_io_t *io, uint32_t ev)
{
    fy__l4_wl_t *wl = io->data;
    if (!wl->w->rx || !wl->hash) return;
    struct mmsghdr m[BATCH];
    struct iovec iov[BATCH];
    struct sockaddr_storage from[BATCH];
    gro_ctl_t ctl[BATCH];
    tx_t tx;
    for (int round = 0; round < 8; round++) {
        rx_prepare(wl->w->rx, m, iov, ctl, from);
        int n = recvmmsg(io->fd, m, BATCH, MSG_DONTWAIT, NULL);
        if (n <= 0) break;
        tx.n = 0;
        fy__l4_udp_sess_t *run = NULL;
        for (int i = 0; i < n; i++) {
            normalise(&from[i]);
            socklen_t fl = m[i].msg_hdr.msg_namelen;
            uint32_t h = addr_hash(&from[i], fl);
            uint8_t *d = iov[i].iov_base;
            size_t len = m[i].msg_len, seg = rx_seg(&m[i].msg_hdr, len), off = 0;
            fy__l4_udp_sess_t *s = NULL;
            do {
                size_t l = seg && len - off > seg ? seg : len - off;
                s = classify(wl, d + off, l, &from[i], fl, h);
                if (!s) off += l;
            } while (!s && off < len);
            if (!s) continue;
            if (run && s != run) {
                if (run->closed)
                    tx.n = 0;
                else
                    tx_flush(wl, run->io.fd, &tx, &run->nogso[0], "origin");
            }
            run = s;
            fy_counter_add(wl->l->cid_bytes[0], len - off);
            tx_add(&tx, d + off, len - off, seg, NULL, 0);
            fy_timer_start(wl->w->loop, &s->timer, wl->l->conf->idle_timeout_ms);
        }
        if (run && !run->closed) tx_flush(wl, run->io.fd, &tx, &run->nogso[0], "origin");
        if (n < BATCH) break;
    }
}

void fy__l4_udp_close_all(fy__l4_worker_t *w)
{
    while (!fy_list_empty(&w->udp))
        sess_close(fy_container_of(w->udp.next, fy__l4_udp_sess_t, node), "closing");
}
