/* Unit tests of tls/mint.c and tls/ca.c: CA generation and reload, leaf contents (SAN by DNS
 * or IP, signed by the CA, verifiable), LRU bound and once-per-host issuance, SNI parsing, and
 * a paused handshake with a real client (the forged leaf's key, the cipher, read-ahead only
 * after the hand-over). */
#include "tls/mint.h"

#include <fcntl.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/test.h"

static bool verifies(X509 *ca, X509 *leaf, const char *host)
{
    X509_STORE *st = X509_STORE_new();
    X509_STORE_add_cert(st, ca);
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(ctx, st, leaf, NULL);
    X509_VERIFY_PARAM *p = X509_STORE_CTX_get0_param(ctx);
    if (strspn(host, "0123456789.") == strlen(host))
        X509_VERIFY_PARAM_set1_ip_asc(p, host);
    else
        X509_VERIFY_PARAM_set1_host(p, host, 0);
    X509_VERIFY_PARAM_set_purpose(p, X509_PURPOSE_SSL_SERVER);
    int ok = X509_verify_cert(ctx);
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(st);
    return ok == 1;
}

static void test_ca_and_leaves(void)
{
    char dir[] = "/tmp/fy_mint_testXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char sub[256], err[600];
    snprintf(sub, sizeof sub, "%s/ca", dir);
    CHECK(fy_ca_load(sub, false, err, sizeof err) == NULL); /* absent, not created */
    fy_ca_t *ca = fy_ca_load(sub, true, err, sizeof err);
    CHECK(ca != NULL && fy_ca_created(ca));
    fy_ca_t *again = fy_ca_load(sub, false, err, sizeof err);
    CHECK(again != NULL && !fy_ca_created(again));
    CHECK(X509_cmp(fy_ca_cert(ca), fy_ca_cert(again)) == 0);
    fy_ca_free(again);

    fy_mint_t *m = fy_mint_new(ca, 2, NULL);
    CHECK(m != NULL);
    bool issued;
    X509 *a = fy_mint_leaf(m, "example.com", &issued);
    CHECK(a && issued);
    CHECK(verifies(fy_ca_cert(ca), a, "example.com"));
    CHECK(!verifies(fy_ca_cert(ca), a, "other.com"));
    X509 *a2 = fy_mint_leaf(m, "example.com", &issued);
    CHECK(a2 == a && !issued);
    X509 *ip = fy_mint_leaf(m, "10.1.2.3", &issued);
    CHECK(ip && issued && verifies(fy_ca_cert(ca), ip, "10.1.2.3"));
    CHECK_EQ_INT(fy_mint_cached(m), 2);
    X509 *b = fy_mint_leaf(m, "b.example", &issued); /* evicts example.com (least recent) */
    CHECK(b && issued);
    CHECK_EQ_INT(fy_mint_cached(m), 2);
    X509 *a3 = fy_mint_leaf(m, "example.com", &issued);
    CHECK(a3 && issued && a3 != a);
    CHECK_EQ_INT(fy_mint_issued(m), 4);
    /* disk cache: a second minter (a restart) reads what the first one forged */
    char disk[300];
    snprintf(disk, sizeof disk, "%s/leaves", dir);
    fy_mint_t *d1 = fy_mint_new(ca, 4, disk);
    X509 *l1 = fy_mint_leaf(d1, "disk.example", &issued);
    CHECK(l1 && issued);
    fy_mint_free(d1);
    fy_mint_t *d2 = fy_mint_new(ca, 4, disk);
    X509 *l2 = fy_mint_leaf(d2, "disk.example", &issued);
    CHECK(l2 && !issued && X509_cmp(l1, l2) == 0);
    CHECK_EQ_INT(fy_mint_issued(d2), 0);
    char kp[400];
    snprintf(kp, sizeof kp, "%s/leaf-key.pem", disk);
    struct stat st;
    CHECK(stat(kp, &st) == 0 && (st.st_mode & 0777) == 0600);
    X509_free(l1);
    X509_free(l2);
    fy_mint_free(d2);
    X509_free(a);
    X509_free(a2);
    X509_free(a3);
    X509_free(ip);
    X509_free(b);
    fy_mint_free(m);
    fy_ca_free(ca);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* The client's side of the handshake: 1 done, 0 wants more, -1 failed. */
static int client_step(SSL *c)
{
    int r = SSL_do_handshake(c);
    if (r == 1) return 1;
    int e = SSL_get_error(c, r);
    return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
}

static void test_handshake(void)
{
    char dir[] = "/tmp/fy_mint_hsXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char err[600];
    fy_ca_t *ca = fy_ca_load(dir, true, err, sizeof err);
    CHECK(ca != NULL);
    fy_mint_t *m = fy_mint_new(ca, 8, NULL);
    CHECK(m != NULL);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    X509_STORE_add_cert(SSL_CTX_get_cert_store(cctx), fy_ca_cert(ca));
    SSL_CTX_set_verify(cctx, SSL_VERIFY_PEER, NULL);
    SSL *c = SSL_new(cctx);
    SSL_set_fd(c, sv[0]);
    SSL_set_connect_state(c);
    SSL_set_tlsext_host_name(c, "shop.example");
    SSL_set1_host(c, "shop.example");
    SSL *s = fy_mint_ssl_new(m, sv[1]);
    CHECK(s != NULL);
    int cr = 0, sr = 0, paused = 0;
    for (int i = 0; i < 100 && (cr != 1 || sr != 1); i++) {
        if (cr != 1) cr = client_step(c);
        if (sr != 1) {
            unsigned want = 0;
            int alert = 0;
            sr = fy_mint_handshake(s, &want, &alert);
            if (sr == FY_MINT_HELLO) {
                paused++;
                CHECK(strcmp(fy_mint_sni(s), "shop.example") == 0);
                /* h2 allowed: the rest of the handshake is read record by record */
                CHECK_EQ_INT(fy_mint_resume(m, s, fy_mint_sni(s), true), 0);
                CHECK(!SSL_get_read_ahead(s));
                sr = 0;
            }
        }
        if (cr < 0 || sr < 0) break;
    }
    CHECK_EQ_INT(paused, 1);
    CHECK_EQ_INT(cr, 1); /* the client verified the forged leaf, signed with the shared key */
    CHECK_EQ_INT(sr, 1);
    CHECK(SSL_get_verify_result(c) == X509_V_OK);
    CHECK(strcmp(SSL_CIPHER_get_name(SSL_get_current_cipher(s)), "TLS_AES_128_GCM_SHA256") == 0);
    /* read-ahead after the hand-over: two records in the socket, one SSL_read of the first
       one's size, and the second one is already in OpenSSL's buffer */
    CHECK(!SSL_get_read_ahead(s));
    fy_mint_handed_over(s);
    CHECK(SSL_get_read_ahead(s));
    CHECK(SSL_write(c, "first", 5) == 5);
    CHECK(SSL_write(c, "second", 6) == 6);
    char buf[16];
    CHECK_EQ_INT(SSL_read(s, buf, 5), 5);
    CHECK(memcmp(buf, "first", 5) == 0);
    CHECK(SSL_has_pending(s));
    CHECK_EQ_INT(SSL_read(s, buf, sizeof buf), 6);
    CHECK(memcmp(buf, "second", 6) == 0);
    /* h1 only: read-ahead all along (an h1 codec reads what came with the Finished) */
    SSL *s1 = fy_mint_ssl_new(m, sv[1]);
    CHECK(SSL_get_read_ahead(s1));
    CHECK_EQ_INT(fy_mint_resume(m, s1, "shop.example", false), 0);
    CHECK(SSL_get_read_ahead(s1));
    SSL_free(s1);
    SSL_free(c);
    SSL_free(s);
    SSL_CTX_free(cctx);
    close(sv[0]);
    close(sv[1]);
    fy_mint_free(m);
    fy_ca_free(ca);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static void test_sni(void)
{
    char out[64];
    static const unsigned char ok[] = {0, 12, 0, 0, 9, 'L', 'o', 'c', 'a', 'l', 'h', 'o', 's', 't'};
    CHECK_EQ_INT(fy_mint_parse_sni(ok, sizeof ok, out, sizeof out), 9);
    CHECK(strcmp(out, "localhost") == 0);
    CHECK_EQ_INT(fy_mint_parse_sni(ok, sizeof ok, out, 9), -1); /* no room for the NUL */
    CHECK_EQ_INT(fy_mint_parse_sni(ok, sizeof ok - 1, out, sizeof out), -1);
    static const unsigned char bad[] = {0, 6, 0, 0, 3, 'a', ' ', 'b'};
    CHECK_EQ_INT(fy_mint_parse_sni(bad, sizeof bad, out, sizeof out), -1);
    CHECK_EQ_INT(fy_mint_parse_sni(NULL, 0, out, sizeof out), -1);
}

FY_TEST_MAIN(test_ca_and_leaves(); test_handshake(); test_sni())
