/* Shared validators for config values that reach a wire or the file system (conf_valid.h). */
#include "conf/conf_valid.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* a line break is the worst thing a value can hold: name it before anything else */
static bool has_line_break(const char *s)
{
    return strpbrk(s, "\r\n") != NULL;
}

const char *fy_conf_why_not_token(const char *s)
{
    if (!*s) return "must not be empty";
    if (has_line_break(s)) return "has a line break (CR or LF)";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\r' || *p == '\n') return "has a line break (CR or LF)";
        if (*p < 0x20 || *p == 0x7f) return "has a control character";
        if (*p == ' ' || *p == '\t') return "has a space; a name is one token";
        if (!is_tchar(*p))
            return "has a character not allowed in a name (letters, digits and "
                   "!#$%&'*+-.^_`|~ only)";
    }
    return NULL;
}

const char *fy_conf_why_not_field_value(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    for (; *p; p++) {
        if (*p == '\r' || *p == '\n') return "has a line break (CR or LF); a value is one line";
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f) return "has a control character";
    }
    size_t l = (size_t)(p - (const unsigned char *)s);
    if (l && (s[0] == ' ' || s[0] == '\t' || s[l - 1] == ' ' || s[l - 1] == '\t'))
        return "has leading or trailing whitespace";
    return NULL;
}

static bool is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static const char *why_not_path_or_target(const char *s, bool query_ok)
{
    if (has_line_break(s)) return "has a line break (CR or LF)";
    if (s[0] != '/') return "must start with '/'";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if (c == '\r' || c == '\n') return "has a line break (CR or LF)";
        if (c < 0x20 || c == 0x7f) return "has a control character";
        if (c == ' ') return "has a space (write it as %20)";
        if (c == '#')
            return query_ok ? "has '#'; a request target has no fragment"
                            : "has '?' or '#'; a path has no query or fragment";
        if (c == '?') { /* a query (RFC 3986: pchar, "/" and "?") follows */
            if (!query_ok) return "has '?' or '#'; a path has no query or fragment";
            continue;
        }
        if (c == '%') {
            if (!is_hex(p[1]) || !is_hex(p[2])) return "has a '%' not followed by two hex digits";
            continue;
        }
        if (c >= 0x80) return "has a non-ASCII byte (percent-encode it)";
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("-._~!$&'()*+,;=:@/", c)))
            return "has a character not allowed in a path (percent-encode it)";
    }
    return NULL;
}

const char *fy_conf_why_not_path(const char *s)
{
    return why_not_path_or_target(s, false);
}

const char *fy_conf_why_not_target(const char *s)
{
    return why_not_path_or_target(s, true);
}

const char *fy_conf_why_not_hostname(const char *s)
{
    size_t len = strlen(s), label = 0;
    if (len && s[len - 1] == '.') len--;
    if (len == 0) return "must not be empty";
    if (has_line_break(s)) return "has a line break (CR or LF)";
    if (len > 253) return "is longer than 253 bytes";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '.') {
            if (label == 0) return "has an empty label";
            label = 0;
            continue;
        }
        if (c == '\r' || c == '\n') return "has a line break (CR or LF)";
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return "is not a host name (letters, digits, '-' and '.' only)";
        if (++label > 63) return "has a label longer than 63 bytes";
    }
    return NULL;
}

/* s with control bytes written as \r, \n, \xNN, cut at ~60 bytes, for messages */
static const char *shown(const char *s, char *buf, size_t cap)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 8 < cap; p++) {
        if (o > 60) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (*p == '\r' || *p == '\n' || *p == '\t')
            o += (size_t)snprintf(buf + o, cap - o, "\\%c",
                                  *p == '\r'   ? 'r'
                                  : *p == '\n' ? 'n'
                                               : 't');
        else if (*p < 0x20 || *p >= 0x7f)
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", *p);
        else
            buf[o++] = (char)*p;
    }
    buf[o] = '\0';
    return buf;
}

static int check_string(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, const char *s,
                        const char *(*why)(const char *), const char *what)
{
    if (!s) return 0;
    const char *w = why(s);
    if (!w) return 0;
    char b[128];
    fy_conf_error(ctx, node, NULL, "%s \"%s\" %s", what, shown(s, b, sizeof b), w);
    return -1;
}

int fy_conf_valid_token(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    return check_string(ctx, node, *(char **)field, fy_conf_why_not_token, "name");
}

int fy_conf_valid_field_value(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                              void *obj)
{
    return check_string(ctx, node, *(char **)field, fy_conf_why_not_field_value, "value");
}

int fy_conf_valid_path(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    return check_string(ctx, node, *(char **)field, fy_conf_why_not_path, "path");
}

int fy_conf_valid_target(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    return check_string(ctx, node, *(char **)field, fy_conf_why_not_target, "request target");
}

int fy_conf_valid_hostname(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    return check_string(ctx, node, *(char **)field, fy_conf_why_not_hostname, "server name");
}

int fy_conf_check_readable(const char *path, char *msg, size_t len)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    int e = fd < 0 ? errno : fstat(fd, &st) < 0 ? errno : 0;
    if (!e && S_ISDIR(st.st_mode)) e = EISDIR;
    if (fd >= 0) close(fd);
    if (!e) return 0;
    snprintf(msg, len, "cannot read '%.300s': %s", path, strerror(e));
    return -1;
}

int fy_conf_valid_readable_file(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                                void *obj)
{
    const char *p = *(char **)field;
    char msg[512];
    if (!p || fy_conf_check_readable(p, msg, sizeof msg) == 0) return 0;
    fy_conf_error(ctx, node, NULL, "%s", msg);
    return -1;
}

int fy_conf_valid_log_target(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *p = *(char **)field;
    if (!p || !strcmp(p, "off") || !strcmp(p, "stdout") || !strcmp(p, "stderr")) return 0;
    struct stat st;
    if (stat(p, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fy_conf_error(ctx, node, NULL, "'%.300s' is a folder; name a file in it", p);
            return -1;
        }
        if (access(p, W_OK) < 0) {
            fy_conf_error(ctx, node, NULL, "cannot write '%.300s': %s", p, strerror(errno));
            return -1;
        }
        return 0;
    }
    char dir[4096];
    const char *slash = strrchr(p, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == p ? 1 : (int)(slash - p), p);
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        fy_conf_error(ctx, node, NULL, "cannot create '%.300s': folder '%.300s' %s", p, dir,
                      errno == ENOENT || !S_ISDIR(st.st_mode) ? "does not exist" : strerror(errno));
        return -1;
    }
    if (access(dir, W_OK | X_OK) < 0) {
        fy_conf_error(ctx, node, NULL, "cannot create '%.300s' in '%.300s': %s", p, dir,
                      strerror(errno));
        return -1;
    }
    return 0;
}

int fy_conf_valid_state_dir(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *p = *(char **)field;
    if (!p) return 0;
    struct stat st;
    if (stat(p, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return 0;
        fy_conf_error(ctx, node, NULL, "'%.300s' is not a folder", p);
        return -1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", p);
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash) {
            snprintf(dir, sizeof dir, ".");
        } else if (slash == dir) {
            dir[1] = '\0';
        } else {
            *slash = '\0';
        }
        if (stat(dir, &st) == 0) break;
        if (!strcmp(dir, ".") || !strcmp(dir, "/")) break;
    }
    if (!S_ISDIR(st.st_mode)) {
        fy_conf_error(ctx, node, NULL, "cannot create '%.300s': '%.300s' is not a folder", p, dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) < 0) {
        fy_conf_error(ctx, node, NULL, "cannot create '%.300s' in '%.300s': %s", p, dir,
                      strerror(errno));
        return -1;
    }
    return 0;
}

int fy_conf_valid_header_map(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strmap_t *m = field;
    bool exact = node->kind == FY_CONF_MAP && node->n == m->n;
    int rc = 0;
    char b[128];
    for (size_t i = 0; i < m->n; i++) {
        const fy_conf_node_t *kn = exact ? node->keys[i] : node;
        const fy_conf_node_t *vn = exact ? node->items[i] : node;
        const char *w = fy_conf_why_not_token(m->keys[i]);
        if (w) {
            fy_conf_error(ctx, kn, NULL, "header name \"%s\" %s", shown(m->keys[i], b, sizeof b),
                          w);
            rc = -1;
            continue;
        }
        w = fy_conf_why_not_field_value(m->values[i]);
        if (w) {
            fy_conf_error(ctx, vn, m->keys[i], "value \"%s\" %s", shown(m->values[i], b, sizeof b),
                          w);
            rc = -1;
        }
    }
    return rc;
}

int fy_conf_valid_token_list(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strlist_t *l = field;
    bool exact = node->kind == FY_CONF_SEQ && node->n == l->n;
    int rc = 0;
    char b[128];
    for (size_t i = 0; i < l->n; i++) {
        const char *w = fy_conf_why_not_token(l->v[i]);
        if (!w) continue;
        fy_conf_error(ctx, exact ? node->items[i] : node, NULL, "name \"%s\" %s",
                      shown(l->v[i], b, sizeof b), w);
        rc = -1;
    }
    return rc;
}

const fy_conf_node_t *fy_conf_map_at(const fy_conf_node_t *map, const char *key)
{
    if (map && map->kind == FY_CONF_MAP)
        for (size_t i = 0; i < map->n; i++)
            if (!strcmp(map->keys[i]->str, key)) return map->items[i];
    return map;
}
