/* libFuzzer driver: whole QUIC datagrams against a real server endpoint (quic/quic.c with
 * ngtcp2 and GnuTLS, a self-signed certificate, a loopback UDP socket), to find inputs that
 * reach an assertion inside libngtcp2 or GnuTLS.
 *
 * The input is a list of records `KIND LEN_HI LEN_LO BYTES[LEN]`. KIND bit 0 clear: BYTES are
 * sent as one datagram as they are. Bit 0 set: BYTES are the plaintext frames of a client
 * Initial packet that the driver protects (RFC 9001 §5, the keys of a fixed client DCID) with
 * packet number = record index, so the mutations reach ngtcp2's frame decoder and GnuTLS's
 * ClientHello parser instead of failing decryption; bit 1 clear also pads the datagram to
 * 1200 bytes. Each input gets a fresh endpoint; after each datagram the loop runs a few turns
 * (no sleeping: an always-readable eventfd counts the turns), and the server's answers are
 * drained from the client socket. Prints nothing. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/loop.h"
#include "quic/quic.h"
#include "tls/tls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t DCID[8] = {0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08};
static const uint8_t SCID[8] = {0xf0, 0x67, 0xa5, 0x50, 0x2a, 0x42, 0x62, 0xb5};

static struct {
    bool ready, failed;
    fy_loop_t loop;
    fy_quic_server_t *qs;
    fy_quic_conf_t conf;
    int cli;
    fy_io_t tick;
    int turns;
    uint8_t key[16], iv[12], hp[16];
} F;

static void *app_open(fy_quic_conn_t *qc, void *ud)
{
    (void)qc;
    (void)ud;
    return &F;
}
static void app_stream_open(void *app, fy_quic_stream_t *s)
{
    (void)app;
    (void)s;
}
static int app_recv(void *app, fy_quic_stream_t *s, const uint8_t *p, size_t n, bool fin)
{
    (void)app;
    (void)s;
    (void)p;
    (void)n;
    (void)fin;
    return 0;
}
static void app_reset(void *app, fy_quic_stream_t *s, uint64_t code)
{
    (void)app;
    (void)s;
    (void)code;
}
static void app_acked(void *app, fy_quic_stream_t *s)
{
    (void)app;
    (void)s;
}
static void app_stream_close(void *app, fy_quic_stream_t *s, uint64_t code)
{
    (void)app;
    (void)s;
    (void)code;
}
static void app_close(void *app)
{
    (void)app;
}

static const fy_quic_app_ops_t ops = {
    .open = app_open,
    .stream_open = app_stream_open,
    .recv = app_recv,
    .reset = app_reset,
    .acked = app_acked,
    .stream_close = app_stream_close,
    .close = app_close,
};

static void on_tick(fy_io_t *io, uint32_t events)
{
    (void)io;
    (void)events;
    if (--F.turns <= 0) fy_loop_stop(&F.loop);
}

static void run_turns(int n)
{
    F.turns = n;
    F.loop.stop = false;
    fy_loop_run(&F.loop);
}

/* HKDF-Expand-Label (RFC 8446 §7.1) with SHA-256, one block at most. */
static void expand_label(const uint8_t *secret, const char *label, uint8_t *out, size_t len)
{
    uint8_t info[64], t[32];
    size_t ll = strlen(label), k = 0;
    info[k++] = 0;
    info[k++] = (uint8_t)len;
    info[k++] = (uint8_t)(6 + ll);
    memcpy(info + k, "tls13 ", 6);
    k += 6;
    memcpy(info + k, label, ll);
    k += ll;
    info[k++] = 0;
    info[k++] = 1;
    unsigned tl = 0;
    HMAC(EVP_sha256(), secret, 32, info, k, t, &tl);
    memcpy(out, t, len);
}

static void derive_keys(void)
{
    static const uint8_t salt[20] = {0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17,
                                     0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a};
    uint8_t initial[32], client[32];
    unsigned l = 0;
    HMAC(EVP_sha256(), salt, sizeof salt, DCID, sizeof DCID, initial, &l);
    expand_label(initial, "client in", client, 32);
    expand_label(client, "quic key", F.key, 16);
    expand_label(client, "quic iv", F.iv, 12);
    expand_label(client, "quic hp", F.hp, 16);
}

/* A protected client Initial around `pt` (frames); returns its length in `out` (>= 1300). */
static size_t protect(const uint8_t *pt, size_t ptlen, uint32_t pn, bool pad, uint8_t *out)
{
    uint8_t plain[1400];
    if (ptlen > 1200) ptlen = 1200;
    memcpy(plain, pt, ptlen);
    size_t hdrfix = 1 + 4 + 1 + 8 + 1 + 8 + 1; /* first, version, dcid, scid, token length 0 */
    if (pad && hdrfix + 2 + 4 + ptlen + 16 < 1200) {
        size_t add = 1200 - (hdrfix + 2 + 4 + ptlen + 16);
        memset(plain + ptlen, 0, add);
        ptlen += add;
    }
    if (ptlen < 4) { /* header protection samples 16 bytes 4 after the packet number */
        memset(plain + ptlen, 0, 4 - ptlen);
        ptlen = 4;
    }
    size_t k = 0;
    out[k++] = 0xc3; /* Initial, 4-byte packet number */
    out[k++] = 0;
    out[k++] = 0;
    out[k++] = 0;
    out[k++] = 1;
    out[k++] = 8;
    memcpy(out + k, DCID, 8);
    k += 8;
    out[k++] = 8;
    memcpy(out + k, SCID, 8);
    k += 8;
    out[k++] = 0;
    size_t length = 4 + ptlen + 16;
    out[k++] = (uint8_t)(0x40 | (length >> 8));
    out[k++] = (uint8_t)length;
    size_t pnoff = k;
    out[k++] = (uint8_t)(pn >> 24);
    out[k++] = (uint8_t)(pn >> 16);
    out[k++] = (uint8_t)(pn >> 8);
    out[k++] = (uint8_t)pn;
    uint8_t nonce[12];
    memcpy(nonce, F.iv, 12);
    for (int i = 0; i < 4; i++) nonce[8 + i] ^= out[pnoff + (size_t)i];
    EVP_CIPHER_CTX *cx = EVP_CIPHER_CTX_new();
    int ol = 0;
    EVP_EncryptInit_ex(cx, EVP_aes_128_gcm(), NULL, F.key, nonce);
    EVP_EncryptUpdate(cx, NULL, &ol, out, (int)k);
    EVP_EncryptUpdate(cx, out + k, &ol, plain, (int)ptlen);
    EVP_EncryptFinal_ex(cx, out + k + ptlen, &ol);
    EVP_CIPHER_CTX_ctrl(cx, EVP_CTRL_GCM_GET_TAG, 16, out + k + ptlen);
    EVP_CIPHER_CTX_free(cx);
    size_t total = k + ptlen + 16;
    uint8_t mask[32];
    cx = EVP_CIPHER_CTX_new();
    EVP_EncryptInit_ex(cx, EVP_aes_128_ecb(), NULL, F.hp, NULL);
    EVP_EncryptUpdate(cx, mask, &ol, out + pnoff + 4, 16);
    EVP_CIPHER_CTX_free(cx);
    out[0] ^= mask[0] & 0x0f;
    for (int i = 0; i < 4; i++) out[pnoff + (size_t)i] ^= mask[1 + i];
    return total;
}

static void setup(void)
{
    F.ready = true;
    fy_log_min_level = getenv("FUZZ_QUIC_VERBOSE") ? FY_LOG_INFO : FY_LOG_ERROR;
    char dir[] = "/tmp/fuzz-quic-XXXXXX", cert[256], key[256];
    if (!mkdtemp(dir) || fy_tls_selfsigned_ensure(dir, cert, key, sizeof cert) != 0 ||
        fy_loop_init(&F.loop) < 0) {
        F.failed = true;
        return;
    }
    fy_loop_update_time(&F.loop);
    F.conf = (fy_quic_conf_t){.cc = FY_QUIC_CC_CUBIC,
                              .idle_timeout_ms = 30000,
                              .handshake_timeout_ms = 10000,
                              .max_streams = 100,
                              .stream_window = 256 * 1024,
                              .connection_window = 4 << 20,
                              .send_buffer = 256 * 1024,
                              .max_datagram_size = 1200,
                              .qpack_table_capacity = 4096,
                              .qpack_blocked_streams = 16,
                              .max_connections = 100};
    const char *certs[] = {cert}, *keys[] = {key};
    F.qs = fy_quic_server_new(&F.conf, certs, keys, 1, "fuzz");
    unlink(cert); /* loaded: leave nothing behind in /tmp */
    unlink(key);
    rmdir(dir);
    F.cli = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int tfd = eventfd(1, EFD_NONBLOCK); /* stays readable: one callback per loop turn */
    if (!F.qs || F.cli < 0 || bind(F.cli, (struct sockaddr *)&a, sizeof a) != 0 || tfd < 0) {
        F.failed = true;
        return;
    }
    F.tick.fd = tfd;
    F.tick.cb = on_tick;
    fy_io_set(&F.loop, &F.tick, EPOLLIN);
    derive_keys();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!F.ready) setup();
    if (F.failed) return 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = fy_quic_socket((struct sockaddr *)&sa, sizeof sa, "fuzz");
    if (fd < 0) return 0;
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    fy_quic_endpoint_t *ep = fy_quic_endpoint_new(&F.loop, F.qs, fd, &ops, NULL);
    if (!ep) return 0;
    size_t at = 0;
    uint32_t pn = 0;
    uint8_t dg[1500], junk[2048];
    while (at + 3 <= size && pn < 64) {
        uint8_t kind = data[at];
        size_t len = (size_t)data[at + 1] << 8 | data[at + 2];
        at += 3;
        if (len > size - at) len = size - at;
        const uint8_t *p = data + at;
        at += len;
        size_t n;
        if (kind & 1) {
            n = protect(p, len, pn, !(kind & 2), dg);
        } else {
            n = len < sizeof dg ? len : sizeof dg;
            memcpy(dg, p, n);
        }
        pn++;
        sendto(F.cli, dg, n, 0, (struct sockaddr *)&sa, sizeof sa);
        fy_loop_update_time(&F.loop);
        run_turns(3);
        while (recv(F.cli, junk, sizeof junk, 0) > 0) {
        }
    }
    fy_quic_endpoint_free(ep);
    run_turns(2); /* the deferred frees */
    while (recv(F.cli, junk, sizeof junk, 0) > 0) {
    }
    return 0;
}
