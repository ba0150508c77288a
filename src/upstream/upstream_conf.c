/* Directive tables of `upstreams:` and their `servers:`. */
#include "upstream/upstream_conf.h"
#include "tls/tls_files.h"
#include "conf/conf_valid.h"

#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U(f) offsetof(fy_upstream_conf_t, f)
#define S(f) offsetof(fy_upstream_server_conf_t, f)

int fy_upstream_url_parse(const char *url, fy_upstream_server_conf_t *sv, bool numeric,
                          char host[256], char auth[256], char *err, size_t errlen)
{
    const char *rest;
    sv->tls = sv->h2 = sv->h3 = false;
    if (strncmp(url, "http://", 7) == 0) {
        rest = url + 7;
    } else if (strncmp(url, "https://", 8) == 0) {
        sv->tls = true;
        rest = url + 8;
    } else if (strncmp(url, "h2c://", 6) == 0) {
        sv->h2 = true; /* HTTP/2 with prior knowledge */
        rest = url + 6;
    } else if (strncmp(url, "h2://", 5) == 0) {
        sv->tls = true; /* HTTP/2 over TLS, ALPN h2 */
        sv->h2 = true;
        rest = url + 5;
    } else if (strncmp(url, "h3://", 5) == 0) {
        sv->tls = true; /* HTTP/3 over QUIC (UDP), ALPN h3 */
        sv->h3 = true;
        rest = url + 5;
    } else {
        snprintf(err, errlen, "expected a URL like http://127.0.0.1:8080, got '%.300s'", url);
        return -1;
    }
    size_t alen = strcspn(rest, "/?#");
    if (rest[alen] == '/' && rest[alen + 1] != '\0') {
        snprintf(err, errlen, "'%.300s': a server URL has no path (use add-prefix)", url);
        return -1;
    }
    if (alen == 0 || alen > 255) {
        snprintf(err, errlen, "'%.300s': missing host", url);
        return -1;
    }
    char port[8];
    memcpy(auth, rest, alen);
    auth[alen] = '\0';
    const char *h = auth, *p = NULL;
    size_t hl;
    if (auth[0] == '[') {
        const char *rb = strchr(auth, ']');
        if (!rb) goto bad;
        h = auth + 1;
        hl = (size_t)(rb - h);
        if (rb[1] == ':')
            p = rb + 2;
        else if (rb[1])
            goto bad;
    } else {
        const char *colon = strchr(auth, ':');
        hl = colon ? (size_t)(colon - auth) : alen;
        if (colon) p = colon + 1;
    }
    if (hl == 0 || hl >= 256) goto bad;
    memcpy(host, h, hl);
    host[hl] = '\0';
    if (p) {
        long pn = strtol(p, NULL, 10);
        if (!*p || strlen(p) > 5 || strspn(p, "0123456789") != strlen(p) || pn > 65535 || pn == 0)
            goto bad;
        snprintf(port, sizeof port, "%s", p);
    } else {
        snprintf(port, sizeof port, "%s", sv->tls ? "443" : "80");
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = numeric ? AI_NUMERICHOST : 0};
    struct addrinfo *res = NULL;
    int r = getaddrinfo(host, port, &hints, &res);
    if (r != 0 || !res) {
        if (numeric)
            snprintf(err, errlen, "'%.300s': '%s' is not an IP address", url, host);
        else
            snprintf(err, errlen, "'%.300s': cannot resolve '%s': %s", url, host, gai_strerror(r));
        if (res) freeaddrinfo(res);
        return -1;
    }
    memcpy(&sv->addr, res->ai_addr, res->ai_addrlen);
    sv->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
bad:
    snprintf(err, errlen, "'%.300s': expected SCHEME://HOST:PORT", url);
    return -1;
}

/* http://HOST[:PORT][/] or https://...; the host is resolved once, now (boot time). */
static int validate_url(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_upstream_server_conf_t *sv = obj;
    const char *url = *(char **)field;
    if (fy_conf_valid_field_value(ctx, node, field, obj) < 0) return -1; /* no CR/LF in messages */
    char host[256], auth[256], err[700];
    if (fy_upstream_url_parse(url, sv, false, host, auth, err, sizeof err) < 0) {
        fy_conf_error(ctx, node, NULL, "%s", err);
        return -1;
    }
    fy_conf_arena_t *a = fy_conf_ctx_arena(ctx);
    sv->host = fy_conf_strdup(a, host);
    sv->authority = fy_conf_strdup(a, auth);
    return 0;
}

static const fy_conf_directive_t server_table[] = {
    {.key = "url",
     .type = FY_CT_STRING,
     .offset = S(url),
     .required = true,
     .validate = validate_url,
     .doc = "`http://`, `https://`, `h2c://` (HTTP/2, prior knowledge), `h2://` (HTTP/2 over "
            "TLS, ALPN h2) or `h3://` (HTTP/3 over QUIC, verified with `ca`/`insecure`/`sni`) "
            "`HOST:PORT` (resolved once at start)."},
    {.key = "weight",
     .type = FY_CT_INT,
     .offset = S(weight),
     .dflt = "1",
     .min = 1,
     .max = 1000,
     .doc = "Share of the requests for balancing."},
    {.key = NULL},
};

static const char *const balance_names[] = {"round-robin", "random", "least-requests", "least-time",
                                            NULL};

#define H(f) offsetof(fy_health_conf_t, f)

static int validate_path(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    /* it goes into the request line: origin-form, a query allowed */
    return fy_conf_valid_target(ctx, node, field, obj);
}

static const char *const health_types[] = {"http", "tcp", NULL};

static const fy_conf_directive_t health_table[] = {
    {.key = "type",
     .type = FY_CT_ENUM,
     .offset = H(type),
     .dflt = "http",
     .enums = health_types,
     .doc = "`http`: GET `path`, judged by the status. `tcp`: the connection opening is the "
            "test (for `https://`/`h2://` servers, the TLS handshake too, verified as for "
            "requests): for layer-4 groups and non-HTTP origins."},
    {.key = "path",
     .type = FY_CT_STRING,
     .offset = H(path),
     .dflt = "/",
     .validate = validate_path,
     .doc = "Path requested with GET on every server (type http)."},
    {.key = "interval",
     .type = FY_CT_DURATION,
     .offset = H(interval_ms),
     .dflt = "5s",
     .min = 100,
     .max = 3600000,
     .doc = "Time between two probes of one server."},
    {.key = "timeout",
     .type = FY_CT_DURATION,
     .offset = H(timeout_ms),
     .dflt = "2s",
     .min = 10,
     .max = 600000,
     .doc = "A probe without a response head by then fails."},
    {.key = "expect-status",
     .type = FY_CT_INT,
     .offset = H(expect_status),
     .dflt = "0",
     .min = 0,
     .max = 599,
     .doc = "Status that counts as healthy; 0 means any 2xx or 3xx."},
    {.key = "fall",
     .type = FY_CT_INT,
     .offset = H(fall),
     .dflt = "3",
     .min = 1,
     .max = 100,
     .doc = "Consecutive failed probes that take a server out."},
    {.key = "rise",
     .type = FY_CT_INT,
     .offset = H(rise),
     .dflt = "2",
     .min = 1,
     .max = 100,
     .doc = "Consecutive good probes that bring it back."},
    {.key = NULL},
};

static int check_sticky(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const fy_sticky_conf_t *sc = obj;
    if (!sc->cookie == !sc->header) {
        fy_conf_error(ctx, map, NULL, "needs exactly one of cookie, header");
        return -1;
    }
    return 0;
}

static const fy_conf_directive_t sticky_table[] = {
    {.key = "cookie",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_sticky_conf_t, cookie),
     .validate = fy_conf_valid_token,
     .doc = "Cookie that pins a client to the server that answered it first (set by Ferry)."},
    {.key = "header",
     .type = FY_CT_STRING,
     .offset = offsetof(fy_sticky_conf_t, header),
     .validate = fy_conf_valid_token,
     .doc = "Request header whose value picks the server (same value, same server)."},
    {.key = NULL, .check = check_sticky},
};

#define D(f) offsetof(fy_discovery_conf_t, f)

static const char *const disc_types[] = {"A", "AAAA", "SRV", NULL};
static const char *const disc_schemes[] = {"http", "https", "h2c", "h2", "h3", NULL};

static int check_discovery(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const fy_discovery_conf_t *d = obj;
    if (!d->file == !d->dns) {
        fy_conf_error(ctx, map, NULL, "needs exactly one of file, dns");
        return -1;
    }
    if (d->dns && d->type != FY_DISC_SRV && d->port == 0) {
        fy_conf_error(ctx, map, "port", "is required for type A and AAAA");
        return -1;
    }
    if (d->min_ttl_ms > d->max_ttl_ms) {
        fy_conf_error(ctx, fy_conf_map_at(map, "min-ttl"), "min-ttl", "is above max-ttl");
        return -1;
    }
    return 0;
}

static int validate_resolver(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    const char *v = *(char **)field;
    if (!v) return 0;
    /* IP[:PORT],... (ares_set_servers_ports_csv's syntax; IPv6 as [ADDR]:PORT) */
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ') t++;
        char host[128] = "";
        const char *port = NULL;
        if (*t == '[') {
            char *rb = strchr(t, ']');
            if (!rb || (rb[1] && rb[1] != ':')) goto bad;
            snprintf(host, sizeof host, "%.*s", (int)(rb - t - 1), t + 1);
            if (rb[1] == ':') port = rb + 2;
        } else {
            char *c = strchr(t, ':');
            snprintf(host, sizeof host, "%.*s", (int)(c ? c - t : (long)strlen(t)), t);
            if (c) port = c + 1;
        }
        struct addrinfo hints = {.ai_flags = AI_NUMERICHOST}, *res = NULL;
        if (getaddrinfo(host, NULL, &hints, &res) != 0) goto bad;
        freeaddrinfo(res);
        if (port && (strspn(port, "0123456789") != strlen(port) || !*port ||
                     strtol(port, NULL, 10) > 65535 || strtol(port, NULL, 10) == 0))
            goto bad;
    }
    return 0;
bad:
    fy_conf_error(ctx, node, NULL, "expected IP[:PORT] separated by commas, got '%.200s'", v);
    return -1;
}

static const fy_conf_directive_t discovery_table[] = {
    {.key = "file",
     .type = FY_CT_STRING,
     .offset = D(file),
     .validate = fy_conf_valid_field_value,
     .doc = "File of servers, watched with inotify: a YAML list (`- http://10.0.0.1:8080` or "
            "`- {url: ..., weight: 2}`) or one URL per line, optionally followed by "
            "`weight=N`; `#` starts a comment. Hosts are IP addresses. A file that does not "
            "parse keeps the last good set (logged with file:line)."},
    {.key = "dns",
     .type = FY_CT_STRING,
     .offset = D(dns),
     .validate = fy_conf_valid_hostname,
     .doc = "Name to resolve (c-ares, on the first worker's loop), again when the answer's "
            "TTL (bounded by `min-ttl`, `max-ttl`) runs out."},
    {.key = "type",
     .type = FY_CT_ENUM,
     .offset = D(type),
     .dflt = "A",
     .enums = disc_types,
     .doc = "`A` or `AAAA`: one server per address, on `port`. `SRV`: the records of the "
            "lowest priority, each target resolved (A and AAAA), on the record's port with its "
            "weight (0 counts as 1)."},
    {.key = "port",
     .type = FY_CT_INT,
     .offset = D(port),
     .dflt = "0",
     .min = 0,
     .max = 65535,
     .doc = "Port of the servers found by A/AAAA (required there; SRV records carry theirs)."},
    {.key = "scheme",
     .type = FY_CT_ENUM,
     .offset = D(scheme),
     .dflt = "http",
     .enums = disc_schemes,
     .doc = "How the servers found by `dns` are spoken to, as a server URL's scheme; TLS "
            "ones are sent and verified for the DNS name (A/AAAA) or the SRV target."},
    {.key = "weight",
     .type = FY_CT_INT,
     .offset = D(weight),
     .dflt = "1",
     .min = 1,
     .max = 1000,
     .doc = "Weight of each server found by A/AAAA."},
    {.key = "min-ttl",
     .type = FY_CT_DURATION,
     .offset = D(min_ttl_ms),
     .dflt = "1s",
     .min = 100,
     .max = 86400000,
     .doc = "Shortest time between two lookups, whatever the TTL says (also the retry delay "
            "after a failed lookup)."},
    {.key = "max-ttl",
     .type = FY_CT_DURATION,
     .offset = D(max_ttl_ms),
     .dflt = "5m",
     .min = 100,
     .max = 86400000,
     .doc = "Longest time an answer is used before it is asked again."},
    {.key = "resolve-timeout",
     .type = FY_CT_DURATION,
     .offset = D(timeout_ms),
     .dflt = "5s",
     .min = 100,
     .max = 600000,
     .doc = "A lookup without an answer by then fails (the last good set stays); also bounds "
            "the lookup made while the configuration is loaded."},
    {.key = "resolver",
     .type = FY_CT_STRING,
     .offset = D(resolver),
     .validate = validate_resolver,
     .doc = "DNS servers to ask, `IP[:PORT],...`; unset: those of /etc/resolv.conf."},
    {.key = "max-servers",
     .type = FY_CT_INT,
     .offset = D(max_servers),
     .dflt = "32",
     .min = 1,
     .max = 62,
     .doc = "Servers kept at once (draining ones included); more found are skipped with a "
            "warning."},
    {.key = NULL, .check = check_discovery},
};

static int check_upstream(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    fy_upstream_conf_t *u = obj;
    if (!u->cert != !u->key) {
        fy_conf_error(ctx, map, u->cert ? "key" : "cert", "cert and key go together");
        return -1;
    }
    if (fy_tls_conf_check_pair(ctx, map, u->cert, u->key, NULL) < 0) return -1;
    if (u->servers.n && u->discovery) {
        fy_conf_error(ctx, map, "discovery", "servers and discovery: choose one");
        return -1;
    }
    if (u->servers.n == 0 && !u->discovery && u->name) {
        fy_conf_error(ctx, map, "servers", "needs at least one server (or discovery)");
        return -1;
    }
    return 0;
}

const fy_conf_directive_t fy_upstream_conf_table[] = {
    {.key = "name",
     .type = FY_CT_STRING,
     .offset = U(name),
     .required = true,
     .doc = "Name that routes use in `proxy: {upstream: NAME}`."},
    {.key = "servers",
     .type = FY_CT_TABLE_LIST,
     .offset = U(servers),
     .sub = server_table,
     .sub_size = sizeof(fy_upstream_server_conf_t),
     .shorthand_key = "url",
     .doc = "Origin servers; each a URL or `{url, weight}`. Required unless `discovery` finds "
            "them."},
    {.key = "discovery",
     .type = FY_CT_TABLE_PTR,
     .offset = U(discovery),
     .sub = discovery_table,
     .sub_size = sizeof(fy_discovery_conf_t),
     .doc = "Servers found at run time instead of `servers`: `{file: PATH}` (watched) or "
            "`{dns: NAME, type: A|AAAA|SRV, ...}` (re-resolved per TTL). Servers that go away "
            "are drained (requests in flight finish, idle connections close), new ones take "
            "traffic; a bad file or a failed lookup keeps the last good set."},
    {.key = "balance",
     .type = FY_CT_ENUM,
     .offset = U(balance),
     .dflt = "round-robin",
     .enums = balance_names,
     .doc = "How a server is chosen: `round-robin` (weighted), `random` (weighted), "
            "`least-requests`, `least-time` (two random choices compared by a decaying average "
            "of time to first byte x requests in flight; unmeasured servers are probed)."},
    {.key = "connect-timeout",
     .type = FY_CT_DURATION,
     .offset = U(connect_timeout_ms),
     .dflt = "5s",
     .doc = "Connecting (and the TLS handshake); past it the next server is tried, else 502."},
    {.key = "first-byte-timeout",
     .type = FY_CT_DURATION,
     .offset = U(first_byte_timeout_ms),
     .dflt = "60s",
     .doc = "From the whole request sent (its body's end) to the response head; past it: "
            "504. While the body goes out, `idle-timeout` bounds each pause instead."},
    {.key = "idle-timeout",
     .type = FY_CT_DURATION,
     .offset = U(idle_timeout_ms),
     .dflt = "60s",
     .doc = "No byte in either direction in the middle of an exchange; past it the exchange is "
            "aborted (504 if no response started)."},
    {.key = "keepalive",
     .type = FY_CT_INT,
     .offset = U(keepalive),
     .dflt = "512",
     .min = 0,
     .max = 100000,
     .doc = "Idle connections kept per server and worker for reuse; keep it at least the "
            "number of requests in flight, or connections churn (32 halved throughput at 64 "
            "concurrent clients). For `h2c://`/`h2://` servers: idle HTTP/2 connections "
            "(each carries many exchanges at once, up to the origin's stream limit)."},
    {.key = "keepalive-timeout",
     .type = FY_CT_DURATION,
     .offset = U(keepalive_timeout_ms),
     .dflt = "60s",
     .doc = "How long an idle pooled connection (or HTTP/2 connection without streams) is "
            "kept; no PINGs are sent meanwhile."},
    {.key = "retries",
     .type = FY_CT_INT,
     .offset = U(retries),
     .dflt = "1",
     .min = 0,
     .max = 10,
     .doc = "Extra attempts for idempotent requests without a body that failed before any "
            "response byte (on another server when there is one); HTTP/2 origins' refused "
            "streams (REFUSED_STREAM, past a GOAWAY) are retried for any request whose body "
            "had not started. A request that got no response head within "
            "`first-byte-timeout` may have reached the origin: it is retried only on a server "
            "not tried yet, never on the same one."},
    {.key = "retry-timeout",
     .type = FY_CT_DURATION,
     .offset = U(retry_timeout_ms),
     .dflt = "0s",
     .doc = "Bound on the time a request spends over all its attempts, from the first one's "
            "start: no retry starts past it, and a retry waits for its response head only "
            "until it (then 504). 0: no bound beyond each attempt's own timeouts."},
    {.key = "max-fails",
     .type = FY_CT_INT,
     .offset = U(max_fails),
     .dflt = "3",
     .min = 1,
     .max = 1000,
     .doc = "Consecutive connect errors or 5xx after which a server is ejected."},
    {.key = "fail-timeout",
     .type = FY_CT_DURATION,
     .offset = U(fail_timeout_ms),
     .dflt = "10s",
     .doc = "How long an ejected server sits out before it is tried again."},
    {.key = "ca",
     .type = FY_CT_STRING,
     .offset = U(ca),
     .validate = fy_tls_valid_ca_file,
     .doc = "PEM file of CAs that `https://` and `h2://` origins are verified against; "
            "default: the system store."},
    {.key = "insecure",
     .type = FY_CT_BOOL,
     .offset = U(insecure),
     .dflt = "false",
     .doc = "Skip origin certificate verification (only when asked)."},
    {.key = "sni",
     .type = FY_CT_STRING,
     .offset = U(sni),
     .validate = fy_conf_valid_hostname,
     .doc = "Server name sent to TLS origins and verified; default: the URL's host."},
    {.key = "cert",
     .type = FY_CT_STRING,
     .offset = U(cert),
     .validate = fy_conf_valid_readable_file,
     .doc = "Client certificate chain (PEM) presented to TLS and `h3://` origins (mTLS); with "
            "`key`."},
    {.key = "key",
     .type = FY_CT_STRING,
     .offset = U(key),
     .validate = fy_conf_valid_readable_file,
     .doc = "Private key (PEM) of `cert`."},
    {.key = "sticky",
     .type = FY_CT_TABLE_PTR,
     .offset = U(sticky),
     .sub = sticky_table,
     .sub_size = sizeof(fy_sticky_conf_t),
     .doc = "Session affinity: `{cookie: NAME}` (Ferry sets NAME to an opaque server id on the "
            "first response) or `{header: NAME}` (hash of the header's value). An ejected or "
            "unhealthy server is replaced by the balancer's choice."},
    {.key = "health-check",
     .type = FY_CT_TABLE_PTR,
     .offset = U(health),
     .sub = health_table,
     .sub_size = sizeof(fy_health_conf_t),
     .shorthand_key = "path",
     .doc = "Active health checks (one worker probes, all workers obey); shorthand "
            "`health-check: /health`. `h2c://`/`h2://` servers are probed with an HTTP/2 "
            "stream on the checking worker's pooled connection, `h3://` ones with an HTTP/3 "
            "stream on its pooled QUIC connection."},
    {.key = "circuit-breaker",
     .type = FY_CT_TABLE_PTR,
     .offset = U(breaker),
     .sub = fy_breaker_conf_table,
     .sub_size = sizeof(fy_breaker_conf_t),
     .doc = "A circuit breaker per server (and worker): closed, open after "
            "`consecutive-failures` or `error-rate`, half-open after `open-for`. An open "
            "server is skipped by balancing; when every server is open the request gets 503. "
            "`circuit-breaker: {}` takes every default."},
    {.key = "retry-budget",
     .type = FY_CT_TABLE_PTR,
     .offset = U(retry_budget),
     .sub = fy_retry_budget_conf_table,
     .sub_size = sizeof(fy_retry_budget_conf_t),
     .doc = "Retries allowed only while retries <= `ratio` x requests + `min-per-second` x "
            "`window` over the sliding window (per worker); past it a failure goes to the "
            "client and `ferry_upstream_retry_budget_exhausted_total` counts it."},
    {.key = "hedge",
     .type = FY_CT_TABLE_PTR,
     .offset = U(hedge),
     .sub = fy_hedge_conf_table,
     .sub_size = sizeof(fy_hedge_conf_t),
     .shorthand_key = "delay",
     .doc = "Hedged requests (shorthand `hedge: 50ms`): a GET or HEAD without a body that has "
            "no response head after `delay` is sent to another server as well; the first "
            "head wins and the other attempt is cancelled (h1: its connection closed; h2/h3: "
            "its stream reset). Counted in `ferry_upstream_hedges_total` and "
            "`ferry_upstream_hedge_wins_total` (the hedge answered first)."},
    {.key = NULL, .check = check_upstream},
};
