/* libFuzzer entry for the HTTP/2 server codec (src/h2/h2_server.c): the input is what a client
 * sends on an h2c connection (the seeds start with the client preface). A real server session
 * is started on one end of a socketpair with a small router (respond on "/", echo on "/echo");
 * part of the input is handed over as "already read" bytes (as the h1 sniffing path does), the
 * rest is written to the peer end and read by the codec through the loop. Responses are read
 * from the peer end and discarded. Everything is closed and the deferred frees run before the
 * next input, so ASan sees every leak. Prints nothing. */
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/loop.h"
#include "h2/h2_conf.h"
#include "h2/h2_server.h"
#include "handler/echo.h"
#include "handler/respond.h"
#include "http/exchange.h"
#include "http/http_conf.h"
#include "http/router.h"
#include "net/listener_conf.h"

static fy_loop_t loop;
static fy_router_t router;
static fy_route_t routes[2];
static fy_respond_conf_t respond_conf;
static fy_http_limits_t limits;
static fy_h2_conf_t h2conf;

static void setup(void)
{
    fy_log_min_level = FY_LOG_ALERT; /* the codec logs every protocol error at info */
    if (fy_loop_init(&loop) != 0) abort();
    fy_loop_update_time(&loop);

    respond_conf.status = 200;
    respond_conf.body = "ok\n";
    respond_conf.body_len = 3;
    routes[0].path = "/echo";
    routes[0].path_len = 5;
    routes[0].handler = fy_echo_handler_new();
    routes[1].path = "/";
    routes[1].path_len = 1;
    routes[1].handler = fy_respond_handler_new(&respond_conf);
    router.routes = routes;
    router.n = 2;

    /* small limits, so that inputs reach them */
    limits.max_request_line = 8192;
    limits.max_header_bytes = 4096;
    limits.max_headers = 32;
    limits.max_body = 64 * 1024;
    limits.header_timeout_ms = 10000;
    limits.body_timeout_ms = 30000;
    limits.keepalive_timeout_ms = 75000;
    limits.send_timeout_ms = 60000;
    limits.keepalive_requests = 10000;
    limits.max_connections = 16;

    /* docs/CONFIG.md defaults, with the abuse budgets lowered so they are reachable */
    h2conf.max_concurrent_streams = 16;
    h2conf.initial_window_size = 65536;
    h2conf.connection_window_size = 1 << 20;
    h2conf.max_frame_size = 16384;
    h2conf.reset_burst = 20;
    h2conf.reset_rate = 33;
    h2conf.max_continuations = 8;
    h2conf.max_glitches = 50;
}

static void run_deferred(void)
{
    fy_defer_t *d;
    while ((d = loop.defer_head)) {
        loop.defer_head = d->next;
        if (!loop.defer_head) loop.defer_tail = &loop.defer_head;
        d->queued = false;
        d->cb(d);
    }
}

static void discard(int fd)
{
    char buf[16384];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}

/* One non-blocking loop turn: ready fds, then deferred callbacks. Returns the events seen. */
static int turn(void)
{
    struct epoll_event evs[16];
    int n = epoll_wait(loop.epfd, evs, 16, 0);
    for (int i = 0; i < n; i++) {
        fy_io_t *io = evs[i].data.ptr;
        io->cb(io, evs[i].events);
    }
    run_deferred();
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool init;
    if (!init) {
        setup();
        init = true;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) abort();

    fy_http_ctx_t ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.router = &router;
    ctx.limits = &limits;
    ctx.loop = &loop;
    ctx.protocols = FY_PROTO_H1 | FY_PROTO_H2C;
    ctx.h2conf = &h2conf;
    ctx.start_h2 = fy_h2_conn_start;
    fy_list_init(&ctx.conns);

    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(40000), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    /* split: the first part as bytes already read by the h1 sniffer, the rest from the socket */
    size_t at = size ? (size_t)data[size - 1] * 257 % (size + 1) : 0;
    fy_loop_update_time(&loop);
    fy_h2_conn_start(&ctx, sv[0], NULL, (const struct sockaddr *)&sa, sizeof sa, (const char *)data,
                     at, NULL);
    run_deferred();
    size_t off = at;
    for (int i = 0; i < 64 && ctx.nconns; i++) {
        if (off < size) {
            ssize_t w = write(sv[1], data + off, size - off);
            if (w > 0) off += (size_t)w;
        } else if (i > 0 && off == size) {
            shutdown(sv[1], SHUT_WR); /* end of input: the client half-closes */
            off++;
        }
        discard(sv[1]);
        if (turn() == 0 && off > size) break;
    }
    discard(sv[1]);
    fy_http_ctx_close_all(&ctx);
    run_deferred();
    close(sv[1]);
    return 0;
}
