/* ferry: argv, signals, config load, workers. The command line is a contract (DESIGN.md §6). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core/log.h"
#include "server.h"
#include "tls/ca.h"

#define FERRY_VERSION "0.1.0"

static const char usage[] =
    "usage:\n"
    "  ferry                         run the embedded default config: demo site on\n"
    "                                http://127.0.0.1:8080 and https://127.0.0.1:8443 (h1, h2,\n"
    "                                h3), proxy demo under /proxy/, intercepting proxy on\n"
    "                                127.0.0.1:8888\n"
    "  ferry run -c FILE             run the configuration in FILE\n"
    "  ferry check -c FILE           validate FILE and print the effective configuration\n"
    "  ferry serve DIR [--listen ADDR] [--tls self-signed|CERT:KEY] [--protocols h1,...]\n"
    "                  [--workers N] [--access-log stdout|FILE]\n"
    "                                serve the files in DIR (default 127.0.0.1:8080)\n"
    "  ferry proxy URL [--listen ADDR] [--tls ...] [--protocols ...] [--upstream-ca FILE]\n"
    "                  [--workers N] [--access-log stdout|FILE]\n"
    "                                reverse-proxy to URL (http:// https:// h2c:// h2:// h3://)\n"
    "  ferry mitm [--listen ADDR] [--ca-dir DIR] [--upstream-ca FILE] [--workers N]\n"
    "                  [--access-log stdout|FILE] [--har FILE]\n"
    "                                intercepting proxy (default 127.0.0.1:8888)\n"
    "  ferry ca init|show|export [--ca-dir DIR] [--out DIR]\n"
    "                                the interception CA (default dir: the data dir)\n"
    "  ferry l4 HOST:PORT [--listen ADDR] [--udp] [--tls self-signed|CERT:KEY] [--workers N]\n"
    "                                relay TCP (or UDP) to HOST:PORT; with --tls, end TLS and\n"
    "                                relay the plaintext (default 127.0.0.1:8080)\n"
    "  ferry doc-config              print the configuration reference (Markdown)\n"
    "  ferry --version | --help\n"
    "options for run and the default: --workers N overrides `workers`\n";

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ferry: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see ferry --help)\n");
    va_end(ap);
    return 2;
}

/* YAML double-quoted scalar of s into buf. */
static void yaml_quote(char *buf, size_t cap, const char *s)
{
    size_t o = 0;
    buf[o++] = '"';
    for (; *s && o + 4 < cap; s++) {
        if (*s == '"' || *s == '\\') buf[o++] = '\\';
        buf[o++] = *s;
    }
    buf[o++] = '"';
    buf[o] = '\0';
}

static int run(fy_config_t *cfg)
{
    fy_server_t *s = fy_server_new(cfg);
    if (!s) return 1;
    /* signals go to this thread only: workers never see them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    int r = fy_server_start(s);
    if (r < 0) {
        fy_log(FY_LOG_EMERG, "cannot start workers: %s", strerror(-r));
        fy_server_free(s);
        return 1;
    }
    fy_server_print_urls(s, stdout);
    fy_notice("ferry %s started: %d workers", FERRY_VERSION,
              cfg->workers > 0 ? (int)cfg->workers : (int)sysconf(_SC_NPROCESSORS_ONLN));
    for (;;) {
        int sig = 0;
        sigwait(&set, &sig);
        if (sig == SIGHUP) {
            fy_notice("SIGHUP: configuration reload is not supported yet; ignored");
            continue;
        }
        fy_notice("signal %d: stopping", sig); /* fy_server_stop logs the drain */
        break;
    }
    fy_server_stop(s, 10000);
    fy_server_free(s);
    fy_notice("exited cleanly");
    return 0;
}

static fy_config_t *load(const char *file)
{
    return file ? fy_config_load_file(file, stderr)
                : fy_config_load_text("<embedded>", fy_config_embedded, strlen(fy_config_embedded),
                                      stderr);
}

/* The one-liners: `serve DIR` (static files) and `proxy URL` (reverse proxy). Both build a
 * YAML config from the flags and load it through the same checks as a config file. */
static int cmd_oneliner(const char *cmd, int argc, char **argv)
{
    bool proxy = strcmp(cmd, "proxy") == 0;
    const char *upstream_ca = NULL;
    const char *dir = NULL, *listen = "127.0.0.1:8080", *tls = NULL, *protocols = NULL;
    const char *workers = NULL, *access = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (strcmp(a, "--listen") == 0)
            dst = &listen;
        else if (strcmp(a, "--tls") == 0)
            dst = &tls;
        else if (strcmp(a, "--protocols") == 0)
            dst = &protocols;
        else if (strcmp(a, "--workers") == 0)
            dst = &workers;
        else if (strcmp(a, "--access-log") == 0)
            dst = &access;
        else if (a[0] == '-')
            return bad_usage("serve: unknown option '%s'", a);
        else if (!dir)
            dir = a;
        else
            return bad_usage("serve: unexpected argument '%s'", a);
        if (dst) {
            if (i + 1 >= argc) return bad_usage("%s: option '%s' needs a value", cmd, a);
            *dst = argv[++i];
        }
    }
    if (!dir) return bad_usage("%s: missing %s", cmd, proxy ? "URL" : "DIR");
    char y[8192], q1[2048], q2[2048], q3[2048];
    size_t o = 0;
#define ADD(...) o += (size_t)snprintf(y + o, sizeof y - o, __VA_ARGS__)
    if (workers) {
        char *end;
        long wn = strtol(workers, &end, 10);
        if (strcmp(workers, "auto") != 0 && (*end || wn < 1 || wn > 256))
            return bad_usage("--workers: expected auto or 1..256, got '%s'", workers);
        ADD("workers: %s\n", strcmp(workers, "auto") == 0 ? "auto" : workers);
    }
    yaml_quote(q1, sizeof q1, listen);
    ADD("listeners:\n  - address: %s\n", q1);
    if (protocols) {
        yaml_quote(q2, sizeof q2, protocols);
        ADD("    protocols: %s\n", q2);
    }
    if (tls) {
        if (strcmp(tls, "self-signed") == 0) {
            ADD("    tls: self-signed\n");
        } else {
            const char *colon = strchr(tls, ':');
            if (!colon) return bad_usage("--tls: expected self-signed or CERT:KEY, got '%s'", tls);
            char cert[1024];
            size_t cl = (size_t)(colon - tls);
            if (cl >= sizeof cert) cl = sizeof cert - 1;
            memcpy(cert, tls, cl);
            cert[cl] = '\0';
            yaml_quote(q2, sizeof q2, cert);
            yaml_quote(q3, sizeof q3, colon + 1);
            ADD("    tls: {cert: %s, key: %s}\n", q2, q3);
        }
    }
    yaml_quote(q1, sizeof q1, dir);
    if (proxy) {
        ADD("upstreams:\n  - name: origin\n    servers: [%s]\n", q1);
        if (upstream_ca) {
            yaml_quote(q2, sizeof q2, upstream_ca);
            ADD("    ca: %s\n", q2);
        }
        ADD("routes:\n  - proxy: origin\n");
    } else {
        ADD("routes:\n  - static: {root: %s}\n", q1);
    }
    if (access) {
        yaml_quote(q1, sizeof q1, access);
        ADD("log: {access: %s}\n", q1);
    }
#undef ADD
    fy_config_t *cfg = fy_config_load_text("<command line>", y, o, stderr);
    if (!cfg) return 2;
    int r = run(cfg);
    fy_config_free(cfg);
    return r;
}

/* `ferry mitm`: the intercepting proxy one-liner (DESIGN.md §6). */
static int cmd_mitm(int argc, char **argv)
{
    const char *listen = "127.0.0.1:8888", *ca_dir = NULL, *upstream_ca = NULL;
    const char *workers = NULL, *access = NULL, *har = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (strcmp(a, "--listen") == 0)
            dst = &listen;
        else if (strcmp(a, "--har") == 0)
            dst = &har;
        else if (strcmp(a, "--ca-dir") == 0)
            dst = &ca_dir;
        else if (strcmp(a, "--upstream-ca") == 0)
            dst = &upstream_ca;
        else if (strcmp(a, "--workers") == 0)
            dst = &workers;
        else if (strcmp(a, "--access-log") == 0)
            dst = &access;
        else
            return bad_usage("mitm: unknown option '%s'", a);
        if (i + 1 >= argc) return bad_usage("mitm: option '%s' needs a value", a);
        *dst = argv[++i];
    }
    char y[8192], q[2048];
    size_t o = 0;
#define ADD(...) o += (size_t)snprintf(y + o, sizeof y - o, __VA_ARGS__)
    if (workers) {
        char *end;
        long wn = strtol(workers, &end, 10);
        if (strcmp(workers, "auto") != 0 && (*end || wn < 1 || wn > 256))
            return bad_usage("--workers: expected auto or 1..256, got '%s'", workers);
        ADD("workers: %s\n", workers);
    }
    yaml_quote(q, sizeof q, listen);
    ADD("listeners:\n  - address: %s\n    kind: intercept\n    protocols: [h1]\n", q);
    ADD("intercept:\n");
    if (ca_dir) {
        yaml_quote(q, sizeof q, ca_dir);
        ADD("  ca-dir: %s\n", q);
    }
    if (upstream_ca) {
        yaml_quote(q, sizeof q, upstream_ca);
        ADD("  upstream-ca: %s\n", q);
    }
    if (har) {
        yaml_quote(q, sizeof q, har);
        ADD("  capture: {har: %s}\n", q);
    }
    if (access) {
        yaml_quote(q, sizeof q, access);
        ADD("log: {access: %s}\n", q);
    }
#undef ADD
    fy_config_t *cfg = fy_config_load_text("<command line>", y, o, stderr);
    if (!cfg) return 2;
    int r = run(cfg);
    fy_config_free(cfg);
    return r;
}

/* `ferry ca init|show|export [--ca-dir DIR] [--out DIR]` */
static int cmd_ca(int argc, char **argv)
{
    if (argc < 1) return bad_usage("ca: expected init, show or export");
    const char *sub = argv[0];
    if (strcmp(sub, "init") && strcmp(sub, "show") && strcmp(sub, "export"))
        return bad_usage("ca: unknown subcommand '%s' (init, show, export)", sub);
    const char *dir = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char **dst = NULL;
        if (strcmp(argv[i], "--ca-dir") == 0)
            dst = &dir;
        else if (strcmp(argv[i], "--out") == 0 && strcmp(sub, "export") == 0)
            dst = &out;
        else
            return bad_usage("ca %s: unknown option '%s'", sub, argv[i]);
        if (i + 1 >= argc) return bad_usage("ca %s: option '%s' needs a value", sub, argv[i]);
        *dst = argv[++i];
    }
    char ddir[4096];
    if (!dir) {
        fy_config_default_data_dir(ddir, sizeof ddir);
        dir = ddir;
    }
    char err[600];
    fy_ca_t *ca = fy_ca_load(dir, strcmp(sub, "show") != 0, err, sizeof err);
    if (!ca) {
        fprintf(stderr, "ferry: ca %s: %s\n", sub, err);
        return 1;
    }
    int rc = 0;
    if (strcmp(sub, "init") == 0) {
        printf("%s %s\n", fy_ca_created(ca) ? "created" : "already present:", fy_ca_pem_path(ca));
        fy_ca_describe(ca, stdout);
    } else if (strcmp(sub, "show") == 0) {
        fy_ca_describe(ca, stdout);
    } else {
        char pem[4200], der[4200];
        int r = fy_ca_export(ca, out ? out : dir, pem, der, sizeof pem);
        if (r < 0) {
            fprintf(stderr, "ferry: ca export: %s: %s\n", out ? out : dir, strerror(-r));
            rc = 1;
        } else {
            printf("PEM: %s\nDER: %s\n", pem, der);
            fy_ca_print_trust_help(pem, der, stdout);
        }
    }
    fy_ca_free(ca);
    return rc;
}

/* `ferry l4 HOST:PORT`: a TCP relay, a UDP relay (--udp) or a TLS-terminating relay (--tls). */
static int cmd_l4(int argc, char **argv)
{
    const char *target = NULL, *listen = "127.0.0.1:8080", *tls = NULL, *workers = NULL;
    bool udp = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (strcmp(a, "--listen") == 0)
            dst = &listen;
        else if (strcmp(a, "--tls") == 0)
            dst = &tls;
        else if (strcmp(a, "--workers") == 0)
            dst = &workers;
        else if (strcmp(a, "--udp") == 0)
            udp = true;
        else if (a[0] == '-')
            return bad_usage("l4: unknown option '%s'", a);
        else if (!target)
            target = a;
        else
            return bad_usage("l4: unexpected argument '%s'", a);
        if (dst) {
            if (i + 1 >= argc) return bad_usage("l4: option '%s' needs a value", a);
            *dst = argv[++i];
        }
    }
    if (!target) return bad_usage("l4: missing HOST:PORT");
    if (udp && tls) return bad_usage("l4: --udp and --tls do not go together");
    char y[8192], q1[2048], q2[2048], q3[2048];
    size_t o = 0;
#define ADD(...) o += (size_t)snprintf(y + o, sizeof y - o, __VA_ARGS__)
    if (workers) {
        char *end;
        long wn = strtol(workers, &end, 10);
        if (strcmp(workers, "auto") != 0 && (*end || wn < 1 || wn > 256))
            return bad_usage("--workers: expected auto or 1..256, got '%s'", workers);
        ADD("workers: %s\n", strcmp(workers, "auto") == 0 ? "auto" : workers);
    }
    yaml_quote(q1, sizeof q1, listen);
    yaml_quote(q2, sizeof q2, target);
    ADD("l4:\n  - listen: %s\n    target: %s\n    mode: %s\n", q1, q2,
        udp   ? "udp"
        : tls ? "tls-terminate"
              : "tcp");
    if (tls) {
        if (strcmp(tls, "self-signed") == 0) {
            ADD("    tls: self-signed\n");
        } else {
            const char *colon = strchr(tls, ':');
            if (!colon) return bad_usage("--tls: expected self-signed or CERT:KEY, got '%s'", tls);
            char cert[1024];
            size_t cl = (size_t)(colon - tls);
            if (cl >= sizeof cert) cl = sizeof cert - 1;
            memcpy(cert, tls, cl);
            cert[cl] = '\0';
            yaml_quote(q2, sizeof q2, cert);
            yaml_quote(q3, sizeof q3, colon + 1);
            ADD("    tls: {cert: %s, key: %s}\n", q2, q3);
        }
    }
#undef ADD
    fy_config_t *cfg = fy_config_load_text("<command line>", y, o, stderr);
    if (!cfg) return 2;
    int r = run(cfg);
    fy_config_free(cfg);
    return r;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;
    if (cmd && (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (cmd && strcmp(cmd, "--version") == 0) {
        printf("ferry %s\n", FERRY_VERSION);
        return 0;
    }
    if (cmd && (strcmp(cmd, "serve") == 0 || strcmp(cmd, "proxy") == 0))
        return cmd_oneliner(cmd, argc - 2, argv + 2);
    if (cmd && strcmp(cmd, "ca") == 0) return cmd_ca(argc - 2, argv + 2);
    if (cmd && strcmp(cmd, "mitm") == 0) return cmd_mitm(argc - 2, argv + 2);
    if (cmd && strcmp(cmd, "l4") == 0) return cmd_l4(argc - 2, argv + 2);
    if (cmd && strcmp(cmd, "doc-config") == 0) {
        fy_config_doc(stdout);
        return 0;
    }
    bool check = false;
    int i = 1;
    if (cmd && strcmp(cmd, "run") == 0)
        i = 2;
    else if (cmd && strcmp(cmd, "check") == 0) {
        check = true;
        i = 2;
    } else if (cmd && cmd[0] != '-') {
        return bad_usage("unknown command '%s'", cmd);
    }
    const char *file = NULL;
    long workers = -1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) return bad_usage("option '%s' needs a FILE", argv[i]);
            file = argv[++i];
        } else if (strcmp(argv[i], "--workers") == 0) {
            if (i + 1 >= argc) return bad_usage("option '%s' needs a number", argv[i]);
            char *end;
            errno = 0;
            workers = strtol(argv[++i], &end, 10);
            if (errno || *end || workers < 1 || workers > 256)
                return bad_usage("--workers: expected 1..256, got '%s'", argv[i]);
        } else {
            return bad_usage("unknown option '%s'", argv[i]);
        }
    }
    if ((check || (cmd && strcmp(cmd, "run") == 0)) && !file)
        return bad_usage("%s needs -c FILE", cmd);
    fy_config_t *cfg = load(file);
    if (!cfg) return check ? 1 : 2;
    if (workers > 0) cfg->workers = workers;
    if (check) {
        fy_config_dump(cfg, stdout);
        fprintf(stderr, "ferry: configuration %s is valid\n", cfg->source);
        fy_config_free(cfg);
        return 0;
    }
    int r = run(cfg);
    fy_config_free(cfg);
    return r;
}
