/* QUIC endpoint: UDP socket I/O (recvmmsg, sendmmsg or UDP GSO), the connection-ID map,
 * stateless reset, version negotiation, Retry, and ngtcp2 connections with GnuTLS sessions.
 * See quic.h for the contract with the application above. */
#include "quic/quic.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/list.h"
#include "core/log.h"
#include "core/loop.h"
#include "core/pool.h"
#include "net/sock.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

#define CIDLEN 16       /* length of the connection IDs we issue */
#define RX_BATCH 32     /* datagrams per recvmmsg */
#define RX_SIZE 2048    /* larger datagrams than this are not QUIC we accept */
#define TX_MAX_PKTS 64  /* packets per write round (one GSO send at most) */
#define TX_PKT_MAX 1452 /* bytes per packet we ever write */
#define MAX_CIDS 16     /* connection IDs one connection may have in the map */
#define MAX_DGRAMS 32   /* queued outgoing DATAGRAM frames per connection */
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
    size_t len;
    uint8_t data[FY_CHUNK_SIZE - 2 * sizeof(void *)];
} qchunk_t;

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
    fy_list_t link;  /* c->streams */
    fy_list_t qlink; /* c->sendq */
} qstream_t;

typedef struct dgram {
    size_t len;
    uint8_t *p;
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
    dgram_t dgrams[MAX_DGRAMS];
    size_t ndgrams;
    tls_rx_t tls_rx[3]; /* per level: Initial, Handshake, 1-RTT */
    fy_list_t link;     /* ep->conns */
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

/* FERRY_QUIC_DEBUG=1 in the environment: ngtcp2's own packet/frame log on stderr */
static void debug_log(void *ud, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void rand_bytes(void *p, size_t n)
{
    if (gnutls_rnd(GNUTLS_RND_RANDOM, p, n) != 0) {
        /* the RNG never fails on Linux; if it did, refuse to run with predictable CIDs */
        fy_log(FY_LOG_EMERG, "quic: gnutls_rnd failed");
        abort();
    }
}

/* ---- server (listener-wide) ---- */

fy_quic_server_t *fy_quic_server_new(const fy_quic_conf_t *conf, const char *const *certs,
                                     const char *const *keys, size_t n, const char *name)
{
    fy_quic_server_t *qs = fy_xcalloc(1, sizeof *qs);
    qs->conf = conf;
    qs->name = fy_xstrdup(name);
    int r = gnutls_certificate_allocate_credentials(&qs->cred);
    if (r != 0) goto gfail;
    for (size_t i = 0; i < n; i++) {
        r = gnutls_certificate_set_x509_key_file(qs->cred, certs[i], keys[i], GNUTLS_X509_FMT_PEM);
        if (r < 0) {
            fy_log(FY_LOG_EMERG, "listener %s: h3: cannot load %s / %s: %s", name, certs[i],
                   keys[i], gnutls_strerror(r));
            goto fail;
        }
    }
    /* QUIC is TLS 1.3 only; no middlebox compatibility mode (RFC 9001 §8.4) */
    r = gnutls_priority_init(&qs->prio,
                             "%DISABLE_TLS13_COMPAT_MODE:NORMAL:-VERS-ALL:+VERS-TLS1.3:"
                             "-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"
                             "+AES-128-CCM:-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:"
                             "+GROUP-SECP384R1:+GROUP-SECP521R1",
                             NULL);
    if (r != 0) goto gfail;
    rand_bytes(qs->secret, sizeof qs->secret);
    rand_bytes(&qs->tag, 1);
    pthread_mutex_init(&qs->lock, NULL);
    qs->shared = true;
    return qs;
gfail:
    fy_log(FY_LOG_EMERG, "listener %s: h3: GnuTLS: %s", name, gnutls_strerror(r));
fail:
    fy_quic_server_free(qs);
    return NULL;
}

int fy_quic_server_set_certs(fy_quic_server_t *qs, const char *const *certs,
                             const char *const *keys, size_t n)
{
    gnutls_certificate_credentials_t cred;
    int r = gnutls_certificate_allocate_credentials(&cred);
    if (r != 0) {
        fy_error("listener %s: h3: GnuTLS: %s", qs->name, gnutls_strerror(r));
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        r = gnutls_certificate_set_x509_key_file(cred, certs[i], keys[i], GNUTLS_X509_FMT_PEM);
        if (r < 0) {
            fy_error("listener %s: h3: cannot load %s / %s: %s", qs->name, certs[i], keys[i],
                     gnutls_strerror(r));
            gnutls_certificate_free_credentials(cred);
            return -1;
        }
    }
    /* a handshake on another worker may hold the old ones: they stay until the free */
    qs->old_creds = fy_xrealloc(qs->old_creds, (qs->nold_creds + 1) * sizeof *qs->old_creds);
    qs->old_creds[qs->nold_creds++] = qs->cred;
    __atomic_store_n(&qs->cred, cred, __ATOMIC_RELEASE);
    return 0;
}

void fy_quic_server_free(fy_quic_server_t *qs)
{
    if (!qs) return;
    for (size_t i = 0; i < qs->nold_creds; i++)
        gnutls_certificate_free_credentials(qs->old_creds[i]);
    free(qs->old_creds);
    if (qs->cred) gnutls_certificate_free_credentials(qs->cred);
    if (qs->prio) gnutls_priority_deinit(qs->prio);
    if (qs->shared) pthread_mutex_destroy(&qs->lock);
    free(qs->name);
    free(qs);
}

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

/* ---- connection-ID map ---- */

static size_t cid_hash(const ngtcp2_cid *cid)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a; CIDs are random, this only spreads them */
    for (size_t i = 0; i < cid->datalen; i++) h = (h ^ cid->data[i]) * 1099511628211ull;
    return (size_t)h;
}

static cid_entry_t **map_slot(fy_quic_endpoint_t *ep, const ngtcp2_cid *cid)
{
    cid_entry_t **pp = &ep->buckets[cid_hash(cid) & (ep->nbuckets - 1)];
    while (*pp && !ngtcp2_cid_eq(&(*pp)->cid, cid)) pp = &(*pp)->next;
    return pp;
}

static void map_grow(fy_quic_endpoint_t *ep)
{
    size_t nb = ep->nbuckets * 2;
    cid_entry_t **b = fy_xcalloc(nb, sizeof *b);
    for (size_t i = 0; i < ep->nbuckets; i++)
        for (cid_entry_t *e = ep->buckets[i], *next; e; e = next) {
            next = e->next;
            size_t h = cid_hash(&e->cid) & (nb - 1);
            e->next = b[h];
            b[h] = e;
        }
    free(ep->buckets);
    ep->buckets = b;
    ep->nbuckets = nb;
}

static fy_quic_conn_t *map_find(fy_quic_endpoint_t *ep, const uint8_t *id, size_t len)
{
    if (len > NGTCP2_MAX_CIDLEN) return NULL;
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, id, len);
    cid_entry_t *e = *map_slot(ep, &cid);
    return e ? e->c : NULL;
}

static int map_add(fy_quic_conn_t *c, const ngtcp2_cid *cid)
{
    fy_quic_endpoint_t *ep = c->ep;
    if (c->ncids == MAX_CIDS) return -1;
    cid_entry_t **pp = map_slot(ep, cid);
    if (*pp) return (*pp)->c == c ? 0 : -1;
    cid_entry_t *e = fy_xmalloc(sizeof *e);
    e->cid = *cid;
    e->c = c;
    e->next = NULL;
    *pp = e;
    c->cids[c->ncids++] = *cid;
    if (++ep->nentries > ep->nbuckets) map_grow(ep);
    return 0;
}

static void map_del(fy_quic_conn_t *c, const ngtcp2_cid *cid)
{
    fy_quic_endpoint_t *ep = c->ep;
    cid_entry_t **pp = map_slot(ep, cid);
    if (*pp && (*pp)->c == c) {
        cid_entry_t *e = *pp;
        *pp = e->next;
        free(e);
        ep->nentries--;
    }
    for (size_t i = 0; i < c->ncids; i++)
        if (ngtcp2_cid_eq(&c->cids[i], cid)) {
            c->cids[i] = c->cids[--c->ncids];
            break;
        }
}

/* ---- UDP output ---- */

static void send_one_fd(fy_quic_endpoint_t *ep, int fd, const struct sockaddr *to, socklen_t tolen,
                        const uint8_t *p, size_t n)
{
    if (sendto(fd, p, n, 0, to, tolen) < 0) ep->dropped_tx++;
}

static void send_one(fy_quic_endpoint_t *ep, const struct sockaddr *to, socklen_t tolen,
                     const uint8_t *p, size_t n)
{
    send_one_fd(ep, ep->io.fd, to, tolen, p, n);
}

/* The socket a connection's packets leave by (its own while the endpoint drains). */
static int conn_fd(const fy_quic_conn_t *c)
{
    return c->pio.fd >= 0 ? c->pio.fd : c->ep->io.fd;
}

/* Send n packets laid out back to back in buf. With GSO, runs of equal-sized packets (the
 * last of a run may be shorter) leave in one sendmsg; else one sendmmsg. A full socket
 * buffer drops packets: QUIC's loss recovery resends them. */
static void send_packets(fy_quic_endpoint_t *ep, int fd, const struct sockaddr *to, socklen_t tolen,
                         const uint8_t *buf, const size_t *sizes, size_t n)
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
            send_one_fd(ep, fd, to, tolen, buf + off, sizes[i]);
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

/* ---- streams ---- */

static fy_pool_t *chunk_pool(void)
{
    return fy_chunk_pool(); /* qchunk_t is exactly one I/O chunk */
}

static qstream_t *qs_of(fy_quic_stream_t *s)
{
    return fy_container_of(s, qstream_t, pub);
}

static qstream_t *stream_new(fy_quic_conn_t *c, int64_t id)
{
    qstream_t *s = fy_xcalloc(1, sizeof *s);
    s->pub.id = id;
    s->c = c;
    fy_list_init(&s->qlink);
    fy_list_insert_tail(&c->streams, &s->link);
    ngtcp2_conn_set_stream_user_data(c->conn, id, s);
    return s;
}

static void stream_drop_data(qstream_t *s)
{
    for (qchunk_t *k = s->head, *next; k; k = next) {
        next = k->next;
        fy_pool_put(chunk_pool(), k);
    }
    s->head = s->tail = NULL;
    s->head_off = s->buffered = s->sent = 0;
}

/* The write side is gone: nothing queued will ever be sent or acknowledged. */
static void stream_drop_unsent(qstream_t *s)
{
    stream_drop_data(s);
}

bool fy_quic_stream_is_write_closed(const fy_quic_stream_t *ps)
{
    const qstream_t *s = fy_container_of(ps, qstream_t, pub);
    return s->shut_wr;
}

static void stream_free(qstream_t *s)
{
    stream_drop_data(s);
    if (s->in_sendq) fy_list_remove(&s->qlink);
    fy_list_remove(&s->link);
    free(s);
}

static void schedule_write(fy_quic_conn_t *c)
{
    if (!c->closed) fy_defer(c->ep->loop, &c->write_defer);
}

static void sendq_add(qstream_t *s)
{
    if (s->in_sendq || s->blocked || s->shut_wr) return;
    if (s->sent == s->buffered && (!s->fin || s->fin_sent)) return;
    s->in_sendq = true;
    fy_list_insert_tail(&s->c->sendq, &s->qlink);
}

static void sendq_del(qstream_t *s)
{
    if (!s->in_sendq) return;
    s->in_sendq = false;
    fy_list_remove(&s->qlink);
}

uint8_t *fy_quic_stream_wbuf(fy_quic_conn_t *qc, fy_quic_stream_t *ps, size_t *avail)
{
    qstream_t *s = qs_of(ps);
    if (!s->tail || s->tail->len == sizeof s->tail->data) {
        qchunk_t *k = fy_pool_get(chunk_pool());
        k->next = NULL;
        k->len = 0;
        if (s->tail)
            s->tail->next = k;
        else
            s->head = k;
        s->tail = k;
    }
    *avail = sizeof s->tail->data - s->tail->len;
    return s->tail->data + s->tail->len;
}

void fy_quic_stream_commit(fy_quic_conn_t *qc, fy_quic_stream_t *ps, size_t n)
{
    qstream_t *s = qs_of(ps);
    if (!n || s->shut_wr || s->fin) return;
    s->tail->len += n;
    s->buffered += n;
    sendq_add(s);
    schedule_write(qc);
}

int fy_quic_stream_write(fy_quic_conn_t *qc, fy_quic_stream_t *ps, const void *p, size_t n)
{
    qstream_t *s = qs_of(ps);
    if (s->fin || s->shut_wr) return -EPIPE;
    const uint8_t *q = p;
    while (n) {
        size_t avail;
        uint8_t *d = fy_quic_stream_wbuf(qc, ps, &avail);
        size_t k = n < avail ? n : avail;
        memcpy(d, q, k);
        fy_quic_stream_commit(qc, ps, k);
        q += k;
        n -= k;
    }
    return 0;
}

void fy_quic_stream_finish(fy_quic_conn_t *qc, fy_quic_stream_t *ps)
{
    qstream_t *s = qs_of(ps);
    if (s->fin || s->shut_wr) return;
    s->fin = true;
    sendq_add(s);
    schedule_write(qc);
}

size_t fy_quic_stream_buffered(const fy_quic_stream_t *ps)
{
    return fy_container_of(ps, qstream_t, pub)->buffered;
}

void fy_quic_stream_consumed(fy_quic_conn_t *qc, fy_quic_stream_t *ps, size_t n)
{
    if (qc->closed || !n) return;
    ngtcp2_conn_extend_max_stream_offset(qc->conn, ps->id, n);
    ngtcp2_conn_extend_max_offset(qc->conn, n);
    schedule_write(qc);
}

void fy_quic_stream_reset(fy_quic_conn_t *qc, fy_quic_stream_t *ps, uint64_t code)
{
    qstream_t *s = qs_of(ps);
    if (qc->closed || s->shut_wr) return;
    s->shut_wr = true;
    sendq_del(s);
    ngtcp2_conn_shutdown_stream_write(qc->conn, ps->id, code);
    schedule_write(qc);
}

/* ngtcp2 0.12 asserts if a stream's read side is shut from inside its recv_stream_data
 * callback (conn_emit_pending_stream_data), which is where the application usually decides
 * to stop reading: do it at the next write instead. */
void fy_quic_stream_stop_reading(fy_quic_conn_t *qc, fy_quic_stream_t *ps, uint64_t code)
{
    qstream_t *s = qs_of(ps);
    if (qc->closed || s->stop_pending) return;
    s->stop_pending = true;
    s->stop_code = code;
    qc->stops_pending = true;
    schedule_write(qc);
}

static void apply_stops(fy_quic_conn_t *c)
{
    c->stops_pending = false;
    for (fy_list_t *l = c->streams.next; l != &c->streams; l = l->next) {
        qstream_t *s = fy_container_of(l, qstream_t, link);
        if (!s->stop_pending) continue;
        s->stop_pending = false;
        ngtcp2_conn_shutdown_stream_read(c->conn, s->pub.id, s->stop_code);
    }
}

fy_quic_stream_t *fy_quic_open_uni(fy_quic_conn_t *qc)
{
    int64_t id;
    if (qc->closed || ngtcp2_conn_open_uni_stream(qc->conn, &id, NULL) != 0) return NULL;
    return &stream_new(qc, id)->pub;
}

int fy_quic_send_datagram(fy_quic_conn_t *qc, const void *p, size_t n)
{
    const ngtcp2_transport_params *rp = ngtcp2_conn_get_remote_transport_params(qc->conn);
    if (!rp || rp->max_datagram_frame_size == 0) return -ENOTSUP;
    if (n + 8 > rp->max_datagram_frame_size || n > 1200) return -EMSGSIZE;
    if (qc->ndgrams == MAX_DGRAMS) return -EAGAIN;
    dgram_t *d = &qc->dgrams[qc->ndgrams++];
    d->p = fy_xmalloc(n ? n : 1);
    memcpy(d->p, p, n);
    d->len = n;
    schedule_write(qc);
    return 0;
}

bool fy_quic_conn_peer_close(const fy_quic_conn_t *qc, uint64_t *code, bool *app)
{
    if (!qc->conn) return false;
    ngtcp2_connection_close_error e;
    ngtcp2_conn_get_connection_close_error(qc->conn, &e);
    if (e.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT_VERSION_NEGOTIATION ||
        e.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT_IDLE_CLOSE)
        return false;
    if (e.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT && e.error_code == 0 &&
        e.frame_type == 0 && e.reasonlen == 0)
        return false; /* nothing received */
    *code = e.error_code;
    *app = e.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION;
    return true;
}

const struct sockaddr *fy_quic_conn_remote(const fy_quic_conn_t *qc)
{
    return (const struct sockaddr *)&qc->remote;
}

const fy_quic_conf_t *fy_quic_conn_conf(const fy_quic_conn_t *qc)
{
    return qc->ep->qs->conf;
}

int fy_quic_conn_send_crypto(fy_quic_conn_t *qc, int level, const void *p, size_t n)
{
    if (qc->closed || (level != 1 && level != 2)) return -EINVAL;
    int r = ngtcp2_conn_submit_crypto_data(
        qc->conn, level == 1 ? NGTCP2_CRYPTO_LEVEL_HANDSHAKE : NGTCP2_CRYPTO_LEVEL_APPLICATION, p,
        n);
    if (r != 0) return r == NGTCP2_ERR_NOMEM ? -ENOMEM : -EINVAL;
    schedule_write(qc);
    return 0;
}

/* ---- connection teardown ---- */

static void free_conn(fy_defer_t *d)
{
    free(d->data);
}

/* Tear down now (never from inside an ngtcp2 call). `send_close`: write CONNECTION_CLOSE
 * with c->ccerr first. */
static void conn_destroy(fy_quic_conn_t *c, bool send_close)
{
    if (c->closed) return;
    fy_quic_endpoint_t *ep = c->ep;
    if (send_close && !ngtcp2_conn_is_in_draining_period(c->conn)) {
        ngtcp2_path_storage ps;
        ngtcp2_path_storage_zero(&ps);
        ngtcp2_pkt_info pi;
        uint8_t buf[TX_PKT_MAX];
        ngtcp2_ssize n = ngtcp2_conn_write_connection_close(c->conn, &ps.path, &pi, buf, sizeof buf,
                                                            &c->ccerr, now_ns());
        if (n > 0)
            send_one_fd(ep, conn_fd(c), (struct sockaddr *)&c->remote, c->remotelen, buf,
                        (size_t)n);
    }
    if (c->pio.fd >= 0) {
        fy_io_set(ep->loop, &c->pio, 0);
        close(c->pio.fd);
        c->pio.fd = -1;
    }
    c->closed = true;
    c->closing = true;
    while (!fy_list_empty(&c->streams)) {
        qstream_t *s = fy_container_of(c->streams.next, qstream_t, link);
        if (c->app && ep->ops->stream_close) ep->ops->stream_close(c->app, &s->pub, 0);
        stream_free(s);
    }
    if (c->app && ep->ops->close) ep->ops->close(c->app);
    c->app = NULL;
    while (c->ncids) map_del(c, &c->cids[c->ncids - 1]);
    for (size_t i = 0; i < c->ndgrams; i++) free(c->dgrams[i].p);
    c->ndgrams = 0;
    fy_timer_stop(ep->loop, &c->timer);
    fy_defer_cancel(ep->loop, &c->write_defer);
    fy_defer_cancel(ep->loop, &c->close_defer);
    ngtcp2_conn_del(c->conn);
    c->conn = NULL;
    gnutls_deinit(c->tls);
    fy_list_remove(&c->link);
    ep->nconns--;
    c->free_defer.cb = free_conn;
    c->free_defer.data = c;
    fy_defer(ep->loop, &c->free_defer);
    if (ep->client) fy_defer(ep->loop, &ep->free_defer);
}

static void close_cb(fy_defer_t *d)
{
    conn_destroy(d->data, true);
}

void fy_quic_conn_close(fy_quic_conn_t *qc, uint64_t app_code, const char *reason)
{
    if (qc->closing) return;
    qc->closing = true;
    ngtcp2_connection_close_error_set_application_error(
        &qc->ccerr, app_code, (const uint8_t *)reason, reason ? strlen(reason) : 0);
    fy_defer(qc->ep->loop, &qc->close_defer);
}

void fy_quic_conn_abort(fy_quic_conn_t *qc, uint64_t app_code)
{
    if (qc->closed) return;
    if (qc->in_lib) { /* called from one of our callbacks: finish after ngtcp2 returns */
        fy_quic_conn_close(qc, app_code, NULL);
        return;
    }
    if (!qc->closing)
        ngtcp2_connection_close_error_set_application_error(&qc->ccerr, app_code, NULL, 0);
    qc->closing = true;
    conn_destroy(qc, true);
}

/* A library error from ngtcp2: close with the matching transport error (never while inside
 * an ngtcp2 call). */
static void conn_fail(fy_quic_conn_t *c, int liberr)
{
    if (c->closed) return;
    if (liberr == NGTCP2_ERR_DRAINING || liberr == NGTCP2_ERR_IDLE_CLOSE ||
        liberr == NGTCP2_ERR_DROP_CONN) {
        conn_destroy(c, false);
        return;
    }
    if (!c->closing) {
        if (liberr == NGTCP2_ERR_CRYPTO)
            ngtcp2_connection_close_error_set_transport_error_tls_alert(
                &c->ccerr, ngtcp2_conn_get_tls_alert(c->conn), NULL, 0);
        else
            ngtcp2_connection_close_error_set_transport_error_liberr(&c->ccerr, liberr, NULL, 0);
    }
    char a[64];
    if (liberr == NGTCP2_ERR_CRYPTO)
        fy_info("client %s: quic: ERR_CRYPTO: closing with TLS alert %u",
                fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a),
                ngtcp2_conn_get_tls_alert(c->conn));
    else
        fy_info("client %s: quic: %s", fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a),
                ngtcp2_strerror(liberr));
    conn_destroy(c, liberr != NGTCP2_ERR_CALLBACK_FAILURE || c->closing);
}

/* ---- connection output ---- */

static void arm_timer(fy_quic_conn_t *c)
{
    uint64_t exp = ngtcp2_conn_get_expiry(c->conn), now = now_ns();
    uint64_t ms = exp <= now ? 0 : (exp - now + 999999) / 1000000;
    if (ms > 3600000) ms = 3600000;
    fy_timer_start(c->ep->loop, &c->timer, ms);
}

static void conn_write(fy_quic_conn_t *c)
{
    if (c->closed) return;
    if (c->closing) {
        conn_destroy(c, true);
        return;
    }
    fy_quic_endpoint_t *ep = c->ep;
    if (c->stops_pending) apply_stops(c);
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    uint64_t ts = now_ns();
    size_t pktmax = ngtcp2_conn_get_path_max_tx_udp_payload_size(c->conn);
    if (pktmax > TX_PKT_MAX) pktmax = TX_PKT_MAX;
    size_t quantum = ngtcp2_conn_get_send_quantum(c->conn);
    size_t maxpkts = quantum / pktmax;
    if (maxpkts < 1) maxpkts = 1;
    if (maxpkts > TX_MAX_PKTS) maxpkts = TX_MAX_PKTS;
    size_t sizes[TX_MAX_PKTS], npkts = 0, off = 0;
    struct sockaddr_storage to;
    socklen_t tolen = 0;
    bool limited = false;
    for (;;) {
        qstream_t *s = NULL;
        ngtcp2_vec v[16];
        size_t nv = 0;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
        ngtcp2_ssize nd = -1, n;
        if (c->ndgrams) {
            int accepted = 0;
            ngtcp2_vec dv = {c->dgrams[0].p, c->dgrams[0].len};
            /* an empty DATAGRAM is legal, but libngtcp2 0.12.1 asserts on an empty vec: none */
            n = ngtcp2_conn_writev_datagram(c->conn, &ps.path, &pi, ep->tx + off, pktmax, &accepted,
                                            NGTCP2_WRITE_DATAGRAM_FLAG_NONE, 0, &dv, dv.len ? 1 : 0,
                                            ts);
            if (accepted || n < 0) { /* sent, or cannot ever be: drop it */
                free(c->dgrams[0].p);
                memmove(c->dgrams, c->dgrams + 1, (c->ndgrams - 1) * sizeof c->dgrams[0]);
                c->ndgrams--;
            }
            if (n < 0) {
                if (n == NGTCP2_ERR_INVALID_ARGUMENT || n == NGTCP2_ERR_INVALID_STATE) continue;
                conn_fail(c, (int)n);
                return;
            }
        } else {
            if (!fy_list_empty(&c->sendq)) {
                s = fy_container_of(c->sendq.next, qstream_t, qlink);
                size_t skip = s->sent;
                qchunk_t *k = s->head;
                size_t koff = s->head_off;
                while (k && skip >= k->len - koff) {
                    skip -= k->len - koff;
                    k = k->next;
                    koff = 0;
                }
                koff += skip;
                for (; k && nv < 16; k = k->next, koff = 0) {
                    if (k->len == koff) continue;
                    v[nv].base = k->data + koff;
                    v[nv].len = k->len - koff;
                    nv++;
                }
                if (s->fin && !k) flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
            }
            n = ngtcp2_conn_writev_stream(c->conn, &ps.path, &pi, ep->tx + off, pktmax, &nd, flags,
                                          s ? s->pub.id : -1, v, nv, ts);
            if (n < 0) {
                switch (n) {
                case NGTCP2_ERR_STREAM_DATA_BLOCKED:
                    s->blocked = true;
                    sendq_del(s);
                    continue;
                case NGTCP2_ERR_STREAM_SHUT_WR:
                case NGTCP2_ERR_STREAM_NOT_FOUND:
                    /* the peer sent STOP_SENDING: ngtcp2 reset the stream */
                    s->shut_wr = true;
                    sendq_del(s);
                    stream_drop_unsent(s);
                    if (!c->closing && c->app && ep->ops->reset) ep->ops->reset(c->app, &s->pub, 0);
                    continue;
                case NGTCP2_ERR_WRITE_MORE:
                    s->sent += (size_t)nd;
                    if (flags & NGTCP2_WRITE_STREAM_FLAG_FIN && s->sent == s->buffered)
                        s->fin_sent = true;
                    if (s->sent == s->buffered && (!s->fin || s->fin_sent)) sendq_del(s);
                    continue;
                default:
                    conn_fail(c, (int)n);
                    return;
                }
            }
            if (s && nd >= 0) {
                s->sent += (size_t)nd;
                if (flags & NGTCP2_WRITE_STREAM_FLAG_FIN && s->sent == s->buffered)
                    s->fin_sent = true;
                if (s->sent == s->buffered && (!s->fin || s->fin_sent)) sendq_del(s);
            }
        }
        if (n == 0) break;
        if (npkts &&
            (ps.path.remote.addrlen != tolen || memcmp(ps.path.remote.addr, &to, tolen) != 0)) {
            /* a path probe to another address: flush what goes to the old one first */
            uint8_t tmp[TX_PKT_MAX];
            memcpy(tmp, ep->tx + off, (size_t)n);
            send_packets(ep, conn_fd(c), (struct sockaddr *)&to, tolen, ep->tx, sizes, npkts);
            memcpy(ep->tx, tmp, (size_t)n);
            npkts = 0;
            off = 0;
        }
        if (npkts == 0) {
            tolen = ps.path.remote.addrlen;
            memcpy(&to, ps.path.remote.addr, tolen);
        }
        sizes[npkts++] = (size_t)n;
        off += (size_t)n;
        if (npkts == maxpkts) {
            limited = true;
            break;
        }
    }
    if (npkts) send_packets(ep, conn_fd(c), (struct sockaddr *)&to, tolen, ep->tx, sizes, npkts);
    ngtcp2_conn_update_pkt_tx_time(c->conn, ts);
    if (limited)
        fy_timer_start(ep->loop, &c->timer, 0); /* next turn: let other conns and reads in */
    else
        arm_timer(c);
}

static void write_cb(fy_defer_t *d)
{
    conn_write(d->data);
}

static void on_timer(fy_timer_t *t)
{
    fy_quic_conn_t *c = t->data;
    if (c->closed) return;
    int r = ngtcp2_conn_handle_expiry(c->conn, now_ns());
    if (r != 0) {
        if (r == NGTCP2_ERR_IDLE_CLOSE) {
            char a[64];
            fy_info("client %s: quic idle timeout, closing connection",
                    fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a));
        }
        conn_fail(c, r);
        return;
    }
    conn_write(c);
}

/* ---- ngtcp2 callbacks ---- */

static void *ensure_app(fy_quic_conn_t *c)
{
    if (!c->app_open && !c->closing) {
        c->app_open = true;
        c->app = c->ep->ops->open(c, c->ep->ud);
        if (!c->app) fy_quic_conn_close(c, 0x102 /* H3_INTERNAL_ERROR */, "refused");
    }
    return c->closing ? NULL : c->app;
}

static int cb_handshake_completed(ngtcp2_conn *conn, void *ud)
{
    ensure_app(ud);
    return 0;
}

static int cb_stream_open(ngtcp2_conn *conn, int64_t id, void *ud)
{
    fy_quic_conn_t *c = ud;
    qstream_t *s = stream_new(c, id);
    void *app = ensure_app(c);
    if (app && c->ep->ops->stream_open) c->ep->ops->stream_open(app, &s->pub);
    return 0;
}

static int cb_recv_stream_data(ngtcp2_conn *conn, uint32_t flags, int64_t id, uint64_t offset,
                               const uint8_t *data, size_t len, void *ud, void *sud)
{
    fy_quic_conn_t *c = ud;
    qstream_t *s = sud;
    void *app = ensure_app(c);
    if (!s || !app) {
        /* nobody reads it: keep the windows open */
        ngtcp2_conn_extend_max_stream_offset(conn, id, len);
        ngtcp2_conn_extend_max_offset(conn, len);
        return 0;
    }
    c->ep->ops->recv(app, &s->pub, data, len, flags & NGTCP2_STREAM_DATA_FLAG_FIN);
    return 0;
}

static int cb_acked(ngtcp2_conn *conn, int64_t id, uint64_t offset, uint64_t len, void *ud,
                    void *sud)
{
    fy_quic_conn_t *c = ud;
    qstream_t *s = sud;
    if (!s) return 0;
    size_t n = (size_t)len;
    if (n > s->buffered) n = s->buffered; /* cannot happen: ngtcp2 acks what it was given */
    s->buffered -= n;
    s->sent -= n < s->sent ? n : s->sent;
    while (n) {
        qchunk_t *k = s->head;
        size_t k_left = k->len - s->head_off;
        if (n < k_left) {
            s->head_off += n;
            break;
        }
        n -= k_left;
        s->head = k->next;
        s->head_off = 0;
        if (!s->head) s->tail = NULL;
        fy_pool_put(chunk_pool(), k);
    }
    if (!c->closing && c->app && c->ep->ops->acked) c->ep->ops->acked(c->app, &s->pub);
    return 0;
}

static int cb_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t id, uint64_t code, void *ud,
                           void *sud)
{
    fy_quic_conn_t *c = ud;
    qstream_t *s = sud;
    /* a client stream is done: give the client credit for another (ngtcp2 0.12 leaves
       MAX_STREAMS to us) */
    if (!ngtcp2_conn_is_local_stream(conn, id)) {
        if (id & 0x2)
            ngtcp2_conn_extend_max_streams_uni(conn, 1);
        else
            ngtcp2_conn_extend_max_streams_bidi(conn, 1);
    }
    if (!s) return 0;
    if (c->app && c->ep->ops->stream_close) c->ep->ops->stream_close(c->app, &s->pub, code);
    ngtcp2_conn_set_stream_user_data(conn, id, NULL);
    stream_free(s);
    return 0;
}

static int cb_stream_reset(ngtcp2_conn *conn, int64_t id, uint64_t final_size, uint64_t code,
                           void *ud, void *sud)
{
    fy_quic_conn_t *c = ud;
    qstream_t *s = sud;
    if (s && !c->closing && c->app && c->ep->ops->reset) c->ep->ops->reset(c->app, &s->pub, code);
    return 0;
}

/* ngtcp2 0.12 calls this when *we* stop reading (shutdown_stream_read); a peer's STOP_SENDING
 * makes ngtcp2 reset the stream itself, which we learn from writev (STREAM_SHUT_WR). */
static int cb_stop_sending(ngtcp2_conn *conn, int64_t id, uint64_t code, void *ud, void *sud)
{
    return 0;
}

static int cb_extend_max_stream_data(ngtcp2_conn *conn, int64_t id, uint64_t max, void *ud,
                                     void *sud)
{
    qstream_t *s = sud;
    if (!s) return 0;
    s->blocked = false;
    sendq_add(s);
    return 0;
}

static int cb_recv_datagram(ngtcp2_conn *conn, uint32_t flags, const uint8_t *p, size_t n, void *ud)
{
    fy_quic_conn_t *c = ud;
    void *app = ensure_app(c);
    if (app && c->ep->ops->datagram) c->ep->ops->datagram(app, p, n);
    return 0;
}

static void cb_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    rand_bytes(dest, len);
}

static void cid_mark(const fy_quic_endpoint_t *ep, uint8_t *b, size_t len)
{
    if (ep->index < 0 || len < 2) return;
    b[CID_EP] = (uint8_t)ep->index;
    b[CID_TAG] = ep->qs->tag;
}

static int cb_get_new_cid(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token, size_t len, void *ud)
{
    fy_quic_conn_t *c = ud;
    uint8_t b[NGTCP2_MAX_CIDLEN];
    for (int tries = 0; tries < 4; tries++) {
        rand_bytes(b, len);
        cid_mark(c->ep, b, len);
        ngtcp2_cid_init(cid, b, len);
        if (*map_slot(c->ep, cid)) continue;
        if (ngtcp2_crypto_generate_stateless_reset_token(token, c->ep->qs->secret,
                                                         sizeof c->ep->qs->secret, cid) != 0)
            return NGTCP2_ERR_CALLBACK_FAILURE;
        return map_add(c, cid) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
    }
    return NGTCP2_ERR_CALLBACK_FAILURE;
}

static int cb_remove_cid(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *ud)
{
    map_del(ud, cid);
    return 0;
}

#define TLS_HS_NEW_SESSION_TICKET 4
#define TLS_HS_FINISHED 20
#define TLS_HS_KEY_UPDATE 24
#define TLS_ALERT_UNEXPECTED_MESSAGE 10

/* Walk the TLS handshake-message headers in the peer's in-order CRYPTO data (a header may be
 * split across calls). QUIC forbids the TLS KeyUpdate message (RFC 9001 §6) and nothing may
 * follow Finished at the Handshake level; libngtcp2 0.12.1 hands either to GnuTLS, whose key
 * change then aborts inside ngtcp2_conn_install_rx_key. After the handshake a client has
 * nothing to send in 1-RTT CRYPTO frames (we never ask for post-handshake authentication),
 * and a server only NewSessionTicket; GnuTLS left some of the others hanging unanswered.
 * Returns what is wrong, or NULL. */
static const char *tls_rx_check(tls_rx_t *st, ngtcp2_crypto_level level, bool server,
                                const uint8_t *p, size_t n)
{
    while (n) {
        if (st->nhdr == 4) {
            size_t k = n < st->left ? n : st->left;
            st->left -= (uint32_t)k;
            p += k;
            n -= k;
            if (!st->left) st->nhdr = 0;
            continue;
        }
        if (st->nhdr == 0) {
            if (p[0] == TLS_HS_KEY_UPDATE) return "KeyUpdate";
            if (level == NGTCP2_CRYPTO_LEVEL_APPLICATION &&
                (server || p[0] != TLS_HS_NEW_SESSION_TICKET))
                return "post-handshake message";
            if (level == NGTCP2_CRYPTO_LEVEL_HANDSHAKE && st->finished)
                return "message after Finished";
            if (level == NGTCP2_CRYPTO_LEVEL_HANDSHAKE && p[0] == TLS_HS_FINISHED)
                st->finished = true;
        }
        st->hdr[st->nhdr++] = *p++;
        n--;
        if (st->nhdr == 4) {
            st->left = (uint32_t)st->hdr[1] << 16 | (uint32_t)st->hdr[2] << 8 | st->hdr[3];
            if (!st->left) st->nhdr = 0;
        }
    }
    return NULL;
}

static int cb_recv_crypto_data(ngtcp2_conn *conn, ngtcp2_crypto_level level, uint64_t offset,
                               const uint8_t *data, size_t len, void *ud)
{
    fy_quic_conn_t *c = ud;
    if ((unsigned)level >= 3) /* 0-RTT: no CRYPTO frames (ngtcp2 refuses them) */
        return ngtcp2_crypto_recv_crypto_data_cb(conn, level, offset, data, len, ud);
    const char *bad =
        tls_rx_check(&c->tls_rx[level], level, ngtcp2_conn_is_server(conn), data, len);
    if (bad) {
        char a[64];
        fy_info("client %s: quic: TLS %s in %s CRYPTO data: unexpected_message",
                fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), bad,
                level == NGTCP2_CRYPTO_LEVEL_INITIAL     ? "Initial"
                : level == NGTCP2_CRYPTO_LEVEL_HANDSHAKE ? "Handshake"
                                                         : "1-RTT");
        ngtcp2_conn_set_tls_alert(conn, TLS_ALERT_UNEXPECTED_MESSAGE);
        return NGTCP2_ERR_CRYPTO;
    }
    return ngtcp2_crypto_recv_crypto_data_cb(conn, level, offset, data, len, ud);
}

/* After the ClientHello was parsed: without quic_transport_parameters (RFC 9001 §8.2) the
 * handshake must fail with missing_extension. libngtcp2 0.12.1 would go on and derive keys
 * with no negotiated version, then abort on an assertion when writing the first packet. The
 * extension's handler (ngtcp2's) records the version, so none yet means no extension. */
static int hello_hook(gnutls_session_t s, unsigned htype, unsigned when, unsigned incoming,
                      const gnutls_datum_t *msg)
{
    (void)htype;
    (void)msg;
    if (!when || !incoming) return 0;
    ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(s);
    fy_quic_conn_t *c = ref->user_data;
    if (ngtcp2_conn_get_negotiated_version(c->conn)) return 0;
    char a[64];
    fy_info("client %s: quic: ClientHello without quic_transport_parameters",
            fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a));
    return GNUTLS_E_MISSING_EXTENSION;
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    return ((fy_quic_conn_t *)ref->user_data)->conn;
}

static const ngtcp2_callbacks callbacks = {
    .recv_client_initial = ngtcp2_crypto_recv_client_initial_cb,
    .recv_crypto_data = cb_recv_crypto_data,
    .handshake_completed = cb_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = cb_recv_stream_data,
    .acked_stream_data_offset = cb_acked,
    .stream_open = cb_stream_open,
    .stream_close = cb_stream_close,
    .rand = cb_rand,
    .get_new_connection_id = cb_get_new_cid,
    .remove_connection_id = cb_remove_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .stream_reset = cb_stream_reset,
    .extend_max_stream_data = cb_extend_max_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .recv_datagram = cb_recv_datagram,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .stream_stop_sending = cb_stop_sending,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
};

/* ---- accepting ---- */

static int setup_tls(fy_quic_conn_t *c)
{
    fy_quic_server_t *qs = c->ep->qs;
    /* no GNUTLS_ENABLE_EARLY_DATA: 0-RTT is off */
    if (gnutls_init(&c->tls,
                    GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET | GNUTLS_NO_END_OF_EARLY_DATA) != 0)
        return -1;
    if (gnutls_priority_set(c->tls, qs->prio) != 0) return -1;
    if (ngtcp2_crypto_gnutls_configure_server_session(c->tls) != 0) return -1;
    c->ref.get_conn = get_conn;
    c->ref.user_data = c;
    gnutls_session_set_ptr(c->tls, &c->ref);
    gnutls_certificate_credentials_t cred = __atomic_load_n(&qs->cred, __ATOMIC_ACQUIRE);
    if (gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, cred) != 0) return -1;
    gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    if (gnutls_alpn_set_protocols(c->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY) != 0) return -1;
    gnutls_handshake_set_hook_function(c->tls, GNUTLS_HANDSHAKE_CLIENT_HELLO, GNUTLS_HOOK_POST,
                                       hello_hook);
    ngtcp2_conn_set_tls_native_handle(c->conn, c->tls);
    return 0;
}

static fy_quic_conn_t *conn_new(fy_quic_endpoint_t *ep, const ngtcp2_pkt_hd *hd,
                                const ngtcp2_cid *odcid, bool retried, const struct sockaddr *sa,
                                socklen_t salen)
{
    const fy_quic_conf_t *conf = ep->qs->conf;
    fy_quic_conn_t *c = fy_xcalloc(1, sizeof *c);
    c->pio.fd = -1;
    c->ep = ep;
    memcpy(&c->remote, sa, salen);
    c->remotelen = salen;
    fy_list_init(&c->streams);
    fy_list_init(&c->sendq);
    fy_timer_init(&c->timer, on_timer, c);
    c->write_defer.cb = write_cb;
    c->write_defer.data = c;
    c->close_defer.cb = close_cb;
    c->close_defer.data = c;
    ngtcp2_connection_close_error_default(&c->ccerr);

    ngtcp2_cid scid;
    uint8_t b[CIDLEN];
    do {
        rand_bytes(b, sizeof b);
        cid_mark(ep, b, sizeof b);
        ngtcp2_cid_init(&scid, b, sizeof b);
    } while (*map_slot(ep, &scid));

    ngtcp2_settings st;
    ngtcp2_settings_default(&st);
    st.initial_ts = now_ns();
    st.cc_algo = conf->cc == FY_QUIC_CC_BBR    ? NGTCP2_CC_ALGO_BBR
                 : conf->cc == FY_QUIC_CC_RENO ? NGTCP2_CC_ALGO_RENO
                                               : NGTCP2_CC_ALGO_CUBIC;
    st.handshake_timeout = conf->handshake_timeout_ms * NGTCP2_MILLISECONDS;
    st.max_window = conf->connection_window;
    st.max_stream_window = conf->stream_window;
    st.max_tx_udp_payload_size = TX_PKT_MAX;
    if (getenv("FERRY_QUIC_DEBUG")) st.log_printf = debug_log;
    if (hd->token.len && !retried) st.token = hd->token;

    ngtcp2_transport_params p;
    ngtcp2_transport_params_default(&p);
    p.initial_max_stream_data_bidi_local = conf->stream_window;
    p.initial_max_stream_data_bidi_remote = conf->stream_window;
    p.initial_max_stream_data_uni = conf->stream_window;
    p.initial_max_data = conf->connection_window;
    p.initial_max_streams_bidi = (uint64_t)conf->max_streams;
    p.initial_max_streams_uni = 8; /* control + 2 QPACK, and a few unknown types */
    p.max_idle_timeout = conf->idle_timeout_ms * NGTCP2_MILLISECONDS;
    p.active_connection_id_limit = 8;
    p.max_datagram_frame_size = conf->max_datagram_size;
    p.stateless_reset_token_present = 1;
    ngtcp2_crypto_generate_stateless_reset_token(p.stateless_reset_token, ep->qs->secret,
                                                 sizeof ep->qs->secret, &scid);
    p.original_dcid = *odcid;
    if (retried) {
        p.retry_scid = hd->dcid;
        p.retry_scid_present = 1;
    }
    ngtcp2_path path = {{(ngtcp2_sockaddr *)&ep->local, ep->locallen},
                        {(ngtcp2_sockaddr *)&c->remote, c->remotelen},
                        NULL};
    if (ngtcp2_conn_server_new(&c->conn, &hd->scid, &scid, &path, hd->version, &callbacks, &st, &p,
                               NULL, c) != 0) {
        free(c);
        return NULL;
    }
    if (setup_tls(c) != 0) {
        if (c->tls) gnutls_deinit(c->tls);
        ngtcp2_conn_del(c->conn);
        free(c);
        return NULL;
    }
    fy_list_insert_tail(&ep->conns, &c->link);
    ep->nconns++;
    map_add(c, &scid);
    map_add(c, &hd->dcid); /* the client's Initials still carry its own DCID */
    return c;
}

static void send_retry(fy_quic_endpoint_t *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *sa,
                       socklen_t salen)
{
    uint8_t tok[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], b[CIDLEN], out[TX_PKT_MAX];
    ngtcp2_cid scid;
    rand_bytes(b, sizeof b);
    ngtcp2_cid_init(&scid, b, sizeof b);
    ngtcp2_ssize tl = ngtcp2_crypto_generate_retry_token(tok, ep->qs->secret, sizeof ep->qs->secret,
                                                         hd->version, (const ngtcp2_sockaddr *)sa,
                                                         salen, &scid, &hd->dcid, now_ns());
    if (tl < 0) return;
    ngtcp2_ssize n = ngtcp2_crypto_write_retry(out, sizeof out, hd->version, &hd->scid, &scid,
                                               &hd->dcid, tok, (size_t)tl);
    if (n > 0) send_one(ep, sa, salen, out, (size_t)n);
}

static void send_stateless_reset(fy_quic_endpoint_t *ep, const uint8_t *dcid, size_t dcidlen,
                                 size_t pktlen, const struct sockaddr *sa, socklen_t salen)
{
    /* smaller than what triggered it, so two endpoints cannot loop (RFC 9000 §10.3.3) */
    if (pktlen < 43 || dcidlen > NGTCP2_MAX_CIDLEN) return;
    size_t len = pktlen - 1 > 100 ? 100 : pktlen - 1;
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN], rnd[100], out[128];
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, dcid, dcidlen);
    if (ngtcp2_crypto_generate_stateless_reset_token(token, ep->qs->secret, sizeof ep->qs->secret,
                                                     &cid) != 0)
        return;
    size_t rl = len - NGTCP2_STATELESS_RESET_TOKENLEN;
    rand_bytes(rnd, rl);
    ngtcp2_ssize n = ngtcp2_pkt_write_stateless_reset(out, sizeof out, token, rnd, rl);
    if (n > 0) send_one(ep, sa, salen, out, (size_t)n);
}

/* A packet for another worker's connection (by the CID's marks): queue it for that worker.
 * Returns true when the packet was taken (queued, or dropped because the queue is full). */
static bool forward(fy_quic_endpoint_t *ep, const ngtcp2_version_cid *vc, const uint8_t *data,
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

static void handle_packet(fy_quic_endpoint_t *ep, const uint8_t *data, size_t len,
                          const struct sockaddr *sa, socklen_t salen)
{
    /* an empty UDP datagram is valid on the wire; libngtcp2 0.12.1 asserts on it */
    if (len == 0) return;
    ngtcp2_version_cid vc;
    int r = ngtcp2_pkt_decode_version_cid(&vc, data, len, CIDLEN);
    if (r == NGTCP2_ERR_VERSION_NEGOTIATION) {
        uint8_t out[256];
        uint32_t sv[] = {NGTCP2_PROTO_VER_V1};
        uint8_t ur;
        rand_bytes(&ur, 1);
        ngtcp2_ssize n = ngtcp2_pkt_write_version_negotiation(
            out, sizeof out, ur, vc.scid, vc.scidlen, vc.dcid, vc.dcidlen, sv, 1);
        if (n > 0) send_one(ep, sa, salen, out, (size_t)n);
        return;
    }
    if (r != 0) return;
    fy_quic_conn_t *c = map_find(ep, vc.dcid, vc.dcidlen);
    if (!c && ep->client) return;
    if (!c) {
        if (!(data[0] & 0x80)) { /* short header for a connection we do not know */
            if (forward(ep, &vc, data, len, sa, salen)) return;
            send_stateless_reset(ep, vc.dcid, vc.dcidlen, len, sa, salen);
            return;
        }
        ngtcp2_pkt_hd hd;
        if (ngtcp2_accept(&hd, data, len) != 0) return;
        if (!ep->accepting) return;
        const fy_quic_conf_t *conf = ep->qs->conf;
        if ((int64_t)ep->nconns >= conf->max_connections) {
            static __thread uint64_t last;
            if (ep->loop->now_ms - last > 1000) {
                fy_warn("listener %s: quic.max-connections (%lld) reached", ep->qs->name,
                        (long long)conf->max_connections);
                last = ep->loop->now_ms;
            }
            uint8_t out[256];
            ngtcp2_ssize n =
                ngtcp2_crypto_write_connection_close(out, sizeof out, hd.version, &hd.scid,
                                                     &hd.dcid, NGTCP2_CONNECTION_REFUSED, NULL, 0);
            if (n > 0) send_one(ep, sa, salen, out, (size_t)n);
            return;
        }
        ngtcp2_cid odcid = hd.dcid;
        bool retried = false;
        if (conf->retry) {
            if (hd.token.len == 0 || hd.token.base[0] != NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY) {
                send_retry(ep, &hd, sa, salen);
                return;
            }
            if (ngtcp2_crypto_verify_retry_token(&odcid, hd.token.base, hd.token.len,
                                                 ep->qs->secret, sizeof ep->qs->secret, hd.version,
                                                 (const ngtcp2_sockaddr *)sa, salen, &hd.dcid,
                                                 RETRY_TOKEN_TTL, now_ns()) != 0) {
                /* forged or expired: a fresh Retry lets an honest client try again */
                send_retry(ep, &hd, sa, salen);
                return;
            }
            retried = true;
        }
        c = conn_new(ep, &hd, &odcid, retried, sa, salen);
        if (!c) return;
    }
    if (c->closed) return;
    ngtcp2_path path = {
        {(ngtcp2_sockaddr *)&ep->local, ep->locallen}, {(ngtcp2_sockaddr *)sa, salen}, NULL};
    ngtcp2_pkt_info pi = {0};
    c->in_lib++;
    r = ngtcp2_conn_read_pkt(c->conn, &path, &pi, data, len, now_ns());
    c->in_lib--;
    if (r != 0) {
        conn_fail(c, r);
        return;
    }
    /* the path the connection uses now (ngtcp2 validated a migration) */
    const ngtcp2_path *cur = ngtcp2_conn_get_path(c->conn);
    if (cur && cur->remote.addrlen <= sizeof c->remote) {
        memcpy(&c->remote, cur->remote.addr, cur->remote.addrlen);
        c->remotelen = cur->remote.addrlen;
    }
    schedule_write(c);
}

/* Read what `fd` holds (bounded rounds; level-triggered epoll calls again) and dispatch it.
 * `c`: the connection owning `fd` (its private drain socket), NULL for the endpoint's. */
static void rx_fd(fy_quic_endpoint_t *ep, int fd, fy_quic_conn_t *c)
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
            handle_packet(ep, iov[i].iov_base, mm[i].msg_len, (struct sockaddr *)&from[i],
                          mm[i].msg_hdr.msg_namelen);
            if (c && c->pio.fd != fd) return; /* the connection closed (its memory is deferred) */
        }
        if (n < RX_BATCH) return;
    }
}

static void on_io(fy_io_t *io, uint32_t events)
{
    fy_quic_endpoint_t *ep = io->data;
    rx_fd(ep, io->fd, NULL);
}

static void on_conn_io(fy_io_t *io, uint32_t events)
{
    fy_quic_conn_t *c = io->data;
    rx_fd(c->ep, io->fd, c);
}

/* A socket for `c` alone: same local address (SO_REUSEADDR, outside the SO_REUSEPORT group),
 * connected to the peer. The kernel prefers a connected socket for its 4-tuple, so the
 * connection keeps receiving after the endpoint's socket has left the group. */
static int conn_detach(fy_quic_conn_t *c)
{
    fy_quic_endpoint_t *ep = c->ep;
    int fd = socket(ep->local.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
    if (fd < 0) return -errno;
    int one = 1;
    if (ep->local.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&ep->local, ep->locallen) < 0 ||
        connect(fd, (struct sockaddr *)&c->remote, c->remotelen) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    c->pio.fd = fd;
    c->pio.cb = on_conn_io;
    c->pio.data = c;
    if (fy_io_set(ep->loop, &c->pio, EPOLLIN) < 0) {
        close(fd);
        c->pio.fd = -1;
        return -ENOMEM;
    }
    return 0;
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
        handle_packet(ep, rev->data, rev->len, (struct sockaddr *)&rev->from, rev->fromlen);
        free(rev);
        rev = n;
    }
}

/* Make the endpoint findable by the listener's other workers (server endpoints only). */
static void ep_register(fy_quic_endpoint_t *ep)
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

static void ep_unregister(fy_quic_endpoint_t *ep)
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

fy_quic_endpoint_t *fy_quic_endpoint_new(fy_loop_t *loop, fy_quic_server_t *qs, int fd,
                                         const fy_quic_app_ops_t *ops, void *ud)
{
    fy_quic_endpoint_t *ep = fy_xcalloc(1, sizeof *ep);
    ep->loop = loop;
    ep->qs = qs;
    ep->ops = ops;
    ep->ud = ud;
    ep->io.fd = fd;
    ep->io.cb = on_io;
    ep->io.data = ep;
    ep->locallen = sizeof ep->local;
    getsockname(fd, (struct sockaddr *)&ep->local, &ep->locallen);
    ep->nbuckets = 256;
    ep->buckets = fy_xcalloc(ep->nbuckets, sizeof *ep->buckets);
    fy_list_init(&ep->conns);
    ep->accepting = true;
    ep->gso = true;
    ep->rx = fy_xmalloc((size_t)RX_BATCH * RX_SIZE);
    ep->tx = fy_xmalloc((size_t)TX_MAX_PKTS * TX_PKT_MAX);
    ep_register(ep);
    if (fy_io_set(loop, &ep->io, EPOLLIN) < 0) {
        fy_quic_endpoint_free(ep);
        return NULL;
    }
    return ep;
}

void fy_quic_endpoint_set_ud(fy_quic_endpoint_t *ep, void *ud)
{
    ep->ud = ud;
}

void fy_quic_endpoint_stop_accepting(fy_quic_endpoint_t *ep)
{
    if (!ep->accepting) return;
    ep->accepting = false;
    if (ep->client || ep->io.fd < 0) return;
    /* Leave the SO_REUSEPORT group so that new connections' Initials reach the sockets of a
       process that still accepts: each live connection moves to a connected socket of its
       own first, then what the shared socket already holds is read and the socket closed. */
    size_t failed = 0;
    int err = 0;
    for (fy_list_t *l = ep->conns.next; l != &ep->conns; l = l->next) {
        fy_quic_conn_t *c = fy_container_of(l, fy_quic_conn_t, link);
        if (c->closed || c->pio.fd >= 0) continue;
        int r = conn_detach(c);
        if (r < 0) {
            failed++;
            err = -r;
        }
    }
    if (failed) {
        /* keep the shared socket for them; new Initials reaching it are dropped */
        fy_warn("listener %s: h3 drain: %zu connection(s) could not get their own socket (%s); "
                "the listener's UDP socket stays open for them",
                ep->qs->name, failed, strerror(err));
        return;
    }
    fy_notice("listener %s: h3 drain: UDP socket left the reuseport group; %zu connection(s) "
              "go on on sockets of their own",
              ep->qs->name, ep->nconns);
    rx_fd(ep, ep->io.fd, NULL);
    fy_io_set(ep->loop, &ep->io, 0);
    close(ep->io.fd);
    ep->io.fd = -1;
    ep->detached = true;
}

void fy_quic_endpoint_free(fy_quic_endpoint_t *ep)
{
    if (!ep) return;
    ep_unregister(ep);
    while (!fy_list_empty(&ep->conns)) {
        fy_quic_conn_t *c = fy_container_of(ep->conns.next, fy_quic_conn_t, link);
        ngtcp2_connection_close_error_set_application_error(&c->ccerr, 0x100, NULL, 0);
        conn_destroy(c, true);
    }
    if (ep->io.fd >= 0) {
        fy_io_set(ep->loop, &ep->io, 0);
        close(ep->io.fd);
    }
    for (size_t i = 0; i < ep->nbuckets; i++)
        for (cid_entry_t *e = ep->buckets[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    free(ep->buckets);
    free(ep->rx);
    free(ep->tx);
    free(ep);
}

/* ---- client connections (h3:// origins) ---- */

static int cb_extend_max_local_bidi(ngtcp2_conn *conn, uint64_t max, void *ud)
{
    fy_quic_conn_t *c = ud;
    if (!c->closing && c->app && c->ep->ops->credit) c->ep->ops->credit(c->app);
    return 0;
}

static const ngtcp2_callbacks client_callbacks = {
    .client_initial = ngtcp2_crypto_client_initial_cb,
    .recv_crypto_data = cb_recv_crypto_data,
    .handshake_completed = cb_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = cb_recv_stream_data,
    .acked_stream_data_offset = cb_acked,
    .stream_open = cb_stream_open,
    .stream_close = cb_stream_close,
    .recv_retry = ngtcp2_crypto_recv_retry_cb,
    .extend_max_local_streams_bidi = cb_extend_max_local_bidi,
    .rand = cb_rand,
    .get_new_connection_id = cb_get_new_cid,
    .remove_connection_id = cb_remove_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .stream_reset = cb_stream_reset,
    .extend_max_stream_data = cb_extend_max_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .recv_datagram = cb_recv_datagram,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .stream_stop_sending = cb_stop_sending,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
};

static void client_ep_free(fy_defer_t *d)
{
    fy_quic_endpoint_t *ep = d->data;
    fy_quic_server_t *qs = ep->qs;
    fy_quic_endpoint_free(ep);
    fy_quic_server_free(qs);
}

/* GnuTLS reports a failed certificate check as an alert; say why in the log first. */
static int verify_cb(gnutls_session_t session)
{
    unsigned status = 0;
    int r = gnutls_certificate_verify_peers2(session, &status);
    if (r < 0 || status) {
        gnutls_datum_t out = {0};
        gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0);
        fy_warn("h3 origin: certificate: %s", out.data ? (char *)out.data : gnutls_strerror(r));
        gnutls_free(out.data);
        return -1;
    }
    return 0;
}

fy_quic_conn_t *fy_quic_connect(fy_loop_t *loop, const struct sockaddr *sa, socklen_t salen,
                                const fy_quic_client_opts_t *o, const fy_quic_app_ops_t *ops,
                                void *ud)
{
    const fy_quic_conf_t *conf = o->conf;
    fy_quic_server_t *qs = fy_xcalloc(1, sizeof *qs);
    qs->conf = conf;
    qs->name = fy_xstrdup(o->name ? o->name : "origin");
    rand_bytes(qs->secret, sizeof qs->secret);
    if (gnutls_certificate_allocate_credentials(&qs->cred) != 0 ||
        gnutls_priority_init(&qs->prio,
                             "%DISABLE_TLS13_COMPAT_MODE:NORMAL:-VERS-ALL:+VERS-TLS1.3:"
                             "-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"
                             "+AES-128-CCM:-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:"
                             "+GROUP-SECP384R1:+GROUP-SECP521R1",
                             NULL) != 0) {
        fy_quic_server_free(qs);
        return NULL;
    }
    if (o->ca_file) {
        if (gnutls_certificate_set_x509_trust_file(qs->cred, o->ca_file, GNUTLS_X509_FMT_PEM) <=
            0) {
            fy_error("h3 origin %s: cannot load CA file %s", qs->name, o->ca_file);
            fy_quic_server_free(qs);
            return NULL;
        }
    } else if (!o->insecure) {
        gnutls_certificate_set_x509_system_trust(qs->cred);
    }
    if (o->cert_file && o->key_file) { /* mTLS: offered when the origin asks for one */
        int r = gnutls_certificate_set_x509_key_file(qs->cred, o->cert_file, o->key_file,
                                                     GNUTLS_X509_FMT_PEM);
        if (r < 0) {
            fy_error("h3 origin %s: cannot load client certificate %s / %s: %s", qs->name,
                     o->cert_file, o->key_file, gnutls_strerror(r));
            fy_quic_server_free(qs);
            return NULL;
        }
    }
    if (!o->insecure) gnutls_certificate_set_verify_function(qs->cred, verify_cb);
    int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
    if (fd < 0 || connect(fd, sa, salen) < 0) {
        fy_error("h3 origin %s: %s", qs->name, strerror(errno));
        if (fd >= 0) close(fd);
        fy_quic_server_free(qs);
        return NULL;
    }
    fy_quic_endpoint_t *ep = fy_quic_endpoint_new(loop, qs, fd, ops, ud);
    if (!ep) {
        fy_quic_server_free(qs);
        return NULL;
    }
    ep->client = true;
    ep->accepting = false;
    ep->free_defer.cb = client_ep_free;
    ep->free_defer.data = ep;

    fy_quic_conn_t *c = fy_xcalloc(1, sizeof *c);
    c->pio.fd = -1;
    c->ep = ep;
    memcpy(&c->remote, sa, salen);
    c->remotelen = salen;
    fy_list_init(&c->streams);
    fy_list_init(&c->sendq);
    fy_timer_init(&c->timer, on_timer, c);
    c->write_defer.cb = write_cb;
    c->write_defer.data = c;
    c->close_defer.cb = close_cb;
    c->close_defer.data = c;
    ngtcp2_connection_close_error_default(&c->ccerr);
    uint8_t b[18];
    ngtcp2_cid dcid, scid;
    rand_bytes(b, sizeof b);
    ngtcp2_cid_init(&dcid, b, sizeof b);
    rand_bytes(b, CIDLEN);
    ngtcp2_cid_init(&scid, b, CIDLEN);
    ngtcp2_settings st;
    ngtcp2_settings_default(&st);
    st.initial_ts = now_ns();
    st.cc_algo = conf->cc == FY_QUIC_CC_BBR    ? NGTCP2_CC_ALGO_BBR
                 : conf->cc == FY_QUIC_CC_RENO ? NGTCP2_CC_ALGO_RENO
                                               : NGTCP2_CC_ALGO_CUBIC;
    st.handshake_timeout = conf->handshake_timeout_ms * NGTCP2_MILLISECONDS;
    st.max_window = conf->connection_window;
    st.max_stream_window = conf->stream_window;
    st.max_tx_udp_payload_size = TX_PKT_MAX;
    if (getenv("FERRY_QUIC_DEBUG")) st.log_printf = debug_log;
    ngtcp2_transport_params p;
    ngtcp2_transport_params_default(&p);
    p.initial_max_stream_data_bidi_local = conf->stream_window; /* response bodies */
    p.initial_max_stream_data_uni = conf->stream_window;
    p.initial_max_data = conf->connection_window;
    p.initial_max_streams_bidi = 0;
    p.initial_max_streams_uni = 8;
    p.max_idle_timeout = conf->idle_timeout_ms * NGTCP2_MILLISECONDS;
    p.active_connection_id_limit = 8;
    p.max_datagram_frame_size = conf->max_datagram_size;
    ngtcp2_path path = {{(ngtcp2_sockaddr *)&ep->local, ep->locallen},
                        {(ngtcp2_sockaddr *)&c->remote, c->remotelen},
                        NULL};
    if (ngtcp2_conn_client_new(&c->conn, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1,
                               &client_callbacks, &st, &p, NULL, c) != 0)
        goto fail;
    if (gnutls_init(&c->tls, GNUTLS_CLIENT | GNUTLS_NO_END_OF_EARLY_DATA) != 0 ||
        gnutls_priority_set(c->tls, qs->prio) != 0 ||
        ngtcp2_crypto_gnutls_configure_client_session(c->tls) != 0)
        goto fail;
    c->ref.get_conn = get_conn;
    c->ref.user_data = c;
    gnutls_session_set_ptr(c->tls, &c->ref);
    if (gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, qs->cred) != 0) goto fail;
    gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    gnutls_alpn_set_protocols(c->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY);
    if (o->sni && o->sni[0]) {
        bool ip = strspn(o->sni, "0123456789.:") == strlen(o->sni);
        if (!ip) gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, o->sni, strlen(o->sni));
        if (!o->insecure) gnutls_session_set_verify_cert(c->tls, o->sni, 0);
    }
    ngtcp2_conn_set_tls_native_handle(c->conn, c->tls);
    fy_list_insert_tail(&ep->conns, &c->link);
    ep->nconns++;
    map_add(c, &scid);
    c->app = ud; /* ops->close reaches the application even if the handshake never completes */
    schedule_write(c);
    return c;
fail:
    if (c->tls) gnutls_deinit(c->tls);
    if (c->conn) ngtcp2_conn_del(c->conn);
    free(c);
    fy_quic_endpoint_free(ep);
    fy_quic_server_free(qs);
    return NULL;
}

fy_quic_stream_t *fy_quic_open_bidi(fy_quic_conn_t *qc)
{
    int64_t id;
    if (qc->closed || qc->closing || ngtcp2_conn_open_bidi_stream(qc->conn, &id, NULL) != 0)
        return NULL;
    return &stream_new(qc, id)->pub;
}

uint64_t fy_quic_streams_bidi_left(fy_quic_conn_t *qc)
{
    return qc->closed ? 0 : ngtcp2_conn_get_streams_bidi_left(qc->conn);
}
