/* Tests for the hiredis loop adapter in redis.c, against a fake Redis on the same loop: a
 * command and its reply, a second one pipelined from the first reply's callback, the server
 * closing (hiredis frees the context, and so the adapter, inside our read callback), a refused
 * connection, and a second attach refused. A watchdog timer stops the loop if a case would
 * hang: it makes a check fail, it asserts no duration. */
#include "policy/redis.h"

#include <errno.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/loop.h"
#include "core/test.h"

static fy_loop_t loop;
static int lfd = -1, cfd = -1;
static fy_io_t lio, cio;
static int port;
static int replies, pongs, connected, disconnected, refused;
static bool close_after_two;
static char inbuf[4096];
static size_t inlen;

static void on_conn(fy_io_t *io, uint32_t ev)
{
    (void)ev;
    ssize_t n = read(io->fd, inbuf + inlen, sizeof inbuf - inlen);
    if (n <= 0) {
        fy_io_set(&loop, io, 0);
        close(io->fd);
        cfd = -1;
        return;
    }
    inlen += (size_t)n;
    /* answer each complete "*1\r\n$4\r\nPING\r\n" */
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    while (inlen >= sizeof ping - 1 && !memcmp(inbuf, ping, sizeof ping - 1)) {
        memmove(inbuf, inbuf + sizeof ping - 1, inlen - (sizeof ping - 1));
        inlen -= sizeof ping - 1;
        pongs++;
        CHECK(write(io->fd, "+PONG\r\n", 7) == 7);
        if (close_after_two && pongs == 2) {
            fy_io_set(&loop, io, 0);
            close(io->fd);
            cfd = -1;
            return;
        }
    }
}

static void on_listen(fy_io_t *io, uint32_t ev)
{
    (void)ev;
    int fd = accept(io->fd, NULL, NULL);
    if (fd < 0) return;
    cfd = fd;
    cio.fd = fd;
    cio.cb = on_conn;
    fy_io_set(&loop, &cio, EPOLLIN);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    (void)ac;
    if (status == REDIS_OK)
        connected++;
    else {
        refused++;
        fy_loop_stop(&loop);
    }
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)ac;
    (void)status;
    disconnected++;
    fy_loop_stop(&loop);
}

static void on_pong(redisAsyncContext *ac, void *r, void *priv)
{
    const redisReply *rep = r;
    if (!rep) return; /* freed with the context: no reply */
    replies++;
    CHECK(rep->type == REDIS_REPLY_STATUS && !strcmp(rep->str, "PONG"));
    if (priv) redisAsyncCommand(ac, on_pong, NULL, "PING"); /* from inside a callback */
}

static bool watchdog_fired;
static void watchdog(fy_timer_t *t)
{
    (void)t;
    watchdog_fired = true;
    fy_loop_stop(&loop);
}

static void run_guarded(void)
{
    fy_timer_t wd;
    fy_timer_init(&wd, watchdog, NULL);
    fy_timer_start(&loop, &wd, 10000);
    loop.stop = false;
    fy_loop_run(&loop);
    fy_timer_stop(&loop, &wd);
}

static void test_roundtrip_and_server_close(void)
{
    close_after_two = true;
    redisAsyncContext *ac = redisAsyncConnect("127.0.0.1", port);
    CHECK(ac && !ac->err);
    CHECK(fy_redis_attach(ac, &loop) == 0);
    CHECK(fy_redis_attach(ac, &loop) == -1); /* already attached */
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    CHECK(redisAsyncCommand(ac, on_pong, (void *)1, "PING") == REDIS_OK);
    run_guarded();
    CHECK(!watchdog_fired);
    CHECK_EQ_INT(connected, 1);
    CHECK_EQ_INT(replies, 2);
    CHECK_EQ_INT(pongs, 2);
    CHECK_EQ_INT(disconnected, 1); /* the server closed: hiredis freed ac and our adapter */
}

static void test_refused(void)
{
    /* a port nothing listens on: bind one, close it */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(getsockname(s, (struct sockaddr *)&a, &al) == 0);
    close(s);
    redisAsyncContext *ac = redisAsyncConnect("127.0.0.1", ntohs(a.sin_port));
    CHECK(ac != NULL);
    if (!ac) return;
    if (ac->err) { /* refused at once */
        redisAsyncFree(ac);
        refused++;
        return;
    }
    CHECK(fy_redis_attach(ac, &loop) == 0);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncCommand(ac, on_pong, NULL, "PING"); /* answered with NULL when it fails */
    run_guarded();
    CHECK(!watchdog_fired);
    CHECK_EQ_INT(refused, 1);
}

static void setup(void)
{
    CHECK(fy_loop_init(&loop) == 0);
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK(bind(lfd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(lfd, 4) == 0);
    CHECK(getsockname(lfd, (struct sockaddr *)&a, &al) == 0);
    port = ntohs(a.sin_port);
    lio.fd = lfd;
    lio.cb = on_listen;
    fy_io_set(&loop, &lio, EPOLLIN);
}

FY_TEST_MAIN(setup(); test_roundtrip_and_server_close(); test_refused(); close(lfd))
