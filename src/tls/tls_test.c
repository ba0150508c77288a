/* Unit tests of tls/tls.c: an idle connection holds no record buffer (issue 19): the server
 * transport once its codec calls fy_tls_transport_idle, a client transport on its own, after a
 * handshake and keep-alive request/responses; a thread's free blocks back to malloc at its exit. */
#include "tls/tls.h"

#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/test.h"

#ifndef FY_NO_POOL /* the record-buffer slab and its count are compiled out there */
/* Drive both handshakes over a socketpair until both are done (bounded). */
static void handshake(fy_transport_t *s, fy_transport_t *c)
{
    int sd = 0, cd = 0;
    for (int i = 0; i < 1000 && (sd != 1 || cd != 1); i++) {
        if (sd != 1) sd = s->ops->handshake(s);
        if (cd != 1) cd = c->ops->handshake(c);
        CHECK(sd >= 0 && cd >= 0);
    }
    CHECK(sd == 1 && cd == 1);
}

static ssize_t read_some(fy_transport_t *t, char *buf, size_t len)
{
    for (int i = 0; i < 1000; i++) {
        ssize_t n = t->ops->read(t, buf, len);
        if (n != 0) return n;
    }
    return 0;
}

#endif

static void test_idle_holds_no_record_buffer(void)
{
#ifndef FY_NO_POOL
    char dir[] = "/tmp/fy_tls_testXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    /* no tickets: a client that has read NewSessionTicket keeps its read buffer (OpenSSL
       3.0 releases it only on the application-data path); the server side is what counts */
    fy_tls_conf_t conf = {.self_signed = true, .session_tickets = false};
    static const char *const alpn[] = {"http/1.1", NULL};
    fy_tls_ctx_t *sctx = fy_tls_ctx_new(&conf, dir, alpn);
    CHECK(sctx != NULL);
    fy_tls_client_ctx_t *cctx = fy_tls_client_ctx_new(NULL, true, NULL, NULL);
    CHECK(cctx != NULL);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    size_t before = fy_tls_record_buffer_bytes();
    fy_transport_t *s = fy_tls_transport_new(sctx, sv[0]);
    fy_transport_t *c = fy_tls_client_transport_new(cctx, sv[1], "localhost");
    CHECK(s && c);
    handshake(s, c);
    static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    char buf[256];
    for (int round = 0; round < 3; round++) { /* keep-alive: several requests */
        struct iovec iv = {(void *)req, sizeof req - 1};
        CHECK(c->ops->writev(c, &iv, 1) == (ssize_t)(sizeof req - 1));
        CHECK(read_some(s, buf, sizeof buf) == (ssize_t)(sizeof req - 1));
        struct iovec ov[2] = {{(void *)resp, 17}, {(void *)(resp + 17), sizeof resp - 18}};
        CHECK(s->ops->writev(s, ov, 2) == (ssize_t)(sizeof resp - 1));
        CHECK(read_some(c, buf, sizeof buf) == (ssize_t)(sizeof resp - 1));
        /* the client's context releases empty buffers itself; the server's buffers go when
           its codec says the connection is idle */
        CHECK(fy_tls_record_buffer_bytes() > before);
        fy_tls_transport_idle(s);
        CHECK_EQ_INT(fy_tls_record_buffer_bytes(), before);
    }
    s->ops->destroy(s);
    c->ops->destroy(c);
    close(sv[0]);
    close(sv[1]);
    fy_tls_client_ctx_free(cctx);
    fy_tls_ctx_free(sctx);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
#endif
}

/* A worker's exit: the small blocks OpenSSL gave back on the thread go back to malloc, and
 * those it gives back afterwards (its own thread-exit handlers) are not kept. */
static void *cleanup_thread(void *arg)
{
    size_t *freed = arg;
    void *p = OPENSSL_malloc(40);
    OPENSSL_free(p);
    freed[0] = fy_tls_thread_cleanup();
    p = OPENSSL_malloc(40);
    OPENSSL_free(p);
    freed[1] = fy_tls_thread_cleanup();
    return NULL;
}

static void test_thread_cleanup(void)
{
    size_t freed[2] = {9, 9};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, cleanup_thread, freed) == 0);
    pthread_join(t, NULL);
#ifndef FY_NO_POOL
    CHECK_EQ_INT(freed[0], 1);
#else
    CHECK_EQ_INT(freed[0], 0);
#endif
    CHECK_EQ_INT(freed[1], 0);
}

FY_TEST_MAIN(test_idle_holds_no_record_buffer(); test_thread_cleanup())
