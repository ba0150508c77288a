/* QUIC endpoint and connection lifecycle: accept, dispatch, ngtcp2 callbacks, teardown, drain.
 * Threads: an endpoint and its connections belong to one worker loop thread. See quic.h. */
#include "quic/quic_int.h"

#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/counters.h"
#include "core/alloc.h"
#include "core/log.h"
#include "net/sock.h"

/* ---- helpers ---- */

/* FERRY_QUIC_DEBUG=1 in the environment: ngtcp2's own packet/frame log on stderr */
void fy__quic_debug_log(void *ud, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

uint64_t fy__quic_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fy__quic_rand_bytes(void *p, size_t n)
{
    if (gnutls_rnd(GNUTLS_RND_RANDOM, p, n) != 0) {
        /* the RNG never fails on Linux; if it did, refuse to run with predictable CIDs */
        fy_log(FY_LOG_EMERG, "quic: gnutls_rnd failed");
        abort();
    }
}

/* ---- connection accessors ---- */

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
    fy__quic_schedule_write(qc);
    return 0;
}

/* ---- memory of server connections (ngtcp2's allocations counted) ---- */

static void *cm_malloc(size_t n, void *ud)
{
    void *p = malloc(n);
    if (p) *(size_t *)ud += malloc_usable_size(p);
    return p;
}

static void cm_free(void *p, void *ud)
{
    if (!p) return;
    *(size_t *)ud -= malloc_usable_size(p);
    free(p);
}

static void *cm_calloc(size_t n, size_t size, void *ud)
{
    void *p = calloc(n, size);
    if (p) *(size_t *)ud += malloc_usable_size(p);
    return p;
}

static void *cm_realloc(void *p, size_t n, void *ud)
{
    size_t old = p ? malloc_usable_size(p) : 0;
    void *q = realloc(p, n);
    if (q)
        *(size_t *)ud += malloc_usable_size(q) - old;
    else if (n == 0)
        *(size_t *)ud -= old;
    return q;
}

/* The connection's bytes into ferry_connection_memory_bytes{proto="h3"} (0: its close). */
static void conn_mem_sync(fy_quic_conn_t *c, bool closing)
{
    if (c->ep->client) return;
    size_t now = closing ? 0 : sizeof *c + c->lib_bytes + c->dg_bytes + c->st_bytes;
    fy_counters_conn_mem(FY_CPROTO_H3, &c->mem_held, now);
}

/* ---- connection teardown ---- */

static void free_conn(fy_defer_t *d)
{
    free(d->data);
}

/* Tear down now (never from inside an ngtcp2 call). `send_close`: write CONNECTION_CLOSE
 * with c->ccerr first. */
void fy__quic_conn_destroy(fy_quic_conn_t *c, bool send_close)
{
    if (c->closed) return;
    fy_quic_endpoint_t *ep = c->ep;
    fy_gauge_add(fy_cid_quic_conns_active[ep->client], -1);
    conn_mem_sync(c, true);
    if (send_close && !ngtcp2_conn_is_in_draining_period(c->conn)) {
        ngtcp2_path_storage ps;
        ngtcp2_path_storage_zero(&ps);
        ngtcp2_pkt_info pi;
        uint8_t buf[TX_PKT_MAX];
        ngtcp2_ssize n = ngtcp2_conn_write_connection_close(c->conn, &ps.path, &pi, buf, sizeof buf,
                                                            &c->ccerr, fy__quic_now_ns());
        if (n > 0)
            fy__quic_send_one_fd(ep, fy__quic_conn_fd(c), (struct sockaddr *)&c->remote,
                                 c->remotelen, buf, (size_t)n);
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
        fy__quic_stream_free(s);
    }
    if (c->app && ep->ops->close) ep->ops->close(c->app);
    c->app = NULL;
    while (c->ncids) fy__quic_map_del(c, &c->cids[c->ncids - 1]);
    while (c->dg_head) {
        dgram_t *d = c->dg_head;
        c->dg_head = d->next;
        free(d);
    }
    c->dg_tail = &c->dg_head;
    c->ndgrams = c->dg_bytes = 0;
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

void fy__quic_close_cb(fy_defer_t *d)
{
    fy__quic_conn_destroy(d->data, true);
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
    fy__quic_conn_destroy(qc, true);
}

/* A library error from ngtcp2: close with the matching transport error (never while inside
 * an ngtcp2 call). */
void fy__quic_conn_fail(fy_quic_conn_t *c, int liberr)
{
    if (c->closed) return;
    if (liberr == NGTCP2_ERR_DRAINING || liberr == NGTCP2_ERR_IDLE_CLOSE ||
        liberr == NGTCP2_ERR_DROP_CONN) {
        fy__quic_conn_destroy(c, false);
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
    fy__quic_conn_destroy(c, liberr != NGTCP2_ERR_CALLBACK_FAILURE || c->closing);
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

int fy__quic_cb_handshake_completed(ngtcp2_conn *conn, void *ud)
{
    fy_quic_conn_t *c = ud;
    if (!c->ep->client) {
        fy_counter_inc(fy_cid_quic_handshakes[gnutls_session_is_resumed(c->tls) ? FY_CTLS_RESUMED
                                                                                : FY_CTLS_FULL]);
        /* GNUTLS_NO_AUTO_SEND_TICKET: one ticket, sent now as 1-RTT CRYPTO data */
        if (c->tickets && gnutls_session_ticket_send(c->tls, 1, 0) != 0)
            fy_log(FY_LOG_DEBUG, "h3: no session ticket sent");
    }
    ensure_app(c);
    return 0;
}

int fy__quic_cb_stream_open(ngtcp2_conn *conn, int64_t id, void *ud)
{
    fy_quic_conn_t *c = ud;
    qstream_t *s = fy__quic_stream_new(c, id);
    void *app = ensure_app(c);
    if (app && c->ep->ops->stream_open) c->ep->ops->stream_open(app, &s->pub);
    return 0;
}

int fy__quic_cb_recv_stream_data(ngtcp2_conn *conn, uint32_t flags, int64_t id, uint64_t offset,
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

int fy__quic_cb_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t id, uint64_t code, void *ud,
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
    fy__quic_stream_free(s);
    return 0;
}

int fy__quic_cb_stream_reset(ngtcp2_conn *conn, int64_t id, uint64_t final_size, uint64_t code,
                             void *ud, void *sud)
{
    fy_quic_conn_t *c = ud;
    qstream_t *s = sud;
    if (s && !c->closing && c->app && c->ep->ops->reset) c->ep->ops->reset(c->app, &s->pub, code);
    return 0;
}

/* ngtcp2 0.12 calls this when *we* stop reading (shutdown_stream_read); a peer's STOP_SENDING
 * makes ngtcp2 reset the stream itself, which we learn from writev (STREAM_SHUT_WR). */
int fy__quic_cb_stop_sending(ngtcp2_conn *conn, int64_t id, uint64_t code, void *ud, void *sud)
{
    return 0;
}

int fy__quic_cb_recv_datagram(ngtcp2_conn *conn, uint32_t flags, const uint8_t *p, size_t n,
                              void *ud)
{
    fy_quic_conn_t *c = ud;
    void *app = ensure_app(c);
    if (app && c->ep->ops->datagram) c->ep->ops->datagram(app, p, n);
    return 0;
}

void fy__quic_cb_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    fy__quic_rand_bytes(dest, len);
}

static const ngtcp2_callbacks callbacks = {
    .recv_client_initial = ngtcp2_crypto_recv_client_initial_cb,
    .recv_crypto_data = fy__quic_cb_recv_crypto_data,
    .handshake_completed = fy__quic_cb_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = fy__quic_cb_recv_stream_data,
    .acked_stream_data_offset = fy__quic_cb_acked,
    .stream_open = fy__quic_cb_stream_open,
    .stream_close = fy__quic_cb_stream_close,
    .rand = fy__quic_cb_rand,
    .get_new_connection_id = fy__quic_cb_get_new_cid,
    .remove_connection_id = fy__quic_cb_remove_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .stream_reset = fy__quic_cb_stream_reset,
    .extend_max_stream_data = fy__quic_cb_extend_max_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .recv_datagram = fy__quic_cb_recv_datagram,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .stream_stop_sending = fy__quic_cb_stop_sending,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
};

/* ---- accepting ---- */

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
    fy_timer_init(&c->timer, fy__quic_on_timer, c);
    c->write_defer.cb = fy__quic_write_cb;
    c->write_defer.data = c;
    c->close_defer.cb = fy__quic_close_cb;
    c->close_defer.data = c;
    ngtcp2_connection_close_error_default(&c->ccerr);

    ngtcp2_cid scid;
    uint8_t b[CIDLEN];
    do {
        fy__quic_rand_bytes(b, sizeof b);
        fy__quic_cid_mark(ep, b, sizeof b);
        ngtcp2_cid_init(&scid, b, sizeof b);
    } while (*fy__quic_map_slot(ep, &scid));

    ngtcp2_settings st;
    ngtcp2_settings_default(&st);
    st.initial_ts = fy__quic_now_ns();
    st.cc_algo = conf->cc == FY_QUIC_CC_BBR    ? NGTCP2_CC_ALGO_BBR
                 : conf->cc == FY_QUIC_CC_RENO ? NGTCP2_CC_ALGO_RENO
                                               : NGTCP2_CC_ALGO_CUBIC;
    st.handshake_timeout = conf->handshake_timeout_ms * NGTCP2_MILLISECONDS;
    st.max_window = conf->connection_window;
    st.max_stream_window = conf->stream_window;
    st.max_tx_udp_payload_size = TX_PKT_MAX;
    if (getenv("FERRY_QUIC_DEBUG")) st.log_printf = fy__quic_debug_log;
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
    c->mem = (ngtcp2_mem){&c->lib_bytes, cm_malloc, cm_free, cm_calloc, cm_realloc};
    if (ngtcp2_conn_server_new(&c->conn, &hd->scid, &scid, &path, hd->version, &callbacks, &st, &p,
                               &c->mem, c) != 0) {
        free(c);
        return NULL;
    }
    if (fy__quic_setup_tls(c) != 0) {
        if (c->tls) gnutls_deinit(c->tls);
        ngtcp2_conn_del(c->conn);
        free(c);
        return NULL;
    }
    fy_list_insert_tail(&ep->conns, &c->link);
    ep->nconns++;
    fy__quic_map_add(c, &scid);
    fy__quic_map_add(c, &hd->dcid); /* the client's Initials still carry its own DCID */
    fy_counters_quic_open(0);
    return c;
}

void fy__quic_handle_packet(fy_quic_endpoint_t *ep, const uint8_t *data, size_t len,
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
        fy__quic_rand_bytes(&ur, 1);
        ngtcp2_ssize n = ngtcp2_pkt_write_version_negotiation(
            out, sizeof out, ur, vc.scid, vc.scidlen, vc.dcid, vc.dcidlen, sv, 1);
        if (n > 0) fy__quic_send_one(ep, sa, salen, out, (size_t)n);
        return;
    }
    if (r != 0) return;
    fy_quic_conn_t *c = fy__quic_map_find(ep, vc.dcid, vc.dcidlen);
    if (!c && ep->client) return;
    if (!c) {
        if (!(data[0] & 0x80)) { /* short header for a connection we do not know */
            if (fy__quic_forward(ep, &vc, data, len, sa, salen)) return;
            fy__quic_send_stateless_reset(ep, vc.dcid, vc.dcidlen, len, sa, salen);
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
            if (n > 0) fy__quic_send_one(ep, sa, salen, out, (size_t)n);
            return;
        }
        ngtcp2_cid odcid = hd.dcid;
        bool retried = false;
        if (conf->retry) {
            if (hd.token.len == 0 || hd.token.base[0] != NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY) {
                fy__quic_send_retry(ep, &hd, sa, salen);
                return;
            }
            if (ngtcp2_crypto_verify_retry_token(&odcid, hd.token.base, hd.token.len,
                                                 ep->qs->secret, sizeof ep->qs->secret, hd.version,
                                                 (const ngtcp2_sockaddr *)sa, salen, &hd.dcid,
                                                 RETRY_TOKEN_TTL, fy__quic_now_ns()) != 0) {
                /* forged or expired: a fresh Retry lets an honest client try again */
                fy__quic_send_retry(ep, &hd, sa, salen);
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
    r = ngtcp2_conn_read_pkt(c->conn, &path, &pi, data, len, fy__quic_now_ns());
    c->in_lib--;
    if (r != 0) {
        fy__quic_conn_fail(c, r);
        return;
    }
    /* the path the connection uses now (ngtcp2 validated a migration) */
    const ngtcp2_path *cur = ngtcp2_conn_get_path(c->conn);
    if (cur && cur->remote.addrlen <= sizeof c->remote) {
        memcpy(&c->remote, cur->remote.addr, cur->remote.addrlen);
        c->remotelen = cur->remote.addrlen;
    }
    conn_mem_sync(c, false);
    fy__quic_schedule_write(c);
}

/* ---- drain ---- */

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
    c->pio.cb = fy__quic_on_conn_io;
    c->pio.data = c;
    if (fy_io_set(ep->loop, &c->pio, EPOLLIN) < 0) {
        close(fd);
        c->pio.fd = -1;
        return -ENOMEM;
    }
    return 0;
}

/* ---- endpoint ---- */

fy_quic_endpoint_t *fy_quic_endpoint_new(fy_loop_t *loop, fy_quic_server_t *qs, int fd,
                                         const fy_quic_app_ops_t *ops, void *ud)
{
    fy_quic_endpoint_t *ep = fy_xcalloc(1, sizeof *ep);
    ep->loop = loop;
    ep->qs = qs;
    ep->ops = ops;
    ep->ud = ud;
    ep->io.fd = fd;
    ep->io.cb = fy__quic_on_io;
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
    fy__quic_ep_register(ep);
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
    fy__quic_rx_fd(ep, ep->io.fd, NULL);
    fy_io_set(ep->loop, &ep->io, 0);
    close(ep->io.fd);
    ep->io.fd = -1;
    ep->detached = true;
}

void fy_quic_endpoint_free(fy_quic_endpoint_t *ep)
{
    if (!ep) return;
    fy__quic_ep_unregister(ep);
    while (!fy_list_empty(&ep->conns)) {
        fy_quic_conn_t *c = fy_container_of(ep->conns.next, fy_quic_conn_t, link);
        ngtcp2_connection_close_error_set_application_error(&c->ccerr, 0x100, NULL, 0);
        fy__quic_conn_destroy(c, true);
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
