/* Directive table of the `waf:` policy and the ModSecurity directives it turns into. */
#include "policy/waf_conf.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf_valid.h"

static const char *const modes[] = {"blocking", "detection", NULL};
static const char *const overflows[] = {"reject", "pass", NULL};

static int validate_readable(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, const char *path,
                             int mode, const char *what)
{
    if (access(path, mode) == 0) return 0;
    fy_conf_error(ctx, node, NULL, "%s '%.200s' is not readable", what, path);
    return -1;
}

/* After the whole map: the CRS paths matter only when the CRS is loaded. */
static int check_crs(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const fy_waf_conf_t *c = obj;
    if (!c->crs) return 0;
    const fy_conf_node_t *n = fy_conf_map_at(map, "crs-setup");
    if (validate_readable(ctx, n, c->crs_setup, R_OK, "crs-setup: file") < 0) return -1;
    n = fy_conf_map_at(map, "crs-rules");
    return validate_readable(ctx, n, c->crs_rules, R_OK | X_OK, "crs-rules: directory");
}

static int validate_rules(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strlist_t *l = field;
    (void)obj;
    for (size_t i = 0; i < l->n; i++)
        if (validate_readable(ctx, node, l->v[i], R_OK, "rules file") < 0) return -1;
    return 0;
}

static int validate_audit(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *p = *(char **)field;
    (void)obj;
    if (!p) return 0;
    if (strpbrk(p, "\"\n\r")) {
        fy_conf_error(ctx, node, NULL, "a path with quotes or newlines is not allowed");
        return -1;
    }
    return 0;
}

#define W(f) offsetof(fy_waf_conf_t, f)

const fy_conf_directive_t fy_waf_conf_table[] = {
    {.key = "name",
     .type = FY_CT_STRING,
     .offset = W(name),
     .doc = "Names a `waf-policies` entry (required there: `listeners[].waf: NAME` uses it); "
            "on a route it labels the log lines and metrics."},
    {.key = "mode",
     .type = FY_CT_ENUM,
     .offset = W(mode),
     .dflt = "blocking",
     .enums = modes,
     .doc = "`blocking` answers a request the rules deny (403, or the rule's status); "
            "`detection` only logs what matched (rule id, message) and lets it through."},
    {.key = "paranoia",
     .type = FY_CT_INT,
     .offset = W(paranoia),
     .dflt = "1",
     .min = 1,
     .max = 4,
     .doc = "CRS paranoia level: 1 catches the classic attacks with few false positives; "
            "each level above adds rules (and false positives)."},
    {.key = "inbound-threshold",
     .type = FY_CT_INT,
     .offset = W(inbound_threshold),
     .dflt = "5",
     .min = 1,
     .max = 10000,
     .doc = "CRS inbound anomaly score at which a request is denied (one critical match is "
            "5)."},
    {.key = "body-limit",
     .type = FY_CT_SIZE,
     .offset = W(body_limit),
     .dflt = "128k",
     .min = 0,
     .max = 64 << 20,
     .doc = "Request body bytes held and inspected before the handler sees the request."},
    {.key = "body-overflow",
     .type = FY_CT_ENUM,
     .offset = W(body_overflow),
     .dflt = "reject",
     .enums = overflows,
     .doc = "A request body longer than `body-limit`: `reject` answers 413; `pass` inspects "
            "the first `body-limit` bytes and streams the rest uninspected."},
    {.key = "response",
     .type = FY_CT_BOOL,
     .offset = W(response),
     .dflt = "false",
     .doc = "Also run the response-header rules (phase 3: `RESPONSE_HEADERS`, "
            "`RESPONSE_STATUS`) before the head leaves; a denial replaces the response with the "
            "rule's status. Response bodies are not inspected, so the CRS's outbound rules (which "
            "read them) do not run."},
    {.key = "audit-log",
     .type = FY_CT_STRING,
     .offset = W(audit_log),
     .validate = validate_audit,
     .doc = "Append ModSecurity's audit log (JSON, one object per line) of the requests that "
            "matched a rule to this file."},
    {.key = "crs",
     .type = FY_CT_BOOL,
     .offset = W(crs),
     .dflt = "true",
     .doc = "Load the OWASP Core Rule Set (Debian `modsecurity-crs`); false runs only "
            "`rules`."},
    {.key = "crs-setup",
     .type = FY_CT_STRING,
     .offset = W(crs_setup),
     .dflt = "/etc/modsecurity/crs/crs-setup.conf",
     .doc = "The CRS setup file, loaded before the rules."},
    {.key = "crs-rules",
     .type = FY_CT_STRING,
     .offset = W(crs_rules),
     .dflt = "/usr/share/modsecurity-crs/rules",
     .doc = "Directory whose `*.conf` CRS rule files are loaded in name order."},
    {.key = "rules",
     .type = FY_CT_STRLIST,
     .offset = W(rules),
     .validate = validate_rules,
     .doc = "Extra ModSecurity rule files (SecRule ...), loaded after the CRS; a file that "
            "does not parse is a config error naming it and the reason."},
    {.key = "status",
     .type = FY_CT_INT,
     .offset = W(status),
     .dflt = "403",
     .min = 400,
     .max = 599,
     .doc = "Status of a denied request when the rule that denies names none."},
    {.key = NULL, .check = check_crs},
};

int fy__waf_base_rules(const fy_waf_conf_t *c, char *buf, size_t cap)
{
    /* Rules 200000..200002 are ModSecurity's recommended body processors: JSON and XML bodies
       are parsed into ARGS so that the CRS sees their values, and a body that does not parse
       is refused (else an attacker hides a payload behind a syntax error). 200003 is ours: a
       body without Content-Type is read as a form, so that leaving the header out does not
       hide a form's fields from the rules (ModSecurity alone parses no body then). */
    unsigned long long lim = (unsigned long long)c->body_limit;
    int n = snprintf(
        buf, cap,
        "SecRuleEngine %s\n"
        "SecRequestBodyAccess On\n"
        "SecRequestBodyLimit %llu\n"
        "SecRequestBodyNoFilesLimit %llu\n"
        "SecRequestBodyLimitAction ProcessPartial\n"
        "SecResponseBodyAccess Off\n"
        "SecArgumentSeparator &\n"
        "SecCookieFormat 0\n"
        "SecStatusEngine Off\n"
        "SecRule REQUEST_HEADERS:Content-Type \"^(?:application(?:/soap\\+|/)|text/)xml\" "
        "\"id:200000,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=XML\"\n"
        "SecRule REQUEST_HEADERS:Content-Type \"^application/json\" "
        "\"id:200001,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=JSON\"\n"
        "SecRule &REQUEST_HEADERS:Content-Type \"@eq 0\" "
        "\"id:200003,phase:1,t:none,pass,nolog,ctl:requestBodyProcessor=URLENCODED\"\n"
        "SecRule REQBODY_ERROR \"!@eq 0\" "
        "\"id:200002,phase:2,t:none,log,deny,status:400,"
        "msg:'Failed to parse request body.'\"\n",
        c->mode == FY_WAF_DETECTION ? "DetectionOnly" : "On", lim ? lim : 1, lim ? lim : 1);
    if (n < 0 || (size_t)n >= cap) return -1;
    size_t len = (size_t)n;
    if (c->audit_log) {
        n = snprintf(buf + len, cap - len,
                     "SecAuditEngine RelevantOnly\n"
                     "SecAuditLogRelevantStatus \"^(?:5|4(?!04))\"\n"
                     "SecAuditLogParts ABFHZ\n"
                     "SecAuditLogType Serial\n"
                     "SecAuditLogFormat JSON\n"
                     "SecAuditLog \"%s\"\n",
                     c->audit_log);
    } else {
        n = snprintf(buf + len, cap - len, "SecAuditEngine Off\n");
    }
    if (n < 0 || (size_t)n >= cap - len) return -1;
    return (int)(len + (size_t)n);
}

int fy__waf_crs_settings(const fy_waf_conf_t *c, char *buf, size_t cap)
{
    /* 900000, 900110 and 900230 are the ids crs-setup.conf keeps (commented out) for these;
       Debian's setup file leaves them unset, so REQUEST-901 would otherwise apply its defaults.
       HTTP/3 joins the allowed versions: CRS 3.3 predates it and 920430 would deny every h3
       request. */
    int n = snprintf(buf, cap,
                     "SecAction \"id:900000,phase:1,nolog,pass,t:none,"
                     "setvar:tx.paranoia_level=%lld\"\n"
                     "SecAction \"id:900110,phase:1,nolog,pass,t:none,"
                     "setvar:tx.inbound_anomaly_score_threshold=%lld\"\n"
                     "SecAction \"id:900230,phase:1,nolog,pass,t:none,"
                     "setvar:'tx.allowed_http_versions=HTTP/1.0 HTTP/1.1 HTTP/2 HTTP/2.0 "
                     "HTTP/3 HTTP/3.0'\"\n",
                     (long long)c->paranoia, (long long)c->inbound_threshold);
    if (n < 0 || (size_t)n >= cap) return -1;
    return n;
}

/* The value of the first `[key "value"]` at or after p, or NULL. */
static const char *field_of(const char *p, const char *key, size_t *len)
{
    p = strstr(p, key);
    if (!p) return NULL;
    p += strlen(key);
    const char *e = strstr(p, "\"]");
    if (!e) return NULL;
    *len = (size_t)(e - p);
    return p;
}

static bool all_digits(const char *p, size_t n)
{
    if (n == 0 || n > 10) return false;
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9') return false;
    return true;
}

bool fy__waf_log_fields(const char *line, const char **id, size_t *idlen, const char **msg,
                        size_t *msglen)
{
    /* ModSecurity writes `<match text> [file ..] [line ..] [id ..] [rev ..] [msg ..] [data ..]
       ...`: the id is the first all-digit one, the message the first after it */
    *id = *msg = "";
    *idlen = *msglen = 0;
    const char *p = line, *v;
    size_t n;
    while ((v = field_of(p, "[id \"", &n)) && !all_digits(v, n)) p = v;
    if (!v) return false;
    *id = v;
    *idlen = n;
    const char *m = field_of(v + n, "[msg \"", &n);
    if (m) {
        *msg = m;
        *msglen = n;
    }
    return true;
}
