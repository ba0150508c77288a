/* fy_accept_run / fy_accept_closed on a real loopback listening socket: the connection-limit
 * hook stops watching the socket and a close under the limit watches it again, a batch ends
 * at FY_ACCEPT_BATCH, EAGAIN ends the loop quietly, and running out of descriptors (a lowered
 * RLIMIT_NOFILE) stops watching and pauses until a descriptor comes free. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/test.h"
#include "net/accept.h"
#include "net/sock.h"

typedef struct {
    int limit; /* at the limit once this many are open; <0: none */
    int open;
    int fds[256];
    int resumed;
} lis_t;

static bool t_at_limit(void *ud)
{
    lis_t *l = ud;
    return l->limit >= 0 && l->open >= l->limit;
}

static void t_on_conn(void *ud, int fd, const struct sockaddr *sa, socklen_t salen)
{
    lis_t *l = ud;
    CHECK(sa->sa_family == AF_INET && salen == sizeof(struct sockaddr_in));
    if (l->open < 256)
        l->fds[l->open++] = fd;
    else
        close(fd);
}

static void t_resume(void *ud)
{
    ((lis_t *)ud)->resumed++;
}

static const fy_accept_ops_t ops = {"test", t_at_limit, t_on_conn};

static int connect_to(const struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(connect(fd, (const struct sockaddr *)a, sizeof *a) == 0); /* the backlog takes it */
    return fd;
}

static void close_all(lis_t *l)
{
    for (int i = 0; i < l->open; i++) close(l->fds[i]);
    l->open = 0;
}

static void test_accept(void)
{
    fy_loop_t loop;
    CHECK(fy_loop_init(&loop) == 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    fy_io_t io = {0};
    io.fd = fy_sock_listen((struct sockaddr *)&a, sizeof a, 512, "test");
    CHECK(io.fd >= 0);
    socklen_t al = sizeof a;
    CHECK(getsockname(io.fd, (struct sockaddr *)&a, &al) == 0);
    CHECK(fy_io_set(&loop, &io, EPOLLIN) == 0);
    lis_t l = {.limit = 2};
    fy_accept_pause_t pause;
    fy_accept_pause_init(&pause, &loop, "test", t_resume, &l);
    bool limited = false;

    /* the limit: two accepted, the third waits in the backlog, the socket is not watched */
    int c[80];
    for (int i = 0; i < 3; i++) c[i] = connect_to(&a);
    fy_accept_run(&loop, &io, &pause, &limited, &ops, &l);
    CHECK_EQ_INT(l.open, 2);
    CHECK(limited);
    CHECK_EQ_INT(io.events, 0);
    /* a close while still at the limit changes nothing; one under it watches again */
    fy_accept_closed(&loop, &io, &pause, &limited, false);
    CHECK(limited);
    CHECK_EQ_INT(io.events, 0);
    fy_accept_closed(&loop, &io, &pause, &limited, true);
    CHECK(!limited);
    CHECK_EQ_INT(io.events, EPOLLIN);
    CHECK_EQ_INT(l.resumed, 0); /* no descriptor pause was running */
    l.limit = -1;
    fy_accept_run(&loop, &io, &pause, &limited, &ops, &l); /* the third, then EAGAIN */
    CHECK_EQ_INT(l.open, 3);
    CHECK(!limited);
    CHECK_EQ_INT(io.events, EPOLLIN);
    for (int i = 0; i < 3; i++) close(c[i]);
    close_all(&l);

    /* a batch ends at FY_ACCEPT_BATCH; the next readiness takes the rest */
    for (int i = 0; i < 70; i++) c[i] = connect_to(&a);
    fy_accept_run(&loop, &io, &pause, &limited, &ops, &l);
    CHECK_EQ_INT(l.open, FY_ACCEPT_BATCH);
    fy_accept_run(&loop, &io, &pause, &limited, &ops, &l);
    CHECK_EQ_INT(l.open, 70);
    for (int i = 0; i < 70; i++) close(c[i]);
    close_all(&l);

    /* out of descriptors: not watched, paused; a freed descriptor ends the pause */
    c[0] = connect_to(&a);
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
    int probe = dup(0); /* the lowest free descriptor: no more may be opened past it */
    CHECK(probe >= 0);
    close(probe);
    struct rlimit low = {(rlim_t)probe, old.rlim_max};
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    fy_accept_run(&loop, &io, &pause, &limited, &ops, &l);
    CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
    CHECK_EQ_INT(l.open, 0);
    CHECK(pause.paused);
    CHECK_EQ_INT(pause.last_err, EMFILE);
    CHECK_EQ_INT(io.events, 0);
    CHECK(!limited);
    fy_accept_closed(&loop, &io, &pause, &limited, true);
    CHECK(!pause.paused);
    CHECK_EQ_INT(l.resumed, 1);
    CHECK(fy_io_set(&loop, &io, EPOLLIN) == 0); /* what the listener's resume does */
    fy_accept_run(&loop, &io, &pause, &limited, &ops, &l);
    CHECK_EQ_INT(l.open, 1);
    close(c[0]);
    close_all(&l);

    fy_accept_pause_stop(&pause);
    fy_io_set(&loop, &io, 0);
    close(io.fd);
    fy_loop_destroy(&loop);
}

FY_TEST_MAIN(test_accept())
