/* Directive table of a listener's `tls:`. */
#include "tls/tls_conf.h"
#include "tls/tls_files.h"
#include "tls/tickets.h"
#include "conf/conf_valid.h"

#include <stddef.h>
#include <string.h>

static int check_cert(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const fy_tls_cert_conf_t *c = obj;
    return fy_tls_conf_check_pair(ctx, map, c->cert, c->key, NULL);
}

static const fy_conf_directive_t cert_table[] = {
    {.key = "cert",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_tls_cert_conf_t, cert),
     .validate = fy_conf_valid_readable_file,
     .required = true,
     .doc = "PEM certificate chain file."},
    {.key = "key",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_tls_cert_conf_t, key),
     .validate = fy_conf_valid_readable_file,
     .required = true,
     .doc = "PEM private key file."},
    {.key = NULL, .check = check_cert},
};

static const char *const tls_versions[] = {"1.2", "1.3", NULL};

/* cert/key and certificates are merged into `certificates`, cert/key first (the default
   certificate). An identical pair already in the list is not added twice, so a dumped
   config loads back to the same value. */
static int check_tls(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_tls_conf_t *t = obj;
    if (!t->cert != !t->key) {
        fy_conf_error(ctx, map, t->cert ? "key" : "cert", "is required when '%s' is set",
                      t->cert ? "cert" : "key");
        return -1;
    }
    bool have_certs = t->cert || t->certificates.n;
    if (t->self_signed && have_certs) {
        fy_conf_error(ctx, map, NULL,
                      "self-signed cannot be combined with cert/key or certificates; "
                      "choose one");
        return -1;
    }
    if (!t->self_signed && !have_certs) {
        fy_conf_error(ctx, map, NULL,
                      "needs a certificate: set cert and key, certificates, or self-signed");
        return -1;
    }
    if (!t->cert) return 0;
    if (fy_tls_conf_check_pair(ctx, map, t->cert, t->key, NULL) < 0) return -1;
    fy_tls_cert_conf_t *old = t->certificates.v;
    for (size_t i = 0; i < t->certificates.n; i++)
        if (!strcmp(old[i].cert, t->cert) && !strcmp(old[i].key, t->key)) return 0;
    fy_tls_cert_conf_t *v =
        fy_conf_alloc(fy_conf_ctx_arena(ctx), (t->certificates.n + 1) * sizeof(*v));
    v[0].cert = t->cert;
    v[0].key = t->key;
    if (t->certificates.n) memcpy(v + 1, old, t->certificates.n * sizeof(*v));
    t->certificates.v = v;
    t->certificates.n++;
    return 0;
}

#define T(f) offsetof(fy_tls_conf_t, f)

const fy_conf_directive_t fy_tls_conf_table[] = {
    {.key = "self-signed",
     .type = FY_CT_BOOL,
     .offset = T(self_signed),
     .dflt = "false",
     .doc = "Generate a self-signed certificate at first start and keep it in the data dir."},
    {.key = "cert",
     .type = FY_CT_STRING,
     .offset = T(cert),
     .validate = fy_conf_valid_readable_file,
     .doc = "PEM certificate chain file of the default certificate (needs `key`)."},
    {.key = "key",
     .type = FY_CT_STRING,
     .offset = T(key),
     .validate = fy_conf_valid_readable_file,
     .doc = "PEM private key file of the default certificate (needs `cert`)."},
    {.key = "certificates",
     .type = FY_CT_TABLE_LIST,
     .offset = T(certificates),
     .sub = cert_table,
     .sub_size = sizeof(fy_tls_cert_conf_t),
     .doc = "More certificates, chosen by SNI; `cert`/`key` above, if set, is added first "
            "and is the default."},
    {.key = "min-version",
     .type = FY_CT_ENUM,
     .offset = T(min_version),
     .dflt = "1.2",
     .enums = tls_versions,
     .doc = "Lowest TLS version accepted."},
    {.key = "session-tickets",
     .type = FY_CT_BOOL,
     .offset = T(session_tickets),
     .dflt = "true",
     .doc = "Offer TLS session tickets for resumption."},
    {.key = "handshake-timeout",
     .type = FY_CT_DURATION,
     .offset = T(handshake_timeout_ms),
     .dflt = "10s",
     .min = 100,
     .max = 3600000,
     .doc = "Close a connection whose TLS handshake takes longer."},
    {.key = "ciphers",
     .type = FY_CT_STRING,
     .offset = T(ciphers),
     .validate = fy_tls_valid_ciphers,
     .doc = "TLS 1.2 cipher list in OpenSSL syntax. Unset, forward-secret AEAD suites only: "
            "`" FY_TLS_DEFAULT_CIPHERS "` (no CBC, no RSA key exchange). TLS 1.3 suites are "
            "all AEAD and not changed by this."},
    {.key = "ticket-keys",
     .type = FY_CT_STRING,
     .offset = T(ticket_keys),
     .validate = fy_tls_valid_ticket_keys,
     .doc = "File of session ticket keys shared by the instances that should resume each "
            "other's sessions: 80-byte records (16 name, 32 HMAC, 32 AES-256 key: `openssl "
            "rand 80`) or 48-byte ones (16 each, AES-128), nginx's `ssl_session_ticket_key` "
            "layout, up to 16. The first encrypts, all decrypt (tickets under a later one are "
            "renewed). Read again on every reload; unset, each start makes random keys. TLS "
            "over TCP and layer-4 termination; HTTP/3 (GnuTLS) derives its one ticket key from "
            "the first record, so over QUIC only tickets under the first key resume."},
    {.key = NULL, .check = check_tls},
};
