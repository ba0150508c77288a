/* Interception CA: generate once, load, export, describe. */
#include "tls/ca.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"

struct fy_ca {
    X509 *cert;    /* owned */
    EVP_PKEY *key; /* owned */
    char pem[4096];
    char keyf[4096];
    bool created;
};

int fy_ca_mkdir_p(const char *dir)
{
    char tmp[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof tmp) return -ENAMETOOLONG;
    memcpy(tmp, dir, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0700) < 0 && errno != EEXIST) return -errno;
        *p = '/';
    }
    if (mkdir(tmp, 0700) < 0 && errno != EEXIST) return -errno;
    return 0;
}

static void ssl_err(char *err, size_t len, const char *what)
{
    unsigned long e = ERR_get_error();
    char b[200] = "failed";
    if (e) ERR_error_string_n(e, b, sizeof b);
    ERR_clear_error();
    snprintf(err, len, "%s: %s", what, b);
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    if (!ext) return -1;
    int ok = X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    return ok ? 0 : -1;
}

static int random_serial(X509 *x)
{
    unsigned char serial[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, serial, sizeof serial);
    close(fd);
    if (n != (ssize_t)sizeof serial) return -1;
    serial[0] &= 0x7f;
    serial[0] |= 0x01; /* positive and of constant length */
    BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
    if (!bn) return -1;
    ASN1_INTEGER *ai = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
    BN_free(bn);
    return ai ? 0 : -1;
}

static int generate(fy_ca_t *ca, char *err, size_t errlen)
{
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    FILE *f = NULL;
    if (!pk || !x) goto fail_ssl;
    X509_set_version(x, 2);
    if (random_serial(x) < 0) goto fail_ssl;
    X509_gmtime_adj(X509_getm_notBefore(x), -86400);
    X509_gmtime_adj(X509_getm_notAfter(x), 10L * 365 * 86400);
    X509_set_pubkey(x, pk);
    X509_NAME *name = X509_get_subject_name(x);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    char cn[320];
    snprintf(cn, sizeof cn, "Ferry interception CA (%s)", host);
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, (const unsigned char *)"Ferry", -1, -1, 0);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, name);
    if (add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") < 0 ||
        add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") < 0 ||
        add_ext(x, x, NID_subject_key_identifier, "hash") < 0 ||
        add_ext(x, x, NID_authority_key_identifier, "keyid:always") < 0)
        goto fail_ssl;
    if (!X509_sign(x, pk, EVP_sha256())) goto fail_ssl;

    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", ca->keyf);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd);
        goto fail;
    }
    if (!PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL) || fclose(f) != 0) {
        f = NULL;
        snprintf(err, errlen, "%s: write failed", tmp);
        goto fail;
    }
    f = NULL;
    if (rename(tmp, ca->keyf) < 0) {
        snprintf(err, errlen, "%s: %s", ca->keyf, strerror(errno));
        goto fail;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", ca->pem);
    f = fopen(tmp, "w");
    if (!f || !PEM_write_X509(f, x) || fclose(f) != 0) {
        f = NULL;
        snprintf(err, errlen, "%s: cannot write", tmp);
        goto fail;
    }
    f = NULL;
    if (rename(tmp, ca->pem) < 0) {
        snprintf(err, errlen, "%s: %s", ca->pem, strerror(errno));
        goto fail;
    }
    ca->cert = x;
    ca->key = pk;
    ca->created = true;
    return 0;
fail_ssl:
    ssl_err(err, errlen, "generating the CA");
fail:
    if (f) fclose(f);
    X509_free(x);
    EVP_PKEY_free(pk);
    return -1;
}

/* Anyone who can write the CA directory can swap the certificate (or the key) for their own,
   and a client trusting "Ferry's CA" then trusts theirs: refuse what others may write, as the
   key's mode is refused (group write is left alone: user-private groups are common). 1 when
   refused (err says why and the chmod that fixes it), 0 fine, -1 when `path` is absent. */
static int writable_by_others(const char *path, bool is_dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) < 0) return -1;
    if (!(st.st_mode & S_IWOTH)) return 0;
    snprintf(err, errlen,
             "%s: mode %03o lets any user replace the interception CA%s; chmod o-w %s "
             "(or chmod %s %s)",
             path, (unsigned)(st.st_mode & 0777), is_dir ? "'s files" : " certificate", path,
             is_dir ? "700" : "644", path);
    return 1;
}

fy_ca_t *fy_ca_load(const char *dir, bool create, char *err, size_t errlen)
{
    fy_ca_t *ca = fy_xcalloc(1, sizeof *ca);
    snprintf(ca->pem, sizeof ca->pem, "%s/ferry-ca.pem", dir);
    snprintf(ca->keyf, sizeof ca->keyf, "%s/ferry-ca.key", dir);
    struct stat st;
    if (writable_by_others(dir, true, err, errlen) == 1) goto fail;
    if (stat(ca->keyf, &st) < 0) {
        if (errno != ENOENT || !create) {
            snprintf(err, errlen, "%s: %s%s", ca->keyf, strerror(errno),
                     errno == ENOENT ? " (run `ferry ca init`)" : "");
            goto fail;
        }
        int r = fy_ca_mkdir_p(dir);
        if (r < 0) {
            snprintf(err, errlen, "%s: %s", dir, strerror(-r));
            goto fail;
        }
        if (generate(ca, err, errlen) < 0) goto fail;
        return ca;
    }
    if (st.st_mode & 077) {
        snprintf(err, errlen, "%s: mode %03o lets others read the CA key; chmod 600 it", ca->keyf,
                 (unsigned)(st.st_mode & 0777));
        goto fail;
    }
    if (writable_by_others(ca->pem, false, err, errlen) == 1) goto fail;
    FILE *f = fopen(ca->keyf, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", ca->keyf, strerror(errno));
        goto fail;
    }
    ca->key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    if (!ca->key) {
        ssl_err(err, errlen, ca->keyf);
        goto fail;
    }
    f = fopen(ca->pem, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", ca->pem, strerror(errno));
        goto fail;
    }
    ca->cert = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!ca->cert) {
        ssl_err(err, errlen, ca->pem);
        goto fail;
    }
    if (X509_check_private_key(ca->cert, ca->key) != 1) {
        ERR_clear_error();
        snprintf(err, errlen, "%s: does not match the key %s", ca->pem, ca->keyf);
        goto fail;
    }
    return ca;
fail:
    fy_ca_free(ca);
    return NULL;
}

void fy_ca_free(fy_ca_t *ca)
{
    if (!ca) return;
    X509_free(ca->cert);
    EVP_PKEY_free(ca->key);
    free(ca);
}

X509 *fy_ca_cert(const fy_ca_t *ca)
{
    return ca->cert;
}

EVP_PKEY *fy_ca_key(const fy_ca_t *ca)
{
    return ca->key;
}

const char *fy_ca_pem_path(const fy_ca_t *ca)
{
    return ca->pem;
}

bool fy_ca_created(const fy_ca_t *ca)
{
    return ca->created;
}

int fy_ca_export(const fy_ca_t *ca, const char *outdir, char *pem, char *der, size_t len)
{
    int r = fy_ca_mkdir_p(outdir);
    if (r < 0) return r;
    snprintf(pem, len, "%s/ferry-ca.pem", outdir);
    snprintf(der, len, "%s/ferry-ca.der", outdir);
    if (strcmp(pem, ca->pem) != 0) {
        FILE *f = fopen(pem, "w");
        if (!f) return -errno;
        int ok = PEM_write_X509(f, ca->cert);
        if (fclose(f) != 0 || !ok) return -EIO;
    }
    FILE *f = fopen(der, "wb");
    if (!f) return -errno;
    int ok = i2d_X509_fp(f, ca->cert);
    if (fclose(f) != 0 || !ok) return -EIO;
    return 0;
}

void fy_ca_describe(const fy_ca_t *ca, FILE *out)
{
    char subj[512];
    X509_NAME_oneline(X509_get_subject_name(ca->cert), subj, sizeof subj);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    X509_digest(ca->cert, EVP_sha256(), md, &mdlen);
    fprintf(out, "subject:     %s\nsha256:      ", subj);
    for (unsigned i = 0; i < mdlen; i++) fprintf(out, "%02X%s", md[i], i + 1 < mdlen ? ":" : "");
    BIO *b = BIO_new_fp(out, BIO_NOCLOSE);
    fputs("\nnot before:  ", out);
    fflush(out);
    ASN1_TIME_print(b, X509_get0_notBefore(ca->cert));
    BIO_flush(b);
    fputs("\nnot after:   ", out);
    fflush(out);
    ASN1_TIME_print(b, X509_get0_notAfter(ca->cert));
    BIO_flush(b);
    BIO_free(b);
    fprintf(out, "\nkey:         ECDSA P-256, %s (mode 0600)\ncertificate: %s\n", ca->keyf,
            ca->pem);
}

void fy_ca_print_trust_help(const char *pem, const char *der, FILE *out)
{
    fprintf(out,
            "\nTo trust this CA (only on machines you control; anyone with the key can\n"
            "impersonate any site to them):\n"
            "  curl:            curl --cacert %s --proxy http://127.0.0.1:8888 https://...\n"
            "  Debian/Ubuntu:   sudo cp %s /usr/local/share/ca-certificates/ferry-ca.crt &&\n"
            "                   sudo update-ca-certificates\n"
            "  Fedora/RHEL:     sudo cp %s /etc/pki/ca-trust/source/anchors/ && sudo "
            "update-ca-trust\n"
            "  Chromium/Chrome: certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n ferry-ca -i %s\n"
            "                   (certutil is in libnss3-tools)\n"
            "  Firefox:         Settings > Privacy & Security > Certificates > View > Import\n"
            "                   %s, or certutil -d sql:PROFILE_DIR -A -t C,, -n ferry-ca -i %s\n"
            "  DER (Android, Windows): %s\n",
            pem, pem, pem, pem, pem, pem, der);
}
