/* libFuzzer entry for the HTTP/2 client codec (src/h2/h2_client.c): the input is what an
 * origin sends (the seeds start with the server's SETTINGS). A client session opens three
 * streams first (a GET, a POST with a body pulled through read_body with deferrals, and an
 * RFC 8441 extended CONNECT), then the input is fed in pieces whose sizes come from the
 * input's first byte; between pieces the codec's output is drained, some delivered response
 * bytes are consumed, deferred bodies resumed, and one stream is released early. Everything is
 * released and freed at the end, so ASan sees every leak. Prints nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/log.h"
#include "h2/h2_client.h"

typedef struct fstream {
    fy_h2_client_stream_t *s;
    size_t held; /* delivered, not consumed */
    size_t body_left;
    int defer;
    bool done;
} fstream_t;

static void on_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    (void)ud;
    (void)status;
    (void)hs;
    (void)end;
}

static void on_data(void *ud, const char *p, size_t n)
{
    fstream_t *f = ud;
    (void)p;
    f->held += n;
}

static void on_end(void *ud, fy_headers_t *trailers)
{
    fstream_t *f = ud;
    (void)trailers;
    f->done = true;
}

static void on_error(void *ud, int kind, uint64_t code, const char *why)
{
    fstream_t *f = ud;
    (void)kind;
    (void)code;
    (void)why;
    f->done = true;
}

static ssize_t read_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers)
{
    fstream_t *f = ud;
    static fy_header_t tr = {{"x-t", 3}, {"1", 1}};
    static fy_headers_t trs = {&tr, 1, 1};
    if (f->defer++ % 2 == 0) return FY_CLIENT_DEFER;
    if (f->body_left == 0) {
        *trailers = &trs;
        return 0;
    }
    size_t n = len < f->body_left ? len : f->body_left;
    if (n > 1000) n = 1000;
    memset(buf, 'b', n);
    f->body_left -= n;
    return (ssize_t)n;
}

static const fy_client_stream_ops_t sops = {on_head, on_data, on_end, on_error, read_body, NULL};

static void want_send(void *ud)
{
    (void)ud;
}
static void on_settings(void *ud)
{
    (void)ud;
}
static void on_goaway(void *ud)
{
    (void)ud;
}
static const fy_h2_client_conn_ops_t cops = {want_send, on_settings, on_goaway, NULL};

static void drain(fy_h2_client_t *c)
{
    const uint8_t *d;
    for (int i = 0; i < 64 && fy_h2_client_send(c, &d) > 0; i++) {
    }
}

static void req(fy_arena_t *a, fy_headers_t *hs, const char *m, const char *path, const char *proto)
{
    *hs = (fy_headers_t){0};
    FY_HDR_ADD(a, hs, ":method", m, strlen(m));
    FY_HDR_ADD(a, hs, ":scheme", "http", 4);
    FY_HDR_ADD(a, hs, ":authority", "origin", 6);
    FY_HDR_ADD(a, hs, ":path", path, strlen(path));
    if (proto) FY_HDR_ADD(a, hs, ":protocol", proto, strlen(proto));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fy_log_min_level = FY_LOG_ALERT;
    if (size < 1) return 0;
    size_t piece = 1 + data[0] % 64;
    if (data[0] & 0x80) piece = size; /* whole */
    data++;
    size--;
    char first[2048];
    fy_arena_t a;
    fy_arena_init(&a, first, sizeof first, 4096);
    fy_h2_client_t *c = fy_h2_client_new(&cops, NULL, 65536);
    if (!c) abort();
    fstream_t fs[3] = {{0}};
    fs[1].body_left = 70000;
    fy_headers_t hs;
    req(&a, &hs, "GET", "/", NULL);
    fs[0].s = fy_h2_client_submit(c, &hs, false, &a, &sops, &fs[0]);
    req(&a, &hs, "POST", "/up", NULL);
    fs[1].s = fy_h2_client_submit(c, &hs, true, &a, &sops, &fs[1]);
    req(&a, &hs, "CONNECT", "/ws", "websocket");
    fs[2].s = fy_h2_client_submit(c, &hs, true, &a, &sops, &fs[2]);
    drain(c);
    size_t off = 0;
    int round = 0;
    while (off < size) {
        size_t n = size - off < piece ? size - off : piece;
        if (fy_h2_client_recv(c, (const char *)data + off, n) < 0) {
            fy_h2_client_fail_all(c, "fuzz: protocol error");
            break;
        }
        off += n;
        for (int i = 0; i < 3; i++) {
            if (!fs[i].s) continue;
            if (fs[i].held) {
                fy_h2_client_consume(fs[i].s, fs[i].held / 2 + 1);
                fs[i].held /= 2;
            }
            fy_h2_client_resume(fs[i].s);
        }
        if (++round == 3 && fs[2].s) {
            fy_h2_client_release(fs[2].s); /* the owner goes away mid-stream */
            fs[2].s = NULL;
        }
        drain(c);
        (void)fy_h2_client_alive(c);
        (void)fy_h2_client_nstreams(c);
        (void)fy_h2_client_max_streams(c);
        (void)fy_h2_client_can_connect_protocol(c);
    }
    fy_h2_client_goaway(c);
    drain(c);
    for (int i = 0; i < 3; i++)
        if (fs[i].s) fy_h2_client_release(fs[i].s);
    fy_h2_client_free(c, "fuzz: done");
    fy_arena_free(&a);
    fy_h2_client_thread_cleanup();
    return 0;
}
