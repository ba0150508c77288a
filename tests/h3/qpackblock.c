/* Test helper for tests/test_h3_qpack.py: an HTTP/3 client that misbehaves on purpose, built
 * on the QUIC layer alone (src/quic) so that it can write any bytes on any stream.
 *
 *   qpackblock ADDR PORT N
 *
 * Opens the control stream (empty SETTINGS), then N request streams whose HEADERS frame
 * references dynamic-table entry 0 (Required Insert Count 1) that nobody inserted yet, so each
 * blocks at the server's QPACK decoder. Once the server acknowledged all of them (it has read
 * them), it inserts the entry on the QPACK encoder stream, which unblocks them.
 *
 * Prints one line and exits 0: "ANSWERED N" when every request stream got an answer (data or
 * a reset) after the insert, "CLOSED APP|TRANSPORT 0xCODE" when the server closed the
 * connection, "TIMEOUT" after 45 s, "GONE" when the connection ended without a close. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/loop.h"
#include "quic/quic.h"

static fy_loop_t loop;
static fy_quic_conn_t *qc;
static int n, nacked, nanswered;
static fy_quic_stream_t **reqs;
static bool *answered, inserted, printed;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    if (printed) return;
    printed = true;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static int req_index(fy_quic_stream_t *s)
{
    for (int i = 0; i < n; i++)
        if (reqs[i] == s) return i;
    return -1;
}

static void answer(fy_quic_stream_t *s)
{
    int i = req_index(s);
    if (i < 0 || answered[i]) return;
    answered[i] = true;
    if (++nanswered == n) {
        say("ANSWERED %d\n", n);
        fy_quic_conn_close(qc, 0x100, "done");
    }
}

static void *app_open(fy_quic_conn_t *c, void *ud)
{
    (void)ud;
    qc = c;
    static const uint8_t ctrl[] = {0x00, 0x04, 0x00}; /* control stream, empty SETTINGS */
    fy_quic_stream_t *cs = fy_quic_open_uni(c);
    if (!cs) return NULL;
    fy_quic_stream_write(c, cs, ctrl, sizeof ctrl);
    /* HEADERS: Required Insert Count 1 (encoded 2 with MaxEntries 128), Delta Base 0, one
       indexed field line: dynamic table, relative index 0 */
    static const uint8_t hdr[] = {0x01, 0x03, 0x02, 0x00, 0x80};
    for (int i = 0; i < n; i++) {
        reqs[i] = fy_quic_open_bidi(c);
        if (!reqs[i]) return NULL;
        fy_quic_stream_write(c, reqs[i], hdr, sizeof hdr);
    }
    return &loop;
}

static void insert_entry(void)
{
    /* encoder stream: Set Dynamic Table Capacity 256, Insert With Literal Name "x-a: b" */
    static const uint8_t enc[] = {0x02, 0x3f, 0xe1, 0x01, 0x43, 'x', '-', 'a', 0x01, 'b'};
    fy_quic_stream_t *es = fy_quic_open_uni(qc);
    if (!es) {
        say("NO-UNI-STREAM\n");
        fy_quic_conn_close(qc, 0x100, "done");
        return;
    }
    fy_quic_stream_write(qc, es, enc, sizeof enc);
    inserted = true;
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
    if ((len || fin) && req_index(s) >= 0) answer(s);
    return 0;
}

static void app_reset(void *app, fy_quic_stream_t *s, uint64_t code)
{
    (void)app;
    (void)code;
    answer(s);
}

static void app_acked(void *app, fy_quic_stream_t *s)
{
    (void)app;
    if (inserted || req_index(s) < 0 || fy_quic_stream_buffered(s)) return;
    if (++nacked == n) insert_entry();
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
    if (fy_quic_conn_peer_close(qc, &code, &is_app))
        say("CLOSED %s 0x%llx\n", is_app ? "APP" : "TRANSPORT", (unsigned long long)code);
    else
        say("GONE\n");
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
    say("TIMEOUT\n");
    fy_loop_stop(&loop);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: qpackblock ADDR PORT N\n");
        return 2;
    }
    n = (int)strtol(argv[3], NULL, 10);
    if (n < 1 || n > 90) return 2;
    reqs = calloc((size_t)n, sizeof *reqs);
    answered = calloc((size_t)n, sizeof *answered);
    fy_quic_conf_t conf = {.cc = FY_QUIC_CC_CUBIC,
                           .idle_timeout_ms = 30000,
                           .handshake_timeout_ms = 10000,
                           .max_streams = 100,
                           .stream_window = 256 * 1024,
                           .connection_window = 4 << 20,
                           .send_buffer = 256 * 1024,
                           .max_connections = 1};
    fy_quic_client_opts_t o = {.conf = &conf, .insecure = true, .name = "qpackblock"};
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)strtol(argv[2], NULL, 10))};
    if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) return 2;
    if (fy_loop_init(&loop) < 0) return 1;
    fy_loop_update_time(&loop);
    fy_timer_t t;
    fy_timer_init(&t, on_timeout, NULL);
    fy_timer_start(&loop, &t, 45000);
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
    free(reqs);
    free(answered);
    return printed ? 0 : 1;
}
