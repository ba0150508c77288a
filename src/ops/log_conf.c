/* Directive table of `log:`. */
#include "ops/log_conf.h"
#include "conf/conf_valid.h"

#include <stddef.h>

#include "core/log.h"

/* Indexed by enum fy_log_level, so the stored index is the level (same order as
   fy_log_level_names). `emerg` is for the server itself, not a threshold one configures. */
static const char *const levels[] = {
    [FY_LOG_DEBUG] = "debug",  [FY_LOG_INFO] = "info",   [FY_LOG_NOTICE] = "notice",
    [FY_LOG_WARN] = "warn",    [FY_LOG_ERROR] = "error", [FY_LOG_ALERT] = "alert",
    [FY_LOG_ALERT + 1] = NULL,
};

static const char *const formats[] = {
    [FY_ACCESS_COMBINED] = "combined",
    [FY_ACCESS_COMMON] = "common",
    [FY_ACCESS_JSON] = "json",
    [FY_ACCESS_JSON + 1] = NULL,
};

#define G(f) offsetof(fy_log_conf_t, f)

const fy_conf_directive_t fy_log_conf_table[] = {
    {.key = "level",
     .type = FY_CT_ENUM,
     .offset = G(level),
     .dflt = "info",
     .enums = levels,
     .doc = "Lowest level written to the error log."},
    {.key = "error",
     .type = FY_CT_STRING,
     .offset = G(error),
     .validate = fy_conf_valid_log_target,
     .dflt = "stderr",
     .doc = "Error log: `stderr` or a file path."},
    {.key = "access",
     .type = FY_CT_STRING,
     .offset = G(access),
     .validate = fy_conf_valid_log_target,
     .dflt = "off",
     .doc = "Access log: `off`, `stdout`, or a file path."},
    {.key = "access-format",
     .type = FY_CT_ENUM,
     .offset = G(access_format),
     .dflt = "combined",
     .enums = formats,
     .doc = "Access log line format."},
    {.key = "access-buffer",
     .type = FY_CT_SIZE,
     .offset = G(access_buffer),
     .dflt = "64k",
     .min = 4096,
     .max = 64 << 20,
     .doc = "Per-worker access log buffer, flushed every second and when full."},
    {.key = NULL},
};
