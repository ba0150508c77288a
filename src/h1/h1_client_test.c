/* Unit tests of the HTTP/1.1 client codec over an in-memory transport: request serialisation
 * (pseudo-headers, cookie crumbs, codec-owned fields, Content-Length / chunked with trailers,
 * Upgrade with a made-up WebSocket key), partial writes, request bodies pulled with deferral,
 * response heads (1xx, fields named in Connection dropped), bodies by length / chunked (byte
 * by byte) / close, backpressure (nothing read while bytes are held), early responses, the
 * keep-alive decision, and errors (closed before/after the head, bad heads, 101 unasked). */
#include "h1/h1_client.h"

#include <sys/epoll.h>

#include "core/errors.h"
#include "core/pool.h"
#include "core/test.h"

/* ---- an in-memory transport ---- */

typedef struct mem {
    fy_transport_t t;
    const char *in; /* what the origin sends */
    size_t in_len, in_pos;
    size_t in_step; /* bytes per read (0: all) */
    bool in_eof;    /* the origin closes after `in` */
    char out[8192];
    size_t out_len;
    size_t out_cap; /* bytes accepted in total so far (0: any) */
    bool shut;
    int reads;
} mem_t;

static ssize_t m_read(fy_transport_t *t, void *buf, size_t len)
{
    mem_t *m = (mem_t *)t;
    m->reads++;
    size_t n = m->in_len - m->in_pos;
    if (n == 0) return m->in_eof ? FY_EEOF : 0;
    if (m->in_step && n > m->in_step) n = m->in_step;
    if (n > len) n = len;
    memcpy(buf, m->in + m->in_pos, n);
    m->in_pos += n;
    return (ssize_t)n;
}

static ssize_t m_writev(fy_transport_t *t, const struct iovec *iov, int n)
{
    mem_t *m = (mem_t *)t;
    size_t w = 0;
    for (int i = 0; i < n; i++) {
        size_t l = iov[i].iov_len;
        if (m->out_cap && m->out_len + l > m->out_cap) l = m->out_cap - m->out_len;
        if (m->out_len + l > sizeof m->out) l = sizeof m->out - m->out_len;
        memcpy(m->out + m->out_len, iov[i].iov_base, l);
        m->out_len += l;
        w += l;
        if (l < iov[i].iov_len) break;
    }
    return (ssize_t)w;
}

static int m_shutdown(fy_transport_t *t)
{
    ((mem_t *)t)->shut = true;
    return 0;
}

static const struct fy_transport_ops mem_ops = {
    .name = "mem", .read = m_read, .writev = m_writev, .shutdown = m_shutdown};

/* ---- the owner ---- */

typedef struct owner {
    int heads, last_status;
    bool last_end;
    fy_headers_t last_hs;
    char data[8192];
    size_t data_len;
    size_t held;
    bool ended;
    int errors, err_kind;
    uint32_t err_code;
    fy_headers_t trailers;
    /* request body script */
    const char *body[4];
    int nbody, body_at;
    bool defer_once;
    fy_headers_t req_trailers;
    uint32_t want;
} owner_t;

static void on_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    owner_t *o = ud;
    o->heads++;
    o->last_status = status;
    o->last_hs = *hs;
    o->last_end = end;
}

static void on_data(void *ud, const char *p, size_t n)
{
    owner_t *o = ud;
    memcpy(o->data + o->data_len, p, n);
    o->data_len += n;
    o->held += n;
}

static void on_end(void *ud, fy_headers_t *trailers)
{
    owner_t *o = ud;
    o->ended = true;
    o->trailers = *trailers;
}

static void on_error(void *ud, int kind, uint64_t code, const char *why)
{
    owner_t *o = ud;
    (void)why;
    o->errors++;
    o->err_kind = kind;
    o->err_code = code;
}

static ssize_t read_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers)
{
    owner_t *o = ud;
    if (o->defer_once) {
        o->defer_once = false;
        return FY_CLIENT_DEFER;
    }
    if (o->body_at < o->nbody) {
        size_t n = strlen(o->body[o->body_at]);
        if (n > len) n = len;
        memcpy(buf, o->body[o->body_at++], n);
        return (ssize_t)n;
    }
    *trailers = &o->req_trailers;
    return 0;
}

static int want(void *ud, uint32_t ev)
{
    ((owner_t *)ud)->want = ev;
    return 0;
}

static const fy_client_stream_ops_t ops = {on_head, on_data, on_end, on_error, read_body, NULL};
static const fy_h1_limits_t lim = {1024, 1024, 16};

typedef struct fx {
    fy_arena_t a;
    mem_t m;
    owner_t o;
    fy_h1_client_t *c;
} fx_t;

static void fx_init(fx_t *f, const char *in, bool head_req)
{
    memset(f, 0, sizeof *f);
    fy_arena_init(&f->a, NULL, 0, 4096);
    f->m.t.ops = &mem_ops;
    f->m.in = in;
    f->m.in_len = in ? strlen(in) : 0;
    f->c = fy_h1_client_new(&f->a, &f->m.t, &lim, head_req, &ops, want, &f->o, &f->o);
}

static bool fx_done(fx_t *f)
{
    bool r = fy_h1_client_release(f->c);
    fy_h1_client_free(f->c);
    fy_arena_free(&f->a);
    return r;
}

static void add(fx_t *f, fy_headers_t *hs, const char *n, const char *v)
{
    fy_headers_add(&f->a, hs, n, strlen(n), v, strlen(v));
}

static void get_fields(fx_t *f, fy_headers_t *hs, const char *method)
{
    *hs = (fy_headers_t){0};
    add(f, hs, ":method", method);
    add(f, hs, ":scheme", "http");
    add(f, hs, ":authority", "origin.test");
    add(f, hs, ":path", "/p?q=1");
}

static bool out_has(const fx_t *f, const char *s)
{
    return memmem(f->m.out, f->m.out_len, s, strlen(s)) != NULL;
}

static const char *find(const fy_headers_t *hs, const char *name)
{
    for (size_t i = 0; i < hs->n; i++)
        if (fy_str_ieq(hs->v[i].name, name, strlen(name))) return hs->v[i].value.p;
    return NULL;
}

/* consume everything held, as the owner does after passing it on */
static void drain(fx_t *f)
{
    for (int i = 0; i < 10000 && f->o.held && !f->o.errors; i++) {
        size_t n = f->o.held;
        f->o.held = 0;
        fy_h1_client_consume(f->c, n);
    }
}

static void test_get_keepalive(void)
{
    fx_t f;
    fx_init(&f,
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive, X-Private\r\n"
            "X-Private: 1\r\nA: b\r\n\r\nhello",
            false);
    fy_headers_t hs;
    get_fields(&f, &hs, "GET");
    add(&f, &hs, "cookie", "a=1");
    add(&f, &hs, "User-Agent", "t");
    add(&f, &hs, "cookie", "b=2");
    add(&f, &hs, "connection", "x");     /* the codec's own */
    add(&f, &hs, "content-length", "9"); /* the codec's own */
    add(&f, &hs, "te", "trailers");
    fy_h1_client_submit(f.c, &hs, 0);
    CHECK_STRN(
        f.m.out, f.m.out_len,
        "GET /p?q=1 HTTP/1.1\r\nHost: origin.test\r\nCookie: a=1; b=2\r\nUser-Agent: t\r\n\r\n");
    CHECK(f.o.want == EPOLLIN);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK_EQ_INT(f.o.heads, 1);
    CHECK_EQ_INT(f.o.last_status, 200);
    CHECK(find(&f.o.last_hs, "a") != NULL);
    CHECK(find(&f.o.last_hs, "x-private") == NULL); /* named in Connection */
    CHECK(find(&f.o.last_hs, "content-length") != NULL);
    CHECK_STRN(f.o.data, f.o.data_len, "hello");
    CHECK(f.o.ended); /* the last piece and the end together */
    CHECK(fy_h1_client_got_bytes(f.c));
    CHECK(fx_done(&f)); /* reusable */
}

static void test_chunked_bytewise(void)
{
    fx_t f;
    fx_init(&f,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            "3\r\nabc\r\n5;ext=1\r\ndefgh\r\n0\r\nX-T: 7\r\n\r\n",
            false);
    f.m.in_step = 1;
    fy_headers_t hs;
    get_fields(&f, &hs, "GET");
    fy_h1_client_submit(f.c, &hs, 0);
    for (int i = 0; i < 200 && !f.o.ended && !f.o.errors; i++) {
        fy_h1_client_io(f.c, EPOLLIN);
        if (f.o.held) {
            /* EPOLLIN stays while bytes are held (no epoll_ctl pair per piece); when the
               origin sends meanwhile, nothing is read and the interest is dropped */
            int reads = f.m.reads;
            fy_h1_client_io(f.c, EPOLLIN);
            CHECK_EQ_INT(f.m.reads, reads);
            CHECK(f.o.want == 0);
            drain(&f);
        }
    }
    CHECK(f.o.ended);
    CHECK_EQ_INT(f.o.errors, 0);
    CHECK_STRN(f.o.data, f.o.data_len, "abcdefgh");
    CHECK_EQ_INT(f.o.trailers.n, 1);
    CHECK(fx_done(&f));
}

static void test_post_chunked_trailers_partial_writes(void)
{
    fx_t f;
    fx_init(&f, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", false);
    f.o.body[0] = "abc";
    f.o.body[1] = "defg";
    f.o.nbody = 2;
    f.o.defer_once = true;
    add(&f, &f.o.req_trailers, "x-sum", "42");
    f.m.out_cap = 10; /* the origin takes 10 bytes, then nothing */
    fy_headers_t hs;
    get_fields(&f, &hs, "POST");
    fy_h1_client_submit(f.c, &hs, -1);
    CHECK_EQ_INT(f.m.out_len, 10);
    CHECK(f.o.want & EPOLLOUT);
    f.m.out_cap = 0;
    fy_h1_client_io(f.c, EPOLLOUT);
    fy_h1_client_resume(f.c); /* the deferred body is there now */
    CHECK(out_has(
        &f, "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\nx-sum: 42\r\n\r\n"));
    CHECK(!(f.o.want & EPOLLOUT));
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK_EQ_INT(f.o.last_status, 201);
    CHECK(f.o.last_end && f.o.ended);
    CHECK(fx_done(&f));
}

/* The origin answers before the request body is all sent: the codec keeps sending it (with
 * EPOLLOUT while the origin is slow to take it) and the connection is reusable once it is
 * out; an origin event in the meantime loses the connection but not the response. */
static void test_early_response_body_goes_on(void)
{
    fx_t f;
    fx_init(&f, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false);
    f.o.body[0] = "abc";
    f.o.body[1] = "defg";
    f.o.nbody = 2;
    f.o.defer_once = true;
    fy_headers_t hs;
    get_fields(&f, &hs, "POST");
    fy_h1_client_submit(f.c, &hs, 7);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK(f.o.ended && f.o.errors == 0);
    CHECK(fy_h1_client_sending(f.c));
    f.m.out_cap = f.m.out_len + 2; /* the origin is slow to take the rest */
    fy_h1_client_resume(f.c);
    CHECK(fy_h1_client_sending(f.c));
    CHECK((f.o.want & EPOLLOUT) && (f.o.want & EPOLLIN));
    f.m.out_cap = 0;
    fy_h1_client_io(f.c, EPOLLOUT);
    CHECK(!fy_h1_client_sending(f.c));
    CHECK(out_has(&f, "Content-Length: 7\r\n\r\nabcdefg"));
    CHECK_EQ_INT(f.o.errors, 0);
    CHECK(fx_done(&f)); /* reusable: both messages complete */

    fx_init(&f, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false);
    f.o.defer_once = true;
    get_fields(&f, &hs, "POST");
    fy_h1_client_submit(f.c, &hs, 7);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK(f.o.ended && fy_h1_client_sending(f.c));
    f.m.in_eof = true;
    fy_h1_client_io(f.c, EPOLLIN | EPOLLHUP); /* the origin closes meanwhile */
    CHECK_EQ_INT(f.o.errors, 1);
    CHECK(!fy_h1_client_sending(f.c));
    CHECK(!fx_done(&f));
}

static void test_content_length_body(void)
{
    fx_t f;
    fx_init(&f, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false);
    f.o.body[0] = "0123456789";
    f.o.nbody = 1;
    fy_headers_t hs;
    get_fields(&f, &hs, "PUT");
    fy_h1_client_submit(f.c, &hs, 10);
    CHECK(out_has(&f, "Content-Length: 10\r\n\r\n0123456789")); /* head and body in one write */
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK(f.o.ended);
    CHECK(fx_done(&f));
}

static void test_interim(void)
{
    fx_t f;
    fx_init(&f,
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"
            "HTTP/1.1 204 No Content\r\n\r\n",
            false);
    fy_headers_t hs;
    get_fields(&f, &hs, "GET");
    fy_h1_client_submit(f.c, &hs, 0);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK_EQ_INT(f.o.heads, 3);
    CHECK_EQ_INT(f.o.last_status, 204);
    CHECK(f.o.ended);
    CHECK(fx_done(&f));
}

static void test_head_request(void)
{
    fx_t f;
    fx_init(&f, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", true);
    fy_headers_t hs;
    get_fields(&f, &hs, "HEAD");
    fy_h1_client_submit(f.c, &hs, 0);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK(f.o.last_end && f.o.ended);
    CHECK(fx_done(&f));
}

static void test_upgrade(void)
{
    fx_t f;
    fx_init(
        &f,
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nsrv",
        false);
    f.m.in_eof = true;
    f.o.body[0] = "cli";
    f.o.nbody = 1;
    fy_headers_t hs = {0};
    add(&f, &hs, ":method", "CONNECT");
    add(&f, &hs, ":scheme", "http");
    add(&f, &hs, ":authority", "origin.test");
    add(&f, &hs, ":path", "/ws");
    add(&f, &hs, ":protocol", "websocket");
    fy_h1_client_submit(f.c, &hs, 0);
    CHECK(out_has(&f, "GET /ws HTTP/1.1\r\n"));
    CHECK(out_has(&f, "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: "));
    CHECK(out_has(&f, "Sec-WebSocket-Version: 13\r\n"));
    CHECK(!out_has(&f, "cli")); /* nothing of the client's before the 101 */
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK_EQ_INT(f.o.last_status, 101);
    CHECK(out_has(&f, "\r\n\r\ncli"));
    CHECK(f.m.shut); /* the client's end became a half-close */
    drain(&f);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK_STRN(f.o.data, f.o.data_len, "srv");
    CHECK(f.o.ended); /* the origin closed: the tunnel ends */
    CHECK(!fx_done(&f));
}

static void test_errors(void)
{
    fx_t f;
    fy_headers_t hs;
    /* closed before any head: the origin's failure (code 1) */
    fx_init(&f, "", false);
    f.m.in_eof = true;
    get_fields(&f, &hs, "GET");
    fy_h1_client_submit(f.c, &hs, 0);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK_EQ_INT(f.o.errors, 1);
    CHECK_EQ_INT(f.o.err_kind, FY_CLIENT_CONN);
    CHECK_EQ_INT(f.o.err_code, 1);
    CHECK(!fy_h1_client_got_bytes(f.c));
    CHECK(!fx_done(&f));
    /* closed mid-body: never a silent short response */
    fx_init(&f, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", false);
    f.m.in_eof = true;
    get_fields(&f, &hs, "GET");
    fy_h1_client_submit(f.c, &hs, 0);
    fy_h1_client_io(f.c, EPOLLIN);
    drain(&f);
    /* the read was short: the EOF comes with the next readiness, not a read on consume */
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK(!f.o.ended);
    CHECK_EQ_INT(f.o.errors, 1);
    CHECK_EQ_INT(f.o.err_code, 0);
    CHECK(!fx_done(&f));
    /* a bad head */
    fx_init(&f, "HTTP/1.1 2000 Nope\r\n\r\n", false);
    get_fields(&f, &hs, "GET");
    fy_h1_client_submit(f.c, &hs, 0);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK_EQ_INT(f.o.err_kind, FY_CLIENT_PROTOCOL);
    CHECK(!fx_done(&f));
    /* 101 that nobody asked for */
    fx_init(&f, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
            false);
    get_fields(&f, &hs, "GET");
    fy_h1_client_submit(f.c, &hs, 0);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK_EQ_INT(f.o.err_kind, FY_CLIENT_PROTOCOL);
    CHECK_EQ_INT(f.o.heads, 0);
    CHECK(!fx_done(&f));
    /* a head over the limit (1024 bytes) */
    static char big[2048];
    memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
    memset(big + 20, 'a', sizeof big - 21);
    fx_init(&f, big, false);
    get_fields(&f, &hs, "GET");
    fy_h1_client_submit(f.c, &hs, 0);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK_EQ_INT(f.o.err_kind, FY_CLIENT_PROTOCOL);
    CHECK(!fx_done(&f));
}

static void test_not_reusable(void)
{
    fx_t f;
    fy_headers_t hs;
    /* early response: the request body is not finished */
    fx_init(&f, "HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n", false);
    f.o.defer_once = true;
    get_fields(&f, &hs, "POST");
    fy_h1_client_submit(f.c, &hs, 100);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK_EQ_INT(f.o.last_status, 413);
    CHECK(f.o.ended);
    CHECK(!fx_done(&f));
    /* extra bytes after the response */
    fx_init(&f, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxJUNK", false);
    get_fields(&f, &hs, "GET");
    fy_h1_client_submit(f.c, &hs, 0);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK(f.o.ended);
    CHECK(!fx_done(&f));
    /* Connection: close */
    fx_init(&f, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx", false);
    get_fields(&f, &hs, "GET");
    fy_h1_client_submit(f.c, &hs, 0);
    fy_h1_client_io(f.c, EPOLLIN);
    CHECK(f.o.ended);
    CHECK(!fx_done(&f));
    /* delimited by close */
    fx_init(&f, "HTTP/1.0 200 OK\r\n\r\nall of it", false);
    f.m.in_eof = true;
    get_fields(&f, &hs, "GET");
    fy_h1_client_submit(f.c, &hs, 0);
    for (int i = 0; i < 10 && !f.o.ended; i++) {
        fy_h1_client_io(f.c, EPOLLIN);
        drain(&f);
    }
    CHECK(f.o.ended);
    CHECK_STRN(f.o.data, f.o.data_len, "all of it");
    CHECK(!fx_done(&f));
}

/* every length the head writer's copies branch on (0..130: 1, 4, 8, 16, 32, 64 bytes and past
 * them), for a name, a value and the target: byte for byte what HTTP/1.1 wants */
static void test_field_lengths(void)
{
    static char src[3][160];
    for (int i = 0; i < 160; i++) {
        src[0][i] = (char)('a' + i % 26); /* names: never a length-and-name the codec owns */
        src[1][i] = (char)('A' + i % 26);
        src[2][i] = (char)('0' + i % 10);
    }
    for (size_t l = 0; l <= 130; l++) {
        fx_t f;
        fx_init(&f, NULL, false);
        size_t nl = l ? l : 1;
        fy_headers_t hs = {0};
        char path[160] = "/";
        memcpy(path + 1, src[2], l);
        fy_headers_add(&f.a, &hs, ":method", 7, "GET", 3);
        fy_headers_add(&f.a, &hs, ":authority", 10, "o.test", 6);
        fy_headers_add(&f.a, &hs, ":path", 5, path, l + 1);
        fy_headers_add(&f.a, &hs, src[0], nl, src[1], l);
        fy_headers_add(&f.a, &hs, "x", 1, src[2], 130 - l);
        fy_h1_client_submit(f.c, &hs, 0);
        char want[1024];
        int n = snprintf(
            want, sizeof want, "GET %.*s HTTP/1.1\r\nHost: o.test\r\n%.*s: %.*s\r\nx: %.*s\r\n\r\n",
            (int)(l + 1), path, (int)nl, src[0], (int)l, src[1], (int)(130 - l), src[2]);
        CHECK_STRN(f.m.out, f.m.out_len, want);
        CHECK_EQ_INT(f.m.out_len, n);
        fy_h1_client_free(f.c);
        fy_arena_free(&f.a);
    }
}

FY_TEST_MAIN(test_field_lengths(); test_get_keepalive(); test_chunked_bytewise();
             test_post_chunked_trailers_partial_writes(); test_early_response_body_goes_on();
             test_content_length_body(); test_interim(); test_head_request(); test_upgrade();
             test_errors(); test_not_reusable())
