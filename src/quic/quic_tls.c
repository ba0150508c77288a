/* QUIC TLS: listener credentials, server session set-up, the guard on peer CRYPTO data.
 * Threads: fy_quic_server_t is shared by workers (certs swapped atomically); sessions are the
 * connection's worker's. */
#include "quic/quic_int.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "net/sock.h"

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
    fy__quic_rand_bytes(qs->secret, sizeof qs->secret);
    fy__quic_rand_bytes(&qs->tag, 1);
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

static void tkey_free(gnutls_datum_t *k)
{
    if (!k) return;
    gnutls_memset(k->data, 0, k->size);
    gnutls_free(k->data);
    free(k);
}

int fy_quic_server_set_tickets(fy_quic_server_t *qs, bool on, const void *secret, size_t len)
{
    gnutls_datum_t *k = NULL;
    if (on && !len && qs->tkey && qs->tkey_random) return 0; /* the random key stays */
    if (on) {
        k = fy_xcalloc(1, sizeof *k);
        /* a random key gives the size this GnuTLS wants (64 bytes in 3.7) */
        int r = gnutls_session_ticket_key_generate(k);
        if (r != 0) {
            fy_error("listener %s: h3: session ticket key: %s", qs->name, gnutls_strerror(r));
            free(k);
            return -1;
        }
        if (len) {
            /* SHA-512 blocks of label, block number and the shared secret, as many as the
               key needs */
            static const char label[] = "ferry h3 session ticket key";
            uint8_t in[sizeof label + 1 + 80], out[64];
            size_t n = len < 80 ? len : 80;
            memcpy(in, label, sizeof label);
            memcpy(in + sizeof label + 1, secret, n);
            for (unsigned off = 0, i = 0; off < k->size; off += sizeof out, i++) {
                in[sizeof label] = (uint8_t)i;
                gnutls_hash_fast(GNUTLS_DIG_SHA512, in, sizeof label + 1 + n, out);
                size_t m = k->size - off < sizeof out ? k->size - off : sizeof out;
                memcpy(k->data + off, out, m);
            }
            gnutls_memset(in, 0, sizeof in);
            gnutls_memset(out, 0, sizeof out);
        }
    }
    gnutls_datum_t *cur = qs->tkey;
    if (cur && k && len && cur->size == k->size && memcmp(cur->data, k->data, k->size) == 0) {
        tkey_free(k); /* a reload with the same file: the key stays */
        return 0;
    }
    if (cur) {
        /* a handshake on another worker may be reading it: kept until the free */
        qs->old_tkeys = fy_xrealloc(qs->old_tkeys, (qs->nold_tkeys + 1) * sizeof *qs->old_tkeys);
        qs->old_tkeys[qs->nold_tkeys++] = cur;
    }
    __atomic_store_n(&qs->tkey, k, __ATOMIC_RELEASE);
    qs->tkey_random = on && !len;
    return 0;
}

void fy_quic_server_free(fy_quic_server_t *qs)
{
    if (!qs) return;
    for (size_t i = 0; i < qs->nold_tkeys; i++) tkey_free(qs->old_tkeys[i]);
    free(qs->old_tkeys);
    tkey_free(qs->tkey);
    for (size_t i = 0; i < qs->nold_creds; i++)
        gnutls_certificate_free_credentials(qs->old_creds[i]);
    free(qs->old_creds);
    if (qs->cred) gnutls_certificate_free_credentials(qs->cred);
    if (qs->prio) gnutls_priority_deinit(qs->prio);
    if (qs->shared) pthread_mutex_destroy(&qs->lock);
    free(qs->name);
    free(qs);
}

/* ---- CRYPTO-data guard ---- */

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

int fy__quic_cb_recv_crypto_data(ngtcp2_conn *conn, ngtcp2_crypto_level level, uint64_t offset,
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

/* ---- server sessions ---- */

ngtcp2_conn *fy__quic_get_conn(ngtcp2_crypto_conn_ref *ref)
{
    return ((fy_quic_conn_t *)ref->user_data)->conn;
}

int fy__quic_setup_tls(fy_quic_conn_t *c)
{
    fy_quic_server_t *qs = c->ep->qs;
    /* no GNUTLS_ENABLE_EARLY_DATA: 0-RTT is off */
    if (gnutls_init(&c->tls,
                    GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET | GNUTLS_NO_END_OF_EARLY_DATA) != 0)
        return -1;
    if (gnutls_priority_set(c->tls, qs->prio) != 0) return -1;
    if (ngtcp2_crypto_gnutls_configure_server_session(c->tls) != 0) return -1;
    c->ref.get_conn = fy__quic_get_conn;
    c->ref.user_data = c;
    gnutls_session_set_ptr(c->tls, &c->ref);
    gnutls_certificate_credentials_t cred = __atomic_load_n(&qs->cred, __ATOMIC_ACQUIRE);
    if (gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, cred) != 0) return -1;
    /* the key is copied into the session (its rotation state starts from it) */
    const gnutls_datum_t *tk = __atomic_load_n(&qs->tkey, __ATOMIC_ACQUIRE);
    if (tk && gnutls_session_ticket_enable_server(c->tls, tk) != 0) return -1;
    c->tickets = tk != NULL;
    gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    if (gnutls_alpn_set_protocols(c->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY) != 0) return -1;
    gnutls_handshake_set_hook_function(c->tls, GNUTLS_HANDSHAKE_CLIENT_HELLO, GNUTLS_HOOK_POST,
                                       hello_hook);
    ngtcp2_conn_set_tls_native_handle(c->conn, c->tls);
    return 0;
}
