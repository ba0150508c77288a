/* Directive table of the static file handler (`static:`). */
#include "handler/static_conf.h"
#include "conf/conf_valid.h"

#include <libgen.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const dotfile_modes[] = {"deny", "allow", NULL};

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The embedded config's root "@demo": the demo site shipped beside the binary, wherever the
   binary runs from (build tree, installed prefix, or the source checkout). */
static bool find_demo(char *out, size_t len)
{
    const char *env = getenv("FERRY_DEMO_DIR");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return is_dir(out);
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *dir = dirname(exe);
        static const char *const rel[] = {"../demo", "../share/ferry/demo"};
        for (size_t i = 0; i < 2; i++) {
            if ((size_t)snprintf(out, len, "%s/%s", dir, rel[i]) < len && is_dir(out)) return true;
        }
    }
    snprintf(out, len, "demo");
    return is_dir(out);
}

static int validate_root(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    char **root = field;
    char demo[PATH_MAX + 32];
    const char *path = *root;
    if (!strcmp(path, "@demo")) {
        if (!find_demo(demo, sizeof demo)) {
            fy_conf_error(ctx, node, NULL,
                          "no demo directory found (looked at $FERRY_DEMO_DIR, "
                          "<exe dir>/../demo, <exe dir>/../share/ferry/demo, ./demo)");
            return -1;
        }
        path = demo;
    }
    char *abs = realpath(path, NULL);
    if (!abs || !is_dir(abs)) {
        fy_conf_error(ctx, node, NULL, "no such directory '%s'", *root);
        free(abs);
        return -1;
    }
    *root = fy_conf_strdup(fy_conf_ctx_arena(ctx), abs);
    free(abs);
    return 0;
}

static int validate_index(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strlist_t *l = field;
    for (size_t i = 0; i < l->n; i++) {
        if (!l->v[i][0] || strchr(l->v[i], '/')) {
            fy_conf_error(ctx, node, NULL, "index '%s' must be a plain file name", l->v[i]);
            return -1;
        }
    }
    return 0;
}

#define S(f) offsetof(fy_static_conf_t, f)

const fy_conf_directive_t fy_static_conf_table[] = {
    {.key = "root",
     .type = FY_CT_STRING,
     .offset = S(root),
     .required = true,
     .validate = validate_root,
     .doc = "Directory to serve; relative paths are relative to the working directory. "
            "`@demo` is the demo site shipped with ferry."},
    {.key = "index",
     .type = FY_CT_STRLIST,
     .offset = S(index),
     .dflt = "index.html",
     .validate = validate_index,
     .doc = "File names tried, in order, for a request naming a directory."},
    {.key = "listing",
     .type = FY_CT_BOOL,
     .offset = S(listing),
     .dflt = "false",
     .doc = "List a directory's entries when it has no index file."},
    {.key = "dotfiles",
     .type = FY_CT_ENUM,
     .offset = S(dotfiles),
     .dflt = "deny",
     .enums = dotfile_modes,
     .doc = "`deny`: a path with any segment starting with `.` (`/.env`, `/.git/config`, "
            "`/a/.htpasswd`) is 404, except under `/.well-known/`. `allow`: serve them."},
    {.key = "precompressed",
     .type = FY_CT_BOOL,
     .offset = S(precompressed),
     .dflt = "true",
     .doc = "Serve a `.br` or `.gz` sibling when the client accepts that encoding."},
    {.key = "etag",
     .type = FY_CT_BOOL,
     .offset = S(etag),
     .dflt = "true",
     .doc = "Send `ETag` and answer conditional requests."},
    {.key = "cache-control",
     .type = FY_CT_STRING,
     .offset = S(cache_control),
     .validate = fy_conf_valid_field_value,
     .doc = "`Cache-Control` value added to responses; none when unset."},
    {.key = "file-cache",
     .type = FY_CT_INT,
     .offset = S(file_cache_entries),
     .dflt = "1024",
     .min = 0,
     .max = 1000000,
     .doc = "Open files and metadata kept per worker; 0 disables the cache."},
    {.key = "file-cache-max-size",
     .type = FY_CT_SIZE,
     .offset = S(file_cache_max_size),
     .dflt = "64k",
     .min = 0,
     .max = (int64_t)1 << 30,
     .doc = "Files up to this size are kept in memory."},
    {.key = "file-cache-ttl",
     .type = FY_CT_DURATION,
     .offset = S(file_cache_ttl_ms),
     .dflt = "1s",
     .min = 0,
     .max = 3600000,
     .doc = "How long a cached file is trusted before it is checked again with stat()."},
    {.key = NULL},
};
