/* Tests of the whole configuration: the modules' tables composed by config.c, the embedded
 * default config, dump round trips and the docs. Links ferry_app (all the tables). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "core/log.h"
#include "core/test.h"

static char errs[8192];

/* Load yaml; on failure the errors are in `errs` (cleared on success). */
static fy_config_t *load(const char *yaml)
{
    FILE *f = fmemopen(errs, sizeof errs, "w");
    setbuf(f, NULL);
    fy_config_t *c = fy_config_load_text("c.yaml", yaml, strlen(yaml), f);
    fclose(f);
    if (c) errs[0] = '\0';
    return c;
}

static bool streq(const char *got, const char *want)
{
    if (!strcmp(got, want)) return true;
    fprintf(stderr, "  got:  [%s]\n  want: [%s]\n", got, want);
    return false;
}

/* yaml must fail with exactly `want` */
#define CHECK_FAIL(yaml, want)                                                                     \
    do {                                                                                           \
        fy_config_t *c_ = load(yaml);                                                              \
        CHECK(c_ == NULL);                                                                         \
        fy_config_free(c_);                                                                        \
        CHECK(streq(errs, want));                                                                  \
    } while (0)

#define L1 "listeners: [{address: 127.0.0.1:8080}]\n"

static char *dump(const fy_config_t *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fy_config_dump(c, f);
    fclose(f);
    return buf;
}

static void test_parse_addr(void)
{
    struct sockaddr_storage ss;
    socklen_t len;
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&ss;
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&ss;
    char buf[64];

    CHECK(fy_listener_parse_addr("127.0.0.1:8080", &ss, &len) == 0);
    CHECK(a4->sin_family == AF_INET && ntohs(a4->sin_port) == 8080 && len == sizeof *a4);
    CHECK(a4->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
    CHECK(fy_listener_parse_addr("[::1]:8443", &ss, &len) == 0);
    CHECK(a6->sin6_family == AF_INET6 && ntohs(a6->sin6_port) == 8443 && len == sizeof *a6);
    inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof buf);
    CHECK(!strcmp(buf, "::1"));
    CHECK(fy_listener_parse_addr("[::]:1", &ss, &len) == 0 && a6->sin6_family == AF_INET6);
    CHECK(fy_listener_parse_addr(":8080", &ss, &len) == 0);
    CHECK(a4->sin_family == AF_INET && a4->sin_addr.s_addr == htonl(INADDR_ANY));
    CHECK(fy_listener_parse_addr("8080", &ss, &len) == 0 && ntohs(a4->sin_port) == 8080);
    CHECK(fy_listener_parse_addr("localhost:80", &ss, &len) == 0);
    CHECK(a4->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && ntohs(a4->sin_port) == 80);
    CHECK(fy_listener_parse_addr("0.0.0.0:65535", &ss, &len) == 0);

    static const char *const bad[] = {
        "",
        ":",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:0",
        "1.2.3.4:65536",
        "1.2.3.4:99999999",
        "1.2.3.4:80x",
        "1.2.3.4:-1",
        "example.com:80",
        "::1:8080",
        "[::1]",
        "[::1]8080",
        "[::1:8080",
        "[1.2.3.4]:80",
        "256.0.0.1:80",
        "[zz]:80",
        "1.2.3.4: 80",
        " 1.2.3.4:80",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&ss, 0x5a, sizeof ss);
        len = 77;
        int rc = fy_listener_parse_addr(bad[i], &ss, &len);
        CHECK(rc == -1 && len == 77 && ((unsigned char *)&ss)[0] == 0x5a);
        if (rc != -1) fprintf(stderr, "  accepted '%s'\n", bad[i]);
    }
}

static void test_minimal_defaults(void)
{
    fy_config_t *c = load(L1);
    CHECK(c != NULL);
    if (!c) {
        fputs(errs, stderr);
        return;
    }
    CHECK_EQ_INT(c->workers, 0);
    CHECK_EQ_INT(c->listeners.n, 1);
    const fy_listener_conf_t *l = c->listeners.v;
    CHECK(!strcmp(l->address, "127.0.0.1:8080") && !strcmp(l->name, "127.0.0.1:8080"));
    CHECK(l->addr.ss_family == AF_INET && l->addrlen == sizeof(struct sockaddr_in));
    CHECK_EQ_INT(l->protocols, FY_PROTO_H1 | FY_PROTO_H2C); /* plain default: h1,h2c */
    CHECK(l->tls == NULL);
    CHECK_EQ_INT(l->backlog, 4096);
    CHECK_EQ_INT(c->routes.n, 0);
    /* limits: absent, all defaults */
    CHECK_EQ_INT(c->limits.max_request_line, 8192);
    CHECK_EQ_INT(c->limits.max_header_bytes, 32768);
    CHECK_EQ_INT(c->limits.max_headers, 100);
    CHECK_EQ_INT(c->limits.max_body, 16 << 20);
    CHECK_EQ_INT(c->limits.header_timeout_ms, 10000);
    CHECK_EQ_INT(c->limits.body_timeout_ms, 30000);
    CHECK_EQ_INT(c->limits.keepalive_timeout_ms, 75000);
    CHECK_EQ_INT(c->limits.send_timeout_ms, 60000);
    CHECK_EQ_INT(c->limits.keepalive_requests, 10000);
    CHECK_EQ_INT(c->limits.max_connections, 16384);
    CHECK_EQ_INT(c->log.level, FY_LOG_INFO);
    CHECK(!strcmp(c->log.error, "stderr") && !strcmp(c->log.access, "off"));
    CHECK_EQ_INT(c->log.access_format, FY_ACCESS_JSON);
    CHECK_EQ_INT(c->log.access_buffer, 65536);
    CHECK(c->data_dir && c->data_dir[0] == '/');
    CHECK(!strcmp(c->source, "c.yaml"));
    fy_config_free(c);
}

static void test_top_level(void)
{
    fy_config_t *c = load("workers: 4\n" L1);
    CHECK(c && c->workers == 4);
    fy_config_free(c);
    c = load("workers: 256\n" L1);
    CHECK(c && c->workers == 256);
    fy_config_free(c);
    c = load("workers: auto\n" L1);
    CHECK(c && c->workers == 0);
    fy_config_free(c);
    CHECK_FAIL("workers: 0\n" L1,
               "c.yaml:1:10: workers: expected 'auto' or a number from 1 to 256, got '0'\n");
    CHECK_FAIL("workers: 257\n" L1,
               "c.yaml:1:10: workers: expected 'auto' or a number from 1 to 256, got '257'\n");
    CHECK_FAIL("workers: many\n" L1,
               "c.yaml:1:10: workers: expected 'auto' or a number from 1 to 256, got 'many'\n");
    CHECK_FAIL("workers: [1]\n" L1,
               "c.yaml:1:10: workers: expected 'auto' or a number from 1 to 256, got a list\n");

    CHECK_FAIL("", "c.yaml:1:1: listeners: is required\n");
    CHECK_FAIL("listeners: []\n", "c.yaml:1:12: listeners: needs at least one item\n");
    CHECK_FAIL("listeners:\n", "c.yaml:1:1: listeners: is required\n");
    CHECK_FAIL("listen: :80\n",
               "c.yaml:1:1: listen: unknown key 'listen'; expected one of: workers, listeners, "
               "routes, upstreams, l4, cidr-lists, client-limits, rate-limits, waf-policies, "
               "limits, http2, "
               "quic, log, tracing, intercept, admin, inspector, data-dir\n");
    CHECK_FAIL("- a\n", "c.yaml:1:1: expected a map, got a list\n");
    CHECK_FAIL("a: [\n", "c.yaml:2:1: yaml: did not find expected node content (while parsing a "
                         "flow node at line 2); an opened quote or bracket is not closed\n");
    /* an unknown key that is valid one level down or up says so */
    CHECK_FAIL(L1 "routes:\n  - match:\n    path: /x\n    echo: {}\n",
               "c.yaml:4:5: routes[0].path: unknown key 'path'; did you mean to indent it under "
               "match? (expected one of: match, static, respond, echo, proxy, jwt, transform, "
               "compress, waf, cidr, "
               "rate-limit, client-limits, capture, webtransport, cache)\n");
    CHECK_FAIL(L1 "routes:\n  - match:\n      path: /x\n      echo: {}\n",
               "c.yaml:5:7: routes[0].match.echo: unknown key 'echo'; it belongs one level up: "
               "did you mean to indent it less, out of match? (expected one of: host, path, "
               "method, path-exact, path-regex, header, query)\n");
    CHECK_FAIL(
        "listeners:\n  - address: :80\n    cert: x\n",
        "c.yaml:3:5: listeners[0].cert: unknown key 'cert'; did you mean to indent it "
        "under tls? (expected one of: address, protocols, tls, backlog, name, kind, sni, share, "
        "cidr, client-limits, rate-limit, waf, accept-proxy)\n");
    /* a route naming no upstream: at the route's own line, not 1:1 */
    CHECK_FAIL(L1 "routes:\n  - echo: {}\n  - proxy: nope\n",
               "c.yaml:4:12: routes[1].proxy.upstream: no upstream named 'nope' (the config has "
               "no upstreams:)\n");
    CHECK_FAIL(L1 "upstreams: [{name: a, servers: [http://127.0.0.1:1]}]\nroutes:\n"
                  "  - proxy: {upstream: b}\n",
               "c.yaml:4:23: routes[0].proxy.upstream: no upstream named 'b'\n");
    /* two listeners on one address and transport */
    CHECK_FAIL("listeners:\n  - address: 127.0.0.1:80\n  - address: 127.0.0.1:80\n",
               "c.yaml:3:14: listeners[1].address: 127.0.0.1:80 (TCP) is already taken by "
               "listeners[0] at line 2; two listeners on one address would split its clients\n");
    c = load("listeners:\n  - address: 127.0.0.1:80\n  - address: 127.0.0.2:80\n"
             "  - address: \"[::1]:80\"\nl4:\n  - {listen: 127.0.0.1:80, mode: udp, target: "
             "127.0.0.1:9}\n");
    CHECK(c != NULL); /* other address, other family, other transport */
    fy_config_free(c);
    CHECK_FAIL(
        "listeners:\n  - address: 127.0.0.1:443\n    tls: self-signed\n"
        "    protocols: [h1, h3]\nl4:\n  - listen: 127.0.0.1:443\n    mode: quic-passthrough\n"
        "    target: 127.0.0.1:9\n",
        "c.yaml:6:13: l4[0].listen: 127.0.0.1:443 (UDP) is already taken by listeners[0] "
        "at line 2; two listeners on one address would split its clients\n");

    c = load(L1 "data-dir: /var/lib/ferry\n");
    CHECK(c && !strcmp(c->data_dir, "/var/lib/ferry"));
    fy_config_free(c);

    /* data-dir default: $XDG_DATA_HOME (absolute only), else $HOME/.local/share */
    char *old_xdg = getenv("XDG_DATA_HOME") ? strdup(getenv("XDG_DATA_HOME")) : NULL;
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    setenv("XDG_DATA_HOME", "/xdg", 1);
    c = load(L1);
    CHECK(c && !strcmp(c->data_dir, "/xdg/ferry"));
    fy_config_free(c);
    setenv("XDG_DATA_HOME", "relative", 1);
    setenv("HOME", "/home/u", 1);
    c = load(L1);
    CHECK(c && !strcmp(c->data_dir, "/home/u/.local/share/ferry"));
    fy_config_free(c);
    unsetenv("XDG_DATA_HOME");
    c = load(L1);
    CHECK(c && !strcmp(c->data_dir, "/home/u/.local/share/ferry"));
    fy_config_free(c);
    if (old_xdg) setenv("XDG_DATA_HOME", old_xdg, 1);
    if (old_home) setenv("HOME", old_home, 1);
    free(old_xdg);
    free(old_home);

    /* limits and log */
    c = load(L1 "limits:\n  body-size: 1g\n  header-timeout: 500ms\n  connections: 10\n"
                "log:\n  level: debug\n  access: stdout\n  access-format: json\n"
                "  access-buffer: 1m\n");
    CHECK(c != NULL);
    if (c) {
        CHECK_EQ_INT(c->limits.max_body, 1 << 30);
        CHECK_EQ_INT(c->limits.header_timeout_ms, 500);
        CHECK_EQ_INT(c->limits.max_connections, 10);
        CHECK_EQ_INT(c->limits.max_headers, 100);
        CHECK_EQ_INT(c->log.level, FY_LOG_DEBUG);
        CHECK(!strcmp(c->log.access, "stdout"));
        CHECK_EQ_INT(c->log.access_format, FY_ACCESS_JSON);
        CHECK_EQ_INT(c->log.access_buffer, 1 << 20);
    }
    fy_config_free(c);
    for (int lv = FY_LOG_DEBUG; lv <= FY_LOG_ALERT; lv++) {
        char y[128];
        snprintf(y, sizeof y, L1 "log: {level: %s}\n", fy_log_level_names[lv]);
        c = load(y);
        CHECK(c && c->log.level == lv);
        fy_config_free(c);
    }
    CHECK_FAIL(L1 "log: {level: loud}\n",
               "c.yaml:2:14: log.level: expected one of: debug, info, notice, warn, error, "
               "alert; got 'loud'\n");
    CHECK_FAIL(L1 "limits: {body-size: lots, header-count: 0}\n",
               "c.yaml:2:21: limits.body-size: expected a size like 16k, got 'lots'\n"
               "c.yaml:2:41: limits.header-count: must be between 1 and 10000, got 0\n");
    CHECK_FAIL(L1 "limits: {request-line: 2m}\n",
               "c.yaml:2:24: limits.request-line: must be between 256 and 1m, got 2m\n");
}

static void test_listeners(void)
{
    fy_config_t *c = load("listeners:\n"
                          "  - address: '[::1]:8443'\n"
                          "    protocols: h1, h2c ,h2,h3\n"
                          "    tls: self-signed\n"
                          "    backlog: 16\n"
                          "    name: main\n"
                          "  - address: :9000\n"
                          "    protocols: [h2c]\n");
    CHECK(c != NULL);
    if (c) {
        const fy_listener_conf_t *l = c->listeners.v;
        CHECK(l[0].addr.ss_family == AF_INET6);
        CHECK_EQ_INT(l[0].protocols, FY_PROTO_H1 | FY_PROTO_H2C | FY_PROTO_H2 | FY_PROTO_H3);
        CHECK_EQ_INT(l[0].backlog, 16);
        CHECK(!strcmp(l[0].name, "main"));
        CHECK_EQ_INT(l[1].protocols, FY_PROTO_H2C);
        CHECK(!strcmp(l[1].name, ":9000"));
    } else {
        fputs(errs, stderr);
    }
    fy_config_free(c);

    CHECK_FAIL(
        "listeners:\n  - listen: :80\n",
        "c.yaml:2:5: listeners[0].listen: unknown key 'listen'; expected one of: address, "
        "protocols, tls, backlog, name, kind, sni, share, cidr, client-limits, rate-limit, waf, "
        "accept-proxy\n"
        "c.yaml:2:5: listeners[0].address: is required\n");
    CHECK_FAIL("listeners:\n  - address: :80\n    accept-proxy: [10.0.0.0/33]\n",
               "c.yaml:3:19: listeners[0].accept-proxy: bad CIDR '10.0.0.0/33'; expected like "
               "10.0.0.0/8 or ::1\n");
    CHECK_FAIL("listeners:\n  - address: example.com:80\n",
               "c.yaml:2:14: listeners[0].address: bad address 'example.com:80'; expected "
               "HOST:PORT with a numeric host, like 127.0.0.1:8080, [::1]:8443 or :8080\n");
    CHECK_FAIL("listeners:\n  - address: :80\n    protocols: [h1, http/1.1]\n",
               "c.yaml:3:21: listeners[0].protocols: unknown protocol 'http/1.1'; expected one "
               "of: h1, h2c, h2, h3\n");
    CHECK_FAIL("listeners:\n  - address: :80\n    protocols: h1,,h2\n",
               "c.yaml:3:16: listeners[0].protocols: unknown protocol ''; expected one of: h1, "
               "h2c, h2, h3\n");
    CHECK_FAIL("listeners:\n  - address: :80\n    protocols: []\n",
               "c.yaml:3:16: listeners[0].protocols: needs at least one protocol\n");
    CHECK_FAIL("listeners:\n  - address: :80\n    protocols: {h1: true}\n",
               "c.yaml:3:16: listeners[0].protocols: expected a list of protocols like [h1, h2], "
               "got a map\n");
    CHECK_FAIL("listeners:\n  - address: :80\n    backlog: 0\n",
               "c.yaml:3:14: listeners[0].backlog: must be between 1 and 65535, got 0\n");
    CHECK_FAIL("listeners: {address: ':80'}\n",
               "c.yaml:1:12: listeners: expected a list of maps, got a map\n");
}

static void test_tls(void)
{
    fy_config_t *c = load("listeners:\n  - address: :443\n    tls: self-signed\n");
    CHECK(c != NULL);
    if (c) {
        const fy_listener_conf_t *l = c->listeners.v;
        const fy_tls_conf_t *t = l->tls;
        CHECK(t && t->self_signed && t->certificates.n == 0);
        CHECK(t && t->session_tickets && t->handshake_timeout_ms == 10000);
        CHECK(t && t->min_version == FY_TLS_V12 && t->ciphers == NULL);
        CHECK_EQ_INT(l->protocols, FY_PROTO_H1 | FY_PROTO_H2); /* tls default: h1,h2 */
    }
    fy_config_free(c);

    c = load("listeners:\n"
             "  - address: :443\n"
             "    tls:\n"
             "      cert: a.pem\n"
             "      key: a.key\n"
             "      certificates:\n"
             "        - {cert: b.pem, key: b.key}\n"
             "      min-version: 1.3\n"
             "      session-tickets: false\n"
             "      handshake-timeout: 2s\n"
             "      ciphers: ECDHE+AESGCM\n");
    CHECK(c != NULL);
    if (c) {
        const fy_tls_conf_t *t = ((const fy_listener_conf_t *)c->listeners.v)->tls;
        const fy_tls_cert_conf_t *cc = t->certificates.v;
        CHECK_EQ_INT(t->certificates.n, 2);
        CHECK(!strcmp(cc[0].cert, "a.pem") && !strcmp(cc[0].key, "a.key"));
        CHECK(!strcmp(cc[1].cert, "b.pem") && !strcmp(cc[1].key, "b.key"));
        CHECK(t->min_version == FY_TLS_V13 && !t->session_tickets);
        CHECK(t->handshake_timeout_ms == 2000 && !strcmp(t->ciphers, "ECDHE+AESGCM"));
        /* the dump loads back without duplicating the merged default certificate */
        char *d = dump(c);
        fy_config_t *c2 = load(d);
        CHECK(c2 != NULL);
        if (c2) {
            const fy_tls_conf_t *t2 = ((const fy_listener_conf_t *)c2->listeners.v)->tls;
            CHECK_EQ_INT(t2->certificates.n, 2);
            char *d2 = dump(c2);
            CHECK(streq(d2, d));
            free(d2);
        }
        fy_config_free(c2);
        free(d);
    } else {
        fputs(errs, stderr);
    }
    fy_config_free(c);

    c = load("listeners:\n  - address: :443\n    tls: {min-version: \"1.3\", "
             "certificates: [{cert: x, key: y}]}\n");
    CHECK(c != NULL);
    fy_config_free(c);

#define TLS_HEAD "listeners:\n  - address: :443\n    tls:\n"
    CHECK_FAIL(TLS_HEAD "      cert: a.pem\n",
               "c.yaml:4:7: listeners[0].tls.key: is required when 'cert' is set\n");
    CHECK_FAIL(TLS_HEAD "      key: a.key\n",
               "c.yaml:4:7: listeners[0].tls.cert: is required when 'key' is set\n");
    CHECK_FAIL(TLS_HEAD "      self-signed: true\n      cert: a\n      key: b\n",
               "c.yaml:4:7: listeners[0].tls: self-signed cannot be combined with cert/key or "
               "certificates; choose one\n");
    CHECK_FAIL(TLS_HEAD "      self-signed: true\n      certificates: [{cert: a, key: b}]\n",
               "c.yaml:4:7: listeners[0].tls: self-signed cannot be combined with cert/key or "
               "certificates; choose one\n");
    CHECK_FAIL(TLS_HEAD "      session-tickets: true\n",
               "c.yaml:4:7: listeners[0].tls: needs a certificate: set cert and key, "
               "certificates, or self-signed\n");
    CHECK_FAIL(TLS_HEAD "      self-signed: false\n",
               "c.yaml:4:7: listeners[0].tls: needs a certificate: set cert and key, "
               "certificates, or self-signed\n");
    CHECK_FAIL(TLS_HEAD "      certificates: [{cert: a}]\n",
               "c.yaml:4:22: listeners[0].tls.certificates[0].key: is required\n");
    CHECK_FAIL(TLS_HEAD "      self-signed: true\n      min-version: 1.1\n",
               "c.yaml:5:20: listeners[0].tls.min-version: expected one of: 1.2, 1.3; got "
               "'1.1'\n");
    CHECK_FAIL(TLS_HEAD "      self-signed: true\n      handshake-timeout: 1ms\n",
               "c.yaml:5:26: listeners[0].tls.handshake-timeout: must be between 100ms and 1h, "
               "got 1ms\n");
    CHECK_FAIL("listeners:\n  - address: :443\n    tls: yes\n",
               "c.yaml:3:10: listeners[0].tls: expected a map or 'self-signed', got 'yes'\n");
}

static bool r_echo_ok(const fy_config_t *c)
{
    const fy_route_conf_t *r = c->routes.v;
    return r[4].echo && !r[4].static_ && !r[4].respond && !r[0].echo && !r[3].echo;
}

static void test_routes(void)
{
    char dir[] = "/tmp/fy_config_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char y[1024];
    snprintf(y, sizeof y,
             L1 "routes:\n"
                "  - match:\n"
                "      host: [Example.COM, '*.Example.org']\n"
                "      path: /api\n"
                "      method: [GET, HEAD]\n"
                "    respond:\n"
                "      status: 404\n"
                "      headers: {content-type: text/plain, x-a: b}\n"
                "      body: \"nope\\n\"\n"
                "  - match: {host: one.example}\n"
                "    static:\n"
                "      root: %s/\n"
                "      index: [index.htm, index.html]\n"
                "      listing: true\n"
                "      cache-control: max-age=60\n"
                "      file-cache: 0\n"
                "  - static: %s\n"
                "  - respond: {}\n"
                "  - echo: {}\n",
             dir, dir);
    fy_config_t *c = load(y);
    CHECK(c != NULL);
    if (c) {
        CHECK_EQ_INT(c->routes.n, 5);
        CHECK(r_echo_ok(c));
        const fy_route_conf_t *r = c->routes.v;
        CHECK_EQ_INT(r[0].match.host.n, 2);
        CHECK(!strcmp(r[0].match.host.v[0], "example.com"));
        CHECK(!strcmp(r[0].match.host.v[1], "*.example.org"));
        CHECK(!strcmp(r[0].match.path, "/api"));
        CHECK(r[0].match.methods.n == 2 && !strcmp(r[0].match.methods.v[1], "HEAD"));
        CHECK(r[0].static_ == NULL && r[0].respond != NULL);
        CHECK_EQ_INT(r[0].respond->status, 404);
        CHECK_EQ_INT(r[0].respond->headers.n, 2);
        CHECK(!strcmp(r[0].respond->body, "nope\n") && r[0].respond->body_len == 5);
        CHECK(r[1].match.host.n == 1 && !strcmp(r[1].match.path, "/"));
        const fy_static_conf_t *s = r[1].static_;
        CHECK(s && !strcmp(s->root, dir)); /* realpath: no trailing slash */
        CHECK(s && s->index.n == 2 && s->listing && s->precompressed && s->etag);
        CHECK(s && !strcmp(s->cache_control, "max-age=60") && s->file_cache_entries == 0);
        CHECK(s && s->file_cache_max_size == 65536 && s->file_cache_ttl_ms == 1000);
        s = r[2].static_;
        CHECK(s && !strcmp(s->root, dir) && s->index.n == 1 &&
              !strcmp(s->index.v[0], "index.html"));
        CHECK(s && !s->listing && s->cache_control == NULL && s->file_cache_entries == 1024);
        CHECK(r[2].match.host.n == 0 && r[2].match.methods.n == 0 && !strcmp(r[2].match.path, "/"));
        const fy_respond_conf_t *rs = r[3].respond;
        CHECK(rs && rs->status == 200 && rs->headers.n == 0 && !strcmp(rs->body, "") &&
              rs->body_len == 0);
    } else {
        fputs(errs, stderr);
    }
    fy_config_free(c);

    /* relative roots resolve against the working directory */
    char cwd[4096];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(dir) == 0);
    CHECK(mkdir("site", 0755) == 0);
    c = load(L1 "routes: [{static: site}]\n");
    CHECK(c != NULL);
    if (c) {
        char want[4200];
        snprintf(want, sizeof want, "%s/site", dir);
        CHECK(streq(((const fy_route_conf_t *)c->routes.v)->static_->root, want));
    }
    fy_config_free(c);
    FILE *f = fopen("file.txt", "w");
    if (f) fclose(f);
    CHECK_FAIL(L1 "routes: [{static: file.txt}]\n",
               "c.yaml:2:19: routes[0].static.root: no such directory 'file.txt'\n");
    rmdir("site");
    unlink("file.txt");
    CHECK(chdir(cwd) == 0);
    rmdir(dir);

    CHECK_FAIL(L1 "routes:\n  - static: {root: /nonexistent/dir}\n",
               "c.yaml:3:20: routes[0].static.root: no such directory '/nonexistent/dir'\n");
    CHECK_FAIL(L1 "routes:\n  - static: {index: x}\n",
               "c.yaml:3:13: routes[0].static.root: is required\n");
    CHECK_FAIL(L1 "routes:\n  - static: {root: /, index: [a/b]}\n",
               "c.yaml:3:30: routes[0].static.index: index 'a/b' must be a plain file name\n");
    CHECK_FAIL(L1 "routes:\n  - match: {path: /}\n",
               "c.yaml:3:5: routes[0]: needs a handler: one of static, respond, echo, proxy, "
               "webtransport\n");
    CHECK_FAIL(L1 "routes:\n  - static: /\n    respond: {}\n",
               "c.yaml:3:5: routes[0]: has more than one handler (static, respond, echo, proxy, "
               "webtransport); use one "
               "per route\n");
    CHECK_FAIL(L1 "routes:\n  - echo: {}\n    static: /\n",
               "c.yaml:3:5: routes[0]: has more than one handler (static, respond, echo, proxy, "
               "webtransport); use one "
               "per route\n");
    CHECK_FAIL(L1 "routes:\n  - echo: {x: 1}\n",
               "c.yaml:3:12: routes[0].echo.x: unknown key 'x'; this map takes no keys\n");
    CHECK_FAIL(L1 "routes:\n  - match: {path: api}\n    respond: {}\n",
               "c.yaml:3:19: routes[0].match.path: must start with '/', got 'api'\n");
    CHECK_FAIL(L1 "routes:\n  - match: {path: '/a b'}\n    respond: {}\n",
               "c.yaml:3:19: routes[0].match.path: '/a b' has a character not allowed in a "
               "path\n");
    CHECK_FAIL(L1 "routes:\n  - match: {host: [ok.com, 'a..b', '*', 'x.com:80']}\n"
                  "    respond: {}\n",
               "c.yaml:3:19: routes[0].match.host: bad host 'a..b'; expected a name like "
               "example.com or *.example.com\n"
               "c.yaml:3:19: routes[0].match.host: bad host '*'; expected a name like "
               "example.com or *.example.com\n"
               "c.yaml:3:19: routes[0].match.host: bad host 'x.com:80'; expected a name like "
               "example.com or *.example.com\n");
    CHECK_FAIL(L1 "routes:\n  - match: {method: 'GE T'}\n    respond: {}\n",
               "c.yaml:3:21: routes[0].match.method: bad method 'GE T'\n");
    CHECK_FAIL(L1 "routes:\n  - match: {uri: /}\n    respond: {}\n",
               "c.yaml:3:13: routes[0].match.uri: unknown key 'uri'; expected one of: host, "
               "path, method, path-exact, path-regex, header, query\n");
    CHECK_FAIL(L1 "routes:\n  - respond: {status: 100}\n",
               "c.yaml:3:23: routes[0].respond.status: must be between 200 and 599, got 100\n");
    CHECK_FAIL(L1 "routes:\n  - respond: {status: 600}\n",
               "c.yaml:3:23: routes[0].respond.status: must be between 200 and 599, got 600\n");
    CHECK_FAIL(L1 "routes:\n  - respond:\n      headers: {'bad name': x}\n",
               "c.yaml:4:17: routes[0].respond.headers: header name \"bad name\" has a space; a "
               "name is one token\n");
    CHECK_FAIL(L1 "routes:\n  - respond:\n      headers: {x: \"a\\r\\nb: c\"}\n",
               "c.yaml:4:20: routes[0].respond.headers.x: value \"a\\r\\nb: c\" has a line break "
               "(CR or LF); a value is one line\n");
    /* all errors of all routes at once */
    CHECK_FAIL(L1 "routes:\n  - respond: {status: x}\n  - static: {root: /nonexistent}\n",
               "c.yaml:3:23: routes[0].respond.status: expected an integer, got 'x'\n"
               "c.yaml:4:20: routes[1].static.root: no such directory '/nonexistent'\n");
}

static void test_demo_root(void)
{
    char *old = getenv("FERRY_DEMO_DIR") ? strdup(getenv("FERRY_DEMO_DIR")) : NULL;
    char dir[] = "/tmp/fy_demo_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    setenv("FERRY_DEMO_DIR", dir, 1);
    fy_config_t *c = load(L1 "routes: [{static: '@demo'}]\n");
    CHECK(c && !strcmp(((const fy_route_conf_t *)c->routes.v)->static_->root, dir));
    fy_config_free(c);
    setenv("FERRY_DEMO_DIR", "/nonexistent/demo", 1);
    CHECK_FAIL(L1 "routes: [{static: '@demo'}]\n",
               "c.yaml:2:19: routes[0].static.root: no demo directory found (looked at "
               "$FERRY_DEMO_DIR, <exe dir>/../demo, <exe dir>/../share/ferry/demo, ./demo)\n");
    rmdir(dir);
    if (old)
        setenv("FERRY_DEMO_DIR", old, 1);
    else
        unsetenv("FERRY_DEMO_DIR");
    free(old);
}

static void test_embedded(void)
{
    /* the repository's demo/ is found beside the binary (build/../demo), or given by the
       build as FY_TEST_SOURCE_DIR */
    char *old = getenv("FERRY_DEMO_DIR") ? strdup(getenv("FERRY_DEMO_DIR")) : NULL;
#ifdef FY_TEST_SOURCE_DIR
    if (!old) setenv("FERRY_DEMO_DIR", FY_TEST_SOURCE_DIR "/demo", 1);
#endif
    fy_config_t *c = load(fy_config_embedded);
    CHECK(c != NULL);
    if (!c) {
        fputs(errs, stderr);
        free(old);
        return;
    }
    CHECK_EQ_INT(c->listeners.n, 3);
    const fy_listener_conf_t *l = c->listeners.v;
    CHECK(!strcmp(l[0].address, "127.0.0.1:8080") && l[0].tls == NULL);
    CHECK(l[0].protocols == (FY_PROTO_H1 | FY_PROTO_H2C));
    CHECK(!strcmp(l[1].address, "127.0.0.1:8443") && l[1].tls && l[1].tls->self_signed);
    CHECK(l[1].protocols == (FY_PROTO_H1 | FY_PROTO_H2 | FY_PROTO_H3));
    CHECK(!strcmp(l[2].address, "127.0.0.1:8888") && l[2].kind == FY_LISTENER_INTERCEPT);
    CHECK_EQ_INT(c->upstreams.n, 1);
    CHECK_EQ_INT(c->routes.n, 3);
    const fy_route_conf_t *r = c->routes.v;
    CHECK(!strcmp(r[0].match.path, "/proxy/") && r[0].proxy);
    r++; /* the demo site's routes follow */
    CHECK(!strcmp(r[0].match.path, "/health") && r[0].respond);
    CHECK(r[0].respond && r[0].respond->status == 200 && !strcmp(r[0].respond->body, "ok\n"));
    CHECK(r[0].respond && r[0].respond->headers.n == 1 &&
          !strcmp(r[0].respond->headers.values[0], "text/plain"));
    CHECK(!strcmp(r[1].match.path, "/") && r[1].static_);
    if (r[1].static_) {
        char p[4200];
        snprintf(p, sizeof p, "%s/index.html", r[1].static_->root);
        CHECK(access(p, R_OK) == 0);
    }
    CHECK_EQ_INT(c->log.level, FY_LOG_INFO);
    CHECK(!strcmp(c->log.access, "off"));
    CHECK_EQ_INT(c->workers, 0);

    /* dump: every key, readable units, and it loads back to the same dump */
    char *d = dump(c);
    static const char *const expect[] = {
        "# effective configuration of c.yaml (defaults included)\n",
        "\nworkers: auto\n",
        "\n  - address: 127.0.0.1:8080\n    protocols: [h1, h2c]\n    tls: null\n",
        "\n    tls:\n      self-signed: true\n",
        "      min-version: \"1.2\"\n",
        "      handshake-timeout: 10s\n",
        "      body: \"ok\\n\"\n",
        "\n  request-line: 8k\n",
        "\n  body-size: 16m\n",
        "\n  send-timeout: 1m\n",
        "\n  access: \"off\"\n",
        "\n  access-buffer: 64k\n",
        "\ndata-dir: ",
    };
    for (size_t i = 0; i < sizeof expect / sizeof *expect; i++) {
        bool ok = strstr(d, expect[i]) != NULL;
        CHECK(ok);
        if (!ok) fprintf(stderr, "  dump lacks [%s]\n", expect[i]);
    }
    fy_config_t *c2 = load(d);
    CHECK(c2 != NULL);
    if (c2) {
        char *d2 = dump(c2);
        CHECK(streq(d2, d));
        free(d2);
    } else {
        fputs(errs, stderr);
    }
    fy_config_free(c2);
    free(d);
    fy_config_free(c);
    if (!old) unsetenv("FERRY_DEMO_DIR");
    free(old);
}

static void test_file_and_doc(void)
{
    char errbuf[512];
    FILE *f = fmemopen(errbuf, sizeof errbuf, "w");
    setbuf(f, NULL);
    CHECK(fy_config_load_file("/nonexistent/ferry.yaml", f) == NULL);
    fclose(f);
    CHECK(streq(errbuf, "/nonexistent/ferry.yaml: cannot read: No such file or directory\n"));
    CHECK(fy_config_load_text("x", "a: *b", 5, NULL) == NULL); /* errf may be NULL */
    CHECK(fy_config_load_text("x", "a: 1", 4, NULL) == NULL);

    char path[] = "/tmp/fy_config_file_XXXXXX";
    int fd = mkstemp(path);
    f = fdopen(fd, "w");
    fputs("listeners:\n  - address: :8080\n    bogus: 1\n", f);
    fclose(f);
    f = fmemopen(errbuf, sizeof errbuf, "w");
    setbuf(f, NULL);
    CHECK(fy_config_load_file(path, f) == NULL);
    fclose(f);
    char want[512];
    snprintf(
        want, sizeof want,
        "%s:3:5: listeners[0].bogus: unknown key 'bogus'; expected one of: address, "
        "protocols, tls, backlog, name, kind, sni, share, cidr, client-limits, rate-limit, waf, "
        "accept-proxy\n",
        path);
    CHECK(streq(errbuf, want));
    f = fopen(path, "w");
    fputs(L1, f);
    fclose(f);
    fy_config_t *c = fy_config_load_file(path, stderr);
    CHECK(c && !strcmp(c->source, path));
    fy_config_free(c);
    unlink(path);
    fy_config_free(NULL);

    char *buf = NULL;
    size_t len = 0;
    f = open_memstream(&buf, &len);
    fy_config_doc(f);
    fclose(f);
    static const char *const sections[] = {
        "### Top level\n",
        "### `listeners[]`\n",
        "### `listeners[].tls`\n",
        "### `listeners[].tls.certificates[]`\n",
        "### `routes[]`\n",
        "### `routes[].match`\n",
        "### `routes[].static`\n",
        "### `routes[].respond`\n",
        "### `limits`\n",
        "### `log`\n",
        "### `routes[].echo`\n\nNo settings.\n\n",
        "| `body-size` | size 0..1t | `16m` |",
        "| `workers` | `auto` or integer 1..256 | `auto` |",
        "Shorthand: `tls: self-signed`.",
        "Shorthand: `static: VALUE` sets `root`.",
    };
    for (size_t i = 0; i < sizeof sections / sizeof *sections; i++) {
        bool ok = strstr(buf, sections[i]) != NULL;
        CHECK(ok);
        if (!ok) fprintf(stderr, "  doc lacks [%s]\n", sections[i]);
    }
    free(buf);
}

/* The TLS tests name certificate files, which must exist and match (tls_files.c): make them in
   a fresh folder and run there. */
static void in_folder_with_certs(void)
{
    char dir[] = "/tmp/ferry-config-test-XXXXXX";
    if (!mkdtemp(dir) || chdir(dir) < 0) abort();
    char cmd[512];
    for (const char *n = "a"; n; n = *n == 'a' ? "b" : NULL) {
        snprintf(cmd, sizeof cmd,
                 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
                 "-subj /CN=%s -keyout %s.key -out %s.pem 2>/dev/null",
                 n, n, n);
        if (system(cmd) != 0) abort();
    }
    if (system("cp a.pem x && cp a.key y && cp a.pem a && cp a.key b") != 0) abort();
}

/* issue 15 resilience: circuit-breaker, retry-budget and hedge under an upstream */
static void test_resilience(void)
{
#define UP(x)                                                                                      \
    L1 "upstreams: [{name: a, servers: [http://127.0.0.1:1, http://127.0.0.1:2], " x "}]\n"        \
       "routes: [{proxy: a}]\n"
    fy_config_t *c = load(UP("circuit-breaker: {}, retry-budget: {}, hedge: 20ms"));
    CHECK(c != NULL);
    if (c) {
        const fy_upstream_conf_t *u = c->upstreams.v;
        CHECK(u->breaker && u->retry_budget && u->hedge);
        CHECK_EQ_INT(u->breaker->consecutive, 5);
        CHECK_EQ_INT(u->breaker->error_rate, 50);
        CHECK_EQ_INT(u->breaker->window_ms, 10000);
        CHECK_EQ_INT(u->breaker->min_requests, 20);
        CHECK_EQ_INT(u->breaker->open_ms, 10000);
        CHECK_EQ_INT(u->breaker->max_open_ms, 300000);
        CHECK_EQ_INT(u->breaker->half_open_requests, 3);
        CHECK(u->breaker->on_5xx);
        CHECK_EQ_INT(u->retry_budget->ratio_permille, 200);
        CHECK_EQ_INT(u->retry_budget->min_per_second, 10);
        CHECK_EQ_INT(u->hedge->delay_ms, 20);
        char *d = dump(c);
        CHECK(strstr(d, "error-rate: 50%") != NULL);
        CHECK(strstr(d, "ratio: 0.2") != NULL);
        free(d);
    }
    fy_config_free(c);
    c = load(UP("circuit-breaker: {error-rate: 30, open-for: 1s, max-open-for: 100ms}, "
                "retry-budget: {ratio: 0.05}"));
    CHECK(c != NULL);
    if (c) {
        const fy_upstream_conf_t *u = c->upstreams.v;
        CHECK_EQ_INT(u->breaker->error_rate, 30);
        CHECK_EQ_INT(u->breaker->max_open_ms, 1000); /* never below open-for */
        CHECK_EQ_INT(u->retry_budget->ratio_permille, 50);
        CHECK(!u->hedge);
    }
    fy_config_free(c);
    c = load(UP("circuit-breaker: {error-rate: 150%}"));
    CHECK(c == NULL && strstr(errs, "percentage") != NULL);
    fy_config_free(c);
    c = load(UP("circuit-breaker: {consecutive-failures: 0, error-rate: 0%}"));
    CHECK(c == NULL && strstr(errs, "could never open") != NULL);
    fy_config_free(c);
    c = load(UP("retry-budget: {ratio: 1.5}"));
    CHECK(c == NULL && strstr(errs, "fraction") != NULL);
    fy_config_free(c);
#undef UP
}

FY_TEST_MAIN(in_folder_with_certs(); test_parse_addr(); test_minimal_defaults(); test_top_level();
             test_listeners(); test_tls(); test_routes(); test_demo_root(); test_embedded();
             test_file_and_doc(); test_resilience())
