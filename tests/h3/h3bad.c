/* Test helper for tests/test_h3_hardening.py: an HTTP/3 client that sends what a correct one
 * never does, built on the QUIC layer alone (src/quic) so that it can put any bytes anywhere.
 *
 *   h3bad ADDR PORT keyupdate-1rtt | keyupdate-handshake
 *       Once the handshake completed, sends a TLS KeyUpdate message (forbidden in QUIC,
 *       RFC 9001 §6) in a CRYPTO frame of 1-RTT packets, or in the Handshake space right
 *       after the client's Finished. Prints "CLOSED APP|TRANSPORT 0xCODE" when the server
 *       closed the connection.
 *   h3bad ADDR PORT crypto-1rtt|crypto-handshake HEX
 *       The same with the bytes given in hex (any TLS handshake messages).
 *   h3bad ADDR PORT req CASE...
 *       Opens the control stream (empty SETTINGS), then one request stream per CASE (all at
 *       once, in order) with one HEADERS frame (QPACK literals only) and FIN. Prints one line
 *       per case: "CASE ANSWERED" (response bytes came) or "CASE RESET 0xCODE" (the server
 *       reset the stream or asked us to stop sending), then closes the connection.
 *
 * Cases: ok, ok-host, dup-method, dup-path, unknown-pseudo, response-pseudo,
 * pseudo-after-regular, no-authority, no-method, no-scheme, no-path, empty-authority,
 * authority-host-differ, connect-no-authority, connect-host-only.
 *
 * "TIMEOUT" after 20 s, "GONE" when the connection ended without a close. Exits 0 once it
 * printed its answer. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/loop.h"
#include "quic/quic.h"

#define MAXREQ 32

static fy_loop_t loop;
static fy_quic_conn_t *qc;
static int mode; /* 1: KeyUpdate at Handshake level, 2: at 1-RTT, 3: requests */
static int n, ndone;
static const char *names[MAXREQ];
static fy_quic_stream_t *reqs[MAXREQ];
static bool done[MAXREQ], printed;
static uint8_t crypto[512];
static size_t ncrypto;

typedef struct fl {
    const char *n, *v;
} fl_t;

typedef struct rcase {
    const char *name;
    fl_t f[8];
} rcase_t;

static const rcase_t cases[] = {
    {"ok", {{":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {":authority", "localhost"}}},
    {"ok-host", {{":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {"host", "localhost"}}},
    {"dup-method",
     {{":method", "GET"},
      {":method", "GET"},
      {":scheme", "https"},
      {":path", "/"},
      {":authority", "localhost"}}},
    {"dup-path",
     {{":method", "GET"},
      {":scheme", "https"},
      {":path", "/"},
      {":path", "/x"},
      {":authority", "localhost"}}},
    {"unknown-pseudo",
     {{":method", "GET"},
      {":scheme", "https"},
      {":path", "/"},
      {":authority", "localhost"},
      {":foo", "bar"}}},
    {"response-pseudo",
     {{":method", "GET"},
      {":scheme", "https"},
      {":path", "/"},
      {":authority", "localhost"},
      {":status", "200"}}},
    {"pseudo-after-regular",
     {{":method", "GET"},
      {":scheme", "https"},
      {"user-agent", "h3bad"},
      {":path", "/"},
      {":authority", "localhost"}}},
    {"no-authority", {{":method", "GET"}, {":scheme", "https"}, {":path", "/"}}},
    {"no-method", {{":scheme", "https"}, {":path", "/"}, {":authority", "localhost"}}},
    {"no-scheme", {{":method", "GET"}, {":path", "/"}, {":authority", "localhost"}}},
    {"no-path", {{":method", "GET"}, {":scheme", "https"}, {":authority", "localhost"}}},
    {"empty-authority",
     {{":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {":authority", ""}}},
    {"authority-host-differ",
     {{":method", "GET"},
      {":scheme", "https"},
      {":path", "/"},
      {":authority", "localhost"},
      {"host", "other.example"}}},
    {"connect-no-authority", {{":method", "CONNECT"}}},
    {"connect-host-only", {{":method", "CONNECT"}, {"host", "localhost:443"}}},
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* QPACK prefixed integer (RFC 9204 §4.1.1) with `bits` prefix bits under `flags`. */
static size_t qint(uint8_t *o, uint8_t flags, int bits, size_t v)
{
    size_t max = ((size_t)1 << bits) - 1, k = 0;
    if (v < max) {
        o[k++] = (uint8_t)(flags | v);
        return k;
    }
    o[k++] = (uint8_t)(flags | max);
    v -= max;
    while (v >= 128) {
        o[k++] = (uint8_t)(0x80 | (v & 0x7f));
        v >>= 7;
    }
    o[k++] = (uint8_t)v;
    return k;
}

/* One HEADERS frame: field section prefix 0/0, then literal field lines with literal names. */
static size_t headers_frame(const rcase_t *rc, uint8_t *out)
{
    uint8_t sec[1024];
    size_t k = 0;
    sec[k++] = 0;
    sec[k++] = 0;
    for (int i = 0; i < 8 && rc->f[i].n; i++) {
        size_t nl = strlen(rc->f[i].n), vl = strlen(rc->f[i].v);
        k += qint(sec + k, 0x20, 3, nl);
        memcpy(sec + k, rc->f[i].n, nl);
        k += nl;
        k += qint(sec + k, 0x00, 7, vl);
        memcpy(sec + k, rc->f[i].v, vl);
        k += vl;
    }
    size_t o = 0;
    out[o++] = 0x01;                       /* HEADERS */
    out[o++] = (uint8_t)(0x40 | (k >> 8)); /* 2-byte varint length */
    out[o++] = (uint8_t)k;
    memcpy(out + o, sec, k);
    return o + k;
}

static int req_index(fy_quic_stream_t *s)
{
    for (int i = 0; i < n; i++)
        if (reqs[i] == s) return i;
    return -1;
}

static void answer(fy_quic_stream_t *s, const char *what, uint64_t code)
{
    int i = req_index(s);
    if (i < 0 || done[i]) return;
    done[i] = true;
    if (code != UINT64_MAX)
        say("%s %s 0x%llx\n", names[i], what, (unsigned long long)code);
    else
        say("%s %s\n", names[i], what);
    if (++ndone == n) {
        printed = true;
        fy_quic_conn_close(qc, 0x100, "done");
    }
}

static void *app_open(fy_quic_conn_t *c, void *ud)
{
    (void)ud;
    qc = c;
    if (mode == 1 || mode == 2) {
        if (fy_quic_conn_send_crypto(c, mode, crypto, ncrypto) != 0) {
            say("CANNOT-SEND\n");
            printed = true;
        }
        return &loop;
    }
    static const uint8_t ctrl[] = {0x00, 0x04, 0x00}; /* control stream, empty SETTINGS */
    fy_quic_stream_t *cs = fy_quic_open_uni(c);
    if (!cs) return NULL;
    fy_quic_stream_write(c, cs, ctrl, sizeof ctrl);
    for (int i = 0; i < n; i++) {
        const rcase_t *rc = NULL;
        for (size_t j = 0; j < sizeof cases / sizeof cases[0]; j++)
            if (!strcmp(cases[j].name, names[i])) rc = &cases[j];
        uint8_t fr[1100];
        size_t len = headers_frame(rc, fr);
        reqs[i] = fy_quic_open_bidi(c);
        if (!reqs[i]) return NULL;
        fy_quic_stream_write(c, reqs[i], fr, len);
        fy_quic_stream_finish(c, reqs[i]);
    }
    return &loop;
}

static void app_stream_open(void *app, fy_quic_stream_t *s)
{
    (void)app;
    (void)s;
}

static int app_recv(void *app, fy_quic_stream_t *s, const uint8_t *p, size_t len, bool fin)
{
    (void)app;
    (void)p;
    fy_quic_stream_consumed(qc, s, len);
    if (len)
        answer(s, "ANSWERED", UINT64_MAX);
    else if (fin)
        answer(s, "FIN-WITHOUT-DATA", UINT64_MAX);
    return 0;
}

static void app_reset(void *app, fy_quic_stream_t *s, uint64_t code)
{
    (void)app;
    answer(s, "RESET", code);
}

static void app_acked(void *app, fy_quic_stream_t *s)
{
    (void)app;
    (void)s;
}

static void app_stream_close(void *app, fy_quic_stream_t *s, uint64_t code)
{
    (void)app;
    (void)code;
    int i = req_index(s);
    if (i >= 0) reqs[i] = NULL;
}

static void app_close(void *app)
{
    (void)app;
    uint64_t code;
    bool is_app;
    if (!printed) {
        if (fy_quic_conn_peer_close(qc, &code, &is_app))
            say("CLOSED %s 0x%llx\n", is_app ? "APP" : "TRANSPORT", (unsigned long long)code);
        else
            say("GONE\n");
        printed = true;
    }
    fy_loop_stop(&loop);
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

static void on_timeout(fy_timer_t *t)
{
    (void)t;
    if (!printed) say("TIMEOUT\n");
    printed = true;
    fy_loop_stop(&loop);
}

static int usage(void)
{
    fprintf(stderr, "usage: h3bad ADDR PORT keyupdate-1rtt|keyupdate-handshake|"
                    "crypto-1rtt HEX|crypto-handshake HEX|req CASE...\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 4) return usage();
    static const uint8_t ku[] = {24, 0, 0, 1, 0}; /* KeyUpdate, update_not_requested */
    if (!strcmp(argv[3], "keyupdate-handshake") || !strcmp(argv[3], "keyupdate-1rtt")) {
        mode = strstr(argv[3], "handshake") ? 1 : 2;
        memcpy(crypto, ku, sizeof ku);
        ncrypto = sizeof ku;
    } else if (!strcmp(argv[3], "crypto-handshake") || !strcmp(argv[3], "crypto-1rtt")) {
        mode = strstr(argv[3], "handshake") ? 1 : 2;
        const char *h = argc > 4 ? argv[4] : "";
        while (h[0] && h[1] && ncrypto < sizeof crypto) {
            unsigned v;
            if (sscanf(h, "%2x", &v) != 1) return usage();
            crypto[ncrypto++] = (uint8_t)v;
            h += 2;
        }
        if (!ncrypto) return usage();
    } else if (!strcmp(argv[3], "req")) {
        mode = 3;
        for (int i = 4; i < argc && n < MAXREQ; i++) {
            bool known = false;
            for (size_t j = 0; j < sizeof cases / sizeof cases[0]; j++)
                if (!strcmp(cases[j].name, argv[i])) known = true;
            if (!known) {
                fprintf(stderr, "h3bad: unknown case '%s'\n", argv[i]);
                return 2;
            }
            names[n++] = argv[i];
        }
        if (n == 0) return usage();
    } else {
        return usage();
    }
    fy_quic_conf_t conf = {.cc = FY_QUIC_CC_CUBIC,
                           .idle_timeout_ms = 30000,
                           .handshake_timeout_ms = 10000,
                           .max_streams = 100,
                           .stream_window = 256 * 1024,
                           .connection_window = 4 << 20,
                           .send_buffer = 256 * 1024,
                           .max_connections = 1};
    fy_quic_client_opts_t o = {.conf = &conf, .insecure = true, .name = "h3bad"};
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)strtol(argv[2], NULL, 10))};
    if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) return 2;
    if (fy_loop_init(&loop) < 0) return 1;
    fy_loop_update_time(&loop);
    fy_timer_t t;
    fy_timer_init(&t, on_timeout, NULL);
    fy_timer_start(&loop, &t, 20000);
    if (!fy_quic_connect(&loop, (struct sockaddr *)&sa, sizeof sa, &o, &ops, NULL)) return 1;
    fy_loop_run(&loop);
    fy_timer_stop(&loop, &t);
    fy_defer_t *d;
    while ((d = loop.defer_head)) {
        loop.defer_head = d->next;
        if (!loop.defer_head) loop.defer_tail = &loop.defer_head;
        d->queued = false;
        d->cb(d);
    }
    fy_loop_destroy(&loop);
    return printed ? 0 : 1;
}
