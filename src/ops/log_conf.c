/* Directive table of `log:`. */
#include "ops/log_conf.h"
#include "conf/conf_valid.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

const char *const fy_access_field_names[] = {
    [FY_AF_TIME] = "time",
    [FY_AF_REMOTE] = "remote",
    [FY_AF_METHOD] = "method",
    [FY_AF_TARGET] = "target",
    [FY_AF_HOST] = "host",
    [FY_AF_PROTO] = "proto",
    [FY_AF_STATUS] = "status",
    [FY_AF_BYTES] = "bytes",
    [FY_AF_DURATION_MS] = "duration_ms",
    [FY_AF_REFERER] = "referer",
    [FY_AF_USER_AGENT] = "user_agent",
    [FY_AF_ERROR] = "error",
    [FY_AF_TRACE_ID] = "trace_id",
    [FY_AF_REQUEST_BYTES] = "request_bytes",
    [FY_AF_COUNT] = NULL,
};

/* Each name one of fy_access_field_names, at most FY_ACCESS_MAX_FIELDS, none twice. */
static int valid_fields(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strlist_t *l = field;
    fy_log_conf_t *lc = obj;
    lc->n_access_fields = 0;
    if (l->n > FY_ACCESS_MAX_FIELDS) {
        fy_conf_error(ctx, node, NULL, "at most %d fields", FY_ACCESS_MAX_FIELDS);
        return -1;
    }
    for (size_t i = 0; i < l->n; i++) {
        int id = -1;
        for (int k = 0; k < FY_AF_COUNT && id < 0; k++)
            if (strcmp(l->v[i], fy_access_field_names[k]) == 0) id = k;
        if (id < 0) {
            char names[256];
            size_t o = 0;
            for (int k = 0; k < FY_AF_COUNT; k++)
                o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", k ? ", " : "",
                                      fy_access_field_names[k]);
            fy_conf_error(ctx, node, NULL, "unknown field \"%s\" (one of: %s)", l->v[i], names);
            return -1;
        }
        for (size_t j = 0; j < lc->n_access_fields; j++)
            if (lc->access_field_ids[j] == id) {
                fy_conf_error(ctx, node, NULL, "field \"%s\" listed twice", l->v[i]);
                return -1;
            }
        lc->access_field_ids[lc->n_access_fields++] = (uint8_t)id;
    }
    return 0;
}

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
     .dflt = "json",
     .enums = formats,
     .doc = "Access log line format: `json` (one object per line, keys as `access-fields` lists "
            "them), or nginx's `combined` / `common` (what `ferry serve`, `proxy` and `mitm` write "
            "to the console)."},
    {.key = "access-buffer",
     .type = FY_CT_SIZE,
     .offset = G(access_buffer),
     .dflt = "64k",
     .min = 4096,
     .max = 64 << 20,
     .doc = "Per-worker access log buffer, flushed every second and when full."},
    {.key = "access-fields",
     .type = FY_CT_STRLIST,
     .offset = G(access_fields),
     .csv = true,
     .validate = valid_fields,
     .doc = "json: the keys of each line, in order (default: time, remote, method, target, "
            "host, proto, status, bytes, duration_ms, referer, user_agent, error, trace_id; "
            "error and trace_id only when there is one); combined/common: fields appended to "
            "the standard line. Also: request_bytes."},
    {.key = NULL},
};
