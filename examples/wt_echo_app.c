/* A WebTransport echo written against include/ferry/webtransport.h: Ferry embedded, one route
 * `webtransport: app`, and the application echoing bidirectional streams on themselves and
 * datagrams as datagrams, with backpressure (it takes bytes only while the stream's send
 * queue is under its bound, and resumes when the queue shrinks).
 *
 *   build/examples/wt_echo_app [PORT]     # https://127.0.0.1:PORT/echo (h3, self-signed)
 *   ferry-load wt://127.0.0.1:PORT/echo --insecure -m 4 --size 1048576
 */
#include <ferry/mitm.h>
#include <ferry/webtransport.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static size_t on_data(ferry_wt_stream_t *st, const uint8_t *p, size_t n, int fin, void *sud)
{
    (void)sud;
    if (ferry_wt_stream_is_uni(st)) return n; /* this echo answers bidirectional streams */
    size_t cap = ferry_wt_send_buffer(st), q = ferry_wt_stream_buffered(st);
    size_t take = q < cap ? cap - q : 0;
    if (take > n) take = n;
    if (take && ferry_wt_stream_write(st, p, take) < 0) return n;
    if (take == n && fin) ferry_wt_stream_finish(st);
    return take; /* the rest comes again after ferry_wt_stream_resume */
}

static void on_writable(ferry_wt_stream_t *st, void *sud)
{
    (void)sud;
    ferry_wt_stream_resume(st);
}

static void on_reset(ferry_wt_stream_t *st, int64_t code, void *sud)
{
    (void)sud;
    ferry_wt_stream_reset(st, code < 0 ? 0 : (uint32_t)code);
}

static void on_datagram(ferry_wt_session_t *s, const uint8_t *p, size_t n, void *sud)
{
    (void)sud;
    ferry_wt_send_datagram(s, p, n); /* a full queue drops it: datagrams may be lost */
}

static void *on_session(ferry_wt_session_t *s, const char *path, void *ud)
{
    (void)s;
    fprintf(stderr, "wt_echo_app: session on %s\n", path);
    return ud;
}

static void on_close(uint32_t code, const char *reason, size_t rlen, void *sud)
{
    (void)sud;
    fprintf(stderr, "wt_echo_app: session closed: %u \"%.*s\"\n", (unsigned)code, (int)rlen,
            reason);
}

int main(int argc, char **argv)
{
    int port = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 8443;
    char yaml[1024], err[1024];
    snprintf(yaml, sizeof yaml,
             "workers: 1\n"
             "listeners:\n"
             "  - {address: 127.0.0.1:%d, protocols: [h3], tls: self-signed}\n"
             "routes:\n"
             "  - match: {path: /echo}\n"
             "    webtransport: app\n",
             port);
    ferry_t *f = ferry_new(yaml, err, sizeof err);
    if (!f) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    ferry_wt_ops_t ops = {.session = on_session,
                          .data = on_data,
                          .writable = on_writable,
                          .reset = on_reset,
                          .datagram = on_datagram,
                          .close = on_close};
    sigset_t set; /* blocked before the workers start, so that they inherit it */
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (ferry_set_webtransport(f, &ops) < 0 || ferry_start(f) < 0) {
        ferry_free(f);
        return 1;
    }
    printf("wt_echo_app: https://127.0.0.1:%d/echo\n", port);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    ferry_stop(f);
    ferry_free(f);
    return 0;
}
