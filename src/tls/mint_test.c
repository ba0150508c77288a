/* Unit tests of tls/mint.c and tls/ca.c: CA generation and reload, leaf contents (SAN by DNS
 * or IP, signed by the CA, verifiable), LRU bound and once-per-host issuance, SNI parsing. */
#include "tls/mint.h"

#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
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

FY_TEST_MAIN(test_ca_and_leaves(); test_sni())
