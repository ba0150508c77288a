/* ferry-load: command line, set-up, threads, and the report (human table or --json). */
#include "fl.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <openssl/err.h>

fl_config_t fl_cfg;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ferry-load URL [options]\n"
        "  URL: http:// https:// h2c:// h2:// (TLS) tcp://HOST:PORT tls://HOST:PORT (echo in TLS)\n"
        "       udp://HOST:PORT ws:// wss://\n"
        "  -c N             connections (default 16)\n"
        "  -m N             concurrent streams per connection (h2), messages in flight (echo)\n"
        "  -t N             threads (default 1)\n"
        "  -d DUR           measured duration, e.g. 10, 10s, 500ms, 1m (default 10s)\n"
        "  -w DUR           warm-up before measuring (default 0)\n"
        "  -n N             stop after N requests (no -d: no time limit)\n"
        "  --rate R         open loop: R requests/s in total, latency from scheduled time\n"
        "  --pipeline N     HTTP/1.1 requests in flight per connection (default 1)\n"
        "  --method M       request method (default GET, POST with a body)\n"
        "  -H 'Name: value' request header (repeatable)\n"
        "  --body-size N    request body of N bytes\n"
        "  --body-file F    request body from file F\n"
        "  --url URL        another URL on the same origin (repeatable; round-robin)\n"
        "  --expect-status N  only status N counts as success (default: any 2xx)\n"
        "  --expect-bytes N   every response body must be N bytes\n"
        "  --size N         echo message size (default 64)\n"
        "  --timeout DUR    no-progress timeout with requests in flight (default 10s)\n"
        "  --hold DUR       h3://: after the run, keep every connection open (idle) for DUR;\n"
        "                   'holding' on stderr when it starts (bench/run idle-memory)\n"
        "  --h1 | --h2      protocol (http:// + --h2 = h2 prior knowledge; https: ALPN)\n"
        "  --insecure       do not verify the server certificate\n"
        "  --proxy HOST:PORT  explicit HTTP proxy: http:// URLs as absolute-form requests,\n"
        "                   others through a CONNECT tunnel\n"
        "  --connect-hosts N  with --proxy: each new connection CONNECTs to the next of N\n"
        "                   IPv4 addresses counting up from the URL's (a new host per\n"
        "                   connection: certificate forging on an intercepting proxy)\n"
        "  --sessions N     wt://: WebTransport sessions per connection (default 1)\n"
        "  --datagram-rate R, --datagram-size S  wt://: R datagrams/s per session of S bytes\n"
        "  --wt-fault F     wt:// tests: unknown-session, close-mid-stream, bad-datagram,\n"
        "                   late-settings, reset-stream (half the bytes, then RESET_STREAM\n"
        "                   with WebTransport code 7), stop-sending (STOP_SENDING with code 7\n"
        "                   once 64 KiB of the echo came back; all bytes are still sent),\n"
        "                   drain (DRAIN_WEBTRANSPORT_SESSION once the session is up)\n"
        "  --datagrams-only wt://: no streams; each echoed datagram is one round trip\n"
        "  --wt-uni         wt://: unidirectional streams; the echo comes back on a stream the\n"
        "                   server opens (matched by the pattern's first byte), verified\n"
        "  --json           machine-readable report (keys in tools/load/README.md)\n");
}

static void die_usage(const char *flag, const char *why)
{
    fprintf(stderr, "ferry-load: %s: %s\n", flag, why);
    exit(2);
}

static long long parse_int(const char *flag, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) die_usage(flag, "bad number");
    return x;
}

static double parse_dur(const char *flag, const char *v)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || !(x >= 0) || isinf(x)) die_usage(flag, "bad duration");
    if (!strcmp(end, "ms"))
        x /= 1000;
    else if (!strcmp(end, "m"))
        x *= 60;
    else if (*end && strcmp(end, "s") != 0)
        die_usage(flag, "bad duration unit (ms, s, m)");
    return x;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d) {
        fprintf(stderr, "ferry-load: out of memory\n");
        exit(1);
    }
    return d;
}

/* --proxy [http://]HOST:PORT (an explicit HTTP proxy) */
static void parse_proxy(const char *v, char *host, char *port)
{
    const char *h = v;
    if (!strncasecmp(h, "http://", 7)) h += 7;
    const char *colon = strrchr(h, ':');
    size_t n = colon ? (size_t)(colon - h) : 0;
    if (!colon || n == 0 || n >= 256 || strchr(colon, '/'))
        die_usage("--proxy", "wants [http://]HOST:PORT");
    if (h[0] == '[' && colon[-1] == ']') h++, n -= 2;
    memcpy(host, h, n);
    host[n] = 0;
    parse_int("--proxy", colon + 1, 1, 65535);
    snprintf(port, 8, "%s", colon + 1);
}

/* scheme://host[:port][/path]; fills host/port/authority (first URL) or checks they match. */
static void parse_url(const char *url, bool first, int *proto_out, bool *tls_out)
{
    const char *sep = strstr(url, "://");
    if (!sep) die_usage(url, "not a URL (scheme://host[:port]/path)");
    size_t sl = (size_t)(sep - url);
    int proto;
    bool tls = false;
    const char *defport;
    if (sl == 4 && !strncasecmp(url, "http", 4)) {
        proto = FL_H1, defport = "80";
    } else if (sl == 5 && !strncasecmp(url, "https", 5)) {
        proto = FL_H1, tls = true, defport = "443";
    } else if (sl == 3 && !strncasecmp(url, "h2c", 3)) {
        proto = FL_H2, defport = "80";
    } else if (sl == 2 && !strncasecmp(url, "h2", 2)) {
        proto = FL_H2, tls = true, defport = "443";
    } else if (sl == 2 && !strncasecmp(url, "h3", 2)) {
        proto = FL_H3, tls = true, defport = "443"; /* QUIC: tools/load/h3.c */
    } else if (sl == 2 && !strncasecmp(url, "wt", 2)) {
        proto = FL_WT, tls = true, defport = "443"; /* WebTransport: tools/load/wt.c */
    } else if (sl == 3 && !strncasecmp(url, "tcp", 3)) {
        proto = FL_TCP_ECHO, defport = NULL;
    } else if (sl == 3 && !strncasecmp(url, "tls", 3)) {
        proto = FL_TCP_ECHO, tls = true, defport = NULL; /* TCP echo inside TLS */
    } else if (sl == 3 && !strncasecmp(url, "udp", 3)) {
        proto = FL_UDP_ECHO, defport = NULL;
    } else if (sl == 2 && !strncasecmp(url, "ws", 2)) {
        proto = FL_WS_ECHO, defport = "80";
    } else if (sl == 3 && !strncasecmp(url, "wss", 3)) {
        proto = FL_WS_ECHO, tls = true, defport = "443";
    } else {
        die_usage(url, "unsupported scheme (http https h2c h2 h3 tcp tls udp ws wss)");
    }
    const char *h = sep + 3;
    const char *path = strchr(h, '/');
    const char *q = strchr(h, '?');
    if (q && (!path || q < path)) path = q;
    size_t hl = path ? (size_t)(path - h) : strlen(h);
    char hostport[300];
    if (hl == 0 || hl >= sizeof(hostport)) die_usage(url, "bad host");
    memcpy(hostport, h, hl);
    hostport[hl] = 0;
    char host[256], port[8];
    const char *colon;
    if (hostport[0] == '[') {
        const char *rb = strchr(hostport, ']');
        if (!rb) die_usage(url, "bad IPv6 literal");
        size_t n = (size_t)(rb - hostport - 1);
        if (n >= sizeof(host)) die_usage(url, "bad host");
        memcpy(host, hostport + 1, n);
        host[n] = 0;
        colon = rb[1] == ':' ? rb + 1 : NULL;
        if (rb[1] && !colon) die_usage(url, "bad host");
    } else {
        colon = strrchr(hostport, ':');
        size_t n = colon ? (size_t)(colon - hostport) : hl;
        if (n == 0 || n >= sizeof(host)) die_usage(url, "bad host");
        memcpy(host, hostport, n);
        host[n] = 0;
    }
    if (colon) {
        parse_int(url, colon + 1, 1, 65535);
        snprintf(port, sizeof(port), "%s", colon + 1);
    } else if (defport) {
        snprintf(port, sizeof(port), "%s", defport);
    } else {
        die_usage(url, "a port is required");
    }
    if (first) {
        *proto_out = proto;
        *tls_out = tls;
        snprintf(fl_cfg.host, sizeof(fl_cfg.host), "%s", host);
        snprintf(fl_cfg.port, sizeof(fl_cfg.port), "%s", port);
        snprintf(fl_cfg.authority, sizeof(fl_cfg.authority), "%s", hostport);
    } else if (proto != *proto_out || tls != *tls_out || strcmp(host, fl_cfg.host) ||
               strcmp(port, fl_cfg.port)) {
        die_usage(url, "every --url must have the scheme, host and port of the first");
    }
    if (fl_cfg.nurls == FL_MAX_URLS) die_usage(url, "too many URLs");
    char *p;
    if (!path)
        p = xstrdup("/");
    else if (*path == '?') {
        size_t n = strlen(path);
        p = malloc(n + 2);
        if (!p) exit(1);
        p[0] = '/';
        memcpy(p + 1, path, n + 1);
    } else
        p = xstrdup(path);
    fl_cfg.urls[fl_cfg.nurls++].path = p;
}

static void add_header(const char *hv)
{
    const char *colon = strchr(hv, ':');
    if (!colon || colon == hv) die_usage("-H", "expected 'Name: value'");
    if (fl_cfg.nheaders == FL_MAX_HEADERS) die_usage("-H", "too many headers");
    fl_header_t *h = &fl_cfg.headers[fl_cfg.nheaders++];
    h->name = strndup(hv, (size_t)(colon - hv));
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    h->value = xstrdup(v);
    if (!h->name) exit(1);
    for (char *c = h->name; *c; c++) {
        if (*c == ' ' || *c == '\t' || *c == '\r' || *c == '\n') die_usage("-H", "bad name");
        *c = (char)tolower((unsigned char)*c);
    }
    if (strpbrk(h->value, "\r\n")) die_usage("-H", "bad value");
    if (!strcmp(h->name, "host")) fl_cfg.user_host = true;
}

static void read_body_file(const char *f)
{
    FILE *fp = fopen(f, "rb");
    if (!fp) die_usage("--body-file", strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) exit(1);
        size_t r = fread(b + n, 1, cap - n, fp);
        n += r;
        if (r == 0) break;
        if (n == cap) b = realloc(b, cap *= 2);
    }
    fclose(fp);
    fl_cfg.body = b;
    fl_cfg.body_len = n;
}

static SSL_CTX *make_ssl_ctx(void)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    static const unsigned char alpn_h2[] = "\x02h2", alpn_h1[] = "\x08http/1.1";
    if (fl_cfg.proto == FL_H2)
        SSL_CTX_set_alpn_protos(ctx, alpn_h2, sizeof(alpn_h2) - 1);
    else
        SSL_CTX_set_alpn_protos(ctx, alpn_h1, sizeof(alpn_h1) - 1);
    if (fl_cfg.insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    } else {
        SSL_CTX_set_default_verify_paths(ctx);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    return ctx;
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static const char *proto_name(void)
{
    switch (fl_cfg.proto) {
    case FL_H1:
        return "h1";
    case FL_H2:
        return "h2";
    case FL_TCP_ECHO:
        return "tcp-echo";
    case FL_UDP_ECHO:
        return "udp-echo";
    case FL_H3:
        return "h3";
    case FL_WS_ECHO:
        return "ws-echo";
    case FL_WT:
        return "webtransport";
    }
    return "?";
}

static void fmt_lat(char *b, size_t n, uint64_t ns)
{
    if (ns < 1000000)
        snprintf(b, n, "%.1f us", (double)ns / 1e3);
    else if (ns < 1000000000ull)
        snprintf(b, n, "%.2f ms", (double)ns / 1e6);
    else
        snprintf(b, n, "%.3f s", (double)ns / 1e9);
}

static volatile int workers_done;

static void *run_thread(void *arg)
{
    if (fl_cfg.proto == FL_WT)
        fl_wt_worker_run(arg);
    else if (fl_cfg.proto == FL_H3)
        fl_h3_worker_run(arg);
    else
        fl_worker_run(arg);
    __atomic_add_fetch(&workers_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

int main(int argc, char **argv)
{
    int proto = -1;
    bool tls = false;
    const char *urls[FL_MAX_URLS];
    int nurl = 0;
    bool want_h1 = false, want_h2 = false, have_d = false, have_m = false;
    long long body_size = -1;
    const char *body_file = NULL, *method = NULL, *proxy = NULL;
    /* A peer closing while we write (an early response, a reset) is an error to count, not a
     * reason to die: TLS writes go through write(2), which raises SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    fl_cfg.conns = 16;
    fl_cfg.streams = 1;
    fl_cfg.pipeline = 1;
    fl_cfg.threads = 1;
    fl_cfg.duration = 10;
    fl_cfg.timeout = 10;
    fl_cfg.expect_bytes = -1;
    fl_cfg.echo_size = 64;
    fl_cfg.wt_sessions = 1;
    fl_cfg.wt_datagram_size = 64;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        char name[64];
        if (a[0] != '-' || a[1] == 0) {
            if (nurl == FL_MAX_URLS) die_usage(a, "too many URLs");
            urls[nurl++] = a;
            continue;
        }
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        const char *attached = NULL; /* -c64, as wrk and h2load accept */
        if (a[1] != '-' && a[2] && strchr("cmtdwnH", a[1])) {
            attached = a + 2;
            nl = 2;
        }
        if (nl >= sizeof(name)) die_usage(a, "unknown option");
        memcpy(name, a, nl);
        name[nl] = 0;
        static const char *const known[] = {"-c",
                                            "-m",
                                            "-t",
                                            "-d",
                                            "-w",
                                            "--timeout",
                                            "--hold",
                                            "--rate",
                                            "-n",
                                            "--method",
                                            "-H",
                                            "--body-size",
                                            "--body-file",
                                            "--url",
                                            "--expect-status",
                                            "--expect-bytes",
                                            "--pipeline",
                                            "--size",
                                            "--proxy",
                                            "--connect-hosts",
                                            "--sessions",
                                            "--datagram-rate",
                                            "--datagram-size",
                                            "--wt-fault",
                                            "--h1",
                                            "--h2",
                                            "--json",
                                            "--insecure",
                                            "--datagrams-only",
                                            "--wt-uni",
                                            "-h",
                                            "--help"};
        int ki = -1;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
            if (!strcmp(name, known[k])) ki = (int)k;
        if (ki < 0) die_usage(name, "unknown option");
        int first_flag = 0; /* --h1 and the ones after it take no value */
        while (strcmp(known[first_flag], "--h1")) first_flag++;
        bool is_flag = ki >= first_flag;
        if (!is_flag) {
            if (attached)
                v = attached;
            else if (eq)
                v = eq + 1;
            else if (i + 1 < argc)
                v = argv[++i];
            else
                die_usage(name, "needs a value");
        } else if (eq) {
            die_usage(name, "takes no value");
        }
        if (!strcmp(name, "-c")) {
            fl_cfg.conns = (int)parse_int(name, v, 1, 100000);
        } else if (!strcmp(name, "-m")) {
            fl_cfg.streams = (int)parse_int(name, v, 1, FL_STREAMS_MAX);
            have_m = true;
        } else if (!strcmp(name, "-t")) {
            fl_cfg.threads = (int)parse_int(name, v, 1, 256);
        } else if (!strcmp(name, "-d")) {
            fl_cfg.duration = parse_dur(name, v);
            have_d = true;
            if (fl_cfg.duration <= 0) die_usage(name, "must be > 0");
        } else if (!strcmp(name, "-w")) {
            fl_cfg.warmup = parse_dur(name, v);
        } else if (!strcmp(name, "--hold")) {
            fl_cfg.hold = parse_dur(name, v);
        } else if (!strcmp(name, "--timeout")) {
            fl_cfg.timeout = parse_dur(name, v);
            if (fl_cfg.timeout <= 0) die_usage(name, "must be > 0");
        } else if (!strcmp(name, "--rate")) {
            char *end;
            fl_cfg.rate = strtod(v, &end);
            if (end == v || *end || !(fl_cfg.rate > 0) || fl_cfg.rate > 1e9)
                die_usage(name, "bad rate");
        } else if (!strcmp(name, "-n")) {
            fl_cfg.total = (uint64_t)parse_int(name, v, 1, (long long)1 << 60);
        } else if (!strcmp(name, "--method")) {
            for (const char *p = v; *p; p++)
                if (!isupper((unsigned char)*p) && *p != '-' && *p != '_')
                    die_usage(name, "bad method");
            if (!*v) die_usage(name, "bad method");
            method = v;
        } else if (!strcmp(name, "-H")) {
            add_header(v);
        } else if (!strcmp(name, "--body-size")) {
            body_size = parse_int(name, v, 0, (long long)1 << 32);
        } else if (!strcmp(name, "--body-file")) {
            body_file = v;
        } else if (!strcmp(name, "--url")) {
            if (nurl == FL_MAX_URLS) die_usage(name, "too many URLs");
            urls[nurl++] = v;
        } else if (!strcmp(name, "--expect-status")) {
            fl_cfg.expect_status = (int)parse_int(name, v, 100, 599);
        } else if (!strcmp(name, "--expect-bytes")) {
            fl_cfg.expect_bytes = parse_int(name, v, 0, (long long)1 << 60);
        } else if (!strcmp(name, "--pipeline")) {
            fl_cfg.pipeline = (int)parse_int(name, v, 1, FL_PIPELINE_MAX);
        } else if (!strcmp(name, "--sessions")) {
            fl_cfg.wt_sessions = (int)parse_int(name, v, 1, 1000);
        } else if (!strcmp(name, "--datagram-rate")) {
            fl_cfg.wt_datagram_rate = (double)parse_int(name, v, 0, 1000000);
        } else if (!strcmp(name, "--wt-fault")) {
            fl_cfg.wt_fault = !strcmp(v, "unknown-session")    ? 1
                              : !strcmp(v, "close-mid-stream") ? 2
                              : !strcmp(v, "bad-datagram")     ? 3
                              : !strcmp(v, "late-settings")    ? 4
                              : !strcmp(v, "reset-stream")     ? 5
                              : !strcmp(v, "stop-sending")     ? 6
                              : !strcmp(v, "drain")            ? 7
                                                               : -1;
            if (fl_cfg.wt_fault < 0)
                die_usage(name, "one of unknown-session, close-mid-stream, bad-datagram, "
                                "late-settings, reset-stream, stop-sending, drain");
        } else if (!strcmp(name, "--datagram-size")) {
            fl_cfg.wt_datagram_size = (size_t)parse_int(name, v, 16, 1400);
        } else if (!strcmp(name, "--size")) {
            fl_cfg.echo_size = (size_t)parse_int(name, v, 1, 1 << 24);
        } else if (!strcmp(name, "--h1")) {
            want_h1 = true;
        } else if (!strcmp(name, "--h2")) {
            want_h2 = true;
        } else if (!strcmp(name, "--proxy")) {
            proxy = v;
        } else if (!strcmp(name, "--connect-hosts")) {
            fl_cfg.connect_hosts = (uint32_t)parse_int(name, v, 1, 1 << 24);
        } else if (!strcmp(name, "--json")) {
            fl_cfg.json = true;
        } else if (!strcmp(name, "--insecure")) {
            fl_cfg.insecure = true;
        } else if (!strcmp(name, "--datagrams-only")) {
            fl_cfg.wt_datagrams_only = true;
        } else if (!strcmp(name, "--wt-uni")) {
            fl_cfg.wt_uni = true;
        } else if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
            usage(stdout);
            return 0;
        } else {
            die_usage(name, "unknown option");
        }
    }
    if (nurl == 0) {
        usage(stderr);
        return 2;
    }
    if (want_h1 && want_h2) die_usage("--h2", "conflicts with --h1");
    for (int i = 0; i < nurl; i++) parse_url(urls[i], i == 0, &proto, &tls);
    fl_cfg.url_text = urls[0];
    if (want_h2 && proto == FL_H1) proto = FL_H2;
    if (want_h1 && proto == FL_H2) proto = FL_H1;
    if ((want_h1 || want_h2) && proto == FL_H3)
        die_usage(want_h1 ? "--h1" : "--h2", "not for h3://");
    if ((want_h1 || want_h2) &&
        (proto == FL_TCP_ECHO || proto == FL_UDP_ECHO || proto == FL_WS_ECHO))
        die_usage(want_h1 ? "--h1" : "--h2", "not for echo URLs");
    fl_cfg.proto = (enum fl_proto)proto;
    fl_cfg.tls = tls;
    if (body_size >= 0 && body_file) die_usage("--body-file", "conflicts with --body-size");
    if (body_size >= 0) {
        fl_cfg.body = malloc((size_t)body_size + 1);
        if (!fl_cfg.body) return 1;
        for (long long k = 0; k < body_size; k++) fl_cfg.body[k] = (char)('a' + k % 26);
        fl_cfg.body_len = (size_t)body_size;
    } else if (body_file) {
        read_body_file(body_file);
    }
    fl_cfg.method = method ? method : fl_cfg.body ? "POST" : "GET";
    fl_cfg.head = !strcmp(fl_cfg.method, "HEAD");
    if (fl_cfg.proto == FL_TCP_ECHO || fl_cfg.proto == FL_UDP_ECHO || fl_cfg.proto == FL_WS_ECHO) {
        if (fl_cfg.proto == FL_WS_ECHO && fl_cfg.nurls > 1)
            die_usage("--url", "a WebSocket run uses one URL");
        if (!have_m) fl_cfg.streams = fl_cfg.pipeline;
        if (fl_cfg.proto == FL_UDP_ECHO && fl_cfg.echo_size > 65507)
            die_usage("--size", "a UDP message is at most 65507 bytes");
        if (fl_echo_init() < 0) return 1;
    }
    if (!have_d && fl_cfg.total) fl_cfg.duration = 0; /* -n alone: no time limit */
    if (fl_cfg.total && fl_cfg.rate == 0 && (uint64_t)fl_cfg.conns > fl_cfg.total)
        fl_cfg.conns = (int)fl_cfg.total;
    if (fl_cfg.threads > fl_cfg.conns) fl_cfg.threads = fl_cfg.conns;
    if (fl_cfg.total && (uint64_t)fl_cfg.threads > fl_cfg.total) fl_cfg.threads = (int)fl_cfg.total;

    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = fl_cfg.proto == FL_UDP_ECHO || fl_cfg.proto == FL_H3 ||
                                                    fl_cfg.proto == FL_WT
                                                ? SOCK_DGRAM
                                                : SOCK_STREAM};
    struct addrinfo *ai;
    char phost[256], pport[8];
    if (proxy) {
        if (fl_cfg.proto == FL_UDP_ECHO || fl_cfg.proto == FL_H3 || fl_cfg.proto == FL_WT)
            die_usage("--proxy", "not for UDP or QUIC");
        parse_proxy(proxy, phost, pport);
        /* plain HTTP/1.1: absolute-form requests to the proxy; anything else: a CONNECT
         * tunnel first (then TLS, h2c, WebSocket or echo bytes through it) */
        fl_cfg.proxy_connect = fl_cfg.tls || fl_cfg.proto != FL_H1;
        fl_cfg.proxy_absolute = !fl_cfg.proxy_connect;
    }
    if (fl_cfg.connect_hosts) {
        struct in_addr a4;
        if (!proxy || !fl_cfg.proxy_connect)
            die_usage("--connect-hosts",
                      "needs --proxy and a URL that is tunneled (TLS, h2c, echo)");
        if (inet_pton(AF_INET, fl_cfg.host, &a4) != 1)
            die_usage("--connect-hosts", "the URL's host must be an IPv4 address");
        fl_cfg.connect_base = ntohl(a4.s_addr);
    }
    int gr = getaddrinfo(proxy ? phost : fl_cfg.host, proxy ? pport : fl_cfg.port, &hints, &ai);
    if (gr != 0) {
        fprintf(stderr, "ferry-load: %s: %s\n", proxy ? phost : fl_cfg.host, gai_strerror(gr));
        return 2;
    }
    memcpy(&fl_cfg.addr, ai->ai_addr, ai->ai_addrlen);
    fl_cfg.addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    if (fl_cfg.proto == FL_H1 && fl_h1_build_templates() < 0) return 1;
    if (fl_cfg.tls && fl_cfg.proto != FL_H3 && fl_cfg.proto != FL_WT &&
        !(fl_cfg.ssl_ctx = make_ssl_ctx())) {
        fprintf(stderr, "ferry-load: cannot create the TLS context\n");
        return 1;
    }

    int T = fl_cfg.threads;
    fl_worker_t *ws = calloc((size_t)T, sizeof(*ws));
    pthread_t *tids = calloc((size_t)T, sizeof(*tids));
    if (!ws || !tids) return 1;
    uint64_t t0 = fl_now_ns() + 20000000ull;
    uint64_t mstart = t0 + (uint64_t)(fl_cfg.warmup * 1e9);
    uint64_t end = fl_cfg.duration > 0 ? mstart + (uint64_t)(fl_cfg.duration * 1e9) : UINT64_MAX;
    for (int i = 0; i < T; i++) {
        fl_worker_t *w = &ws[i];
        w->id = i;
        w->nconns = fl_cfg.conns / T + (i < fl_cfg.conns % T);
        w->conns = calloc((size_t)w->nconns, sizeof(fl_conn_t));
        w->flush = calloc((size_t)w->nconns, sizeof(fl_conn_t *));
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (!w->conns || !w->flush || w->epfd < 0) return 1;
        for (int k = 0; k < w->nconns; k++) {
            w->conns[k].ibuf = malloc(FL_IBUF_SIZE);
            w->conns[k].obuf = malloc(FL_OBUF_SIZE);
            if (!w->conns[k].ibuf || !w->conns[k].obuf) return 1;
        }
        w->t0 = t0;
        w->measure_start = mstart;
        w->end = end;
        if (fl_cfg.total)
            w->budget = fl_cfg.total / (uint64_t)T + ((uint64_t)i < fl_cfg.total % (uint64_t)T);
        if (fl_cfg.rate > 0) {
            w->rate = fl_cfg.rate * w->nconns / fl_cfg.conns;
            w->interval_ns = (uint64_t)(1e9 / w->rate);
            if (w->interval_ns == 0) w->interval_ns = 1;
        }
        if (pthread_create(&tids[i], NULL, run_thread, w) != 0) {
            fprintf(stderr, "ferry-load: cannot start a thread\n");
            return 1;
        }
    }

    /* progress line (TTY only) and the CPU time of the measured window */
    bool tty = isatty(STDOUT_FILENO) && !fl_cfg.json;
    double cpu0 = -1;
    uint64_t last_print = 0;
    while (__atomic_load_n(&workers_done, __ATOMIC_ACQUIRE) < T) {
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
        uint64_t now = fl_now_ns();
        if (cpu0 < 0 && now >= mstart) cpu0 = cpu_seconds();
        if (tty && now - last_print >= 1000000000ull && now > t0) {
            last_print = now;
            uint64_t r = 0, e = 0;
            for (int i = 0; i < T; i++) {
                r += __atomic_load_n(&ws[i].progress, __ATOMIC_RELAXED);
                e += __atomic_load_n(&ws[i].progress_err, __ATOMIC_RELAXED);
            }
            double el = now > mstart ? (double)(now - mstart) / 1e9 : 0;
            printf("\r%s %6.1fs  requests %llu  %.0f/s  errors %llu   ",
                   now < mstart ? "warm-up" : "running", el, (unsigned long long)r,
                   el > 0 ? (double)r / el : 0.0, (unsigned long long)e);
            fflush(stdout);
        }
    }
    double cpu1 = cpu_seconds();
    if (cpu0 < 0) cpu0 = 0;
    for (int i = 0; i < T; i++) pthread_join(tids[i], NULL);
    if (tty) printf("\r%*s\r", 70, "");

    fl_stats_t *tot = calloc(1, sizeof(*tot));
    if (!tot) return 1;
    uint64_t fin = mstart;
    for (int i = 0; i < T; i++) {
        fl_stats_t *s = &ws[i].st;
        tot->requests += s->requests;
        tot->ok += s->ok;
        tot->bytes += s->bytes;
        tot->body_bytes += s->body_bytes;
        tot->connects += s->connects;
        for (int k = 0; k < FL_ERR_MAX; k++) tot->errors[k] += s->errors[k];
        for (int k = 0; k < 6; k++) tot->status[k] += s->status[k];
        fl_hist_merge(&tot->hist, &s->hist);
        if (ws[i].finish_ns > fin) fin = ws[i].finish_ns;
    }
    double secs = (double)(fin - mstart) / 1e9;
    if (secs <= 0) secs = 1e-9;
    uint64_t nerr = 0;
    for (int k = 0; k < FL_ERR_MAX; k++) nerr += tot->errors[k];
    double rps = (double)tot->requests / secs;
    double mibs = (double)tot->bytes / secs / 1048576.0;
    double bmibs = (double)tot->body_bytes / secs / 1048576.0;
    double cpu = (cpu1 - cpu0) / secs * 100.0;
    const fl_hist_t *h = &tot->hist;
    static const double qs[] = {0.5, 0.9, 0.95, 0.99, 0.999};
    static const char *const qn[] = {"p50", "p90", "p95", "p99", "p999"};
    static const char *const sc[] = {"other", "1xx", "2xx", "3xx", "4xx", "5xx"};
    bool http = fl_cfg.proto == FL_H1 || fl_cfg.proto == FL_H2 || fl_cfg.proto == FL_H3;

    if (fl_cfg.json) {
        printf("{\"tool\": \"ferry-load\", \"url\": ");
        json_str(stdout, fl_cfg.url_text);
        printf(", \"protocol\": \"%s\", \"tls\": %s, \"connections\": %d, \"streams\": %d, "
               "\"pipeline\": %d, \"threads\": %d, \"rate\": %.3f, \"warmup_s\": %.3f, "
               "\"duration_s\": %.6f, ",
               proto_name(), fl_cfg.tls ? "true" : "false", fl_cfg.conns, fl_cfg.streams,
               fl_cfg.pipeline, T, fl_cfg.rate, fl_cfg.warmup, secs);
        printf("\"requests\": %llu, \"ok\": %llu, \"errors\": %llu, \"errors_by_kind\": {",
               (unsigned long long)tot->requests, (unsigned long long)tot->ok,
               (unsigned long long)nerr);
        for (int k = 0; k < FL_ERR_MAX; k++)
            printf("%s\"%s\": %llu", k ? ", " : "", fl_err_names[k],
                   (unsigned long long)tot->errors[k]);
        printf("}, \"requests_per_sec\": %.1f, \"bytes\": %llu, \"body_bytes\": %llu, "
               "\"mib_per_sec\": %.3f, \"body_mib_per_sec\": %.3f, \"latency_us\": {",
               rps, (unsigned long long)tot->bytes, (unsigned long long)tot->body_bytes, mibs,
               bmibs);
        printf("\"min\": %.1f, \"mean\": %.1f", (double)h->min / 1e3,
               h->count ? h->sum / (double)h->count / 1e3 : 0.0);
        for (int k = 0; k < 5; k++)
            printf(", \"%s\": %.1f", qn[k], (double)fl_hist_quantile(h, qs[k]) / 1e3);
        printf(", \"max\": %.1f}, \"status\": {", (double)h->max / 1e3);
        for (int k = 1; k <= 6; k++)
            printf("%s\"%s\": %llu", k > 1 ? ", " : "", sc[k % 6],
                   (unsigned long long)tot->status[k % 6]);
        printf("}, \"connects\": %llu, \"cpu_percent\": %.1f}\n", (unsigned long long)tot->connects,
               cpu);
    } else {
        printf("ferry-load %s  %s%s, %d connection%s x %d %s, %d thread%s, %s\n", fl_cfg.url_text,
               proto_name(), fl_cfg.tls ? "+tls" : "", fl_cfg.conns, fl_cfg.conns == 1 ? "" : "s",
               fl_cfg.proto == FL_H1 ? fl_cfg.pipeline : fl_cfg.streams,
               fl_cfg.proto == FL_H1   ? "pipelined"
               : fl_cfg.proto != FL_H1 ? "streams"
                                       : "in flight",
               T, T == 1 ? "" : "s", fl_cfg.rate > 0 ? "open loop" : "closed loop");
        if (fl_cfg.rate > 0) printf("  target rate   %.1f/s\n", fl_cfg.rate);
        printf("  measured      %.3f s (after %.3f s warm-up)\n", secs, fl_cfg.warmup);
        printf("  %-13s %llu (ok %llu)\n", http ? "requests" : "round trips",
               (unsigned long long)tot->requests, (unsigned long long)tot->ok);
        printf("  %-13s %.1f\n", http ? "requests/s" : "ops/s", rps);
        printf("  transfer      %.2f MiB/s (body %.2f MiB/s)\n", mibs, bmibs);
        char b[6][32];
        fmt_lat(b[0], 32, fl_hist_quantile(h, 0.5));
        fmt_lat(b[1], 32, fl_hist_quantile(h, 0.95));
        fmt_lat(b[2], 32, fl_hist_quantile(h, 0.99));
        fmt_lat(b[3], 32, h->max);
        fmt_lat(b[4], 32, h->count ? (uint64_t)(h->sum / (double)h->count) : 0);
        printf("  latency       p50 %s  p95 %s  p99 %s  max %s  (mean %s)\n", b[0], b[1], b[2],
               b[3], b[4]);
        printf("  errors        %llu", (unsigned long long)nerr);
        for (int k = 0; k < FL_ERR_MAX; k++)
            if (tot->errors[k])
                printf("  %s %llu", fl_err_names[k], (unsigned long long)tot->errors[k]);
        printf("\n");
        if (http) {
            printf("  status       ");
            for (int k = 1; k <= 6; k++)
                if (tot->status[k % 6])
                    printf(" %s %llu", sc[k % 6], (unsigned long long)tot->status[k % 6]);
            printf("\n");
        }
        printf("  connections   %llu established\n", (unsigned long long)tot->connects);
        printf("  cpu           %.1f%%\n", cpu);
    }
    fflush(stdout);
    int rc = nerr || tot->requests == 0 ? 1 : 0;
    /* freed so that sanitizer builds report only real leaks */
    for (int i = 0; i < T; i++) {
        for (int k = 0; k < ws[i].nconns; k++) {
            fl_conn_t *c = &ws[i].conns[k];
            free(c->ibuf);
            free(c->obuf);
            if (fl_cfg.proto == FL_H2) free(c->u.h2.slots);
        }
        free(ws[i].conns);
        free(ws[i].flush);
        close(ws[i].epfd);
    }
    if (fl_cfg.proto == FL_WT) fl_wt_report(fl_cfg.json);
    free(ws);
    free(tids);
    free(tot);
    if (fl_cfg.ssl_ctx) SSL_CTX_free(fl_cfg.ssl_ctx);
    return rc;
}
