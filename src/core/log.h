/* Error log with levels. Lines look like
 *   2026/11/30 04:30:00 [error] 1234#2: message
 * (nginx's shape, so tests can fail on "[alert]" or "[emerg]"). Thread-safe: one write(2) per
 * line to the error log fd. */
#ifndef FY_CORE_LOG_H
#define FY_CORE_LOG_H

#include <stdarg.h>

enum fy_log_level {
    FY_LOG_DEBUG = 0,
    FY_LOG_INFO,
    FY_LOG_NOTICE,
    FY_LOG_WARN,
    FY_LOG_ERROR,
    FY_LOG_ALERT,
    FY_LOG_EMERG,
};

/* NULL-terminated: "debug", "info", "notice", "warn", "error", "alert", "emerg". */
extern const char *const fy_log_level_names[];
extern int fy_log_min_level; /* lines below it are dropped; default FY_LOG_INFO */

/* Route the error log to `fd` (default 2). Not owned. */
void fy_log_set_fd(int fd);
/* Worker id printed after the pid ("#N"); thread-local. */
void fy_log_set_worker(int id);

void fy_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fy_vlog(int level, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#define FY_LOG_ENABLED(lvl) ((lvl) >= fy_log_min_level)
#define fy_debug(...)                                                                              \
    do {                                                                                           \
        if (FY_LOG_ENABLED(FY_LOG_DEBUG)) fy_log(FY_LOG_DEBUG, __VA_ARGS__);                       \
    } while (0)
#define fy_info(...) fy_log(FY_LOG_INFO, __VA_ARGS__)
#define fy_notice(...) fy_log(FY_LOG_NOTICE, __VA_ARGS__)
#define fy_warn(...) fy_log(FY_LOG_WARN, __VA_ARGS__)
#define fy_error(...) fy_log(FY_LOG_ERROR, __VA_ARGS__)
#define fy_alert(...) fy_log(FY_LOG_ALERT, __VA_ARGS__)

#endif
