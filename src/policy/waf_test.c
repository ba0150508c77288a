/* Unit tests of the WAF's pure parts: the `waf:` table (defaults, bounds, enums, the
 * `waf: detection` shorthand through the route table is covered by tests/test_waf.py), the
 * ModSecurity directives a config becomes (engine mode, body limit, audit log, CRS paranoia
 * level and thresholds), the buffers they need, and the rule id / message of a log line. */
#include "policy/waf_conf.c"

#include "core/test.h"

/* Apply the waf table to YAML `text`; 0 or -1 (errors into errs). */
static int apply(const char *text, fy_waf_conf_t *c, const char **errs)
{
    static fy_conf_arena_t *a;
    if (a) fy_conf_arena_free(a);
    a = fy_conf_arena_new();
    char err[256];
    fy_conf_node_t *n = fy_conf_parse(a, "t.yaml", text, strlen(text), err, sizeof err);
    if (!n) return -2;
    fy_conf_ctx_t *ctx = fy_conf_ctx_new(a);
    memset(c, 0, sizeof *c);
    int rc = fy_conf_apply(ctx, fy_waf_conf_table, n, c);
    *errs = fy_conf_errors(ctx);
    return rc;
}

static void test_table(void)
{
    fy_waf_conf_t c;
    const char *e;
    CHECK(apply("{}", &c, &e) == 0);
    CHECK_EQ_INT(c.mode, FY_WAF_BLOCKING);
    CHECK_EQ_INT(c.paranoia, 1);
    CHECK_EQ_INT(c.inbound_threshold, 5);
    CHECK_EQ_INT(c.body_limit, 128 * 1024);
    CHECK_EQ_INT(c.body_overflow, FY_WAF_OVERFLOW_REJECT);
    CHECK_EQ_INT(c.status, 403);
    CHECK(c.crs && c.audit_log == NULL && c.rules.n == 0);
    CHECK(!strcmp(c.crs_rules, "/usr/share/modsecurity-crs/rules"));

    CHECK(apply("{mode: detection, paranoia: 3, inbound-threshold: 10, body-limit: 1m, "
                "body-overflow: pass}",
                &c, &e) == 0);
    CHECK_EQ_INT(c.mode, FY_WAF_DETECTION);
    CHECK_EQ_INT(c.paranoia, 3);
    CHECK_EQ_INT(c.inbound_threshold, 10);
    CHECK_EQ_INT(c.body_limit, 1 << 20);
    CHECK_EQ_INT(c.body_overflow, FY_WAF_OVERFLOW_PASS);

    CHECK(apply("{paranoia: 5}", &c, &e) < 0 && strstr(e, "paranoia"));
    CHECK(apply("{paranoia: 0}", &c, &e) < 0);
    CHECK(apply("{mode: block}", &c, &e) < 0 && strstr(e, "mode"));
    CHECK(apply("{body-overflow: drop}", &c, &e) < 0);
    CHECK(apply("{status: 200}", &c, &e) < 0);
    CHECK(apply("{rules: [/nonexistent/x.conf]}", &c, &e) < 0 && strstr(e, "/nonexistent/x.conf") &&
          strstr(e, "not readable"));
    CHECK(apply("{crs-rules: /nonexistent}", &c, &e) < 0 && strstr(e, "directory"));
    /* without the CRS its paths are not needed */
    CHECK(apply("{crs: false, crs-rules: /nonexistent}", &c, &e) == 0);
    CHECK(apply("{audit-log: \"/tmp/a\\\"b\"}", &c, &e) < 0);
    CHECK(apply("{unknown-key: 1}", &c, &e) < 0);
}

static void test_directives(void)
{
    fy_waf_conf_t c;
    const char *e;
    char buf[4096];
    CHECK(apply("{}", &c, &e) == 0);
    int n = fy__waf_base_rules(&c, buf, sizeof buf);
    CHECK(n > 0 && (size_t)n == strlen(buf));
    CHECK(strstr(buf, "SecRuleEngine On\n"));
    CHECK(strstr(buf, "SecRequestBodyAccess On\n"));
    CHECK(strstr(buf, "SecRequestBodyLimit 131072\n"));
    CHECK(strstr(buf, "ctl:requestBodyProcessor=JSON"));
    CHECK(strstr(buf, "id:200003,") && strstr(buf, "ctl:requestBodyProcessor=URLENCODED"));
    CHECK(strstr(buf, "SecAuditEngine Off\n"));
    CHECK(!strstr(buf, "SecAuditLog \""));
    /* every buffer shorter than the text is refused, none is overrun */
    for (size_t cap = 0; cap <= (size_t)n; cap++) CHECK(fy__waf_base_rules(&c, buf, cap) == -1);

    CHECK(apply("{mode: detection, audit-log: /tmp/audit.json, body-limit: 0}", &c, &e) == 0);
    n = fy__waf_base_rules(&c, buf, sizeof buf);
    CHECK(n > 0);
    CHECK(strstr(buf, "SecRuleEngine DetectionOnly\n"));
    CHECK(strstr(buf, "SecAuditLogFormat JSON\n"));
    CHECK(strstr(buf, "SecAuditLog \"/tmp/audit.json\"\n"));
    CHECK(strstr(buf, "SecRequestBodyLimit 1\n")); /* ModSecurity refuses 0 */
    for (size_t cap = 0; cap <= (size_t)n; cap++) CHECK(fy__waf_base_rules(&c, buf, cap) == -1);

    CHECK(apply("{paranoia: 2, inbound-threshold: 7}", &c, &e) == 0);
    n = fy__waf_crs_settings(&c, buf, sizeof buf);
    CHECK(n > 0);
    CHECK(strstr(buf, "id:900000,") && strstr(buf, "setvar:tx.paranoia_level=2\""));
    CHECK(strstr(buf, "id:900110,") && strstr(buf, "tx.inbound_anomaly_score_threshold=7\""));
    CHECK(apply("{outbound-threshold: 4}", &c, &e) < 0); /* responses are not inspected */
    CHECK(strstr(buf, "HTTP/3.0"));
    for (size_t cap = 0; cap <= (size_t)n; cap++) CHECK(fy__waf_crs_settings(&c, buf, cap) == -1);
}

static void test_log_fields(void)
{
    const char *id, *msg;
    size_t il, ml;
    const char *line =
        "ModSecurity: Warning. detected SQLi using libinjection with fingerprint 's&sos' "
        "[file \"/usr/share/modsecurity-crs/rules/REQUEST-942-APPLICATION-ATTACK-SQLI.conf\"] "
        "[line \"65\"] [id \"942100\"] [rev \"\"] [msg \"SQL Injection Attack Detected via "
        "libinjection\"] [data \"Matched Data: s&sos found\"] [severity \"2\"]";
    CHECK(fy__waf_log_fields(line, &id, &il, &msg, &ml));
    CHECK(il == 6 && !memcmp(id, "942100", 6));
    CHECK(ml == strlen("SQL Injection Attack Detected via libinjection"));
    CHECK(!memcmp(msg, "SQL Injection", 13));
    /* no id: nothing */
    CHECK(!fy__waf_log_fields("[msg \"x\"]", &id, &il, &msg, &ml) && il == 0 && ml == 0);
    /* an id without a message */
    CHECK(fy__waf_log_fields("[id \"1\"]", &id, &il, &msg, &ml) && il == 1 && ml == 0);
    /* unterminated field */
    CHECK(!fy__waf_log_fields("[id \"123", &id, &il, &msg, &ml));
    CHECK(!fy__waf_log_fields("[id \"\"]", &id, &il, &msg, &ml));
    CHECK(!fy__waf_log_fields("", &id, &il, &msg, &ml));
    /* request bytes quoted before the real fields: a non-numeric fake id is skipped */
    CHECK(
        fy__waf_log_fields("Value: `\"] [id \"x\"] [msg \"fake\"]' [id \"942100\"] [msg \"real\"]",
                           &id, &il, &msg, &ml));
    CHECK(il == 6 && !memcmp(id, "942100", 6) && ml == 4 && !memcmp(msg, "real", 4));
    /* an id of more than 10 digits is none; a message before the id is not its message */
    CHECK(!fy__waf_log_fields("[id \"12345678901\"]", &id, &il, &msg, &ml));
    CHECK(fy__waf_log_fields("[msg \"before\"] [id \"7\"]", &id, &il, &msg, &ml) && ml == 0);
}

FY_TEST_MAIN(test_table(); test_directives(); test_log_fields())
