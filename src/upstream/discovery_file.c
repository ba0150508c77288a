/* The discovery file's two forms, parsed without I/O (fuzz/fuzz_discovery_file.c). */
#include "upstream/discovery.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"

static int check_url(const char *path, int line, int col, const char *url, fy_disc_entry_t *out,
                     size_t n, char *err, size_t errlen)
{
    char host[256], auth[256], why[700];
    fy_upstream_server_conf_t sv = {0};
    char at[64];
    if (col)
        snprintf(at, sizeof at, "%d:%d", line, col);
    else
        snprintf(at, sizeof at, "%d", line);
    if (strlen(url) >= FY_DISC_URL_MAX) {
        snprintf(err, errlen, "%s:%s: URL longer than %d bytes", path, at, FY_DISC_URL_MAX - 1);
        return -1;
    }
    if (fy_upstream_url_parse(url, &sv, true, host, auth, why, sizeof why) < 0) {
        snprintf(err, errlen, "%s:%s: %s", path, at, why);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(out[i].url, url) == 0) {
            snprintf(err, errlen, "%s:%s: '%s' is listed twice", path, at, url);
            return -1;
        }
    return 0;
}

static int parse_weight(const char *s, int64_t *w)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 1 || v > 1000) return -1;
    *w = v;
    return 0;
}

static int parse_lines(const char *path, const char *text, size_t len, fy_disc_entry_t *out,
                       size_t max, char *err, size_t errlen)
{
    size_t n = 0;
    int line = 0;
    for (size_t off = 0; off < len;) {
        const char *p = text + off, *nl = memchr(p, '\n', len - off);
        size_t ll = nl ? (size_t)(nl - p) : len - off;
        off += ll + (nl ? 1 : 0);
        line++;
        char buf[1024];
        if (ll >= sizeof buf) {
            snprintf(err, errlen, "%s:%d: line longer than %zu bytes", path, line, sizeof buf - 1);
            return -1;
        }
        memcpy(buf, p, ll);
        buf[ll] = 0;
        if (memchr(buf, 0, ll)) {
            snprintf(err, errlen, "%s:%d: NUL byte", path, line);
            return -1;
        }
        char *hash = strchr(buf, '#');
        if (hash) *hash = 0;
        char *tok[3];
        int nt = 0;
        char *save = NULL;
        for (char *t = strtok_r(buf, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
            if (nt == 2) {
                snprintf(err, errlen, "%s:%d: expected URL [weight=N], got more", path, line);
                return -1;
            }
            tok[nt++] = t;
        }
        if (nt == 0) continue;
        int64_t w = 1;
        if (nt == 2 && (strncmp(tok[1], "weight=", 7) != 0 || parse_weight(tok[1] + 7, &w) < 0)) {
            snprintf(err, errlen, "%s:%d: '%.100s': expected weight=N (1 to 1000)", path, line,
                     tok[1]);
            return -1;
        }
        if (n == max) {
            snprintf(err, errlen, "%s:%d: more than %zu servers (max-servers)", path, line, max);
            return -1;
        }
        if (check_url(path, line, 0, tok[0], out, n, err, errlen) < 0) return -1;
        snprintf(out[n].url, sizeof out[n].url, "%s", tok[0]);
        out[n].name[0] = 0;
        out[n].weight = w;
        n++;
    }
    return (int)n;
}

static int parse_yaml(const char *path, const char *text, size_t len, fy_disc_entry_t *out,
                      size_t max, char *err, size_t errlen)
{
    fy_conf_arena_t *a = fy_conf_arena_new();
    int rc = -1;
    char perr[600];
    fy_conf_node_t *root = fy_conf_parse(a, path, text, len, perr, sizeof perr);
    if (!root) {
        snprintf(err, errlen, "%s", perr);
        goto out;
    }
    if (root->kind != FY_CONF_SEQ) {
        snprintf(err, errlen, "%s:%d:%d: expected a list of servers", path, root->line, root->col);
        goto out;
    }
    size_t n = 0;
    for (size_t i = 0; i < root->n; i++) {
        const fy_conf_node_t *it = root->items[i];
        const char *url = NULL;
        int64_t w = 1;
        if (it->kind == FY_CONF_SCALAR) {
            url = it->str;
        } else if (it->kind == FY_CONF_MAP) {
            for (size_t k = 0; k < it->n; k++) {
                const fy_conf_node_t *key = it->keys[k], *v = it->items[k];
                if (v->kind != FY_CONF_SCALAR) {
                    snprintf(err, errlen, "%s:%d:%d: %s: expected a scalar", path, v->line, v->col,
                             key->str);
                    goto out;
                }
                if (strcmp(key->str, "url") == 0) {
                    url = v->str;
                } else if (strcmp(key->str, "weight") == 0) {
                    if (parse_weight(v->str, &w) < 0) {
                        snprintf(err, errlen, "%s:%d:%d: weight: expected 1 to 1000, got '%.50s'",
                                 path, v->line, v->col, v->str);
                        goto out;
                    }
                } else {
                    snprintf(err, errlen, "%s:%d:%d: unknown key '%.50s' (url, weight)", path,
                             key->line, key->col, key->str);
                    goto out;
                }
            }
            if (!url) {
                snprintf(err, errlen, "%s:%d:%d: url: missing", path, it->line, it->col);
                goto out;
            }
        } else {
            snprintf(err, errlen, "%s:%d:%d: expected a URL or {url, weight}", path, it->line,
                     it->col);
            goto out;
        }
        if (n == max) {
            snprintf(err, errlen, "%s:%d:%d: more than %zu servers (max-servers)", path, it->line,
                     it->col, max);
            goto out;
        }
        if (check_url(path, it->line, it->col, url, out, n, err, errlen) < 0) goto out;
        snprintf(out[n].url, sizeof out[n].url, "%s", url);
        out[n].name[0] = 0;
        out[n].weight = w;
        n++;
    }
    rc = (int)n;
out:
    fy_conf_arena_free(a);
    return rc;
}

int fy_discovery_parse(const char *path, const char *text, size_t len, fy_disc_entry_t *out,
                       size_t max, char *err, size_t errlen)
{
    if (len > FY_DISC_FILE_MAX) {
        snprintf(err, errlen, "%s: larger than %d bytes", path, FY_DISC_FILE_MAX);
        return -1;
    }
    /* YAML when the first thing that is not a blank or a comment starts a sequence */
    size_t i = 0;
    while (i < len) {
        if (text[i] == '#') {
            while (i < len && text[i] != '\n') i++;
        } else if (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n') {
            i++;
        } else {
            break;
        }
    }
    if (i < len && (text[i] == '-' || text[i] == '['))
        return parse_yaml(path, text, len, out, max, err, errlen);
    return parse_lines(path, text, len, out, max, err, errlen);
}
