/* Directive table of `intercept:`, CIDR and host-pattern helpers. */
#include "handler/mitm_conf.h"
#include "tls/tls_files.h"
#include "conf/conf_valid.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http/router.h"

int fy_cidr_parse(const char *s, fy_cidr_t *out)
{
    char buf[64];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n + 1);
    char *slash = strchr(buf, '/');
    int bits = -1;
    if (slash) {
        *slash = '\0';
        char *end;
        long b = strtol(slash + 1, &end, 10);
        if (*end || slash[1] == '\0' || b < 0 || b > 128) return -1;
        bits = (int)b;
    }
    memset(out, 0, sizeof *out);
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        out->family = AF_INET;
        if (bits > 32) return -1;
        out->bits = bits < 0 ? 32 : bits;
        return 0;
    }
    if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        out->family = AF_INET6;
        out->bits = bits < 0 ? 128 : bits;
        return 0;
    }
    return -1;
}

bool fy_cidr_match(const fy_cidr_t *c, const struct sockaddr *sa)
{
    const unsigned char *a;
    if (sa->sa_family == AF_INET) {
        if (c->family != AF_INET) return false;
        a = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
    } else if (sa->sa_family == AF_INET6) {
        a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        if (c->family == AF_INET) {
            static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            if (memcmp(a, mapped, 12) != 0) return false;
            a += 12;
        }
    } else {
        return false;
    }
    int bits = c->bits;
    for (int i = 0; bits > 0; i++, bits -= 8) {
        unsigned char m = bits >= 8 ? 0xff : (unsigned char)(0xff << (8 - bits));
        if ((a[i] & m) != (c->addr[i] & m)) return false;
    }
    return true;
}

bool fy_host_list_match(const fy_conf_strlist_t *l, const char *host)
{
    size_t hl = strlen(host);
    for (size_t i = 0; i < l->n; i++) {
        const char *p = l->v[i];
        if (strcmp(p, "*") == 0) return true;
        if (p[0] == '*' && p[1] == '.') {
            size_t sl = strlen(p + 1); /* ".example.com" */
            if (hl > sl && strcasecmp(host + hl - sl, p + 1) == 0) return true;
            continue;
        }
        if (strcasecmp(p, host) == 0) return true;
    }
    return false;
}

static int validate_cidrs(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    const fy_conf_strlist_t *l = field;
    int rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        fy_cidr_t c;
        if (fy_cidr_parse(l->v[i], &c) < 0) {
            fy_conf_error(ctx, node, NULL,
                          "bad CIDR '%.60s'; expected an address with an optional /prefix, like "
                          "10.0.0.0/8 or ::1",
                          l->v[i]);
            rc = -1;
        }
    }
    return rc;
}

static int validate_hostport(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    const char *v = *(char **)field;
    const char *c = strrchr(v, ':');
    char *end = NULL;
    long port = c ? strtol(c + 1, &end, 10) : 0;
    if (!c || c == v || !end || *end || port < 1 || port > 65535) {
        fy_conf_error(ctx, node, NULL, "expected host:port, got '%.100s'", v);
        return -1;
    }
    return 0;
}

static int validate_auth(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    const char *a = *(char **)field;
    if (!strchr(a, ':') || a[0] == ':') {
        fy_conf_error(ctx, node, NULL, "expected user:password");
        return -1;
    }
    return 0;
}

static int validate_regex(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    char msg[256];
    if (fy_regex_check(*(char **)field, msg, sizeof msg) < 0) {
        fy_conf_error(ctx, node, NULL, "invalid regular expression: %s", msg);
        return -1;
    }
    return 0;
}

static int validate_file(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    if (access(*(char **)field, R_OK) < 0) {
        fy_conf_error(ctx, node, NULL, "cannot read '%.200s'", *(char **)field);
        return -1;
    }
    return 0;
}

static int validate_origin_url(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                               void *obj)
{
    (void)obj;
    const char *u = *(char **)field;
    if (fy_conf_valid_field_value(ctx, node, field, obj) < 0) return -1; /* it becomes the Host */
    if ((strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0) ||
        u[strlen(u) - 1] == '/' || strchr(u + 8, '/') || strpbrk(u, " \t")) {
        fy_conf_error(ctx, node, NULL,
                      "expected http://HOST[:PORT] or https://HOST[:PORT], got '%.100s'", u);
        return -1;
    }
    return 0;
}

static const fy_conf_directive_t hdr_edit_table[] = {
    {.key = "set",
     .type = FY_CT_STRMAP,
     .offset = offsetof(fy_mitm_hdr_edit_t, set),
     .validate = fy_conf_valid_header_map,
     .doc = "Fields set (replacing any of the same name)."},
    {.key = "append",
     .type = FY_CT_STRMAP,
     .offset = offsetof(fy_mitm_hdr_edit_t, append),
     .validate = fy_conf_valid_header_map,
     .doc = "Fields added after the existing ones."},
    {.key = "remove",
     .type = FY_CT_STRLIST,
     .offset = offsetof(fy_mitm_hdr_edit_t, remove),
     .validate = fy_conf_valid_token_list,
     .doc = "Field names removed."},
    {.key = NULL},
};

static const char *const replace_in[] = {"response", "request", "both", NULL};

static int check_replace(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const fy_mitm_replace_t *r = obj;
    if ((r->search != NULL) == (r->regex != NULL)) {
        fy_conf_error(ctx, map, NULL, "needs exactly one of search, regex");
        return -1;
    }
    if (r->search && !r->search[0]) {
        fy_conf_error(ctx, map, "search", "must not be empty");
        return -1;
    }
    return 0;
}

static const fy_conf_directive_t replace_table[] = {
    {.key = "search",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_mitm_replace_t, search),
     .doc = "Literal text to replace (every occurrence)."},
    {.key = "regex",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_mitm_replace_t, regex),
     .validate = validate_regex,
     .doc = "PCRE2 pattern to replace (every match; `$1` in `with`)."},
    {.key = "with",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_mitm_replace_t, with),
     .dflt = "",
     .doc = "Replacement text."},
    {.key = "in",
     .type = FY_CT_ENUM,
     .offset = offsetof(fy_mitm_replace_t, in),
     .dflt = "response",
     .enums = replace_in,
     .doc = "Which body: response, request or both."},
    {.key = NULL, .check = check_replace},
};

static int check_respond(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const fy_mitm_respond_t *r = obj;
    if (r->body && r->file) {
        fy_conf_error(ctx, map, NULL, "body and file exclude each other");
        return -1;
    }
    return 0;
}

static const fy_conf_directive_t respond_table[] = {
    {.key = "status",
     .type = FY_CT_INT,
     .offset = offsetof(fy_mitm_respond_t, status),
     .dflt = "200",
     .min = 200,
     .max = 999,
     .doc = "Status code."},
    {.key = "body",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_mitm_respond_t, body),
     .doc = "Fixed body."},
    {.key = "file",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_mitm_respond_t, file),
     .validate = validate_file,
     .doc = "Serve this file's contents (read at start; map local)."},
    {.key = "headers",
     .type = FY_CT_STRMAP,
     .offset = offsetof(fy_mitm_respond_t, headers),
     .validate = fy_conf_valid_header_map,
     .doc = "Response header fields."},
    {.key = NULL, .check = check_respond},
};

static const fy_conf_directive_t match_table[] = {
    {.key = "host",
     .type = FY_CT_STRLIST,
     .offset = offsetof(fy_mitm_match_t, host),
     .doc = "Hosts (`example.com`, `*.example.com`); any when unset."},
    {.key = "path",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_mitm_match_t, path),
     .dflt = "/",
     .doc = "Path prefix."},
    {.key = "method",
     .type = FY_CT_STRLIST,
     .offset = offsetof(fy_mitm_match_t, methods),
     .doc = "Methods; any when unset."},
    {.key = "header",
     .type = FY_CT_STRMAP,
     .offset = offsetof(fy_mitm_match_t, headers),
     .doc = "Request fields with exactly this value (`\"*\"`: present)."},
    {.key = NULL},
};

#define R(f) offsetof(fy_mitm_rule_t, f)

static const fy_conf_directive_t rule_table[] = {
    {.key = "match",
     .type = FY_CT_TABLE,
     .offset = R(match),
     .sub = match_table,
     .doc = "Which intercepted requests the rule applies to; all when absent."},
    {.key = "request-headers",
     .type = FY_CT_TABLE,
     .offset = R(request_headers),
     .sub = hdr_edit_table,
     .doc = "Edit the request's header fields before it leaves."},
    {.key = "response-headers",
     .type = FY_CT_TABLE,
     .offset = R(response_headers),
     .sub = hdr_edit_table,
     .doc = "Edit the response's header fields."},
    {.key = "status",
     .type = FY_CT_INT,
     .offset = R(status),
     .min = 0,
     .max = 999,
     .doc = "Override the response status (0: keep)."},
    {.key = "respond",
     .type = FY_CT_TABLE_PTR,
     .offset = R(respond),
     .sub = respond_table,
     .sub_size = sizeof(fy_mitm_respond_t),
     .doc = "Answer with this response; the origin is not contacted."},
    {.key = "map-remote",
     .type = FY_CT_STRING,
     .offset = R(map_remote),
     .validate = validate_origin_url,
     .doc = "Send the request to this origin (`https://host:port`) instead."},
    {.key = "block",
     .type = FY_CT_BOOL,
     .offset = R(block),
     .dflt = "false",
     .doc = "Answer 403 without contacting the origin."},
    {.key = "replace",
     .type = FY_CT_TABLE_LIST,
     .offset = R(replace),
     .sub = replace_table,
     .sub_size = sizeof(fy_mitm_replace_t),
     .doc = "Body rewriting (bodies up to `body-cap`, gzip/br/zstd decoded and re-encoded; "
            "larger bodies stream through unchanged)."},
    {.key = NULL},
};

static const fy_conf_directive_t capture_table[] = {
    {.key = "har",
     .type = FY_CT_STRING,
     .offset = offsetof(struct fy_mitm_capture, har),
     .doc = "Write every intercepted or proxied flow (heads, bodies up to `body-cap`, sizes, "
            "timings) to this HAR 1.2 file, one complete valid document after each flow "
            "(truncated at start)."},
    {.key = "body-cap",
     .type = FY_CT_SIZE,
     .offset = offsetof(struct fy_mitm_capture, body_cap),
     .dflt = "64k",
     .max = 64 << 20,
     .doc = "Request and response body bytes kept per flow in the HAR (as sent to the client, "
            "base64 unless printable text); 0: none."},
    {.key = NULL},
};

/* `hosts:` of a destination rule: a CIDR, a keyword, or a host name pattern. */
static int validate_dest_hosts(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                               void *obj)
{
    (void)obj;
    const fy_conf_strlist_t *l = field;
    int rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        const char *h = l->v[i];
        fy_cidr_t c;
        if (fy_cidr_parse(h, &c) == 0 || strcmp(h, "loopback") == 0 || strcmp(h, "private") == 0 ||
            strcmp(h, "*") == 0)
            continue;
        const char *name = strncmp(h, "*.", 2) == 0 ? h + 2 : h;
        bool ok = name[0] && strlen(name) < 254 && name[0] != '.';
        for (const char *q = name; ok && *q; q++)
            ok = *q == '.' || *q == '-' || *q == '_' || (*q >= '0' && *q <= '9') ||
                 ((*q | 0x20) >= 'a' && (*q | 0x20) <= 'z');
        if (!ok) {
            fy_conf_error(ctx, node, NULL,
                          "bad destination '%.60s'; expected a CIDR (10.0.0.0/8, ::1), "
                          "loopback, private, a host name, *.example.com or *",
                          h);
            rc = -1;
        }
    }
    return rc;
}

int fy_port_range_parse(const char *s, int *lo, int *hi)
{
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s || a < 1 || a > 65535) return -1;
    if (*end == '-') {
        const char *q = end + 1;
        b = strtol(q, &end, 10);
        if (end == q || b < a || b > 65535) return -1;
    }
    if (*end) return -1;
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

static int validate_dest_ports(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                               void *obj)
{
    (void)obj;
    const fy_conf_strlist_t *l = field;
    int rc = 0, lo, hi;
    for (size_t i = 0; i < l->n; i++) {
        if (fy_port_range_parse(l->v[i], &lo, &hi) == 0) continue;
        fy_conf_error(ctx, node, NULL,
                      "bad port '%.40s'; expected a port (443) or a range (8000-8999) in 1..65535",
                      l->v[i]);
        rc = -1;
    }
    return rc;
}

static int check_dest_rule(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    (void)ctx;
    ((fy_mitm_dest_rule_t *)obj)->line = map->line;
    return 0;
}

static const char *const dest_actions[] = {"allow", "deny", NULL};

static const fy_conf_directive_t dest_rule_table[] = {
    {.key = "action",
     .type = FY_CT_ENUM,
     .offset = offsetof(fy_mitm_dest_rule_t, action),
     .required = true,
     .enums = dest_actions,
     .doc = "allow or deny the destinations this rule matches."},
    {.key = "hosts",
     .type = FY_CT_STRLIST,
     .offset = offsetof(fy_mitm_dest_rule_t, hosts),
     .validate = validate_dest_hosts,
     .doc = "Destinations: CIDRs (checked against the resolved address, so a name resolving "
            "into one matches), `loopback` (127.0.0.0/8, ::1, 0.0.0.0, ::), `private` "
            "(10/8, 172.16/12, 192.168/16, 100.64/10, 169.254/16, fc00::/7, fe80::/10), host "
            "names, `*.example.com`, `*`; any host when unset."},
    {.key = "ports",
     .type = FY_CT_STRLIST,
     .offset = offsetof(fy_mitm_dest_rule_t, ports),
     .validate = validate_dest_ports,
     .doc = "Ports (`443`) and ranges (`8000-8999`); any port when unset."},
    {.key = NULL, .check = check_dest_rule},
};

#define I(f) offsetof(fy_intercept_conf_t, f)

const fy_conf_directive_t fy_intercept_conf_table[] = {
    {.key = "ca-dir",
     .type = FY_CT_STRING,
     .offset = I(ca_dir),
     .validate = fy_conf_valid_state_dir,
     .doc = "Directory of the interception CA (`ferry-ca.pem`, `ferry-ca.key` mode 0600), "
            "generated on first use; default the data dir."},
    {.key = "upstream-ca",
     .type = FY_CT_STRING,
     .offset = I(upstream_ca),
     .validate = fy_tls_valid_ca_file,
     .doc = "PEM bundle to verify origin certificates; default the system store."},
    {.key = "insecure",
     .type = FY_CT_STRLIST,
     .offset = I(insecure),
     .doc = "Hosts (`example.com`, `*.example.com`) whose origin certificate is not verified. "
            "Everything else that fails verification gets a 502 page."},
    {.key = "allow",
     .type = FY_CT_STRLIST,
     .offset = I(allow),
     .dflt = "[127.0.0.0/8, \"::1/128\"]",
     .validate = validate_cidrs,
     .doc = "Client addresses (CIDRs) that may use the proxy; others get 403. Loopback only "
            "by default: Ferry is never an open proxy unless told."},
    {.key = "auth",
     .type = FY_CT_STRING,
     .offset = I(auth),
     .validate = validate_auth,
     .doc = "`user:password`: require Basic proxy authentication (407 otherwise)."},
    {.key = "passthrough",
     .type = FY_CT_STRLIST,
     .offset = I(passthrough),
     .doc = "Hosts (`example.com`, `*.example.com`, `*`) whose CONNECT tunnels are relayed "
            "without decryption."},
    {.key = "pinning-failures",
     .type = FY_CT_INT,
     .offset = I(pin_failures),
     .dflt = "3",
     .min = 0,
     .max = 1000,
     .doc = "Client TLS handshake failures with a forged certificate (certificate pinning) "
            "after which a host is passed through undecrypted; 0: never."},
    {.key = "pinning-ttl",
     .type = FY_CT_DURATION,
     .offset = I(pin_ttl_ms),
     .dflt = "10m",
     .doc = "How long a host stays passed through after pinning was detected."},
    {.key = "cert-cache",
     .type = FY_CT_INT,
     .offset = I(cert_cache),
     .dflt = "1000",
     .min = 1,
     .max = 1000000,
     .doc = "Forged certificates kept in memory (LRU, shared by the workers)."},
    {.key = "cert-disk-cache",
     .type = FY_CT_BOOL,
     .offset = I(cert_disk),
     .dflt = "false",
     .doc = "Also keep forged certificates (and their shared key, mode 0600) in "
            "`ca-dir/leaves`, so that a restart does not sign them again."},
    {.key = "max-origins",
     .type = FY_CT_INT,
     .offset = I(max_origins),
     .dflt = "1024",
     .min = 1,
     .max = 1000000,
     .doc = "Origins (host, port, TLS) with a connection pool per worker (LRU); past it, and "
            "all in use: 502."},
    {.key = "connect-timeout",
     .type = FY_CT_DURATION,
     .offset = I(connect_timeout_ms),
     .dflt = "10s",
     .doc = "Origin connect and TLS handshake, and the client's TLS handshake, each."},
    {.key = "resolve-timeout",
     .type = FY_CT_DURATION,
     .offset = I(resolve_timeout_ms),
     .dflt = "5s",
     .doc = "An origin's host name not resolved by then (by c-ares on the worker's loop) "
            "gives the client a 502 naming the name."},
    {.key = "resolve-cache",
     .type = FY_CT_INT,
     .offset = I(resolve_cache),
     .dflt = "1024",
     .min = 0,
     .max = 1000000,
     .doc = "Resolved host names kept (shared by the workers; 0: none); a newer name may "
            "replace an older one sooner."},
    {.key = "resolve-ttl",
     .type = FY_CT_DURATION,
     .offset = I(resolve_ttl_ms),
     .dflt = "60s",
     .doc = "Longest a resolved name is kept (its DNS record's TTL, when shorter, wins). "
            "Failures are never cached."},
    {.key = "resolver-threads",
     .type = FY_CT_INT,
     .offset = I(resolver_threads),
     .dflt = "2",
     .min = 1,
     .max = 64,
     .doc = "Ignored (kept so that older configs load): names are resolved by c-ares on "
            "each worker's loop, without threads."},
    {.key = "tunnel-idle-timeout",
     .type = FY_CT_DURATION,
     .offset = I(tunnel_idle_ms),
     .dflt = "5m",
     .doc = "A relayed (undecrypted) tunnel with no traffic either way is closed."},
    {.key = "forward",
     .type = FY_CT_STRING,
     .offset = I(forward),
     .validate = validate_hostport,
     .doc = "`host:port`: transparent listeners send everything there (instead of the original "
            "destination, or SNI/Host)."},
    {.key = "generic-certificate",
     .type = FY_CT_STRING,
     .offset = I(generic_cert),
     .doc = "Name of the certificate forged for transparent clients that send no SNI; default "
            "the destination address."},
    {.key = "rules",
     .type = FY_CT_TABLE_LIST,
     .offset = I(rules),
     .sub = rule_table,
     .sub_size = sizeof(fy_mitm_rule_t),
     .doc = "Rules for intercepted and proxied requests, applied in order (every matching "
            "rule's edits; the first `respond`/`block`/`map-remote`)."},
    {.key = "destinations",
     .type = FY_CT_TABLE_LIST,
     .offset = I(destinations),
     .sub = dest_rule_table,
     .sub_size = sizeof(fy_mitm_dest_rule_t),
     .doc = "Where clients may go through the proxy (CONNECT, absolute-form requests, SOCKS5, "
            "transparent): rules checked in order, the first whose `hosts` and `ports` match "
            "decides; denied is 403 naming the rule (SOCKS5: reply 2). No rule matching, and "
            "by default (no rules): allowed, as the clients are only the ones `allow` admits "
            "(loopback by default, who reach these hosts anyway). Widening `allow`? Add "
            "`{action: deny, hosts: [loopback, private]}` first."},
    {.key = "body-cap",
     .type = FY_CT_SIZE,
     .offset = I(body_cap),
     .dflt = "1m",
     .min = 1,
     .max = 1 << 30,
     .doc = "Largest body (decoded) that `replace` rules buffer and rewrite; past it the body "
            "streams through unchanged."},
    {.key = "capture",
     .type = FY_CT_TABLE,
     .offset = I(capture),
     .sub = capture_table,
     .doc = "Flow capture."},
    {.key = NULL},
};
