/* The interception CA (`ferry ca`, `intercept:`): an ECDSA P-256 root that signs the leaf
 * certificates forged for intercepted hosts (tls/mint.c). Files in the CA directory:
 * ferry-ca.pem (certificate), ferry-ca.key (private key, mode 0600), and after export
 * ferry-ca.der.
 * Threads: the CA is loaded on the main thread and read-only after; signing may run on any
 * worker. */
#ifndef FY_TLS_CA_H
#define FY_TLS_CA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

typedef struct fy_ca fy_ca_t;

/* Load the CA from `dir`; when it is missing and `create`, generate it (the directory is made
 * mode 0700, the key written mode 0600). Returns the CA, or NULL with a reason naming the file
 * in err (errlen bytes). A key file readable by group or others is refused. */
fy_ca_t *fy_ca_load(const char *dir, bool create, char *err, size_t errlen);
void fy_ca_free(fy_ca_t *ca);

/* Borrowed: valid as long as the CA. */
X509 *fy_ca_cert(const fy_ca_t *ca);
EVP_PKEY *fy_ca_key(const fy_ca_t *ca);
const char *fy_ca_pem_path(const fy_ca_t *ca);
/* true when fy_ca_load generated the CA just now. */
bool fy_ca_created(const fy_ca_t *ca);

/* Write the certificate as PEM and DER into `outdir` (ferry-ca.pem, ferry-ca.der). Returns 0
 * or -errno; the paths written go into pem/der (len bytes each). */
int fy_ca_export(const fy_ca_t *ca, const char *outdir, char *pem, char *der, size_t len);

/* Subject, SHA-256 fingerprint, validity and file paths, one per line. */
void fy_ca_describe(const fy_ca_t *ca, FILE *out);

/* How to trust `pem`/`der` in the system store, Firefox/NSS, Chromium's NSS db and curl. */
void fy_ca_print_trust_help(const char *pem, const char *der, FILE *out);

/* mkdir -p with mode 0700. Returns 0 or -errno. */
int fy_ca_mkdir_p(const char *dir);

#endif
