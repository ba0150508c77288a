#include "tls/tls.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdatomic.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "core/counters.h"
#include "core/alloc.h"
#include "core/errors.h"
#include "core/log.h"
#include "tls/tickets.h"

typedef struct sni_entry {
    char *name; /* lowercase; "*.example.com" for wildcards */
    SSL_CTX *ctx;
} sni_entry_t;

struct fy_tls_ctx {
    SSL_CTX *dflt;  /* first certificate; owned */
    SSL_CTX **ctxs; /* one per certificate; owned */
    size_t nctx;
    sni_entry_t *sni;
    size_t nsni;
    unsigned char alpn_wire[64];
    size_t alpn_len;
    uint64_t handshake_timeout_ms;
    fy_tls_tickets_t *tickets; /* owned; NULL: OpenSSL's random keys */
};

typedef struct tls_transport {
    fy_transport_t t;
    SSL *ssl;
    char *staging; /* plaintext accepted by writev but not yet taken by SSL_write */
    size_t staged;
    bool short_read; /* fy_tls_track_reads: the last socket read got less than asked */
    bool peek_plain; /* server side of an HTTP listener: first bytes not yet looked at */
    int64_t mem;     /* bytes OpenSSL took for this connection (fy_tls_transport_mem) */
} tls_transport_t;

/* OpenSSL's allocations on this thread, net (taken - given back, usable sizes): a connection
 * counts the difference across each of its own SSL calls (CHARGE). Frees of another
 * connection's memory inside a call (rare: shared session state) blur it a little; the
 * connection's count goes whole with it at destroy. Stays 0 in FY_NO_POOL builds. */
static _Thread_local int64_t tls_net;
#define CHARGE(tt, call)                                                                           \
    ({                                                                                             \
        int64_t charge_b0_ = tls_net;                                                              \
        __typeof__(call) charge_r_ = (call);                                                       \
        (tt)->mem += tls_net - charge_b0_;                                                         \
        charge_r_;                                                                                 \
    })

/* An idle connection holds no record buffer (issue 19: OpenSSL's read and write buffers,
 * ~16.6 KiB each, were ~33 KiB of every idle TLS connection). Server connections free them
 * when their codec says the connection is idle (fy_tls_transport_idle: SSL_free_buffers);
 * origin (client) contexts have OpenSSL free them whenever they are empty
 * (SSL_MODE_RELEASE_BUFFERS). Either way OpenSSL allocates them again for the next record:
 * through glibc, release-when-empty cost ~1,000 instructions per h1+TLS request (6%).
 * OpenSSL 3.0 keeps no buffer freelist of its own, so its allocator is replaced, before its
 * first allocation, by one that serves those sizes from a slab of fixed blocks with a
 * per-thread freelist: a pop to take one, an address compare and a push to give it back.
 * Everything else (and record buffers once the slab is used up) goes to small_get/small_put:
 * OpenSSL 3.0 takes and gives back ~12 small blocks per record (parameter and context
 * blocks), which through glibc's malloc and free cost ~1,000 instructions per h1+TLS
 * request; from per-thread lists they cost a pop, a push and a malloc_usable_size. Those
 * sizes are also what each connection's accounting counts (fy_tls_transport_mem). Compiled out with
 * FY_NO_POOL (sanitizer builds), as the other pools are. */
#ifndef FY_NO_POOL
#define RECBUF_MIN 16384u                /* the smallest record buffer OpenSSL asks for */
#define RECBUF_SIZE 20480u               /* every slab block: more than the largest it asks for */
#define RECBUF_SLAB (32u * 1024 * 1024)  /* address space only: pages count once touched */
static char *recbuf_slab;                /* NULL: the slab could not be mapped, all via malloc */
static atomic_size_t recbuf_next;        /* blocks never handed out start here */
static _Thread_local void *recbuf_free;  /* blocks given back on this thread */
static _Thread_local size_t recbuf_held; /* blocks taken minus given back on this thread */

/* Small blocks: per-thread lists by glibc chunk size (16-byte steps, 8 bytes of glibc header),
 * no header of our own (an idle connection's SSL state is ~100 small blocks: a 16-byte header
 * each cost ~1 KiB per connection). The list a freed block joins comes from
 * malloc_usable_size, which is exactly its chunk size - 8. */
#define SMALL_MAX 512u /* chunk bytes */
#define SMALL_KEEP 256u
static _Thread_local void *small_free[SMALL_MAX / 16 + 1];
static _Thread_local unsigned small_nfree[SMALL_MAX / 16 + 1];
static _Thread_local bool small_off; /* after fy_tls_thread_cleanup: keep none */

static inline size_t chunk_of(size_t n)
{
    size_t c = (n + 8 + 15) & ~(size_t)15;
    return c < 32 ? 32 : c;
}

static void *small_get(size_t n)
{
    size_t c = chunk_of(n);
    if (c <= SMALL_MAX) {
        void *p = small_free[c >> 4];
        if (p) {
            small_free[c >> 4] = *(void **)p;
            small_nfree[c >> 4]--;
            tls_net += (int64_t)c;
            return p;
        }
        p = malloc(c - 8);
        if (p) tls_net += (int64_t)c;
        return p;
    }
    void *p = malloc(n);
    if (p) tls_net += (int64_t)(malloc_usable_size(p) + 8);
    return p;
}

static void small_put(void *p)
{
    size_t c = malloc_usable_size(p) + 8;
    tls_net -= (int64_t)c;
    /* c >= 32 always with glibc; not under valgrind, whose usable size is the size asked for
     * (a 2-byte block cannot hold the list's link) */
    if (c >= 32 && c <= SMALL_MAX && small_nfree[c >> 4] < SMALL_KEEP && !small_off) {
        *(void **)p = small_free[c >> 4];
        small_free[c >> 4] = p;
        small_nfree[c >> 4]++;
        return;
    }
    free(p);
}

static void *tls_mem_malloc(size_t n, const char *file, int line)
{
    (void)file, (void)line;
    if (n < RECBUF_MIN || n > RECBUF_SIZE || !recbuf_slab) return small_get(n);
    void *p = recbuf_free;
    if (p) {
        recbuf_free = *(void **)p;
        recbuf_held++;
        tls_net += RECBUF_SIZE;
        return p;
    }
    size_t off = atomic_fetch_add_explicit(&recbuf_next, RECBUF_SIZE, memory_order_relaxed);
    if (off <= RECBUF_SLAB - RECBUF_SIZE) {
        recbuf_held++;
        tls_net += RECBUF_SIZE;
        return recbuf_slab + off;
    }
    return small_get(n);
}

static void tls_mem_free(void *p, const char *file, int line)
{
    (void)file, (void)line;
    if ((size_t)((char *)p - recbuf_slab) < RECBUF_SLAB) {
        *(void **)p = recbuf_free;
        recbuf_free = p;
        recbuf_held--;
        tls_net -= RECBUF_SIZE;
        return;
    }
    if (p) small_put(p);
}

static void *tls_mem_realloc(void *p, size_t n, const char *file, int line)
{
    (void)file, (void)line;
    if (p && (size_t)((char *)p - recbuf_slab) < RECBUF_SLAB) { /* OpenSSL does not do it */
        void *q = small_get(n);
        if (!q) return NULL;
        memcpy(q, p, n < RECBUF_SIZE ? n : RECBUF_SIZE);
        tls_mem_free(p, file, line);
        return q;
    }
    int64_t old = p ? (int64_t)(malloc_usable_size(p) + 8) : 0;
    void *q = realloc(p, n); /* a listed block is a plain glibc block */
    if (q) tls_net += (int64_t)(malloc_usable_size(q) + 8) - old;
    return q;
}

/* Runs before main(): CRYPTO_set_mem_functions fails once OpenSSL has allocated anything.
 * If it fails anyway, buffers are still released, at glibc's price. */
__attribute__((constructor)) static void tls_mem_init(void)
{
    void *m = mmap(NULL, RECBUF_SLAB, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return;
    if (!CRYPTO_set_mem_functions(tls_mem_malloc, tls_mem_realloc, tls_mem_free)) {
        munmap(m, RECBUF_SLAB);
        return;
    }
    recbuf_slab = m;
}

size_t fy_tls_record_buffer_bytes(void)
{
    return recbuf_held * RECBUF_SIZE;
}

size_t fy_tls_thread_cleanup(void)
{
    size_t n = 0;
    small_off = true;
    for (size_t k = 0; k < sizeof small_free / sizeof small_free[0]; k++) {
        while (small_free[k]) {
            void *p = small_free[k];
            small_free[k] = *(void **)p;
            free(p);
            n++;
        }
        small_nfree[k] = 0;
    }
    return n;
}

/* The main thread's lists: after OPENSSL_cleanup (an atexit handler, run before destructors) */
__attribute__((destructor)) static void tls_mem_fini(void)
{
    fy_tls_thread_cleanup();
}
/* tls_writev's staging buffer (16 KiB) comes from the same slab */
static char *staging_get(void)
{
    char *p = tls_mem_malloc(16384, NULL, 0);
    if (!p) abort(); /* out of memory, as fy_xmalloc (staging_put frees it as ours) */
    return p;
}
static void staging_put(char *p)
{
    tls_mem_free(p, NULL, 0);
}
#else
size_t fy_tls_record_buffer_bytes(void)
{
    return 0;
}
size_t fy_tls_thread_cleanup(void)
{
    return 0;
}
static char *staging_get(void)
{
    return fy_xmalloc(16384);
}
static void staging_put(char *p)
{
    free(p);
}
#endif

void fy_tls_log_errors(int level, const char *prefix)
{
    unsigned long e;
    char buf[256];
    bool any = false;
    while ((e = ERR_get_error()) != 0) {
        ERR_error_string_n(e, buf, sizeof buf);
        fy_log(level, "%s: %s", prefix, buf);
        any = true;
    }
    if (!any) fy_log(level, "%s: failed", prefix);
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    fy_tls_ctx_t *c = arg;
    unsigned char *o;
    if (SSL_select_next_proto(&o, outlen, c->alpn_wire, (unsigned)c->alpn_len, in, inlen) ==
        OPENSSL_NPN_NEGOTIATED) {
        *out = o;
        return SSL_TLSEXT_ERR_OK;
    }
    /* A client offering "http/1.0" (and nothing we speak) gets it where we speak http/1.1:
       the h1 codec serves HTTP/1.0 requests, as nginx does. */
    static const unsigned char h10[] = "\x08http/1.0";
    bool have_h11 = false;
    for (size_t i = 0; i + 9 <= c->alpn_len; i += 1 + c->alpn_wire[i])
        if (c->alpn_wire[i] == 8 && memcmp(c->alpn_wire + i + 1, "http/1.1", 8) == 0)
            have_h11 = true;
    for (unsigned i = 0; have_h11 && i + 9 <= inlen; i += 1u + in[i])
        if (memcmp(in + i, h10, 9) == 0) {
            *out = in + i + 1;
            *outlen = 8;
            return SSL_TLSEXT_ERR_OK;
        }
    return SSL_TLSEXT_ERR_ALERT_FATAL; /* RFC 7301: no_application_protocol */
}

static bool name_matches(const char *pattern, const char *host)
{
    if (pattern[0] == '*' && pattern[1] == '.') {
        const char *dot = strchr(host, '.');
        return dot && dot != host && strcasecmp(dot + 1, pattern + 2) == 0;
    }
    return strcasecmp(pattern, host) == 0;
}

static int servername_cb(SSL *ssl, int *alert, void *arg)
{
    fy_tls_ctx_t *c = arg;
    const char *host = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (!host || c->nctx < 2) return SSL_TLSEXT_ERR_OK;
    /* exact names first, then wildcards */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < c->nsni; i++) {
            bool wild = c->sni[i].name[0] == '*';
            if (wild != (pass == 1)) continue;
            if (name_matches(c->sni[i].name, host)) {
                if (c->sni[i].ctx != c->dflt) SSL_set_SSL_CTX(ssl, c->sni[i].ctx);
                return SSL_TLSEXT_ERR_OK;
            }
        }
    return SSL_TLSEXT_ERR_OK; /* unknown name: default certificate */
}

static void add_sni(fy_tls_ctx_t *c, const char *name, size_t len, SSL_CTX *ctx)
{
    c->sni = fy_xrealloc(c->sni, (c->nsni + 1) * sizeof *c->sni);
    char *n = fy_xstrndup(name, len);
    for (char *p = n; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
    c->sni[c->nsni].name = n;
    c->sni[c->nsni].ctx = ctx;
    c->nsni++;
}

static void index_names(fy_tls_ctx_t *c, SSL_CTX *ctx)
{
    X509 *x = SSL_CTX_get0_certificate(ctx);
    if (!x) return;
    GENERAL_NAMES *sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    int found = 0;
    for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans); i++) {
        GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
        if (g->type != GEN_DNS) continue;
        add_sni(c, (const char *)ASN1_STRING_get0_data(g->d.dNSName),
                (size_t)ASN1_STRING_length(g->d.dNSName), ctx);
        found++;
    }
    GENERAL_NAMES_free(sans);
    if (!found) {
        char cn[256];
        if (X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn) > 0)
            add_sni(c, cn, strlen(cn), ctx);
    }
}

static SSL_CTX *make_ctx(fy_tls_ctx_t *c, const fy_tls_conf_t *conf, const char *cert,
                         const char *key)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) return NULL;
    SSL_CTX_set_min_proto_version(ctx, conf->min_version == FY_TLS_V13 ? TLS1_3_VERSION
                                                                       : TLS1_2_VERSION);
    long opts = SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                SSL_OP_IGNORE_UNEXPECTED_EOF;
    if (!conf->session_tickets) opts |= SSL_OP_NO_TICKET;
    SSL_CTX_set_options(ctx, opts);
    /* buffers: released by the codecs when a connection is idle (fy_tls_transport_idle) */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_read_ahead(ctx, 1);
    if (!conf->session_tickets) SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"ferry", 5);
    /* TLS 1.3: AES-128-GCM first (what clients prefer anyway; fewer AES rounds than the
       OpenSSL default order, which puts AES-256 first and wins under server preference) */
    SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:"
                                  "TLS_AES_256_GCM_SHA384");
    if (!SSL_CTX_set_cipher_list(ctx, conf->ciphers ? conf->ciphers : FY_TLS_DEFAULT_CIPHERS)) {
        fy_tls_log_errors(FY_LOG_EMERG, "tls ciphers");
        goto fail;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        fy_tls_log_errors(FY_LOG_EMERG, cert);
        fy_log(FY_LOG_EMERG, "cannot load certificate chain %s", cert);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        fy_tls_log_errors(FY_LOG_EMERG, key);
        fy_log(FY_LOG_EMERG, "cannot load private key %s", key);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        fy_log(FY_LOG_EMERG, "private key %s does not match certificate %s", key, cert);
        ERR_clear_error();
        goto fail;
    }
    if (c->alpn_len) /* no list (layer-4 termination): ALPN is not negotiated */
        SSL_CTX_set_alpn_select_cb(ctx, alpn_select, c);
    SSL_CTX_set_tlsext_servername_callback(ctx, servername_cb);
    SSL_CTX_set_tlsext_servername_arg(ctx, c);
    if (c->tickets && fy_tls_tickets_attach(ctx, c->tickets) < 0) {
        fy_tls_log_errors(FY_LOG_EMERG, "tls ticket keys");
        goto fail;
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

fy_tls_ctx_t *fy_tls_ctx_new(const fy_tls_conf_t *conf, const char *data_dir,
                             const char *const *alpn)
{
    fy_tls_ctx_t *c = fy_xcalloc(1, sizeof *c);
    c->handshake_timeout_ms = conf->handshake_timeout_ms ? conf->handshake_timeout_ms : 10000;
    for (size_t i = 0; alpn && alpn[i]; i++) {
        size_t l = strlen(alpn[i]);
        if (c->alpn_len + 1 + l > sizeof c->alpn_wire) break;
        c->alpn_wire[c->alpn_len++] = (unsigned char)l;
        memcpy(c->alpn_wire + c->alpn_len, alpn[i], l);
        c->alpn_len += l;
    }
    if (conf->ticket_keys && conf->session_tickets) {
        char msg[600];
        c->tickets = fy_tls_tickets_load(conf->ticket_keys, msg, sizeof msg);
        if (!c->tickets) {
            fy_log(FY_LOG_EMERG, "tls: %s", msg);
            fy_tls_ctx_free(c);
            return NULL;
        }
    }
    /* collect (cert, key) pairs: cert/key first, then certificates[], then self-signed */
    size_t n = conf->certificates.n + 2;
    const char **certs = fy_xcalloc(n, sizeof *certs), **keys = fy_xcalloc(n, sizeof *keys);
    size_t k = 0;
    char sscert[4096], sskey[4096];
    if (conf->cert && conf->key) {
        certs[k] = conf->cert;
        keys[k++] = conf->key;
    }
    const fy_tls_cert_conf_t *cc = conf->certificates.v;
    for (size_t i = 0; i < conf->certificates.n; i++) {
        certs[k] = cc[i].cert;
        keys[k++] = cc[i].key;
    }
    if (conf->self_signed) {
        if (fy_tls_selfsigned_ensure(data_dir, sscert, sskey, sizeof sscert) < 0) goto fail;
        certs[k] = sscert;
        keys[k++] = sskey;
    }
    if (k == 0) {
        fy_log(FY_LOG_EMERG, "tls: no certificate configured");
        goto fail;
    }
    c->ctxs = fy_xcalloc(k, sizeof *c->ctxs);
    for (size_t i = 0; i < k; i++) {
        SSL_CTX *ctx = make_ctx(c, conf, certs[i], keys[i]);
        if (!ctx) goto fail;
        c->ctxs[c->nctx++] = ctx;
        index_names(c, ctx);
    }
    c->dflt = c->ctxs[0];
    free(certs);
    free(keys);
    return c;
fail:
    free(certs);
    free(keys);
    fy_tls_ctx_free(c);
    return NULL;
}

void fy_tls_ctx_free(fy_tls_ctx_t *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->nctx; i++) SSL_CTX_free(c->ctxs[i]);
    for (size_t i = 0; i < c->nsni; i++) free(c->sni[i].name);
    free(c->sni);
    free(c->ctxs);
    fy_tls_tickets_free(c->tickets);
    free(c);
}

int fy_tls_ctx_require_client_cert(fy_tls_ctx_t *c, const char *ca_file)
{
    for (size_t i = 0; i < c->nctx; i++) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca_file);
        if (!names || SSL_CTX_load_verify_locations(c->ctxs[i], ca_file, NULL) != 1) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            fy_tls_log_errors(FY_LOG_EMERG, ca_file);
            return -1;
        }
        SSL_CTX_set_client_CA_list(c->ctxs[i], names);
        SSL_CTX_set_verify(c->ctxs[i], SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    return 0;
}

uint64_t fy_tls_ctx_handshake_timeout(const fy_tls_ctx_t *ctx)
{
    return ctx->handshake_timeout_ms;
}

/* ---- transport ---- */

static int ssl_status(tls_transport_t *tt, int r, const char *what)
{
    int err = SSL_get_error(tt->ssl, r);
    switch (err) {
    case SSL_ERROR_WANT_READ:
        tt->t.want = FY_WANT_READ;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        tt->t.want = FY_WANT_WRITE;
        return 0;
    case SSL_ERROR_ZERO_RETURN:
        return FY_EEOF;
    case SSL_ERROR_SYSCALL:
        ERR_clear_error();
        return errno ? -errno : FY_EEOF;
    default: {
        unsigned long e = ERR_peek_last_error();
        char buf[256];
        ERR_error_string_n(e, buf, sizeof buf);
        fy_info("tls %s failed: %s", what, buf);
        ERR_clear_error();
        return FY_ETLS;
    }
    }
}

/* Plain HTTP on a TLS port: a TLS connection starts with a handshake record (0x16), an HTTP
 * request with a method's letter. Look at the first byte without taking it; for a
 * letter, answer 400 in clear text (as nginx does) and fail the handshake. Returns 1 (TLS:
 * go on), 0 (nothing yet) or a negative error. */
static int peek_plain_http(tls_transport_t *tt)
{
    unsigned char b;
    ssize_t n = recv(tt->t.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        tt->t.want = FY_WANT_READ;
        return 0;
    }
    if (n < 0 && errno == EINTR) return 0;
    if (n < 0) return -errno;
    if (n == 0) return FY_EEOF;
    tt->peek_plain = false;
    if (!((b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z'))) return 1; /* TLS is 0x16 */
    static const char resp[] = "HTTP/1.1 400 Bad Request\r\n"
                               "Server: ferry\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 42\r\n"
                               "Connection: close\r\n"
                               "\r\n"
                               "plain HTTP request sent to an HTTPS port\r\n";
    /* best effort: a fresh socket's send buffer takes it whole */
    if (send(tt->t.fd, resp, sizeof resp - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) ERR_clear_error();
    fy_info("tls: plain HTTP request sent to an HTTPS port: answered 400");
    shutdown(tt->t.fd, SHUT_WR);
    return FY_ETLS;
}

static int tls_handshake(fy_transport_t *t)
{
    tls_transport_t *tt = (tls_transport_t *)t;
    if (tt->peek_plain) {
        int r = peek_plain_http(tt);
        if (r <= 0) return r;
    }
    ERR_clear_error();
    int r = CHARGE(tt, SSL_do_handshake(tt->ssl));
    if (r == 1) {
        fy_counter_inc(fy_cid_tls_handshakes[SSL_session_reused(tt->ssl) ? FY_CTLS_RESUMED : 0]);
        const unsigned char *p;
        unsigned len;
        SSL_get0_alpn_selected(tt->ssl, &p, &len);
        t->alpn = NULL;
        if (len == 8 && (memcmp(p, "http/1.1", 8) == 0 || memcmp(p, "http/1.0", 8) == 0))
            t->alpn = "http/1.1"; /* http/1.0: served by the same codec (alpn_select) */
        else if (len == 2 && memcmp(p, "h2", 2) == 0)
            t->alpn = "h2";
        t->sni = SSL_get_servername(tt->ssl, TLSEXT_NAMETYPE_host_name);
        return 1;
    }
    r = ssl_status(tt, r, "handshake");
    if (r < 0) fy_counter_inc(fy_cid_tls_handshakes[FY_CTLS_FAILED]);
    return r;
}

static ssize_t tls_read(fy_transport_t *t, void *buf, size_t len)
{
    tls_transport_t *tt = (tls_transport_t *)t;
    size_t n = 0;
    /* the error queue is kept empty by ssl_status(): no ERR_clear_error per call (~900
       instructions each) */
    int r = CHARGE(tt, SSL_read_ex(tt->ssl, buf, len, &n));
    if (r == 1) return (ssize_t)n;
    return ssl_status(tt, 0, "read");
}

/* Contract (core/transport.h): after a 0 return, the next call starts with the same bytes. */
static ssize_t tls_writev(fy_transport_t *t, const struct iovec *iov, int iovcnt)
{
    tls_transport_t *tt = (tls_transport_t *)t;
    if (tt->staged == 0) {
        size_t total = 0;
        for (int i = 0; i < iovcnt; i++) total += iov[i].iov_len;
        if (iovcnt == 1 || total == 0) {
            /* one buffer: write it straight from the caller's memory */
            size_t n = 0;
            size_t len = iov[0].iov_len > 16384 ? 16384 : iov[0].iov_len;
            if (CHARGE(tt, SSL_write_ex(tt->ssl, iov[0].iov_base, len, &n)) == 1) return (ssize_t)n;
            return ssl_status(tt, 0, "write");
        }
        if (!tt->staging) tt->staging = staging_get();
        for (int i = 0; i < iovcnt && tt->staged < 16384; i++) {
            size_t l = iov[i].iov_len;
            if (l > 16384 - tt->staged) l = 16384 - tt->staged;
            memcpy(tt->staging + tt->staged, iov[i].iov_base, l);
            tt->staged += l;
        }
    }
    size_t n = 0;
    if (CHARGE(tt, SSL_write_ex(tt->ssl, tt->staging, tt->staged, &n)) == 1) {
        tt->staged = 0;
        staging_put(tt->staging); /* an idle connection holds none */
        tt->staging = NULL;
        return (ssize_t)n;
    }
    return ssl_status(tt, 0, "write");
}

static size_t tls_pending(fy_transport_t *t)
{
    tls_transport_t *tt = (tls_transport_t *)t;
    return SSL_has_pending(tt->ssl) ? 1 : 0;
}

static int tls_shutdown(fy_transport_t *t)
{
    tls_transport_t *tt = (tls_transport_t *)t;
    ERR_clear_error();
    if (SSL_is_init_finished(tt->ssl)) CHARGE(tt, SSL_shutdown(tt->ssl));
    ERR_clear_error();
    return shutdown(t->fd, SHUT_WR) < 0 ? -errno : 0;
}

static void tls_destroy(fy_transport_t *t)
{
    tls_transport_t *tt = (tls_transport_t *)t;
    SSL_free(tt->ssl);
    staging_put(tt->staging);
    free(tt);
}

/* BIO callback on the socket BIO: notes whether the last read drained the socket. */
static long track_cb(BIO *b, int oper, const char *argp, size_t len, int argi, long argl, int ret,
                     size_t *processed)
{
    (void)argp, (void)argi, (void)argl;
    if (oper == (BIO_CB_READ | BIO_CB_RETURN)) {
        tls_transport_t *tt = (tls_transport_t *)BIO_get_callback_arg(b);
        tt->short_read = ret > 0 && processed && *processed < len;
    }
    return ret;
}

void fy_tls_track_reads(fy_transport_t *t)
{
    tls_transport_t *tt = (tls_transport_t *)t;
    BIO *b = SSL_get_rbio(tt->ssl);
    if (!b) return;
    BIO_set_callback_arg(b, (char *)tt);
    BIO_set_callback_ex(b, track_cb);
}

bool fy_tls_read_drained(const fy_transport_t *t)
{
    const tls_transport_t *tt = (const tls_transport_t *)t;
    return tt->short_read && !SSL_has_pending(tt->ssl);
}

static const struct fy_transport_ops tls_ops;

/* The socket BIO of server connections: OpenSSL 3.0 asks its BIO ~12 ctrl questions per
 * record (kTLS? pending? flush?), each through BIO_s_socket's general ctrl; these answer
 * them at once, and read and write are one syscall each, as there. */
static int fbio_read(BIO *b, char *buf, int len)
{
    int fd = (int)(intptr_t)BIO_get_data(b);
    ssize_t n = recv(fd, buf, (size_t)len, 0);
    BIO_clear_retry_flags(b);
    if (n > 0) return (int)n;
    if (n == 0) {
        BIO_set_flags(b, BIO_FLAGS_IN_EOF);
        return 0;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_read(b);
    return -1;
}

static int fbio_write(BIO *b, const char *buf, int len)
{
    int fd = (int)(intptr_t)BIO_get_data(b);
    ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
    BIO_clear_retry_flags(b);
    if (n >= 0) return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_write(b);
    return -1;
}

static long fbio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_C_GET_FD:
        if (ptr) *(int *)ptr = (int)(intptr_t)BIO_get_data(b);
        return (long)(intptr_t)BIO_get_data(b);
    case BIO_CTRL_EOF:
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    default:
        return 0; /* kTLS, pending, push/pop, close flags: none here */
    }
}

static int fbio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *fbio_method;

static void fbio_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "ferry socket");
    if (!m) return;
    BIO_meth_set_read(m, fbio_read);
    BIO_meth_set_write(m, fbio_write);
    BIO_meth_set_ctrl(m, fbio_ctrl);
    BIO_meth_set_create(m, fbio_create);
    fbio_method = m;
}

/* fd as the SSL's BIO (not owned: the codec closes it), or SSL_set_fd's if none could be made */
static void set_fd(SSL *ssl, int fd)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fbio_method_init);
    BIO *b = fbio_method ? BIO_new(fbio_method) : NULL;
    if (!b) {
        SSL_set_fd(ssl, fd);
        return;
    }
    BIO_set_data(b, (void *)(intptr_t)fd);
    SSL_set_bio(ssl, b, b);
}

void fy_tls_transport_idle(fy_transport_t *t)
{
    if (t->ops != &tls_ops) return;
    tls_transport_t *tt = (tls_transport_t *)t;
    if (tt->staged == 0 && tt->staging) {
        staging_put(tt->staging);
        tt->staging = NULL;
    }
    /* refused (0) while a record is half read or written */
    CHARGE(tt, SSL_free_buffers(tt->ssl));
}

size_t fy_tls_transport_mem(const fy_transport_t *t)
{
    if (t->ops != &tls_ops) return 0;
    const tls_transport_t *tt = (const tls_transport_t *)t;
    return sizeof *tt + (tt->mem > 0 ? (size_t)tt->mem : 0) + (tt->staging ? 16384 : 0);
}

static const struct fy_transport_ops tls_ops = {
    .name = "tls",
    .handshake = tls_handshake,
    .read = tls_read,
    .writev = tls_writev,
    .sendfile = NULL,
    .pending = tls_pending,
    .shutdown = tls_shutdown,
    .destroy = tls_destroy,
};

fy_transport_t *fy_tls_transport_new(fy_tls_ctx_t *ctx, int fd)
{
    tls_transport_t *tt = calloc(1, sizeof *tt);
    if (!tt) return NULL;
    tt->ssl = CHARGE(tt, SSL_new(ctx->dflt));
    if (!tt->ssl) {
        free(tt);
        return NULL;
    }
    set_fd(tt->ssl, fd);
    SSL_set_accept_state(tt->ssl);
    tt->peek_plain = ctx->alpn_len > 0; /* an HTTP listener, not a layer-4 termination */
    tt->t.ops = &tls_ops;
    tt->t.fd = fd;
    tt->t.is_tls = true;
    return &tt->t;
}

fy_transport_t *fy_tls_transport_from_ssl(SSL *ssl, int fd)
{
    tls_transport_t *tt = calloc(1, sizeof *tt);
    if (!tt) {
        SSL_free(ssl);
        return NULL;
    }
    tt->ssl = ssl;
    tt->t.ops = &tls_ops;
    tt->t.fd = fd;
    tt->t.is_tls = true;
    tls_handshake(&tt->t); /* fills alpn and sni of a finished handshake */
    return &tt->t;
}

/* ---- client side ---- */

struct fy_tls_client_ctx {
    SSL_CTX *ctx;
    bool insecure;
};

fy_tls_client_ctx_t *fy_tls_client_ctx_new(const char *ca, bool insecure, const char *cert,
                                           const char *key)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* released when empty, as on the server side: an idle pooled origin connection too */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn - 1);
    if (!insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        int ok = ca ? SSL_CTX_load_verify_locations(ctx, ca, NULL)
                    : SSL_CTX_set_default_verify_paths(ctx);
        if (ok != 1) {
            fy_tls_log_errors(FY_LOG_EMERG, ca ? ca : "system CA store");
            fy_log(FY_LOG_EMERG, "cannot load CA certificates from %s", ca ? ca : "the system");
            SSL_CTX_free(ctx);
            return NULL;
        }
    }
    if (cert && (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
                 SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
                 SSL_CTX_check_private_key(ctx) != 1)) {
        fy_tls_log_errors(FY_LOG_EMERG, cert);
        fy_log(FY_LOG_EMERG, "cannot use client certificate %s with key %s", cert, key);
        SSL_CTX_free(ctx);
        return NULL;
    }
    fy_tls_client_ctx_t *c = fy_xcalloc(1, sizeof *c);
    c->ctx = ctx;
    c->insecure = insecure;
    return c;
}

void fy_tls_client_ctx_free(fy_tls_client_ctx_t *c)
{
    if (!c) return;
    SSL_CTX_free(c->ctx);
    free(c);
}

void fy_tls_client_ctx_alpn_h2(fy_tls_client_ctx_t *c)
{
    static const unsigned char alpn[] = "\x02h2";
    SSL_CTX_set_alpn_protos(c->ctx, alpn, sizeof alpn - 1);
}

fy_transport_t *fy_tls_client_transport_new(fy_tls_client_ctx_t *ctx, int fd, const char *sni)
{
    tls_transport_t *tt = calloc(1, sizeof *tt);
    if (!tt) return NULL;
    tt->ssl = SSL_new(ctx->ctx);
    if (!tt->ssl) {
        free(tt);
        return NULL;
    }
    SSL_set_fd(tt->ssl, fd);
    SSL_set_connect_state(tt->ssl);
    /* SNI only for names, not IP literals (RFC 6066 §3) */
    bool is_ip = strspn(sni, "0123456789.") == strlen(sni) || strchr(sni, ':');
    if (!is_ip) SSL_set_tlsext_host_name(tt->ssl, sni);
    if (!ctx->insecure) SSL_set1_host(tt->ssl, sni); /* checks DNS names and IP addresses */
    tt->t.ops = &tls_ops;
    tt->t.fd = fd;
    tt->t.is_tls = true;
    return &tt->t;
}
