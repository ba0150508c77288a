/* systemd readiness (Type=notify) through libsystemd's sd_notify. Every call is a no-op
 * returning 0 when NOTIFY_SOCKET is unset (not started by systemd), so callers never check
 * whether they run under systemd. Returns > 0 when a message was sent, 0 when there is no
 * NOTIFY_SOCKET, -errno when sending failed (the server keeps running either way).
 * Threads: main thread (readiness, reload and stop notices). */
#ifndef FY_OPS_SD_NOTIFY_H
#define FY_OPS_SD_NOTIFY_H

#include <stdbool.h>

/* "READY=1" + STATUS: every listener is bound and the workers run. */
int fy_sd_notify_ready(void);
/* "STOPPING=1": the drain begins (SIGTERM/SIGINT). */
int fy_sd_notify_stopping(void);
/* "RELOADING=1" + MONOTONIC_USEC (what Type=notify-reload expects): a reload begins. */
int fy_sd_notify_reloading(void);
/* A reload ended: "READY=1" + STATUS saying whether the new generation runs or, with `why`,
 * why the previous one kept running. */
int fy_sd_notify_reloaded(bool ok, const char *why);
/* "STATUS=text" (shown by systemctl status). */
int fy_sd_notify_status(const char *text);

#endif
