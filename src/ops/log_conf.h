/* Typed logging config (`log:`). Table: ops/log_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_OPS_LOG_CONF_H
#define FY_OPS_LOG_CONF_H

#include <stdint.h>

#include "conf/conf.h"

enum fy_access_format { FY_ACCESS_COMBINED = 0, FY_ACCESS_COMMON = 1, FY_ACCESS_JSON = 2 };

/* The fields an access-log line can hold (`access-fields`), by name in fy_access_field_names. */
enum fy_access_field {
    FY_AF_TIME = 0,
    FY_AF_REMOTE,
    FY_AF_METHOD,
    FY_AF_TARGET,
    FY_AF_HOST,
    FY_AF_PROTO,
    FY_AF_STATUS,
    FY_AF_BYTES,
    FY_AF_DURATION_MS,
    FY_AF_REFERER,
    FY_AF_USER_AGENT,
    FY_AF_ERROR,
    FY_AF_TRACE_ID,
    FY_AF_REQUEST_BYTES,
    FY_AF_COUNT
};
#define FY_ACCESS_MAX_FIELDS 32
extern const char *const fy_access_field_names[]; /* FY_AF_COUNT names, then NULL */

typedef struct fy_log_conf {
    int level;              /* `level`: debug|info|notice|warn|error|alert, default info
                               (index into fy_log_level_names of core/log.h) */
    char *error;            /* `error`: "stderr" (default) or a file path */
    char *access;           /* `access`: "off" (default), "stdout", or a file path */
    int access_format;      /* `access-format`: combined (default) | common | json */
    uint64_t access_buffer; /* `access-buffer`: per-worker buffer, default 64k, flushed each
                               second and when full */
    fy_conf_strlist_t access_fields; /* `access-fields`: json: the keys of a line, in order
                                        (empty: the default set); combined/common: fields
                                        appended to the line */
    uint8_t access_field_ids[FY_ACCESS_MAX_FIELDS]; /* derived: enum fy_access_field */
    size_t n_access_fields;
} fy_log_conf_t;

extern const fy_conf_directive_t fy_log_conf_table[];

#endif
