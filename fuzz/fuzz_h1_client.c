/* libFuzzer entry for the HTTP/1.1 client codec (src/h1/h1_client.c): the input is what an
 * origin sends, after two control bytes: data[0] picks the request (GET, HEAD, POST with a
 * chunked body pulled with deferrals, WebSocket Upgrade) and the read size, data[1] how many
 * request bytes the origin accepts per write. The codec is driven with readiness events, held
 * response bytes are consumed, deferred bodies resumed, until it ends, fails or stalls.
 * Traps on a callback after the end or an error, on more bytes delivered than received, and
 * on a connection judged reusable when the response was not complete. Prints nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "core/arena.h"
#include "core/errors.h"
#include "h1/h1_client.h"

typedef struct mem {
    fy_transport_t t;
    const uint8_t *in;
    size_t in_len, in_pos, step;
    size_t wcap, written;
} mem_t;

static ssize_t m_read(fy_transport_t *t, void *buf, size_t len)
{
    mem_t *m = (mem_t *)t;
    size_t n = m->in_len - m->in_pos;
    if (n == 0) return FY_EEOF;
    if (n > m->step) n = m->step;
    if (n > len) n = len;
    memcpy(buf, m->in + m->in_pos, n);
    m->in_pos += n;
    return (ssize_t)n;
}

static ssize_t m_writev(fy_transport_t *t, const struct iovec *iov, int n)
{
    mem_t *m = (mem_t *)t;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += iov[i].iov_len;
    if (total > m->wcap) total = m->wcap;
    m->written += total;
    return (ssize_t)total;
}

static int m_shutdown(fy_transport_t *t)
{
    (void)t;
    return 0;
}

static const struct fy_transport_ops mem_ops = {
    .name = "fuzz", .read = m_read, .writev = m_writev, .shutdown = m_shutdown};

typedef struct st {
    size_t held, delivered;
    int body_left;
    bool ended, failed, deferred;
} st_t;

static void on_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    st_t *s = ud;
    (void)hs;
    (void)end;
    if (s->ended || s->failed || status < 100 || status > 999) abort();
}

static void on_data(void *ud, const char *p, size_t n)
{
    st_t *s = ud;
    if (s->ended || s->failed || n == 0 || !p || s->held) abort();
    s->held = n;
    s->delivered += n;
}

static void on_end(void *ud, fy_headers_t *trailers)
{
    st_t *s = ud;
    (void)trailers;
    if (s->ended || s->failed) abort();
    s->ended = true;
}

static void on_error(void *ud, int kind, uint64_t code, const char *why)
{
    st_t *s = ud;
    (void)code;
    if (s->ended || s->failed || !why || (kind != FY_CLIENT_CONN && kind != FY_CLIENT_PROTOCOL))
        abort();
    s->failed = true;
}

static ssize_t read_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers)
{
    st_t *s = ud;
    if (!s->deferred) {
        s->deferred = true;
        return FY_CLIENT_DEFER;
    }
    s->deferred = false;
    if (s->body_left-- > 0) {
        size_t n = len < 100 ? len : 100;
        memset(buf, 'b', n);
        return (ssize_t)n;
    }
    *trailers = NULL;
    return 0;
}

static int want(void *ud, uint32_t ev)
{
    (void)ud;
    (void)ev;
    return 0;
}

static const fy_client_stream_ops_t ops = {on_head, on_data, on_end, on_error, read_body, NULL};

static void add(fy_arena_t *a, fy_headers_t *hs, const char *n, const char *v)
{
    fy_headers_add(a, hs, n, strlen(n), v, strlen(v));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    fy_arena_t a;
    fy_arena_init(&a, NULL, 0, 4096);
    mem_t m = {.t = {.ops = &mem_ops},
               .in = data + 2,
               .in_len = size - 2,
               .step = (size_t)(data[0] >> 2) + 1,
               .wcap = (size_t)data[1] + 1};
    st_t s = {.body_left = 3};
    int mode = data[0] & 3;
    static const fy_h1_limits_t lim = {256, 1024, 16};
    fy_h1_client_t *c = fy_h1_client_new(&a, &m.t, &lim, mode == 1, &ops, want, &s, &s);
    fy_headers_t hs = {0};
    add(&a, &hs, ":method",
        mode == 0   ? "GET"
        : mode == 1 ? "HEAD"
        : mode == 2 ? "POST"
                    : "CONNECT");
    add(&a, &hs, ":scheme", "http");
    add(&a, &hs, ":authority", "o.test");
    add(&a, &hs, ":path", "/");
    if (mode == 3) add(&a, &hs, ":protocol", "websocket");
    add(&a, &hs, "cookie", "a=1");
    add(&a, &hs, "cookie", "b=2");
    fy_h1_client_submit(c, &hs, mode == 2 ? -1 : 0);
    for (int i = 0; i < 100000 && !s.ended && !s.failed; i++) {
        size_t pos = m.in_pos, w = m.written;
        bool held = s.held != 0;
        fy_h1_client_io(c, EPOLLIN | EPOLLOUT);
        if (s.held) {
            size_t n = s.held;
            s.held = 0;
            fy_h1_client_consume(c, n);
        }
        if (s.deferred) fy_h1_client_resume(c);
        if (m.in_pos == pos && m.written == w && !held && !s.held && !s.deferred) break;
    }
    if (s.delivered > m.in_len) abort();
    bool reusable = fy_h1_client_release(c);
    if (reusable && (!s.ended || s.failed)) abort();
    fy_h1_client_free(c);
    fy_arena_free(&a);
    return 0;
}
