/* Typed configuration of the `waf:` policy (table: policy/waf_conf.c): per route inline, per
 * listener by name (listeners[].waf names an entry of the top-level `waf-policies:`), and the pure
 * pieces of the WAF filter that tests reach without ModSecurity traffic: the ModSecurity directives
 * a config turns into, and the rule id and message of a ModSecurity log line.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_POLICY_WAF_CONF_H
#define FY_POLICY_WAF_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"

enum fy_waf_mode { FY_WAF_BLOCKING = 0, FY_WAF_DETECTION = 1 };
enum fy_waf_overflow { FY_WAF_OVERFLOW_REJECT = 0, FY_WAF_OVERFLOW_PASS = 1 };

typedef struct fy_waf_conf {
    char *name;                /* `name` (entries of the top-level `waf-policies`) */
    int mode;                  /* `mode`: enum fy_waf_mode (shorthand `waf: blocking`) */
    int64_t paranoia;          /* `paranoia`: CRS paranoia level 1..4 */
    int64_t inbound_threshold; /* `inbound-threshold`: CRS inbound anomaly score that blocks */
    uint64_t body_limit;       /* `body-limit`: request body bytes inspected */
    int body_overflow;         /* `body-overflow`: enum fy_waf_overflow */
    bool response;             /* `response`: also run the response-header rules (phase 3) */
    char *audit_log;           /* `audit-log`: JSON audit log file, or NULL */
    bool crs;                  /* `crs`: load the OWASP Core Rule Set */
    char *crs_setup;           /* `crs-setup`: the CRS setup file */
    char *crs_rules;           /* `crs-rules`: directory of the CRS *.conf rule files */
    fy_conf_strlist_t rules;   /* `rules`: extra ModSecurity rule files, after the CRS */
    int64_t status;            /* `status`: answer when a rule denies without a status */
} fy_waf_conf_t;

/* routes[].waf (shorthand `waf: blocking`) and the items of the top-level `waf-policies:`. */
extern const fy_conf_directive_t fy_waf_conf_table[];

/* The ModSecurity directives that come before the CRS setup file (engine mode, body access
 * and limits, JSON/XML body processors, the audit log) into buf (NUL-terminated). Returns the
 * length, or -1 when cap is too small. Pure. */
int fy__waf_base_rules(const fy_waf_conf_t *c, char *buf, size_t cap);
/* The CRS settings (paranoia level, inbound anomaly threshold, allowed HTTP versions) that go after
 * the setup file and before the rules, as SecActions with the ids crs-setup.conf reserves for them.
 * As above. */
int fy__waf_crs_settings(const fy_waf_conf_t *c, char *buf, size_t cap);

/* From a ModSecurity log line (`... [id "942100"] ... [msg "SQL Injection ..."] ...`) the
 * rule id (the first `[id "..."]` of 1..10 digits) and the message after it, as pointer +
 * length into `line` (borrowed; NUL-terminated). false when the line names no such id (the
 * message is then empty). The line quotes request bytes, so a crafted request can place a
 * fake `[id "1"]` before the real one: these fields are for the log only, never a decision,
 * and the caller strips control bytes before logging them. Pure; fuzzed (fuzz_waf_log). */
bool fy__waf_log_fields(const char *line, const char **id, size_t *idlen, const char **msg,
                        size_t *msglen);

#endif
