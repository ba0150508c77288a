/* libFuzzer driver: the HTTP/3 server codec (h3/h3_server.c) over real QUIC. One server
 * endpoint (quic/quic.c, ngtcp2 + GnuTLS, a self-signed certificate, a loopback UDP socket)
 * with a small router (respond on "/", echo on "/echo"); per input our QUIC client on the same
 * loop completes a real handshake and then sends what the input says, so the bytes reach the
 * codec's control-stream, QPACK-stream and request-stream paths, and the CRYPTO guard after
 * the handshake, through ngtcp2 as a hostile client would send them.
 *
 * The input is a list of records `KIND LEN BYTES[LEN]` (LEN one byte):
 *   (KIND & 7) % 6 == 0: a new request stream with BYTES, finished (FIN);
 *            1: a new request stream with BYTES, left open;
 *            2: a new unidirectional stream with BYTES (its first bytes are the stream type);
 *            3: BYTES appended to the last stream opened (FIN when KIND & 8);
 *            4: BYTES as TLS data in CRYPTO frames of 1-RTT packets;
 *            5: BYTES as one DATAGRAM frame.
 * The loop runs until every request stream got its answer (a FIN or a reset) or the
 * connection closed, or at most 50 ms (ngtcp2's pacing and ACK timers need real time);
 * then the client aborts and the server's side is drained. Prints nothing. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/loop.h"
#include "h3/h3_server.h"
#include "handler/echo.h"
#include "handler/respond.h"
#include "http/exchange.h"
#include "http/http_conf.h"
#include "http/router.h"
#include "net/listener_conf.h"
#include "quic/quic.h"
#include "tls/tls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct {
    bool ready, failed;
    fy_loop_t loop;
    fy_router_t router;
    fy_route_t routes[2];
    fy_respond_conf_t respond;
    fy_http_limits_t limits;
    fy_http_ctx_t ctx;
    fy_quic_conf_t conf;
    fy_quic_server_t *qs;
    fy_quic_endpoint_t *ep;
    struct sockaddr_in addr;
    fy_timer_t bound;
    /* this input's client */
    fy_quic_conn_t *qc;
    bool open, closed;
    int nreq, nanswered;
    const uint8_t *in;
    size_t in_len;
} F;

static void on_bound(fy_timer_t *t)
{
    (void)t;
    fy_loop_stop(&F.loop);
}

/* Run the loop until something calls fy_loop_stop, or `ms` at most. */
static void run_for(uint64_t ms)
{
    F.loop.stop = false;
    fy_loop_update_time(&F.loop);
    fy_timer_start(&F.loop, &F.bound, ms);
    fy_loop_run(&F.loop);
    fy_timer_stop(&F.loop, &F.bound);
}

static void answered(fy_quic_stream_t *s)
{
    if (s->app) return; /* counted already */
    s->app = &F;
    if (++F.nanswered >= F.nreq) fy_loop_stop(&F.loop);
}

static void send_input(fy_quic_conn_t *c)
{
    fy_quic_stream_t *last = NULL;
    size_t at = 0;
    while (at + 2 <= F.in_len) {
        uint8_t kind = F.in[at];
        size_t len = F.in[at + 1];
        at += 2;
        if (len > F.in_len - at) len = F.in_len - at;
        const uint8_t *p = F.in + at;
        at += len;
        switch ((kind & 7) % 6) {
        case 0:
        case 1:
            last = fy_quic_open_bidi(c);
            if (!last) break;
            F.nreq++;
            fy_quic_stream_write(c, last, p, len);
            if ((kind & 7) % 6 == 0) fy_quic_stream_finish(c, last);
            break;
        case 2:
            last = fy_quic_open_uni(c);
            if (last) fy_quic_stream_write(c, last, p, len);
            break;
        case 3:
            if (!last) break;
            fy_quic_stream_write(c, last, p, len);
            if (kind & 8) fy_quic_stream_finish(c, last);
            break;
        case 4:
            if (len) fy_quic_conn_send_crypto(c, 2, p, len);
            break;
        case 5:
            fy_quic_send_datagram(c, p, len);
            break;
        }
    }
}

static void *app_open(fy_quic_conn_t *c, void *ud)
{
    (void)ud;
    F.qc = c;
    F.open = true;
    send_input(c);
    if (!F.nreq) fy_loop_stop(&F.loop); /* nothing to wait for: a few turns are run after */
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
    (void)p;
    fy_quic_stream_consumed(F.qc, s, n);
    if (fin && s->id % 4 == 0) answered(s);
    return 0;
}
static void app_reset(void *app, fy_quic_stream_t *s, uint64_t code)
{
    (void)app;
    (void)code;
    if (s->id % 4 == 0) answered(s);
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
    F.closed = true;
    fy_loop_stop(&F.loop);
}

static const fy_quic_app_ops_t client_ops = {
    .open = app_open,
    .stream_open = app_stream_open,
    .recv = app_recv,
    .reset = app_reset,
    .acked = app_acked,
    .stream_close = app_stream_close,
    .close = app_close,
};

static void setup(void)
{
    F.ready = true;
    fy_log_min_level = getenv("FUZZ_QUIC_VERBOSE") ? FY_LOG_INFO : FY_LOG_ALERT;
    char dir[] = "/tmp/fuzz-quic-h3-XXXXXX", cert[256], key[256];
    if (!mkdtemp(dir) || fy_tls_selfsigned_ensure(dir, cert, key, sizeof cert) != 0 ||
        fy_loop_init(&F.loop) < 0) {
        F.failed = true;
        return;
    }
    fy_loop_update_time(&F.loop);
    F.respond.status = 200;
    F.respond.body = "ok\n";
    F.respond.body_len = 3;
    F.routes[0].path = "/echo";
    F.routes[0].path_len = 5;
    F.routes[0].handler = fy_echo_handler_new();
    F.routes[1].path = "/";
    F.routes[1].path_len = 1;
    F.routes[1].handler = fy_respond_handler_new(&F.respond);
    F.router.routes = F.routes;
    F.router.n = 2;
    /* small limits, so that inputs reach them */
    F.limits.max_request_line = 8192;
    F.limits.max_header_bytes = 4096;
    F.limits.max_headers = 32;
    F.limits.max_body = 64 * 1024;
    F.limits.header_timeout_ms = 10000;
    F.limits.body_timeout_ms = 30000;
    F.limits.keepalive_timeout_ms = 75000;
    F.limits.send_timeout_ms = 60000;
    F.limits.keepalive_requests = 10000;
    F.limits.max_connections = 16;
    F.conf = (fy_quic_conf_t){.cc = FY_QUIC_CC_CUBIC,
                              .idle_timeout_ms = 30000,
                              .handshake_timeout_ms = 10000,
                              .max_streams = 8,
                              .stream_window = 64 * 1024,
                              .connection_window = 1 << 20,
                              .send_buffer = 64 * 1024,
                              .max_datagram_size = 1200,
                              .qpack_table_capacity = 4096,
                              .qpack_blocked_streams = 4,
                              .max_connections = 16};
    const char *certs[] = {cert}, *keys[] = {key};
    F.qs = fy_quic_server_new(&F.conf, certs, keys, 1, "fuzz");
    unlink(cert); /* loaded: leave nothing behind in /tmp */
    unlink(key);
    rmdir(dir);
    F.addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = F.qs ? fy_quic_socket((struct sockaddr *)&F.addr, sizeof F.addr, "fuzz") : -1;
    if (fd < 0) {
        F.failed = true;
        return;
    }
    socklen_t sl = sizeof F.addr;
    getsockname(fd, (struct sockaddr *)&F.addr, &sl);
    F.ctx.router = &F.router;
    F.ctx.limits = &F.limits;
    F.ctx.loop = &F.loop;
    F.ctx.is_tls = true;
    F.ctx.protocols = FY_PROTO_H3;
    fy_list_init(&F.ctx.conns);
    F.ep = fy_h3_endpoint_start(&F.ctx, F.qs, fd);
    if (!F.ep) {
        F.failed = true;
        return;
    }
    fy_timer_init(&F.bound, on_bound, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!F.ready) setup();
    if (F.failed) return 0;
    F.in = data;
    F.in_len = size;
    F.open = F.closed = false;
    F.nreq = F.nanswered = 0;
    fy_quic_client_opts_t o = {.conf = &F.conf, .insecure = true, .name = "fuzz"};
    fy_loop_update_time(&F.loop);
    F.qc =
        fy_quic_connect(&F.loop, (struct sockaddr *)&F.addr, sizeof F.addr, &o, &client_ops, NULL);
    if (!F.qc) return 0;
    run_for(50); /* the handshake, then the input's exchange */
    if (!F.closed && F.nreq == 0) run_for(1);
    if (getenv("FUZZ_QUIC_VERBOSE"))
        fy_info("fuzz: open %d closed %d answered %d/%d", F.open, F.closed, F.nanswered, F.nreq);
    if (!F.closed) fy_quic_conn_abort(F.qc, 0x100);
    run_for(1); /* the server reads the CONNECTION_CLOSE; the deferred frees run */
    if (F.ctx.nconns) fy_http_ctx_close_all(&F.ctx);
    run_for(0);
    return 0;
}
