/* Unit tests of tls/tls_mitm.c: the probe's handshake against a forged server (tls/mint.h)
 * over a socketpair, insecure and verified (an unknown issuer fails as "untrusted", with
 * OpenSSL's reason), what describe reports of each side, the refusal alerts' names and the CA
 * as PEM. */
#include "tls/tls_mitm.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/test.h"
#include "tls/mint.h"

/* Run a probe against a forged server for "shop.example". Returns the probe's last result. */
static int run(fy_mint_t *m, SSL_CTX *cctx, bool verify, bool h2, struct fy_tls_peer_desc *c,
               struct fy_tls_peer_desc *s, char *msg, size_t cap)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    SSL *p = fy_tls_mitm_probe_new(cctx, sv[0], "shop.example", verify);
    SSL *f = fy_mint_ssl_new(m, sv[1]);
    CHECK(p != NULL && f != NULL);
    int pr = 0, fr = 0;
    bool got_h2 = false;
    for (int i = 0; i < 100 && (pr != 1 || fr != 1); i++) {
        unsigned want = 0;
        if (pr == 0) pr = fy_tls_mitm_probe_step(p, sv[0], &want, &got_h2, msg, cap);
        if (fr == 0 || fr == FY_MINT_HELLO) {
            int alert = 0;
            fr = fy_mint_handshake(f, &want, &alert);
            if (fr == FY_MINT_HELLO) {
                CHECK_EQ_INT(fy_mint_resume(m, f, fy_mint_sni(f), h2), 0);
                fr = 0;
            }
        }
        if (pr < 0 || fr < 0) break;
    }
    if (pr == 1) {
        CHECK(got_h2 == h2);
        fy_tls_mitm_describe(p, true, c);
        fy_tls_mitm_describe(f, false, s);
    }
    fy_tls_mitm_ssl_free(p);
    fy_tls_mitm_ssl_free(f);
    close(sv[0]);
    close(sv[1]);
    return pr;
}

static void test_probe(void)
{
    char dir[] = "/tmp/fy_tls_mitm_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char err[600];
    fy_ca_t *ca = fy_ca_load(dir, true, err, sizeof err);
    CHECK(ca != NULL);
    fy_mint_t *m = fy_mint_new(ca, 8, NULL);
    CHECK(m != NULL);
    SSL_CTX *insecure = fy_tls_mitm_probe_ctx(NULL, true);
    CHECK(insecure != NULL);
    struct fy_tls_peer_desc c, s;
    char msg[300] = "";
    CHECK_EQ_INT(run(m, insecure, false, true, &c, &s, msg, sizeof msg), 1);
    CHECK(strcmp(c.alpn, "h2") == 0);
    CHECK(strcmp(s.alpn, "h2") == 0);
    CHECK(strcmp(c.version, "TLSv1.3") == 0);
    CHECK(c.cipher[0] != 0);
    CHECK(strstr(c.subject, "shop.example") != NULL); /* the forged leaf, seen by the probe */
    CHECK(strcmp(c.sha256, s.sha256) == 0);           /* ... is the one the server sent */
    CHECK(strlen(c.sha256) == 95);
    CHECK(c.not_after[0] == '2');
    CHECK_EQ_INT(run(m, insecure, false, false, &c, &s, msg, sizeof msg), 1);
    CHECK(strcmp(c.alpn, "http/1.1") == 0);
    /* verified against the system store: our CA is unknown there */
    SSL_CTX *strict = fy_tls_mitm_probe_ctx(NULL, false);
    CHECK(strict != NULL);
    CHECK_EQ_INT(run(m, strict, true, true, &c, &s, msg, sizeof msg), -FY_TLS_PROBE_UNTRUSTED);
    CHECK(strstr(msg, "issuer") != NULL || strstr(msg, "certificate") != NULL);
    /* the CA as PEM */
    size_t len = 0;
    char *pem = fy_tls_mitm_cert_pem(fy_ca_cert(ca), &len);
    CHECK(pem != NULL && len > 100);
    CHECK(strncmp(pem, "-----BEGIN CERTIFICATE-----", 27) == 0);
    CHECK(strlen(pem) == len);
    free(pem);
    fy_tls_mitm_ctx_free(insecure);
    fy_tls_mitm_ctx_free(strict);
    fy_mint_free(m);
    fy_ca_free(ca);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static void test_alerts(void)
{
    CHECK(strcmp(fy_tls_mitm_refusal_alert(SSL_AD_UNKNOWN_CA), "unknown_ca") == 0);
    CHECK(strcmp(fy_tls_mitm_refusal_alert(SSL_AD_BAD_CERTIFICATE), "bad_certificate") == 0);
    CHECK(strcmp(fy_tls_mitm_refusal_alert(SSL_AD_CERTIFICATE_UNKNOWN), "certificate_unknown") ==
          0);
    CHECK(fy_tls_mitm_refusal_alert(SSL_AD_HANDSHAKE_FAILURE) == NULL);
}

FY_TEST_MAIN(test_probe(); test_alerts())
