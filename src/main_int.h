/* What src/main.c (argv, help, the one-liners, check, ca) and src/main_run.c (run, reload,
 * status) share. Main thread only. */
#ifndef FY_MAIN_INT_H
#define FY_MAIN_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

#ifndef FERRY_VERSION
#define FERRY_VERSION                                                                              \
    "0.1.0" /* CMakeLists.txt's project() has no version; -DFERRY_VERSION= wins                    \
             */
#endif

/* set by main.c's cmd_config before run(): kept across reloads */
extern const char *g_conf_file; /* -c FILE, or NULL */
extern bool g_conf_embedded;    /* `ferry` with the built-in configuration */
extern const char *g_pid_file;  /* written by run(), removed at exit */
extern long g_workers;          /* --workers */
/* $XDG_RUNTIME_DIR/ferry.pid or /tmp/ferry-UID.pid */
void fy__main_default_pid_file(char *buf, size_t len);

enum { EXIT_CONFIG = 1, EXIT_USAGE = 2 };

/* Options that take a value, and flags that do not; unknown options are usage errors. */
struct opt {
    const char *name;
    const char **value; /* NULL for a flag */
    bool *set;          /* flags */
};

/* "ferry: MSG" plus the usage hint on stderr; returns EXIT_USAGE. */
__attribute__((format(printf, 1, 2))) int fy__main_bad_usage(const char *fmt, ...);
/* Parse argv into opts and at most one positional argument (when `pos` is not NULL).
   Returns 0 or EXIT_USAGE after bad_usage. */
int fy__main_parse_opts(int argc, char **argv, const struct opt *opts, const char **pos,
                        const char *pos_name);
bool fy__main_wants_help(int argc, char **argv);
int fy__main_print_help(const char *cmd);
/* Serve cfg until SIGTERM/SIGINT (borrowed); the exit code. */
int fy__main_run(fy_config_t *cfg);
int fy__main_cmd_status(int argc, char **argv);
int fy__main_cmd_reload(int argc, char **argv);

#endif
