/* ferry run (signals, pid file, reload, the admin listener's host) and the commands that talk
 * to a running ferry (status, reload). Main thread only. */
#include "main_int.h"

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
#include "core/log.h"
#include "ops/admin.h"
#include "ops/sd_notify.h"
#include "server.h"
#include "tls/ca.h"

/* ---- run, check, ca ---- */

/* What SIGHUP reloads (set by cmd_config; the one-liners have nothing to reload). */
const char *g_conf_file;      /* -c FILE, or NULL */
bool g_conf_embedded;         /* `ferry` with the built-in configuration */
const char *g_pid_file;       /* written by run(), removed at exit */
long g_workers = -1;          /* --workers, kept across reloads */
static fy_server_t *g_server; /* run(): the admin host's server */
static fy_admin_t *g_admin;   /* run(): the admin listener, or NULL */

/* ---- the admin listener's host (ops/admin.h): the config and the server it cannot see ---- */

static struct fy_config *host_load(const char *name, const char *text, size_t len, FILE *errf)
{
    fy_config_t *cfg = fy_config_load_text(name, text, len, errf);
    if (cfg && g_workers > 0) cfg->workers = g_workers;
    return cfg;
}

static void host_free(struct fy_config *cfg)
{
    fy_config_free(cfg);
}

static void host_dump(const struct fy_config *cfg, FILE *out)
{
    fy_config_dump(cfg, out);
}

static const struct fy_config *host_current(void *ud, unsigned *gen)
{
    return fy_server_config(ud, gen);
}

static int host_apply(void *ud, struct fy_config *cfg)
{
    fy_sd_notify_reloading();
    int r = fy_server_reload(ud, cfg);
    fy_sd_notify_reloaded(r == 0, r == 0 ? NULL : "the new configuration could not be set up");
    return r;
}

static size_t host_upstreams(void *ud, fy_upstream_t *const **v)
{
    return fy_server_upstreams(ud, v);
}

static int start_admin(const fy_config_t *cfg)
{
    fy_admin_host_t host = {
        .table = fy_config_table,
        .load = host_load,
        .free = host_free,
        .dump = host_dump,
        .current = host_current,
        .apply = host_apply,
        .upstreams = host_upstreams,
        .ud = g_server,
    };
    char *text = NULL;
    size_t len = 0;
    if (g_conf_file) {
        FILE *f = fopen(g_conf_file, "rb");
        if (f) {
            char buf[65536];
            size_t n;
            FILE *m = open_memstream(&text, &len);
            while (m && (n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, m);
            if (m) fclose(m);
            fclose(f);
        }
    }
    const char *t = text ? text : fy_config_embedded;
    g_admin = fy_admin_start(cfg->admin, &cfg->limits, cfg->data_dir, &host, g_conf_file, t,
                             text ? len : strlen(fy_config_embedded));
    free(text);
    if (g_admin && fy_admin_conf_is_exposed(cfg->admin))
        fy_warn("admin: %s is not a loopback address and has no token: anyone who reaches it "
                "can read the metrics and change the configuration",
                cfg->admin->address);
    return g_admin ? 0 : -1;
}

void fy__main_default_pid_file(char *buf, size_t len)
{
    const char *rt = getenv("XDG_RUNTIME_DIR");
    if (rt && *rt)
        snprintf(buf, len, "%s/ferry.pid", rt);
    else
        snprintf(buf, len, "/tmp/ferry-%u.pid", (unsigned)getuid());
}

/* "PID\nCONFIG\n" (CONFIG: the absolute path of -c FILE, or "<embedded>"). */
static void write_pid_file(const char *path)
{
    char abs[PATH_MAX];
    const char *conf = "<embedded>";
    if (g_conf_file) conf = realpath(g_conf_file, abs) ? abs : g_conf_file;
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%ld\n%s\n", (long)getpid(), conf) < 0 || fclose(f) != 0 ||
        rename(tmp, path) != 0) {
        fy_warn("pid file %s: %s (ferry reload will not find this server)", path, strerror(errno));
        unlink(tmp);
        return;
    }
}

/* Read "PID\nCONFIG\n". Returns the pid, or -1 with `why` set. */
static long read_pid_file(const char *path, char *conf, size_t len, char *why, size_t wlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, wlen, "%s: %s (is ferry running? see --pid-file)", path, strerror(errno));
        return -1;
    }
    char line[32];
    long pid = -1;
    if (fgets(line, sizeof line, f)) {
        char *end;
        pid = strtol(line, &end, 10);
        if (end == line || (*end != '\n' && *end) || pid <= 0) pid = -1;
    }
    if (pid > 0 && fgets(conf, (int)len, f)) {
        conf[strcspn(conf, "\n")] = '\0';
    } else {
        pid = -1;
    }
    fclose(f);
    if (pid < 0) snprintf(why, wlen, "%s: not a ferry pid file", path);
    return pid;
}

/* The pid file is ours to remove only while it still names this process. */
static void remove_pid_file(const char *path)
{
    char conf[PATH_MAX], why[16];
    if (read_pid_file(path, conf, sizeof conf, why, sizeof why) == (long)getpid()) unlink(path);
}

/* SIGHUP: load the configuration again; errors are logged as `ferry check` prints them. */
static void reload(fy_server_t *s)
{
    if (!g_conf_file && !g_conf_embedded) {
        fy_notice("SIGHUP: this configuration came from the command line; nothing to reload");
        return;
    }
    fy_notice("SIGHUP: reloading %s", g_conf_file ? g_conf_file : "the built-in configuration");
    if (g_admin) { /* one reload at a time, and the admin API's rollback sees it */
        if (fy_admin_reload_source(g_admin, stderr) < 0)
            fy_error("reload: %s was not applied; the running configuration stays",
                     g_conf_file ? g_conf_file : "the built-in configuration");
        return;
    }
    fy_sd_notify_reloading();
    fy_config_t *cfg = g_conf_file ? fy_config_load_file(g_conf_file, stderr)
                                   : fy_config_load_text("<embedded>", fy_config_embedded,
                                                         strlen(fy_config_embedded), stderr);
    if (!cfg) {
        fy_error("reload: %s is not valid; the running configuration stays",
                 g_conf_file ? g_conf_file : "the built-in configuration");
        fy_sd_notify_reloaded(false, "the configuration is not valid");
        return;
    }
    if (g_workers > 0) cfg->workers = g_workers;
    if (fy_server_reload(s, cfg) < 0)
        fy_sd_notify_reloaded(false, "the new configuration could not be set up");
    else
        fy_sd_notify_reloaded(true, NULL);
}

int fy__main_run(fy_config_t *cfg)
{
    if (cfg->admin) fy_admin_prepare(); /* detailed metrics, before anything is built */
    fy_server_t *s = fy_server_new(cfg);
    if (!s) return EXIT_CONFIG;
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
        return EXIT_CONFIG;
    }
    g_server = s;
    if (cfg->admin && start_admin(cfg) < 0) {
        fy_server_stop(s, 0);
        fy_server_free(s);
        return EXIT_CONFIG;
    }
    if (g_pid_file) write_pid_file(g_pid_file);
    fy_server_print_urls(s, stdout);
    fy_notice("ferry %s started: %d workers", FERRY_VERSION,
              cfg->workers > 0 ? (int)cfg->workers : (int)sysconf(_SC_NPROCESSORS_ONLN));
    fy_sd_notify_ready(); /* systemd Type=notify: every listener bound, workers running */
    for (;;) {
        int sig = 0;
        sigwait(&set, &sig);
        if (sig == SIGHUP) {
            reload(s);
            continue;
        }
        fy_notice("signal %d: stopping", sig); /* fy_server_stop logs the drain */
        break;
    }
    fy_sd_notify_stopping();
    fy_admin_stop(g_admin); /* no reload may start while the server stops */
    g_admin = NULL;
    fy_server_stop(s, 10000);
    fy_server_free(s);
    if (g_pid_file) remove_pid_file(g_pid_file);
    fy_notice("exited cleanly");
    return 0;
}

/* One request to the admin listener of `ac` (plain HTTP/1.1, Connection: close). Returns the
 * status (> 0) with the body in *out (malloc'd), or -1 when it cannot be reached (why set). */
static int admin_request(const fy_admin_conf_t *ac, const char *method, const char *path,
                         char **out, char *why, size_t wlen)
{
    *out = NULL;
    if (ac->tls) { /* this small client speaks plain HTTP only */
        snprintf(why, wlen, "admin listener %s uses TLS (not spoken by the CLI)", ac->address);
        return -1;
    }
    int fd = socket(ac->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {30, 0}; /* a reload waits for every worker: up to 10 s */
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
        connect(fd, (const struct sockaddr *)&ac->addr, ac->addrlen) < 0) {
        snprintf(why, wlen, "admin listener %s: %s", ac->address, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    char req[2048];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: "
                     "0\r\n%s%s%s\r\n",
                     method, path, ac->address, ac->token ? "Authorization: Bearer " : "",
                     ac->token ? ac->token : "", ac->token ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof req || write(fd, req, (size_t)n) != n) {
        snprintf(why, wlen, "admin listener %s: write: %s", ac->address, strerror(errno));
        close(fd);
        return -1;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap = cap * 2 + 8192);
            if (!nb) break;
            buf = nb;
        }
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    int status = -1;
    if (buf) {
        buf[len] = '\0';
        if (len > 12 && !strncmp(buf, "HTTP/1.1 ", 9)) status = (int)strtol(buf + 9, NULL, 10);
        char *body = strstr(buf, "\r\n\r\n");
        if (status > 0 && body) {
            memmove(buf, body + 4, strlen(body + 4) + 1);
            *out = buf;
            return status;
        }
    }
    free(buf);
    snprintf(why, wlen, "admin listener %s: no HTTP response", ac->address);
    return -1;
}

/* The configuration named by -c FILE or by the pid file (NULL when neither gives one). */
static fy_config_t *running_config(const char *file, const char *running, bool embedded)
{
    if (!file && !embedded && running && running[0]) file = running;
    if (file) return fy_config_load_file(file, stderr);
    if (embedded)
        return fy_config_load_text("<embedded>", fy_config_embedded, strlen(fy_config_embedded),
                                   stderr);
    return NULL;
}

/* `ferry status [-c FILE] [--pid-file PATH]` */
int fy__main_cmd_status(int argc, char **argv)
{
    const char *file = NULL, *pidf = NULL;
    const struct opt opts[] = {
        {"-c", &file, NULL},
        {"--config", &file, NULL},
        {"--pid-file", &pidf, NULL},
        {NULL, NULL, NULL},
    };
    if (fy__main_parse_opts(argc, argv, opts, NULL, NULL)) return EXIT_USAGE;
    char dflt[PATH_MAX], running[PATH_MAX] = "", why[PATH_MAX + 100];
    if (!pidf) {
        fy__main_default_pid_file(dflt, sizeof dflt);
        pidf = dflt;
    }
    if (file && fy_conf_check_readable(file, why, sizeof why) < 0)
        return fy__main_bad_usage("-c: %s", why);
    long pid = read_pid_file(pidf, running, sizeof running, why, sizeof why);
    fy_config_t *cfg = running_config(file, running, pid > 0 && !strcmp(running, "<embedded>"));
    if (cfg && cfg->admin) {
        char *body = NULL, awhy[300];
        int st = admin_request(cfg->admin, "GET", "/status", &body, awhy, sizeof awhy);
        fy_config_free(cfg);
        if (st == 200) {
            printf("%s", body);
            free(body);
            return 0;
        }
        fprintf(stderr, "ferry: status: %s%s\n", st > 0 ? "admin listener answered " : awhy,
                st > 0 ? body : "");
        free(body);
        if (pid < 0) return EXIT_CONFIG;
    } else {
        fy_config_free(cfg);
    }
    if (pid < 0) {
        fprintf(stderr, "ferry: status: not running (%s)\n", why);
        return EXIT_CONFIG;
    }
    if (kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
        fprintf(stderr, "ferry: status: not running (pid %ld from %s is gone)\n", pid, pidf);
        return EXIT_CONFIG;
    }
    printf("{\"ok\": true, \"pid\": %ld, \"config\": \"%s\"}\n", pid, running);
    return 0;
}

/* `ferry reload [-c FILE] [--pid-file PATH]` */
int fy__main_cmd_reload(int argc, char **argv)
{
    const char *file = NULL, *pidf = NULL;
    const struct opt opts[] = {
        {"-c", &file, NULL},
        {"--config", &file, NULL},
        {"--pid-file", &pidf, NULL},
        {NULL, NULL, NULL},
    };
    if (fy__main_parse_opts(argc, argv, opts, NULL, NULL)) return EXIT_USAGE;
    char dflt[PATH_MAX], running[PATH_MAX], why[PATH_MAX + 100];
    if (!pidf) {
        fy__main_default_pid_file(dflt, sizeof dflt);
        pidf = dflt;
    }
    if (file && fy_conf_check_readable(file, why, sizeof why) < 0)
        return fy__main_bad_usage("-c: %s", why);
    long pid = read_pid_file(pidf, running, sizeof running, why, sizeof why);
    if (pid < 0 && file) {
        /* no pid file: a server with an admin listener can still be asked */
        fy_config_t *cfg = fy_config_load_file(file, stderr);
        if (!cfg) {
            fprintf(stderr, "ferry: reload: %s is not valid\n", file);
            return EXIT_CONFIG;
        }
        int rc = -1;
        if (cfg->admin) {
            char *body = NULL, awhy[300];
            int st = admin_request(cfg->admin, "POST", "/config/reload", &body, awhy, sizeof awhy);
            if (st > 0) fprintf(stderr, "ferry: reload: %s", body ? body : "");
            rc = st == 200 ? 0 : EXIT_CONFIG;
            if (st < 0) fprintf(stderr, "ferry: reload: %s; %s\n", awhy, why);
            free(body);
        } else {
            fprintf(stderr, "ferry: reload: %s\n", why);
            rc = EXIT_CONFIG;
        }
        fy_config_free(cfg);
        return rc;
    }
    if (pid < 0) {
        fprintf(stderr, "ferry: reload: %s\n", why);
        return EXIT_CONFIG;
    }
    bool embedded = strcmp(running, "<embedded>") == 0;
    if (file) {
        char abs[PATH_MAX];
        if (embedded || !realpath(file, abs) || strcmp(abs, running) != 0) {
            fprintf(stderr, "ferry: reload: the server (pid %ld) runs %s, not %s\n", pid,
                    embedded ? "the built-in configuration" : running, file);
            return EXIT_USAGE;
        }
    } else if (!embedded) {
        file = running;
    }
    fy_config_t *cfg = file ? fy_config_load_file(file, stderr)
                            : fy_config_load_text("<embedded>", fy_config_embedded,
                                                  strlen(fy_config_embedded), stderr);
    if (!cfg) {
        fprintf(stderr, "ferry: reload: %s is not valid\n", file);
        return EXIT_CONFIG;
    }
    if (cfg->admin) { /* ask the admin listener: it answers with the generation or errors */
        char *body = NULL, awhy[300];
        int st = admin_request(cfg->admin, "POST", "/config/reload", &body, awhy, sizeof awhy);
        fy_config_free(cfg);
        if (st > 0) {
            fprintf(stderr, "ferry: reload: %s", body ? body : "");
            free(body);
            return st == 200 ? 0 : EXIT_CONFIG;
        }
        fprintf(stderr, "ferry: reload: %s; falling back to SIGHUP\n", awhy);
        cfg = NULL;
    }
    fy_config_free(cfg);
    if (kill((pid_t)pid, SIGHUP) < 0) {
        fprintf(stderr, "ferry: reload: pid %ld (from %s): %s\n", pid, pidf, strerror(errno));
        return EXIT_CONFIG;
    }
    fprintf(stderr, "ferry: reload: %s is valid; sent SIGHUP to pid %ld\n",
            file ? file : "the built-in configuration", pid);
    return 0;
}
