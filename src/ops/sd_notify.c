/* systemd notifications: thin wrappers over sd_notify(3) with the messages Ferry sends. */
#include "ops/sd_notify.h"

#include <stdio.h>
#include <systemd/sd-daemon.h>
#include <time.h>

static int send_msg(const char *msg)
{
    /* unset_environment = 0: the reload sends READY=1 again on the same socket */
    return sd_notify(0, msg);
}

int fy_sd_notify_ready(void)
{
    return send_msg("READY=1\nSTATUS=serving");
}

int fy_sd_notify_stopping(void)
{
    return send_msg("STOPPING=1\nSTATUS=draining");
}

int fy_sd_notify_reloading(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char msg[96];
    snprintf(msg, sizeof msg, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading",
             (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
    return send_msg(msg);
}

int fy_sd_notify_reloaded(bool ok, const char *why)
{
    char msg[512];
    if (ok)
        snprintf(msg, sizeof msg, "READY=1\nSTATUS=serving (reloaded)");
    else
        snprintf(msg, sizeof msg, "READY=1\nSTATUS=serving the previous configuration: %.400s",
                 why && *why ? why : "reload failed");
    /* STATUS is one line: a multi-line error would start new assignments */
    for (char *p = msg + sizeof "READY=1\nSTATUS=" - 1; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return send_msg(msg);
}

int fy_sd_notify_status(const char *text)
{
    char msg[512];
    snprintf(msg, sizeof msg, "STATUS=%.490s", text ? text : "");
    for (char *p = msg + sizeof "STATUS=" - 1; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return send_msg(msg);
}
