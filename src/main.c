/* ferry: argv, signals, config load, workers. The command line is a contract (DESIGN.md §6). */
#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/types.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_valid.h"
#include "config.h"
#include "main_int.h"
#include "core/log.h"
#include "ops/admin.h"
#include "ops/sd_notify.h"
#include "server.h"
#include "tls/ca.h"

/* Exit codes (also in `ferry --help` and the README):
 *   0  success
 *   1  the configuration is invalid (file:line:col errors), or the server failed to start/run
 *   2  the command line is wrong: unknown command or option, a bad option value (for the
 *      one-liners that includes every flag whose value the configuration refuses), or a
 *      -c FILE that cannot be read */

static const char usage[] =
    "usage: ferry [COMMAND] [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  (none)                        run the built-in configuration: demo site on\n"
    "                                http://127.0.0.1:8080 and https://127.0.0.1:8443 (h1, h2,\n"
    "                                h3), proxy demo under /proxy/, intercepting proxy on\n"
    "                                127.0.0.1:8888 [--workers N]\n"
    "  ferry run -c FILE             run the configuration in FILE [--workers N]\n"
    "                  [--pid-file PATH]\n"
    "  ferry reload [-c FILE]        validate FILE and have the running server load it\n"
    "                  [--pid-file PATH]\n"
    "  ferry status [-c FILE]        is the server running: its pid, generation and\n"
    "                  [--pid-file PATH]  config (from the admin listener when it has one)\n"
    "  ferry check [-c FILE]         validate FILE and print the effective configuration;\n"
    "                                without -c, check and print the built-in configuration\n"
    "  ferry serve DIR [--listen ADDR] [--tls self-signed|CERT:KEY] [--protocols h1,...]\n"
    "                  [--workers N] [--access-log stdout|FILE] [--check]\n"
    "                                serve the files in DIR (default 127.0.0.1:8080)\n"
    "  ferry proxy URL [--listen ADDR] [--tls ...] [--protocols ...] [--upstream-ca FILE]\n"
    "                  [--workers N] [--access-log stdout|FILE] [--check]\n"
    "                                reverse-proxy to URL (http:// https:// h2c:// h2:// h3://)\n"
    "  ferry mitm [--listen ADDR] [--ca-dir DIR] [--upstream-ca FILE] [--workers N]\n"
    "                  [--access-log stdout|off|FILE] [--har FILE] [--check]\n"
    "                                intercepting proxy (default 127.0.0.1:8888)\n"
    "  ferry ca init|show|export [--ca-dir DIR] [--out DIR]\n"
    "                                the interception CA (default dir: the data dir)\n"
    "  ferry l4 HOST:PORT [--listen ADDR] [--udp] [--tls self-signed|CERT:KEY] [--workers N]\n"
    "                  [--check]\n"
    "                                relay TCP (or UDP) to HOST:PORT; with --tls, end TLS and\n"
    "                                relay the plaintext (default 127.0.0.1:8080)\n"
    "  ferry doc-config [--man]      print the configuration reference (Markdown, or man)\n"
    "  ferry help [COMMAND]          this text, or one command's options (also COMMAND --help)\n"
    "  ferry version                 print the version (also --version)\n"
    "\n"
    "exit status: 0 success; 1 invalid configuration (file:line:col errors) or the server\n"
    "failed; 2 bad command line: unknown command or option, bad option value, unreadable -c\n"
    "FILE. Every message of the command line starts with \"ferry: \"; configuration errors\n"
    "are \"file:line:col: key: message\".\n";

/* One command's help: its synopsis, what it does, and its options, one per line as
 * "  --flag VALUE   description" (tests/test_cli.py runs every flag listed here). */
struct cmd_help {
    const char *name, *text;
};

#define OPT_LISTEN "  --listen ADDR                 address to listen on (default 127.0.0.1:8080)\n"
#define OPT_TLS                                                                                    \
    "  --tls self-signed|CERT:KEY    TLS with a generated or the given certificate; protocols\n"   \
    "                                then default to h1,h2 (add h3 with --protocols h1,h2,h3)\n"
#define OPT_PROTOCOLS                                                                              \
    "  --protocols LIST              h1, h2c, h2, h3, comma-separated (default h1,h2c, or\n"       \
    "                                h1,h2 with --tls; h2 and h3 need --tls)\n"
#define OPT_WORKERS "  --workers N                   worker threads: auto or 1..256\n"
#define OPT_PIDFILE                                                                                \
    "  --pid-file PATH               the server's pid file (default $XDG_RUNTIME_DIR/ferry.pid\n"  \
    "                                or /tmp/ferry-UID.pid)\n"
#define OPT_ACCESS "  --access-log stdout|FILE      write an access log line per request\n"
#define OPT_CHECK                                                                                  \
    "  --check                       validate the options, print the configuration they make\n"    \
    "                                and exit without serving\n"

static const struct cmd_help helps[] = {
    {"run",
     "usage: ferry run -c FILE [--workers N] [--pid-file PATH]\n"
     "Run the configuration in FILE (see docs/CONFIG.md). SIGHUP or `ferry reload`\n"
     "loads FILE again: new connections get the new configuration, open ones finish\n"
     "on theirs; a FILE with errors is logged and the running configuration stays.\n"
     "options:\n"
     "  -c, --config FILE             the configuration file (required)\n" OPT_WORKERS OPT_PIDFILE},
    {"reload",
     "usage: ferry reload [-c FILE] [--pid-file PATH]\n"
     "Validate the configuration the running server was started with (errors as\n"
     "`ferry check` prints them: file:line:col, exit 1, the server untouched), then\n"
     "have the server load it again: through its admin listener when the configuration\n"
     "has one (POST /config/reload, which reports the new generation or the errors),\n"
     "else by SIGHUP to the pid in its pid file (which also names its configuration).\n"
     "options:\n"
     "  -c, --config FILE             the configuration to check; it must be the\n"
     "                                file the server runs (default: that file)\n" OPT_PIDFILE},
    {"status",
     "usage: ferry status [-c FILE] [--pid-file PATH]\n"
     "Say whether the server runs: with an admin listener in its configuration, ask it\n"
     "(GET /status: pid, configuration generation, file); otherwise check the pid in\n"
     "the pid file. Exit 0 when it runs, 1 when not.\n"
     "options:\n"
     "  -c, --config FILE             the configuration the server runs (default: the one\n"
     "                                named in the pid file)\n" OPT_PIDFILE},
    {"check", "usage: ferry check [-c FILE]\n"
              "Validate FILE and print its effective configuration (every default filled in);\n"
              "errors are file:line:col: key: message, exit 1. Without -c, check the built-in\n"
              "configuration and print it as written (`ferry check > ferry.yaml` to start one).\n"
              "options:\n"
              "  -c, --config FILE             the configuration file\n"},
    {"serve", "usage: ferry serve DIR [options]\n"
              "Serve the files in DIR.\n"
              "options:\n" OPT_LISTEN OPT_TLS OPT_PROTOCOLS OPT_WORKERS OPT_ACCESS OPT_CHECK},
    {"proxy",
     "usage: ferry proxy URL [options]\n"
     "Reverse-proxy every request to URL (http:// https:// h2c:// h2:// h3://).\n"
     "options:\n" OPT_LISTEN OPT_TLS OPT_PROTOCOLS
     "  --upstream-ca FILE            PEM CAs that verify an https://, h2:// or h3://\n"
     "                                origin (default: the system store)\n" OPT_WORKERS OPT_ACCESS
         OPT_CHECK},
    {"mitm", "usage: ferry mitm [options]\n"
             "An intercepting HTTP(S) proxy; trust its CA (ferry ca export) in the clients.\n"
             "options:\n"
             "  --listen ADDR                 address to listen on (default 127.0.0.1:8888)\n"
             "  --ca-dir DIR                  folder of the interception CA (default: the data\n"
             "                                dir)\n"
             "  --upstream-ca FILE            PEM CAs that verify origins (default: the system\n"
             "                                store)\n" OPT_WORKERS OPT_ACCESS
             "  --har FILE                    record every flow to this HAR file\n" OPT_CHECK},
    {"ca",
     "usage: ferry ca init|show|export [options]\n"
     "init: make the interception CA if there is none; show: describe it; export: write\n"
     "it as PEM and DER and say how to trust it.\n"
     "options:\n"
     "  --ca-dir DIR                  folder of the CA (default: the data dir)\n"
     "  --out DIR                     export: where to write the files (default: --ca-dir)\n"},
    {"l4",
     "usage: ferry l4 HOST:PORT [options]\n"
     "Relay TCP (or UDP) connections to HOST:PORT; with --tls, end TLS here and relay\n"
     "the plaintext.\n"
     "options:\n" OPT_LISTEN "  --udp                         relay UDP datagrams instead of TCP\n"
     "  --tls self-signed|CERT:KEY    end TLS with a generated or the given "
     "certificate\n" OPT_WORKERS OPT_CHECK},
    {"doc-config", "usage: ferry doc-config [--man]\n"
                   "Print the reference of every configuration key (Markdown, docs/CONFIG.md).\n"
                   "options:\n"
                   "  --man                         as the man page ferry.yaml(5) instead\n"},
    {"help", "usage: ferry help [COMMAND]\n"
             "Print the list of commands, or one command's options.\n"},
    {"version", "usage: ferry version\nPrint the version.\n"},
};

static const struct cmd_help *find_help(const char *cmd)
{
    for (size_t i = 0; i < sizeof helps / sizeof *helps; i++)
        if (!strcmp(helps[i].name, cmd)) return &helps[i];
    return NULL;
}

static bool is_help_flag(const char *a)
{
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

/* `CMD --help` / `CMD -h` anywhere among the arguments: print that command's help. */
bool fy__main_wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (is_help_flag(argv[i])) return true;
    return false;
}

int fy__main_print_help(const char *cmd)
{
    const struct cmd_help *h = find_help(cmd);
    fputs(h ? h->text : usage, stdout);
    return 0;
}

static const char *g_cmd; /* the command being run, for messages: "serve", "ca export" */

/* "ferry: serve: MESSAGE (see ferry serve --help)", exit 2 */
int fy__main_bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ferry: ");
    if (g_cmd) fprintf(stderr, "%s: ", g_cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see ferry %s%s--help)\n", g_cmd ? g_cmd : "", g_cmd ? " " : "");
    va_end(ap);
    return EXIT_USAGE;
}

/* YAML double-quoted scalar of s into buf (control bytes escaped, so a flag's value cannot
   break the generated document's lines). */
static void yaml_quote(char *buf, size_t cap, const char *s)
{
    size_t o = 0;
    buf[o++] = '"';
    for (; *s && o + 6 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
}

/* ---- the one-liners: a YAML config generated from the flags ---- */

#define GEN_LINES 64

/* The generated config, and for each of its lines the flag that produced it, so an error in
 * line L is reported as that flag ("--tls: cannot read ...") and not as a position in a file
 * the user never wrote. */
struct gen {
    char y[8192];
    size_t o;
    int lines;
    const char *flag[GEN_LINES + 1]; /* flag[L] names line L (1-based); NULL: no flag */
};

__attribute__((format(printf, 3, 4))) static void gen_add(struct gen *g, const char *flag,
                                                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t start = g->o;
    int n = vsnprintf(g->y + g->o, sizeof g->y - g->o, fmt, ap);
    va_end(ap);
    if (n > 0) g->o = g->o + (size_t)n < sizeof g->y ? g->o + (size_t)n : sizeof g->y - 1;
    for (size_t i = start; i < g->o; i++)
        if (g->y[i] == '\n' && g->lines < GEN_LINES) g->flag[++g->lines] = flag;
}

/* --tls self-signed|CERT:KEY into `    tls: ...`; -1 after bad_usage */
static int gen_tls(struct gen *g, const char *tls)
{
    if (strcmp(tls, "self-signed") == 0) {
        gen_add(g, "--tls", "    tls: self-signed\n");
        return 0;
    }
    const char *colon = strchr(tls, ':');
    if (!colon || colon == tls || !colon[1])
        return fy__main_bad_usage("--tls: expected self-signed or CERT:KEY, got '%s'", tls), -1;
    char cert[2048], q2[4200], q3[4200];
    snprintf(cert, sizeof cert, "%.*s", (int)(colon - tls), tls);
    yaml_quote(q2, sizeof q2, cert);
    yaml_quote(q3, sizeof q3, colon + 1);
    gen_add(g, "--tls", "    tls: {cert: %s, key: %s}\n", q2, q3);
    return 0;
}

static int gen_workers(struct gen *g, const char *workers)
{
    if (!workers) return 0;
    char *end;
    long wn = strtol(workers, &end, 10);
    if (strcmp(workers, "auto") != 0 && (!*workers || *end || wn < 1 || wn > 256))
        return fy__main_bad_usage("--workers: expected auto or 1..256, got '%s'", workers), -1;
    gen_add(g, "--workers", "workers: %s\n", strcmp(workers, "auto") == 0 ? "auto" : workers);
    return 0;
}

/* The flag a generated key comes from, by the key's last name ("listeners[0].protocols"):
   cross-field errors are reported at their map's line, which may be another flag's. */
static const char *flag_of_key(const char *key, size_t len)
{
    static const char *const map[][2] = {
        {"protocols", "--protocols"},
        {"tls", "--tls"},
        {"cert", "--tls"},
        {"key", "--tls"},
        {"access", "--access-log"},
        {"upstream-ca", "--upstream-ca"},
        {"ca", "--upstream-ca"},
        {"ca-dir", "--ca-dir"},
        {"har", "--har"},
        {"workers", "--workers"},
        {"address", "--listen"},
        {"listen", "--listen"},
    };
    size_t b = len;
    while (b > 0 && key[b - 1] != '.') b--;
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (strlen(map[i][0]) == len - b && !memcmp(key + b, map[i][0], len - b)) return map[i][1];
    return NULL;
}

/* Load the generated config. Its errors are the flags' errors: the first one is printed as
   "ferry: CMD: FLAG: message" (one line, exit 2). With `check`, print the effective config
   instead of running it. */
static int gen_run(struct gen *g, bool check)
{
    char *errs = NULL;
    size_t errlen = 0;
    FILE *mem = open_memstream(&errs, &errlen);
    if (!mem) return EXIT_CONFIG;
    fy_config_t *cfg = fy_config_load_text("<command line>", g->y, g->o, mem);
    fclose(mem);
    if (!cfg) {
        /* "<command line>:L:C: key: message" or "<command line>:L:C: yaml: message" */
        const char *line = errs ? errs : "";
        const char *flag = NULL, *msg = line;
        int l = 0, c = 0, used = 0;
        if (sscanf(line, "<command line>:%d:%d: %n", &l, &c, &used) == 2 && used > 0) {
            msg = line + used;
            const char *sep = strstr(msg, ": ");
            const char *nl = strchr(msg, '\n');
            if (sep && (!nl || sep < nl)) {
                flag = flag_of_key(msg, (size_t)(sep - msg));
                msg = sep + 2;
            }
            if (!flag && l >= 1 && l <= g->lines) flag = g->flag[l];
        }
        int ml = (int)strcspn(msg, "\n");
        if (flag)
            fprintf(stderr, "ferry: %s: %s: %.*s\n", g_cmd, flag, ml, msg);
        else
            fprintf(stderr, "ferry: %s: %.*s\n", g_cmd, ml, msg);
        free(errs);
        return EXIT_USAGE;
    }
    free(errs);
    int r = 0;
    if (check) {
        fy_config_dump(cfg, stdout);
        fprintf(stderr, "ferry: %s: the options are valid\n", g_cmd);
    } else {
        r = fy__main_run(cfg);
    }
    fy_config_free(cfg);
    return r;
}

/* Parse argv into opts and at most one positional argument (when `pos` is not NULL).
   Returns 0 or EXIT_USAGE after bad_usage. */
int fy__main_parse_opts(int argc, char **argv, const struct opt *opts, const char **pos,
                        const char *pos_name)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const struct opt *o = NULL;
        for (const struct opt *p = opts; p->name; p++)
            if (p->name[0] && !strcmp(a, p->name)) o = p; /* "": not offered here */
        if (o && o->set) {
            *o->set = true;
        } else if (o) {
            if (i + 1 >= argc) return fy__main_bad_usage("option '%s' needs a value", a);
            *o->value = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            return fy__main_bad_usage("unknown option '%s'", a);
        } else if (pos && !*pos) {
            *pos = a;
        } else {
            return fy__main_bad_usage("unexpected argument '%s'", a);
        }
    }
    if (pos && !*pos) return fy__main_bad_usage("missing %s", pos_name);
    return 0;
}

/* `serve DIR` (static files) and `proxy URL` (reverse proxy). */
static int cmd_oneliner(int argc, char **argv)
{
    bool proxy = strcmp(g_cmd, "proxy") == 0, check = false;
    const char *arg = NULL, *listen = "127.0.0.1:8080", *tls = NULL, *protocols = NULL;
    const char *workers = NULL, *access = NULL, *upstream_ca = NULL;
    const struct opt opts[] = {
        {"--listen", &listen, NULL},       {"--tls", &tls, NULL},
        {"--protocols", &protocols, NULL}, {"--workers", &workers, NULL},
        {"--access-log", &access, NULL},   {proxy ? "--upstream-ca" : "", &upstream_ca, NULL},
        {"--check", NULL, &check},         {NULL, NULL, NULL},
    };
    if (fy__main_parse_opts(argc, argv, opts, &arg, proxy ? "URL" : "DIR")) return EXIT_USAGE;
    const char *argname = proxy ? "URL" : "DIR";
    struct gen g = {.o = 0};
    char q[4200];
    if (gen_workers(&g, workers) < 0) return EXIT_USAGE;
    yaml_quote(q, sizeof q, listen);
    gen_add(&g, NULL, "listeners:\n");
    gen_add(&g, "--listen", "  - address: %s\n", q);
    if (protocols) {
        yaml_quote(q, sizeof q, protocols);
        gen_add(&g, "--protocols", "    protocols: %s\n", q);
    }
    if (tls && gen_tls(&g, tls) < 0) return EXIT_USAGE;
    yaml_quote(q, sizeof q, arg);
    if (proxy) {
        gen_add(&g, NULL, "upstreams:\n  - name: origin\n");
        gen_add(&g, argname, "    servers: [%s]\n", q);
        if (upstream_ca) {
            yaml_quote(q, sizeof q, upstream_ca);
            gen_add(&g, "--upstream-ca", "    ca: %s\n", q);
        }
        gen_add(&g, NULL, "routes:\n  - proxy: origin\n");
    } else {
        gen_add(&g, NULL, "routes:\n");
        gen_add(&g, argname, "  - static: {root: %s}\n", q);
    }
    if (access) {
        yaml_quote(q, sizeof q, access);
        gen_add(&g, "--access-log", "log: {access: %s, access-format: combined}\n", q);
    }
    return gen_run(&g, check);
}

/* `ferry mitm`: the intercepting proxy one-liner (DESIGN.md §6). */
static int cmd_mitm(int argc, char **argv)
{
    const char *listen = "127.0.0.1:8888", *ca_dir = NULL, *upstream_ca = NULL;
    const char *workers = NULL, *access = "stdout", *har = NULL; /* --access-log off: none */
    bool check = false;
    const struct opt opts[] = {
        {"--listen", &listen, NULL},   {"--har", &har, NULL},
        {"--ca-dir", &ca_dir, NULL},   {"--upstream-ca", &upstream_ca, NULL},
        {"--workers", &workers, NULL}, {"--access-log", &access, NULL},
        {"--check", NULL, &check},     {NULL, NULL, NULL},
    };
    if (fy__main_parse_opts(argc, argv, opts, NULL, NULL)) return EXIT_USAGE;
    struct gen g = {.o = 0};
    char q[4200];
    if (gen_workers(&g, workers) < 0) return EXIT_USAGE;
    yaml_quote(q, sizeof q, listen);
    gen_add(&g, NULL, "listeners:\n");
    gen_add(&g, "--listen", "  - address: %s\n", q);
    gen_add(&g, NULL, "    kind: intercept\n    protocols: [h1]\nintercept:\n");
    if (ca_dir) {
        yaml_quote(q, sizeof q, ca_dir);
        gen_add(&g, "--ca-dir", "  ca-dir: %s\n", q);
    }
    if (upstream_ca) {
        yaml_quote(q, sizeof q, upstream_ca);
        gen_add(&g, "--upstream-ca", "  upstream-ca: %s\n", q);
    }
    if (har) {
        yaml_quote(q, sizeof q, har);
        gen_add(&g, "--har", "  capture: {har: %s}\n", q);
    }
    if (access) {
        yaml_quote(q, sizeof q, access);
        gen_add(&g, "--access-log", "log: {access: %s, access-format: combined}\n", q);
    }
    return gen_run(&g, check);
}

/* `ferry l4 HOST:PORT`: a TCP relay, a UDP relay (--udp) or a TLS-terminating relay (--tls). */
static int cmd_l4(int argc, char **argv)
{
    const char *target = NULL, *listen = "127.0.0.1:8080", *tls = NULL, *workers = NULL;
    bool udp = false, check = false;
    const struct opt opts[] = {
        {"--listen", &listen, NULL}, {"--tls", &tls, NULL},     {"--workers", &workers, NULL},
        {"--udp", NULL, &udp},       {"--check", NULL, &check}, {NULL, NULL, NULL},
    };
    if (fy__main_parse_opts(argc, argv, opts, &target, "HOST:PORT")) return EXIT_USAGE;
    if (udp && tls) return fy__main_bad_usage("--udp and --tls do not go together");
    struct gen g = {.o = 0};
    char q[4200];
    if (gen_workers(&g, workers) < 0) return EXIT_USAGE;
    yaml_quote(q, sizeof q, listen);
    gen_add(&g, NULL, "l4:\n");
    gen_add(&g, "--listen", "  - listen: %s\n", q);
    yaml_quote(q, sizeof q, target);
    gen_add(&g, "HOST:PORT", "    target: %s\n", q);
    gen_add(&g,
            udp   ? "--udp"
            : tls ? "--tls"
                  : NULL,
            "    mode: %s\n",
            udp   ? "udp"
            : tls ? "tls-terminate"
                  : "tcp");
    if (tls && gen_tls(&g, tls) < 0) return EXIT_USAGE;
    return gen_run(&g, check);
}

/* ---- ca, check, the commands ---- */

/* `ferry ca init|show|export [--ca-dir DIR] [--out DIR]` */
static int cmd_ca(int argc, char **argv)
{
    if (argc < 1) return fy__main_bad_usage("expected init, show or export");
    const char *sub = argv[0];
    if (strcmp(sub, "init") && strcmp(sub, "show") && strcmp(sub, "export"))
        return fy__main_bad_usage("unknown subcommand '%s' (init, show, export)", sub);
    const char *dir = NULL, *out = NULL;
    const struct opt opts[] = {
        {"--ca-dir", &dir, NULL},
        {strcmp(sub, "export") == 0 ? "--out" : "", &out, NULL},
        {NULL, NULL, NULL},
    };
    char name[32];
    snprintf(name, sizeof name, "ca %s", sub);
    g_cmd = name;
    if (fy__main_parse_opts(argc - 1, argv + 1, opts, NULL, NULL)) return EXIT_USAGE;
    char ddir[4096];
    if (!dir) {
        fy_config_default_data_dir(ddir, sizeof ddir);
        dir = ddir;
    }
    char err[600];
    fy_ca_t *ca = fy_ca_load(dir, strcmp(sub, "show") != 0, err, sizeof err);
    if (!ca) {
        fprintf(stderr, "ferry: ca %s: %s\n", sub, err);
        return EXIT_CONFIG;
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
            rc = EXIT_CONFIG;
        } else {
            printf("PEM: %s\nDER: %s\n", pem, der);
            fy_ca_print_trust_help(pem, der, stdout);
        }
    }
    fy_ca_free(ca);
    return rc;
}

/* `ferry`, `ferry run -c FILE`, `ferry check [-c FILE]` */
static int cmd_config(bool check, bool need_file, int argc, char **argv)
{
    const char *file = NULL, *workers_s = NULL, *pidf = NULL;
    const struct opt opts[] = {
        {"-c", &file, NULL},
        {"--config", &file, NULL},
        {"--workers", &workers_s, NULL},
        {check ? "" : "--pid-file", &pidf, NULL},
        {NULL, NULL, NULL},
    };
    if (fy__main_parse_opts(argc, argv, opts, NULL, NULL)) return EXIT_USAGE;
    long workers = -1;
    if (workers_s) {
        char *end;
        errno = 0;
        workers = strtol(workers_s, &end, 10);
        if (errno || !*workers_s || *end || workers < 1 || workers > 256)
            return fy__main_bad_usage("--workers: expected 1..256, got '%s'", workers_s);
    }
    if (need_file && !file) return fy__main_bad_usage("needs -c FILE");
    char why[600];
    if (file && fy_conf_check_readable(file, why, sizeof why) < 0)
        return fy__main_bad_usage("-c: %s", why);
    fy_config_t *cfg = file ? fy_config_load_file(file, stderr)
                            : fy_config_load_text("<embedded>", fy_config_embedded,
                                                  strlen(fy_config_embedded), stderr);
    if (!cfg) {
        fprintf(stderr, "ferry: %s: %s is not valid\n", g_cmd ? g_cmd : "run",
                file ? file : "the built-in configuration");
        return EXIT_CONFIG;
    }
    if (workers > 0) cfg->workers = workers;
    if (check && cfg->admin && fy_admin_conf_is_exposed(cfg->admin))
        fprintf(stderr,
                "ferry: check: warning: admin.address %s is not a loopback address and admin "
                "has no token (nor client-ca): anyone who reaches it can read the metrics and "
                "change the configuration\n",
                cfg->admin->address);
    if (check) {
        if (file)
            fy_config_dump(cfg, stdout);
        else
            fputs(fy_config_embedded, stdout);
        fprintf(stderr, "ferry: check: %s is valid\n", file ? file : "the built-in configuration");
        fy_config_free(cfg);
        return 0;
    }
    char dflt[PATH_MAX];
    if (!pidf) {
        fy__main_default_pid_file(dflt, sizeof dflt);
        pidf = dflt;
    }
    g_conf_file = file;
    g_conf_embedded = !file;
    g_pid_file = pidf;
    g_workers = workers;
    int r = fy__main_run(cfg);
    fy_config_free(cfg);
    return r;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;
    if (cmd && (is_help_flag(cmd) || !strcmp(cmd, "help"))) {
        if (argc > 2 && is_help_flag(argv[2])) return fy__main_print_help("help");
        if (argc > 2 && !find_help(argv[2])) {
            g_cmd = "help";
            return fy__main_bad_usage("unknown command '%s'", argv[2]);
        }
        return fy__main_print_help(argc > 2 ? argv[2] : "");
    }
    if (cmd && (!strcmp(cmd, "--version") || !strcmp(cmd, "version"))) {
        printf("ferry %s\n", FERRY_VERSION);
        return 0;
    }
    if (!cmd || cmd[0] == '-') { /* `ferry [--workers N]`: the built-in configuration */
        return cmd_config(false, false, argc - 1, argv + 1);
    }
    if (!find_help(cmd)) return fy__main_bad_usage("unknown command '%s'", cmd);
    g_cmd = cmd;
    if (fy__main_wants_help(argc - 2, argv + 2)) return fy__main_print_help(cmd);
    if (!strcmp(cmd, "serve") || !strcmp(cmd, "proxy")) return cmd_oneliner(argc - 2, argv + 2);
    if (!strcmp(cmd, "ca")) return cmd_ca(argc - 2, argv + 2);
    if (!strcmp(cmd, "mitm")) return cmd_mitm(argc - 2, argv + 2);
    if (!strcmp(cmd, "l4")) return cmd_l4(argc - 2, argv + 2);
    if (!strcmp(cmd, "run")) return cmd_config(false, true, argc - 2, argv + 2);
    if (!strcmp(cmd, "check")) return cmd_config(true, false, argc - 2, argv + 2);
    if (!strcmp(cmd, "reload")) return fy__main_cmd_reload(argc - 2, argv + 2);
    if (!strcmp(cmd, "status")) return fy__main_cmd_status(argc - 2, argv + 2);
    if (!strcmp(cmd, "doc-config") && argc == 3 && !strcmp(argv[2], "--man"))
        return fy_config_doc_man(stdout, FERRY_VERSION), 0;
    if (argc > 2) return fy__main_bad_usage("takes no arguments");
    if (!strcmp(cmd, "doc-config")) {
        fy_config_doc(stdout);
        return 0;
    }
    return fy__main_print_help(cmd); /* help, version handled above */
}
