/* Self-signed certificate for `tls: self-signed` and the embedded demo config. */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "tls/tls.h"

static int mkdir_p(const char *dir)
{
    char tmp[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof tmp) return -1;
    memcpy(tmp, dir, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0700) < 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0700) < 0 && errno != EEXIST) return -1;
    return 0;
}

/* true when cert exists, parses, and is valid for at least one more day */
static bool cert_usable(const char *cert, const char *key)
{
    if (access(key, R_OK) != 0) return false;
    FILE *f = fopen(cert, "r");
    if (!f) return false;
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!x) return false;
    time_t t = time(NULL) + 86400;
    bool ok = X509_cmp_time(X509_get0_notAfter(x), &t) > 0;
    X509_free(x);
    return ok;
}

static int generate(const char *cert, const char *key)
{
    int rc = -1;
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_NAME *name = NULL;
    X509_EXTENSION *ext = NULL;
    FILE *f = NULL;
    if (!pk || !x) goto out;
    X509_set_version(x, 2);
    unsigned char serial[16];
    FILE *ur = fopen("/dev/urandom", "rb");
    if (!ur || fread(serial, 1, sizeof serial, ur) != sizeof serial) {
        if (ur) fclose(ur);
        goto out;
    }
    fclose(ur);
    serial[0] &= 0x7f;
    BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
    BN_free(bn);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 365L * 86400);
    X509_set_pubkey(x, pk);
    name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"Ferry", -1, -1, 0);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1,
                               0);
    X509_set_issuer_name(x, name);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name,
                              "DNS:localhost,IP:127.0.0.1,IP:0:0:0:0:0:0:0:1");
    if (!ext || !X509_add_ext(x, ext, -1)) goto out;
    X509_EXTENSION_free(ext);
    ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:FALSE");
    if (!ext || !X509_add_ext(x, ext, -1)) goto out;
    if (!X509_sign(x, pk, EVP_sha256())) goto out;

    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", key);
    mode_t old = umask(077);
    f = fopen(tmp, "w");
    umask(old);
    if (!f || !PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL)) goto out;
    fclose(f);
    f = NULL;
    if (rename(tmp, key) < 0) goto out;
    snprintf(tmp, sizeof tmp, "%s.tmp", cert);
    f = fopen(tmp, "w");
    if (!f || !PEM_write_X509(f, x)) goto out;
    fclose(f);
    f = NULL;
    if (rename(tmp, cert) < 0) goto out;
    rc = 0;
out:
    if (f) fclose(f);
    if (ext) X509_EXTENSION_free(ext);
    X509_free(x);
    EVP_PKEY_free(pk);
    if (rc < 0) fy_tls_log_errors(FY_LOG_EMERG, "self-signed certificate");
    return rc;
}

int fy_tls_selfsigned_ensure(const char *dir, char *cert, char *key, size_t len)
{
    if (mkdir_p(dir) < 0) {
        fy_log(FY_LOG_EMERG, "data dir %s: %s", dir, strerror(errno));
        return -1;
    }
    snprintf(cert, len, "%s/selfsigned.crt", dir);
    snprintf(key, len, "%s/selfsigned.key", dir);
    if (cert_usable(cert, key)) return 0;
    if (generate(cert, key) < 0) return -1;
    fy_notice("generated self-signed certificate %s", cert);
    return 0;
}
