#include "core/log.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

const char *const fy_log_level_names[] = {"debug", "info",  "notice", "warn",
                                          "error", "alert", "emerg",  NULL};
int fy_log_min_level = FY_LOG_INFO;
static int log_fd = 2;
static __thread int log_worker = -1;

void fy_log_set_fd(int fd)
{
    log_fd = fd;
}

void fy_log_set_worker(int id)
{
    log_worker = id;
}

void fy_vlog(int level, const char *fmt, va_list ap)
{
    if (level < fy_log_min_level) return;
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(line, sizeof line, "%Y/%m/%d %H:%M:%S ", &tm);
    if (log_worker >= 0)
        n += snprintf(line + n, sizeof line - (size_t)n, "[%s] %d#%d: ", fy_log_level_names[level],
                      (int)getpid(), log_worker);
    else
        n += snprintf(line + n, sizeof line - (size_t)n, "[%s] %d: ", fy_log_level_names[level],
                      (int)getpid());
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (m < 0) m = 0;
    n += m;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(log_fd, line, (size_t)n);
    (void)w;
}

void fy_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fy_vlog(level, fmt, ap);
    va_end(ap);
}
