/* Tests for sd_notify.c against a fake NOTIFY_SOCKET: a datagram socket made here, as systemd
 * makes one for a Type=notify service. Each call must arrive as exactly one datagram with the
 * expected assignments; without NOTIFY_SOCKET every call is a no-op returning 0. */
#include "ops/sd_notify.h"
#include "core/test.h"

#include <stddef.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int fake_socket(struct sockaddr_un *sa, bool abstract)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    socklen_t len;
    if (abstract) {
        int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "ferry-sd-test-%d", getpid());
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    } else {
        snprintf(sa->sun_path, sizeof sa->sun_path, "/tmp/ferry-sd-test-%d.sock", getpid());
        unlink(sa->sun_path);
        len = sizeof *sa;
    }
    if (bind(fd, (struct sockaddr *)sa, len) < 0) {
        close(fd);
        return -1;
    }
    char env[sizeof sa->sun_path + 1];
    snprintf(env, sizeof env, "%s%s", abstract ? "@" : "", sa->sun_path + (abstract ? 1 : 0));
    setenv("NOTIFY_SOCKET", env, 1);
    return fd;
}

/* the next datagram (non-blocking: the message was sent before we look) */
static ssize_t next_msg(int fd, char *buf, size_t cap)
{
    ssize_t n = recv(fd, buf, cap - 1, MSG_DONTWAIT);
    buf[n > 0 ? n : 0] = 0;
    return n;
}

static void test_unset(void)
{
    unsetenv("NOTIFY_SOCKET");
    CHECK_EQ_INT(fy_sd_notify_ready(), 0);
    CHECK_EQ_INT(fy_sd_notify_stopping(), 0);
    CHECK_EQ_INT(fy_sd_notify_reloading(), 0);
    CHECK_EQ_INT(fy_sd_notify_reloaded(true, NULL), 0);
}

static void test_messages(bool abstract)
{
    struct sockaddr_un sa;
    int fd = fake_socket(&sa, abstract);
    CHECK(fd >= 0);
    if (fd < 0) return;
    char buf[1024];

    CHECK(fy_sd_notify_ready() > 0);
    CHECK(next_msg(fd, buf, sizeof buf) > 0);
    CHECK(!strcmp(buf, "READY=1\nSTATUS=serving"));

    CHECK(fy_sd_notify_reloading() > 0);
    CHECK(next_msg(fd, buf, sizeof buf) > 0);
    CHECK(!strncmp(buf, "RELOADING=1\nMONOTONIC_USEC=", 27));
    char *end = NULL;
    unsigned long long usec = strtoull(buf + 27, &end, 10);
    CHECK(usec > 0 && end && !strcmp(end, "\nSTATUS=reloading"));

    CHECK(fy_sd_notify_reloaded(true, NULL) > 0);
    CHECK(next_msg(fd, buf, sizeof buf) > 0);
    CHECK(!strcmp(buf, "READY=1\nSTATUS=serving (reloaded)"));

    /* a multi-line error stays one STATUS line: no injected assignment */
    CHECK(fy_sd_notify_reloaded(false, "a.yaml:3:1: x: bad\nREADY=0") > 0);
    CHECK(next_msg(fd, buf, sizeof buf) > 0);
    CHECK(!strcmp(buf, "READY=1\nSTATUS=serving the previous configuration: "
                       "a.yaml:3:1: x: bad READY=0"));

    CHECK(fy_sd_notify_status("draining\n3 conns") > 0);
    CHECK(next_msg(fd, buf, sizeof buf) > 0);
    CHECK(!strcmp(buf, "STATUS=draining 3 conns"));

    CHECK(fy_sd_notify_stopping() > 0);
    CHECK(next_msg(fd, buf, sizeof buf) > 0);
    CHECK(!strcmp(buf, "STOPPING=1\nSTATUS=draining"));

    /* exactly one datagram per call: nothing left */
    CHECK(next_msg(fd, buf, sizeof buf) < 0);
    close(fd);
    if (!abstract) unlink(sa.sun_path);

    /* the socket is gone: sending fails with an error, not a crash */
    if (!abstract) CHECK(fy_sd_notify_ready() < 0);
    unsetenv("NOTIFY_SOCKET");
}

FY_TEST_MAIN(test_unset(); test_messages(false); test_messages(true))
