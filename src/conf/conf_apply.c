/* The directive engine: node tree + table -> typed struct (fy_conf_apply), with defaults that
 * are YAML scalar text run through the very converters used for user input, so a default can
 * never mean something a user could not have written; "did you mean" hints for unknown keys.
 * The thread loading the config only (see conf_int.h). */
#include "conf/conf_int.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- path of what is being applied, for messages ---- */

static size_t path_push_key(fy_conf_ctx_t *ctx, const char *key)
{
    size_t old = ctx->plen;
    int n = snprintf(ctx->path + old, sizeof ctx->path - old, "%s%s", old ? "." : "", key);
    ctx->plen = n < 0 ? old : old + (size_t)n;
    if (ctx->plen >= sizeof ctx->path) ctx->plen = sizeof ctx->path - 1;
    return old;
}

static size_t path_push_index(fy_conf_ctx_t *ctx, size_t i)
{
    size_t old = ctx->plen;
    int n = snprintf(ctx->path + old, sizeof ctx->path - old, "[%zu]", i);
    ctx->plen = n < 0 ? old : old + (size_t)n;
    if (ctx->plen >= sizeof ctx->path) ctx->plen = sizeof ctx->path - 1;
    return old;
}

static void path_pop(fy_conf_ctx_t *ctx, size_t old)
{
    ctx->plen = old;
    ctx->path[old] = '\0';
}

/* ---- node helpers ---- */

static bool is_null(const fy_conf_node_t *n)
{
    if (!n) return true;
    if (n->kind != FY_CONF_SCALAR || n->quoted) return false;
    return n->len == 0 || !strcmp(n->str, "~") || !strcmp(n->str, "null") ||
           !strcmp(n->str, "Null") || !strcmp(n->str, "NULL");
}

/* "a map", "a list", or the scalar quoted and shortened, for "got ..." */
static const char *describe(const fy_conf_node_t *n, char *buf, size_t len)
{
    if (n->kind == FY_CONF_MAP) return "a map";
    if (n->kind == FY_CONF_SEQ) return "a list";
    snprintf(buf, len, "'%.60s%s'", n->str, n->len > 60 ? "..." : "");
    return buf;
}

static fy_conf_node_t *synth_scalar(fy_conf_ctx_t *ctx, const fy_conf_node_t *at, const char *s)
{
    fy_conf_node_t *n = fy_conf_alloc(ctx->a, sizeof(*n));
    n->kind = FY_CONF_SCALAR;
    n->file = at->file;
    n->line = at->line;
    n->col = at->col;
    n->str = s;
    n->len = strlen(s);
    return n;
}

static fy_conf_node_t *synth_map(fy_conf_ctx_t *ctx, const fy_conf_node_t *at)
{
    fy_conf_node_t *n = fy_conf_alloc(ctx->a, sizeof(*n));
    n->kind = FY_CONF_MAP;
    n->file = at->file;
    n->line = at->line;
    n->col = at->col;
    return n;
}

bool has_bounds(const fy_conf_directive_t *d)
{
    return d->max > d->min;
}

/* ---- applying one value ---- */

static int apply_table(fy_conf_ctx_t *ctx, const fy_conf_directive_t *table,
                       const fy_conf_node_t *node, void *obj);
static int apply_table_in(fy_conf_ctx_t *ctx, const fy_conf_directive_t *table,
                          const fy_conf_node_t *node, void *obj);

static int need_scalar(fy_conf_ctx_t *ctx, const fy_conf_node_t *n, const char *what)
{
    if (n->kind == FY_CONF_SCALAR) return 0;
    char b[80];
    fy_conf_error(ctx, n, NULL, "expected %s, got %s", what, describe(n, b, sizeof b));
    return -1;
}

static int apply_strlist(fy_conf_ctx_t *ctx, const fy_conf_directive_t *d, const fy_conf_node_t *n,
                         fy_conf_strlist_t *out)
{
    const char *what =
        d->csv ? "a list of strings or a comma-separated string" : "a string or a list of strings";
    char b[80];
    if (n->kind == FY_CONF_MAP) {
        fy_conf_error(ctx, n, NULL, "expected %s, got a map", what);
        return -1;
    }
    if (n->kind == FY_CONF_SCALAR) {
        if (!d->csv || n->quoted) {
            out->v = fy_conf_alloc(ctx->a, sizeof(char *));
            out->v[0] = fy_conf_strndup(ctx->a, n->str, n->len);
            out->n = 1;
            return 0;
        }
        size_t cnt = 1;
        for (const char *p = n->str; *p; p++) cnt += *p == ',';
        out->v = fy_conf_alloc(ctx->a, cnt * sizeof(char *));
        out->n = 0;
        const char *p = n->str;
        for (;;) {
            const char *e = strchr(p, ',');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            while (l && isspace((unsigned char)*p)) p++, l--;
            while (l && isspace((unsigned char)p[l - 1])) l--;
            if (!l) {
                fy_conf_error(ctx, n, NULL, "empty item in '%s'", n->str);
                return -1;
            }
            out->v[out->n++] = fy_conf_strndup(ctx->a, p, l);
            if (!e) break;
            p = e + 1;
        }
        return 0;
    }
    out->v = fy_conf_alloc(ctx->a, (n->n ? n->n : 1) * sizeof(char *));
    out->n = 0;
    int rc = 0;
    for (size_t i = 0; i < n->n; i++) {
        const fy_conf_node_t *it = n->items[i];
        if (it->kind != FY_CONF_SCALAR || is_null(it)) {
            size_t old = path_push_index(ctx, i);
            fy_conf_error(ctx, it, NULL, "expected a string, got %s",
                          is_null(it) ? "null" : describe(it, b, sizeof b));
            path_pop(ctx, old);
            rc = -1;
            continue;
        }
        out->v[out->n++] = fy_conf_strndup(ctx->a, it->str, it->len);
    }
    return rc;
}

static int apply_strmap(fy_conf_ctx_t *ctx, const fy_conf_node_t *n, fy_conf_strmap_t *out)
{
    char b[80];
    if (n->kind != FY_CONF_MAP) {
        fy_conf_error(ctx, n, NULL, "expected a map of strings, got %s", describe(n, b, sizeof b));
        return -1;
    }
    size_t cap = n->n ? n->n : 1;
    out->keys = fy_conf_alloc(ctx->a, cap * sizeof(char *));
    out->values = fy_conf_alloc(ctx->a, cap * sizeof(char *));
    out->n = 0;
    int rc = 0;
    for (size_t i = 0; i < n->n; i++) {
        const fy_conf_node_t *v = n->items[i];
        if (v->kind != FY_CONF_SCALAR) {
            size_t old = path_push_key(ctx, n->keys[i]->str);
            fy_conf_error(ctx, v, NULL, "expected a string, got %s", describe(v, b, sizeof b));
            path_pop(ctx, old);
            rc = -1;
            continue;
        }
        out->keys[out->n] = fy_conf_strndup(ctx->a, n->keys[i]->str, n->keys[i]->len);
        out->values[out->n++] = fy_conf_strndup(ctx->a, v->str, v->len);
    }
    return rc;
}

/* A scalar given where a table is expected: `tls: self-signed`. */
static const fy_conf_node_t *expand_shorthand(fy_conf_ctx_t *ctx, const fy_conf_directive_t *d,
                                              const fy_conf_node_t *n)
{
    char b[80];
    if (n->kind != FY_CONF_SCALAR || !d->shorthand_key) {
        fy_conf_error(ctx, n, NULL, "expected a map, got %s", describe(n, b, sizeof b));
        return NULL;
    }
    const fy_conf_directive_t *k = d->sub;
    while (k->key && strcmp(k->key, d->shorthand_key)) k++;
    fy_conf_node_t *value = (fy_conf_node_t *)n;
    if (k->key && k->type == FY_CT_BOOL) {
        if (strcmp(n->str, k->key)) {
            fy_conf_error(ctx, n, NULL, "expected a map or '%s', got %s", k->key,
                          describe(n, b, sizeof b));
            return NULL;
        }
        value = synth_scalar(ctx, n, "true");
    }
    fy_conf_node_t *m = synth_map(ctx, n);
    m->keys = fy_conf_alloc(ctx->a, sizeof(fy_conf_node_t *));
    m->items = fy_conf_alloc(ctx->a, sizeof(fy_conf_node_t *));
    m->keys[0] = synth_scalar(ctx, n, d->shorthand_key);
    m->items[0] = value;
    m->n = 1;
    return m;
}

static int apply_sub(fy_conf_ctx_t *ctx, const fy_conf_directive_t *d, const fy_conf_node_t *n,
                     void *obj)
{
    if (n->kind != FY_CONF_MAP) {
        n = expand_shorthand(ctx, d, n);
        if (!n) return -1;
    }
    return apply_table(ctx, d->sub, n, obj);
}

static int apply_table_list(fy_conf_ctx_t *ctx, const fy_conf_directive_t *d,
                            const fy_conf_node_t *n, fy_conf_list_t *out)
{
    char b[80];
    if (n->kind != FY_CONF_SEQ) {
        fy_conf_error(ctx, n, NULL, "expected a list of maps, got %s", describe(n, b, sizeof b));
        return -1;
    }
    out->v = fy_conf_alloc(ctx->a, (n->n ? n->n : 1) * d->sub_size);
    out->n = n->n;
    int rc = 0;
    for (size_t i = 0; i < n->n; i++) {
        size_t old = path_push_index(ctx, i);
        if (apply_sub(ctx, d, n->items[i], (char *)out->v + i * d->sub_size) < 0) rc = -1;
        path_pop(ctx, old);
    }
    return rc;
}

/* Convert node `n` (never null) into the field of directive d. The path names d. */
static int apply_value(fy_conf_ctx_t *ctx, const fy_conf_directive_t *d, const fy_conf_node_t *n,
                       void *obj)
{
    void *field = (char *)obj + d->offset;
    char b[80], lo[32], hi[32], got[32];
    int rc = 0;
    switch (d->type) {
    case FY_CT_STRING:
        if (need_scalar(ctx, n, "a string") < 0) return -1;
        *(char **)field = fy_conf_strndup(ctx->a, n->str, n->len);
        break;
    case FY_CT_BOOL: {
        bool v;
        if (need_scalar(ctx, n, "true or false") < 0) return -1;
        if (n->quoted || fy_conf_parse_bool(n->str, &v) < 0) {
            fy_conf_error(ctx, n, NULL, "expected true or false, got %s%s",
                          n->quoted ? "a quoted " : "", describe(n, b, sizeof b));
            return -1;
        }
        *(bool *)field = v;
        break;
    }
    case FY_CT_INT: {
        int64_t v;
        if (need_scalar(ctx, n, "an integer") < 0) return -1;
        if (n->quoted || parse_int(n->str, &v) < 0) {
            fy_conf_error(ctx, n, NULL, "expected an integer, got %s%s",
                          n->quoted ? "a quoted " : "", describe(n, b, sizeof b));
            return -1;
        }
        if (has_bounds(d) && (v < d->min || v > d->max)) {
            fy_conf_error(ctx, n, NULL, "must be between %" PRId64 " and %" PRId64 ", got %" PRId64,
                          d->min, d->max, v);
            return -1;
        }
        *(int64_t *)field = v;
        break;
    }
    case FY_CT_SIZE: {
        uint64_t v;
        if (need_scalar(ctx, n, "a size like 16k") < 0) return -1;
        if (fy_conf_parse_size(n->str, &v) < 0) {
            fy_conf_error(ctx, n, NULL, "expected a size like 16k, got %s",
                          describe(n, b, sizeof b));
            return -1;
        }
        if (has_bounds(d) && (v < (uint64_t)d->min || v > (uint64_t)d->max)) {
            fmt_size(lo, sizeof lo, (uint64_t)d->min);
            fmt_size(hi, sizeof hi, (uint64_t)d->max);
            fmt_size(got, sizeof got, v);
            fy_conf_error(ctx, n, NULL, "must be between %s and %s, got %s", lo, hi, got);
            return -1;
        }
        *(uint64_t *)field = v;
        break;
    }
    case FY_CT_DURATION: {
        uint64_t v;
        if (need_scalar(ctx, n, "a duration like 10s") < 0) return -1;
        if (fy_conf_parse_duration_ms(n->str, &v) < 0) {
            fy_conf_error(ctx, n, NULL, "expected a duration like 10s or 250ms, got %s",
                          describe(n, b, sizeof b));
            return -1;
        }
        if (has_bounds(d) && (v < (uint64_t)d->min || v > (uint64_t)d->max)) {
            fmt_duration(lo, sizeof lo, (uint64_t)d->min);
            fmt_duration(hi, sizeof hi, (uint64_t)d->max);
            fmt_duration(got, sizeof got, v);
            fy_conf_error(ctx, n, NULL, "must be between %s and %s, got %s", lo, hi, got);
            return -1;
        }
        *(uint64_t *)field = v;
        break;
    }
    case FY_CT_ENUM: {
        char list[256] = "";
        size_t ll = 0;
        for (size_t i = 0; d->enums[i]; i++) {
            if (n->kind == FY_CONF_SCALAR && !strcmp(n->str, d->enums[i])) {
                *(int *)field = (int)i;
                goto validate;
            }
            int w = snprintf(list + ll, sizeof list - ll, "%s%s", i ? ", " : "", d->enums[i]);
            if (w > 0 && ll + (size_t)w < sizeof list) ll += (size_t)w;
        }
        fy_conf_error(ctx, n, NULL, "expected one of: %s; got %s", list, describe(n, b, sizeof b));
        return -1;
    }
    case FY_CT_STRLIST:
        rc = apply_strlist(ctx, d, n, field);
        if (rc == 0 && d->required && ((fy_conf_strlist_t *)field)->n == 0) {
            fy_conf_error(ctx, n, NULL, "needs at least one item");
            return -1;
        }
        break;
    case FY_CT_STRMAP:
        rc = apply_strmap(ctx, n, field);
        break;
    case FY_CT_TABLE:
        rc = apply_sub(ctx, d, n, field);
        break;
    case FY_CT_TABLE_PTR: {
        void *sub = fy_conf_alloc(ctx->a, d->sub_size);
        *(void **)field = sub;
        rc = apply_sub(ctx, d, n, sub);
        break;
    }
    case FY_CT_TABLE_LIST:
        rc = apply_table_list(ctx, d, n, field);
        if (rc == 0 && d->required && ((fy_conf_list_t *)field)->n == 0) {
            fy_conf_error(ctx, n, NULL, "needs at least one item");
            return -1;
        }
        break;
    case FY_CT_CUSTOM:
        rc = d->parse(ctx, n, field);
        break;
    default:
        fy_conf_error(ctx, n, NULL, "bad directive type %d (a bug)", d->type);
        return -1;
    }
validate:
    if (rc == 0 && d->validate) rc = d->validate(ctx, n, field, obj);
    return rc;
}

/* The default text as a node: scalars as they are; "[a, b]" / "{k: v}" for lists and maps go
   through the YAML parser itself. */
static const fy_conf_node_t *default_node(fy_conf_ctx_t *ctx, const fy_conf_directive_t *d,
                                          const fy_conf_node_t *at)
{
    if ((d->type == FY_CT_STRLIST || d->type == FY_CT_STRMAP) &&
        (d->dflt[0] == '[' || d->dflt[0] == '{')) {
        char err[256];
        fy_conf_node_t *n =
            fy_conf_parse(ctx->a, "<default>", d->dflt, strlen(d->dflt), err, sizeof err);
        if (!n) {
            fy_conf_error(ctx, at, NULL, "bad default (a bug): %s", err);
            return NULL;
        }
        return n;
    }
    return synth_scalar(ctx, at, d->dflt);
}

static void list_keys(const fy_conf_directive_t *table, char *buf, size_t len)
{
    size_t l = 0;
    buf[0] = '\0';
    for (const fy_conf_directive_t *d = table; d->key; d++) {
        int w = snprintf(buf + l, len - l, "%s%s", l ? ", " : "", d->key);
        if (w < 0 || l + (size_t)w >= len) break;
        l += (size_t)w;
    }
}

static const fy_conf_directive_t *find_key(const fy_conf_directive_t *table, const char *key)
{
    for (const fy_conf_directive_t *d = table; d && d->key; d++)
        if (!strcmp(d->key, key)) return d;
    return NULL;
}

/* An unknown key that is a key one level down ("did you mean to indent it under match?") or
   one level up (written too deep), as a hint for the message; "" when neither. */
static void unknown_key_hint(const fy_conf_ctx_t *ctx, const fy_conf_directive_t *table,
                             const char *key, size_t key_path_start, char *buf, size_t len)
{
    buf[0] = '\0';
    for (const fy_conf_directive_t *d = table; d->key; d++)
        if ((d->type == FY_CT_TABLE || d->type == FY_CT_TABLE_PTR) && find_key(d->sub, key)) {
            snprintf(buf, len, "; did you mean to indent it under %s?", d->key);
            return;
        }
    if (ctx->ntables >= 2 && find_key(ctx->tables[ctx->ntables - 2], key)) {
        /* the name of the map it sits in: the path's last key before this one */
        size_t e = key_path_start, b;
        if (e > 0 && ctx->path[e - 1] == ']') /* "listeners[0]" -> "listeners" */
            while (e > 0 && ctx->path[e - 1] != '[') e--;
        if (e > 0 && ctx->path[e - 1] == '[') e--;
        b = e;
        while (b > 0 && ctx->path[b - 1] != '.') b--;
        snprintf(buf, len,
                 "; it belongs one level up: did you mean to indent it less, out of %.*s?",
                 (int)(e - b), ctx->path + b);
    }
}

static int apply_table(fy_conf_ctx_t *ctx, const fy_conf_directive_t *table,
                       const fy_conf_node_t *node, void *obj)
{
    int rc;
    if (ctx->ntables < FY_CONF_HINT_DEPTH) ctx->tables[ctx->ntables] = table;
    ctx->ntables++;
    rc = apply_table_in(ctx, table, node, obj);
    ctx->ntables--;
    return rc;
}

static int apply_table_in(fy_conf_ctx_t *ctx, const fy_conf_directive_t *table,
                          const fy_conf_node_t *node, void *obj)
{
    char b[80];
    if (node->kind != FY_CONF_MAP) {
        fy_conf_error(ctx, node, NULL, "expected a map, got %s", describe(node, b, sizeof b));
        return -1;
    }
    size_t nerr0 = ctx->nerr, ndir = 0;
    while (table[ndir].key) ndir++;
    bool *given = fy_conf_alloc(ctx->a, ndir + 1);

    /* the keys present, in document order, so errors come out in the order of the text */
    for (size_t i = 0; i < node->n; i++) {
        const fy_conf_node_t *k = node->keys[i], *v = node->items[i];
        size_t j = 0;
        while (j < ndir && strcmp(table[j].key, k->str)) j++;
        size_t old = path_push_key(ctx, k->str);
        if (j == ndir) {
            char keys[512], hint[160];
            list_keys(table, keys, sizeof keys);
            unknown_key_hint(ctx, table, k->str, old, hint, sizeof hint);
            if (ndir && hint[0])
                fy_conf_error(ctx, k, NULL, "unknown key '%.60s'%s (expected one of: %s)", k->str,
                              hint, keys);
            else if (ndir)
                fy_conf_error(ctx, k, NULL, "unknown key '%.60s'; expected one of: %s", k->str,
                              keys);
            else
                fy_conf_error(ctx, k, NULL, "unknown key '%.60s'; this map takes no keys", k->str);
        } else if (!is_null(v)) { /* `key:` with nothing is as if absent */
            given[j] = true;
            apply_value(ctx, &table[j], v, obj);
        }
        path_pop(ctx, old);
    }

    /* then the absent ones: required, defaults, nested tables' defaults */
    const fy_conf_directive_t *d;
    for (d = table; d->key; d++) {
        if (given[d - table]) continue;
        const fy_conf_node_t *at = node;
        for (size_t i = 0; i < node->n; i++)
            if (!strcmp(node->keys[i]->str, d->key)) at = node->keys[i];
        size_t old = path_push_key(ctx, d->key);
        if (d->required) {
            fy_conf_error(ctx, at, NULL, "is required");
        } else if (d->type == FY_CT_TABLE) {
            apply_table(ctx, d->sub, synth_map(ctx, at), (char *)obj + d->offset);
        } else if (d->dflt && d->type != FY_CT_TABLE_PTR && d->type != FY_CT_TABLE_LIST) {
            const fy_conf_node_t *dn = default_node(ctx, d, at);
            if (dn) apply_value(ctx, d, dn, obj);
        }
        path_pop(ctx, old);
    }
    /* cross-field rules only make sense when every field converted */
    if (d->check && ctx->nerr == nerr0) d->check(ctx, node, obj);
    return ctx->nerr == nerr0 ? 0 : -1;
}

int fy_conf_apply(fy_conf_ctx_t *ctx, const fy_conf_directive_t *table, const fy_conf_node_t *node,
                  void *obj)
{
    return apply_table(ctx, table, node, obj);
}
