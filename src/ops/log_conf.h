/* Typed logging config (`log:`). Table: ops/log_conf.c. */
#ifndef FY_OPS_LOG_CONF_H
#define FY_OPS_LOG_CONF_H

#include <stdint.h>

#include "conf/conf.h"

enum fy_access_format { FY_ACCESS_COMBINED = 0, FY_ACCESS_COMMON = 1, FY_ACCESS_JSON = 2 };

typedef struct fy_log_conf {
    int level;              /* `level`: debug|info|notice|warn|error|alert, default info
                               (index into fy_log_level_names of core/log.h) */
    char *error;            /* `error`: "stderr" (default) or a file path */
    char *access;           /* `access`: "off" (default), "stdout", or a file path */
    int access_format;      /* `access-format`: combined (default) | common | json */
    uint64_t access_buffer; /* `access-buffer`: per-worker buffer, default 64k, flushed each
                               second and when full */
} fy_log_conf_t;

extern const fy_conf_directive_t fy_log_conf_table[];

#endif
