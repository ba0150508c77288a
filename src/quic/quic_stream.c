/* QUIC streams: send buffers and their acks, receive credit, DATAGRAMs, packets out.
 * Threads: the connection's worker loop thread only. */
#include "quic/quic_int.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/spool.h"
#include "net/sock.h"

/* ---- streams ---- */

static fy_pool_t *chunk_pool(void)
{
    return fy_chunk_pool(); /* qchunk_t is exactly one I/O chunk */
}

/* What a chunk costs: a 512-byte small block or one pooled I/O chunk. */
static size_t chunk_bytes(const qchunk_t *k)
{
    return k->cap == QCHUNK_SMALL ? offsetof(qchunk_t, data) + QCHUNK_SMALL : sizeof *k;
}

/* The stream's bytes moved by `d`: its connection's total, and for a request stream of a server
 * connection (client-initiated bidirectional) ferry_stream_memory_bytes{proto="h3"}. */
static void stream_mem(qstream_t *s, ssize_t d)
{
    s->c->st_bytes += (size_t)d;
    if (s->c->ep->client || (s->pub.id & 3) != 0) return;
    fy_counters_stream_mem(FY_CPROTO_H3, &s->held, s->held + (size_t)d);
}

static void chunk_put(qstream_t *s, qchunk_t *k)
{
    stream_mem(s, -(ssize_t)chunk_bytes(k));
    if (k->cap == QCHUNK_SMALL)
        fy_spool_free(k);
    else
        fy_pool_put(chunk_pool(), k);
}

static qstream_t *qs_of(fy_quic_stream_t *s)
{
    return fy_container_of(s, qstream_t, pub);
}

qstream_t *fy__quic_stream_new(fy_quic_conn_t *c, int64_t id)
{
    qstream_t *s = fy_xcalloc(1, sizeof *s);
    s->pub.id = id;
    s->c = c;
    fy_list_init(&s->qlink);
    fy_list_insert_tail(&c->streams, &s->link);
    ngtcp2_conn_set_stream_user_data(c->conn, id, s);
    stream_mem(s, sizeof *s);
    return s;
}

static void stream_drop_data(qstream_t *s)
{
    for (qchunk_t *k = s->head, *next; k; k = next) {
        next = k->next;
        chunk_put(s, k);
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

void fy__quic_stream_free(qstream_t *s)
{
    stream_drop_data(s);
    if (s->in_sendq) fy_list_remove(&s->qlink);
    fy_list_remove(&s->link);
    stream_mem(s, -(ssize_t)sizeof *s);
    free(s);
}

void fy__quic_schedule_write(fy_quic_conn_t *c)
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

static uint8_t *stream_wbuf(qstream_t *s, size_t *avail, size_t want)
{
    if (!s->tail || s->tail->len == s->tail->cap) {
        qchunk_t *k;
        if (!s->tail && want <= QCHUNK_SMALL) {
            k = fy_spool_alloc(offsetof(qchunk_t, data) + QCHUNK_SMALL);
            if (!k) abort(); /* out of memory, as the pool */
            k->cap = QCHUNK_SMALL;
        } else {
            k = fy_pool_get(chunk_pool());
            k->cap = sizeof k->data;
        }
        k->next = NULL;
        k->len = 0;
        stream_mem(s, (ssize_t)chunk_bytes(k));
        if (s->tail)
            s->tail->next = k;
        else
            s->head = k;
        s->tail = k;
    }
    *avail = s->tail->cap - s->tail->len;
    return s->tail->data + s->tail->len;
}

uint8_t *fy_quic_stream_wbuf(fy_quic_conn_t *qc, fy_quic_stream_t *ps, size_t *avail)
{
    (void)qc;
    return stream_wbuf(qs_of(ps), avail, (size_t)-1);
}

void fy_quic_stream_commit(fy_quic_conn_t *qc, fy_quic_stream_t *ps, size_t n)
{
    qstream_t *s = qs_of(ps);
    if (!n || s->shut_wr || s->fin) return;
    s->tail->len += n;
    s->buffered += n;
    sendq_add(s);
    fy__quic_schedule_write(qc);
}

int fy_quic_stream_write(fy_quic_conn_t *qc, fy_quic_stream_t *ps, const void *p, size_t n)
{
    qstream_t *s = qs_of(ps);
    if (s->fin || s->shut_wr) return -EPIPE;
    const uint8_t *q = p;
    while (n) {
        size_t avail;
        uint8_t *d = stream_wbuf(s, &avail, n);
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
    fy__quic_schedule_write(qc);
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
    fy__quic_schedule_write(qc);
}

void fy_quic_conn_consumed(fy_quic_conn_t *qc, size_t n)
{
    if (qc->closed || !n) return;
    ngtcp2_conn_extend_max_offset(qc->conn, n);
    fy__quic_schedule_write(qc);
}

void fy_quic_stream_reset(fy_quic_conn_t *qc, fy_quic_stream_t *ps, uint64_t code)
{
    qstream_t *s = qs_of(ps);
    if (qc->closed || s->shut_wr) return;
    s->shut_wr = true;
    sendq_del(s);
    ngtcp2_conn_shutdown_stream_write(qc->conn, ps->id, code);
    fy__quic_schedule_write(qc);
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
    fy__quic_schedule_write(qc);
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
    return &fy__quic_stream_new(qc, id)->pub;
}

int fy_quic_send_datagram(fy_quic_conn_t *qc, const void *p, size_t n)
{
    if (qc->closed) return -ENOTSUP;
    const ngtcp2_transport_params *rp = ngtcp2_conn_get_remote_transport_params(qc->conn);
    if (!rp || rp->max_datagram_frame_size == 0) return -ENOTSUP;
    if (n + 8 > rp->max_datagram_frame_size || n > 1200) return -EMSGSIZE;
    if (qc->ndgrams >= DGRAM_Q_MAX || qc->dg_bytes + n > DGRAM_Q_BYTES) {
        qc->dgrams_dropped++;
        fy_counter_inc(fy_cid_quic_dgrams_dropped);
        return -EAGAIN;
    }
    dgram_t *d = fy_xmalloc(sizeof *d + n);
    d->next = NULL;
    memcpy(d->p, p, n);
    d->len = n;
    if (!qc->dg_tail) qc->dg_tail = &qc->dg_head;
    *qc->dg_tail = d;
    qc->dg_tail = &d->next;
    qc->ndgrams++;
    qc->dg_bytes += n;
    fy__quic_schedule_write(qc);
    return 0;
}

size_t fy_quic_datagram_room(const fy_quic_conn_t *qc)
{
    if (qc->closed || qc->ndgrams >= DGRAM_Q_MAX || qc->dg_bytes >= DGRAM_Q_BYTES) return 0;
    return DGRAM_Q_MAX - qc->ndgrams;
}

uint64_t fy_quic_datagrams_dropped(const fy_quic_conn_t *qc)
{
    return qc->dgrams_dropped;
}

static void dgram_pop(fy_quic_conn_t *c)
{
    dgram_t *d = c->dg_head;
    c->dg_head = d->next;
    if (!c->dg_head) c->dg_tail = &c->dg_head;
    c->ndgrams--;
    c->dg_bytes -= d->len;
    free(d);
}

/* ---- connection output ---- */

static void arm_timer(fy_quic_conn_t *c)
{
    uint64_t exp = ngtcp2_conn_get_expiry(c->conn), now = fy__quic_now_ns();
    uint64_t ms = exp <= now ? 0 : (exp - now + 999999) / 1000000;
    if (ms > 3600000) ms = 3600000;
    fy_timer_start(c->ep->loop, &c->timer, ms);
}

static void conn_write(fy_quic_conn_t *c)
{
    if (c->closed) return;
    if (c->closing) {
        fy__quic_conn_destroy(c, true);
        return;
    }
    fy_quic_endpoint_t *ep = c->ep;
    if (c->stops_pending) apply_stops(c);
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi;
    uint64_t ts = fy__quic_now_ns();
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
            ngtcp2_vec dv = {c->dg_head->p, c->dg_head->len};
            /* an empty DATAGRAM is legal, but libngtcp2 0.12.1 asserts on an empty vec: none */
            n = ngtcp2_conn_writev_datagram(c->conn, &ps.path, &pi, ep->tx + off, pktmax, &accepted,
                                            NGTCP2_WRITE_DATAGRAM_FLAG_NONE, 0, &dv, dv.len ? 1 : 0,
                                            ts);
            if (accepted || n < 0) dgram_pop(c); /* sent, or cannot ever be: drop it */
            if (n < 0) {
                if (n == NGTCP2_ERR_INVALID_ARGUMENT || n == NGTCP2_ERR_INVALID_STATE) continue;
                fy__quic_conn_fail(c, (int)n);
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
                    fy__quic_conn_fail(c, (int)n);
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
            fy__quic_send_packets(ep, fy__quic_conn_fd(c), (struct sockaddr *)&to, tolen, ep->tx,
                                  sizes, npkts);
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
    if (npkts)
        fy__quic_send_packets(ep, fy__quic_conn_fd(c), (struct sockaddr *)&to, tolen, ep->tx, sizes,
                              npkts);
    ngtcp2_conn_update_pkt_tx_time(c->conn, ts);
    if (limited)
        fy_timer_start(ep->loop, &c->timer, 0); /* next turn: let other conns and reads in */
    else
        arm_timer(c);
}

void fy__quic_write_cb(fy_defer_t *d)
{
    conn_write(d->data);
}

void fy__quic_on_timer(fy_timer_t *t)
{
    fy_quic_conn_t *c = t->data;
    if (c->closed) return;
    int r = ngtcp2_conn_handle_expiry(c->conn, fy__quic_now_ns());
    if (r != 0) {
        if (r == NGTCP2_ERR_IDLE_CLOSE) {
            char a[64];
            fy_info("client %s: quic idle timeout, closing connection",
                    fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a));
        }
        fy__quic_conn_fail(c, r);
        return;
    }
    conn_write(c);
}

/* ---- stream callbacks (ngtcp2) ---- */

int fy__quic_cb_acked(ngtcp2_conn *conn, int64_t id, uint64_t offset, uint64_t len, void *ud,
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
        chunk_put(s, k);
    }
    if (!c->closing && c->app && c->ep->ops->acked) c->ep->ops->acked(c->app, &s->pub);
    return 0;
}

int fy__quic_cb_extend_max_stream_data(ngtcp2_conn *conn, int64_t id, uint64_t max, void *ud,
                                       void *sud)
{
    qstream_t *s = sud;
    if (!s) return 0;
    s->blocked = false;
    sendq_add(s);
    return 0;
}
