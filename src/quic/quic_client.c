/* QUIC client connections (h3:// origins), each with a private endpoint and GnuTLS session.
 * Threads: created and used on one worker loop thread. */
#include "quic/quic_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/counters.h"
#include "core/alloc.h"
#include "core/log.h"

/* ---- client connections (h3:// origins) ---- */

static int cb_extend_max_local_bidi(ngtcp2_conn *conn, uint64_t max, void *ud)
{
    fy_quic_conn_t *c = ud;
    if (!c->closing && c->app && c->ep->ops->credit) c->ep->ops->credit(c->app);
    return 0;
}

static const ngtcp2_callbacks client_callbacks = {
    .client_initial = ngtcp2_crypto_client_initial_cb,
    .recv_crypto_data = fy__quic_cb_recv_crypto_data,
    .handshake_completed = fy__quic_cb_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = fy__quic_cb_recv_stream_data,
    .acked_stream_data_offset = fy__quic_cb_acked,
    .stream_open = fy__quic_cb_stream_open,
    .stream_close = fy__quic_cb_stream_close,
    .recv_retry = ngtcp2_crypto_recv_retry_cb,
    .extend_max_local_streams_bidi = cb_extend_max_local_bidi,
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
    fy__quic_rand_bytes(qs->secret, sizeof qs->secret);
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
    fy_timer_init(&c->timer, fy__quic_on_timer, c);
    c->write_defer.cb = fy__quic_write_cb;
    c->write_defer.data = c;
    c->close_defer.cb = fy__quic_close_cb;
    c->close_defer.data = c;
    ngtcp2_connection_close_error_default(&c->ccerr);
    uint8_t b[18];
    ngtcp2_cid dcid, scid;
    fy__quic_rand_bytes(b, sizeof b);
    ngtcp2_cid_init(&dcid, b, sizeof b);
    fy__quic_rand_bytes(b, CIDLEN);
    ngtcp2_cid_init(&scid, b, CIDLEN);
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
    c->ref.get_conn = fy__quic_get_conn;
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
    fy__quic_map_add(c, &scid);
    c->app = ud; /* ops->close reaches the application even if the handshake never completes */
    fy__quic_schedule_write(c);
    fy_counters_quic_open(1);
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
    return &fy__quic_stream_new(qc, id)->pub;
}

uint64_t fy_quic_streams_bidi_left(fy_quic_conn_t *qc)
{
    return qc->closed ? 0 : ngtcp2_conn_get_streams_bidi_left(qc->conn);
}
