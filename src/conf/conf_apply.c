/* The directive engine: node tree + table -> typed struct, and the same tables back out as
 * YAML (fy_conf_dump) and Markdown (fy_conf_doc). Defaults are YAML scalar text run through
 * the very converters used for user input, so a default can never mean something a user
 * could not have written. */
#include "conf/conf.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

#define MAX_ERRORS 100
#define PATH_MAX_LEN 256
#define FY_CONF_HINT_DEPTH 64

struct err_line {
    struct err_line *next;
    char *text;
};

struct fy_conf_ctx {
    fy_conf_arena_t *a;
    struct err_line *errs, **errs_tail;
    size_t nerr;
    char *joined; /* cache of fy_conf_errors, valid while joined_n == nerr */
    size_t joined_n;
    char path[PATH_MAX_LEN];
    size_t plen;
    /* the tables being applied, outermost first, for "did you mean" hints on unknown keys */
    const fy_conf_directive_t *tables[FY_CONF_HINT_DEPTH];
    size_t ntables;
};

fy_conf_ctx_t *fy_conf_ctx_new(fy_conf_arena_t *a)
{
    fy_conf_ctx_t *ctx = fy_conf_alloc(a, sizeof(*ctx));
    ctx->a = a;
    ctx->errs_tail = &ctx->errs;
    return ctx;
}

fy_conf_arena_t *fy_conf_ctx_arena(fy_conf_ctx_t *ctx)
{
    return ctx->a;
}

size_t fy_conf_error_count(const fy_conf_ctx_t *ctx)
{
    return ctx->nerr;
}

const char *fy_conf_errors(const fy_conf_ctx_t *ctx)
{
    fy_conf_ctx_t *c = (fy_conf_ctx_t *)ctx; /* the cache is not part of the observable state */
    if (c->joined && c->joined_n == c->nerr) return c->joined;
    size_t total = 1;
    for (struct err_line *e = c->errs; e; e = e->next) total += strlen(e->text) + 1;
    char extra[64] = "";
    if (c->nerr > MAX_ERRORS)
        snprintf(extra, sizeof extra, "... and %zu more errors\n", c->nerr - MAX_ERRORS);
    total += strlen(extra);
    char *out = fy_conf_alloc(c->a, total), *p = out;
    for (struct err_line *e = c->errs; e; e = e->next) {
        size_t l = strlen(e->text);
        memcpy(p, e->text, l);
        p[l] = '\n';
        p += l + 1;
    }
    memcpy(p, extra, strlen(extra) + 1);
    c->joined = out;
    c->joined_n = c->nerr;
    return out;
}

static void vrecord(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, const char *key,
                    const char *fmt, va_list ap)
{
    if (++ctx->nerr > MAX_ERRORS) return;
    char head[PATH_MAX_LEN + 160] = "";
    size_t hl = 0;
    if (node) hl = (size_t)snprintf(head, 160, "%s:%d:%d: ", node->file, node->line, node->col);
    if (hl >= 160) hl = 159;
    const char *sep = ctx->plen && key ? "." : "";
    if (ctx->plen || key)
        snprintf(head + hl, sizeof head - hl, "%.*s%s%s: ", (int)ctx->plen, ctx->path, sep,
                 key ? key : "");
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t l1 = strlen(head), l2 = strlen(msg);
    struct err_line *e = fy_conf_alloc(ctx->a, sizeof(*e));
    e->text = fy_conf_alloc(ctx->a, l1 + l2 + 1);
    memcpy(e->text, head, l1);
    memcpy(e->text + l1, msg, l2 + 1);
    *ctx->errs_tail = e;
    ctx->errs_tail = &e->next;
}

void fy_conf_error(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, const char *key, const char *fmt,
                   ...)
{
    va_list ap;
    va_start(ap, fmt);
    vrecord(ctx, node, key, fmt, ap);
    va_end(ap);
}

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

/* ---- scalar converters ---- */

/* Parse a run of decimal digits at *s into *v (no sign, no spaces). */
static int parse_digits(const char **s, uint64_t *v)
{
    const char *p = *s;
    uint64_t n = 0;
    if (!isdigit((unsigned char)*p)) return -1;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (n > (UINT64_MAX - d) / 10) return -1;
        n = n * 10 + d;
    }
    *s = p;
    *v = n;
    return 0;
}

int fy_conf_parse_size(const char *s, uint64_t *out)
{
    uint64_t n;
    if (parse_digits(&s, &n) < 0) return -1;
    unsigned shift = 0;
    switch (tolower((unsigned char)*s)) {
    case '\0':
        break;
    case 'b':
        if (s[1]) return -1;
        s++;
        break;
    case 'k':
        shift = 10;
        break;
    case 'm':
        shift = 20;
        break;
    case 'g':
        shift = 30;
        break;
    case 't':
        shift = 40;
        break;
    default:
        return -1;
    }
    if (shift) {
        s++;
        /* "k", "kb", "kib" in any case */
        if (tolower((unsigned char)*s) == 'i') {
            if (tolower((unsigned char)s[1]) != 'b') return -1;
            s += 2;
        } else if (tolower((unsigned char)*s) == 'b') {
            s++;
        }
        if (*s) return -1;
        if (n > (UINT64_MAX >> shift)) return -1;
        n <<= shift;
    }
    *out = n;
    return 0;
}

int fy_conf_parse_duration_ms(const char *s, uint64_t *out)
{
    uint64_t total = 0, n;
    if (parse_digits(&s, &n) < 0) return -1;
    if (!*s) { /* bare number: seconds */
        if (n > UINT64_MAX / 1000) return -1;
        *out = n * 1000;
        return 0;
    }
    for (;;) {
        uint64_t mul;
        if (s[0] == 'm' && s[1] == 's') {
            mul = 1;
            s += 2;
        } else {
            switch (*s) {
            case 's':
                mul = 1000;
                break;
            case 'm':
                mul = 60000;
                break;
            case 'h':
                mul = 3600000;
                break;
            case 'd':
                mul = 86400000;
                break;
            default:
                return -1;
            }
            s++;
        }
        if (n > UINT64_MAX / mul || total > UINT64_MAX - n * mul) return -1;
        total += n * mul;
        if (!*s) break;
        if (parse_digits(&s, &n) < 0) return -1; /* compound: "1m30s" */
    }
    *out = total;
    return 0;
}

int fy_conf_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};
    for (size_t i = 0; i < 3; i++) {
        if (!strcasecmp(s, yes[i])) {
            *out = true;
            return 0;
        }
        if (!strcasecmp(s, no[i])) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

static int parse_int(const char *s, int64_t *out)
{
    bool neg = *s == '-';
    if (neg) s++;
    uint64_t n;
    if (parse_digits(&s, &n) < 0 || *s) return -1;
    if (neg ? n > (uint64_t)INT64_MAX + 1 : n > (uint64_t)INT64_MAX) return -1;
    *out = neg ? (int64_t)(0 - n) : (int64_t)n;
    return 0;
}

/* ---- readable units, shared by messages and dump ---- */

static void fmt_size(char *buf, size_t len, uint64_t v)
{
    static const char units[] = "tgmk";
    for (int i = 0; i < 4; i++) {
        unsigned shift = (unsigned)(40 - 10 * i);
        uint64_t unit = (uint64_t)1 << shift;
        if (v >= unit && v % unit == 0) {
            snprintf(buf, len, "%" PRIu64 "%c", v >> shift, units[i]);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64, v);
}

static void fmt_duration(char *buf, size_t len, uint64_t ms)
{
    static const struct {
        uint64_t ms;
        const char *u;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
    if (ms == 0) {
        snprintf(buf, len, "0s");
        return;
    }
    for (size_t i = 0; i < 4; i++) {
        if (ms % units[i].ms == 0) {
            snprintf(buf, len, "%" PRIu64 "%s", ms / units[i].ms, units[i].u);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64 "ms", ms);
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

static bool has_bounds(const fy_conf_directive_t *d)
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

/* ---- dump ---- */

static bool plain_ok(const char *s)
{
    static const char *const special[] = {"true", "false", "yes", "no", "on",
                                          "off",  "null",  "~",   "y",  "n"};
    if (!*s) return false;
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        if (!strcasecmp(s, special[i])) return false;
    /* looks like a number (YAML would read it as one): quote it */
    bool numeric = true;
    for (const char *p = s; *p; p++)
        if (!strchr("0123456789.+-eE_", *p)) numeric = false;
    if (numeric) return false;
    if (!(isalnum((unsigned char)s[0]) || s[0] == '/' || s[0] == '.' || s[0] == '_')) return false;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!(isalnum(c) || strchr("_./:+-*", c))) return false;
    }
    return s[strlen(s) - 1] != ':';
}

static void put_scalar(FILE *f, const char *s)
{
    if (plain_ok(s)) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(f, "\\x%02x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* Print "key:" at the start of a line: indented, or after "- " for the first key of a list
   item (*dash set, then cleared). */
static void put_key(FILE *f, int indent, bool *dash, const char *key)
{
    if (*dash) {
        fprintf(f, "%*s- ", indent - 2, "");
        *dash = false;
    } else {
        fprintf(f, "%*s", indent, "");
    }
    fprintf(f, "%s:", key);
}

static void dump_table(const fy_conf_directive_t *table, const void *obj, int indent, FILE *f,
                       bool dash);

static void dump_one(const fy_conf_directive_t *d, const void *obj, int indent, FILE *f, bool *dash)
{
    const void *field = (const char *)obj + d->offset;
    char buf[32];
    put_key(f, indent, dash, d->key);
    switch (d->type) {
    case FY_CT_STRING: {
        const char *s = *(char *const *)field;
        fputc(' ', f);
        if (s)
            put_scalar(f, s);
        else
            fputs("null", f);
        break;
    }
    case FY_CT_BOOL:
        fprintf(f, " %s", *(const bool *)field ? "true" : "false");
        break;
    case FY_CT_INT:
        fprintf(f, " %" PRId64, *(const int64_t *)field);
        break;
    case FY_CT_SIZE:
        fmt_size(buf, sizeof buf, *(const uint64_t *)field);
        fprintf(f, " %s", buf);
        break;
    case FY_CT_DURATION:
        fmt_duration(buf, sizeof buf, *(const uint64_t *)field);
        fprintf(f, " %s", buf);
        break;
    case FY_CT_ENUM: {
        int v = *(const int *)field, i = 0;
        while (d->enums[i] && i < v) i++;
        fputc(' ', f);
        put_scalar(f, d->enums[i] ? d->enums[i] : "?");
        break;
    }
    case FY_CT_STRLIST: {
        const fy_conf_strlist_t *l = field;
        fputs(" [", f);
        for (size_t i = 0; i < l->n; i++) {
            if (i) fputs(", ", f);
            put_scalar(f, l->v[i]);
        }
        fputc(']', f);
        break;
    }
    case FY_CT_STRMAP: {
        const fy_conf_strmap_t *m = field;
        if (!m->n) fputs(" {}", f);
        for (size_t i = 0; i < m->n; i++) {
            fprintf(f, "\n%*s", indent + 2, "");
            put_scalar(f, m->keys[i]);
            fputs(": ", f);
            put_scalar(f, m->values[i]);
        }
        break;
    }
    case FY_CT_TABLE:
        fputc('\n', f);
        dump_table(d->sub, field, indent + 2, f, false);
        return;
    case FY_CT_TABLE_PTR: {
        const void *sub = *(void *const *)field;
        if (!sub) {
            fputs(" null", f);
            break;
        }
        fputc('\n', f);
        dump_table(d->sub, sub, indent + 2, f, false);
        return;
    }
    case FY_CT_TABLE_LIST: {
        const fy_conf_list_t *l = field;
        if (!l->n) {
            fputs(" []", f);
            break;
        }
        fputc('\n', f);
        for (size_t i = 0; i < l->n; i++)
            dump_table(d->sub, (const char *)l->v + i * d->sub_size, indent + 4, f, true);
        return;
    }
    case FY_CT_CUSTOM:
        if (d->dump) {
            fputc(' ', f);
            d->dump(field, f);
        } else {
            fputs(" # (not printable)", f);
        }
        break;
    }
    fputc('\n', f);
}

static void dump_table(const fy_conf_directive_t *table, const void *obj, int indent, FILE *f,
                       bool dash)
{
    for (const fy_conf_directive_t *d = table; d->key; d++) dump_one(d, obj, indent, f, &dash);
}

void fy_conf_dump(const fy_conf_directive_t *table, const void *obj, int indent, void *file)
{
    dump_table(table, obj, indent, file, false);
}

/* ---- doc ---- */

static void put_cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n')
            fputc(' ', f);
        else
            fputc(*s, f);
    }
}

static void doc_type(const fy_conf_directive_t *d, FILE *f)
{
    char lo[32], hi[32];
    switch (d->type) {
    case FY_CT_STRING:
        fputs("string", f);
        break;
    case FY_CT_BOOL:
        fputs("bool", f);
        break;
    case FY_CT_INT:
        fputs("integer", f);
        if (has_bounds(d)) fprintf(f, " %" PRId64 "..%" PRId64, d->min, d->max);
        break;
    case FY_CT_SIZE:
        fputs("size", f);
        if (has_bounds(d)) {
            fmt_size(lo, sizeof lo, (uint64_t)d->min);
            fmt_size(hi, sizeof hi, (uint64_t)d->max);
            fprintf(f, " %s..%s", lo, hi);
        }
        break;
    case FY_CT_DURATION:
        fputs("duration", f);
        if (has_bounds(d)) {
            fmt_duration(lo, sizeof lo, (uint64_t)d->min);
            fmt_duration(hi, sizeof hi, (uint64_t)d->max);
            fprintf(f, " %s..%s", lo, hi);
        }
        break;
    case FY_CT_ENUM:
        fputs("one of", f);
        for (size_t i = 0; d->enums[i]; i++) fprintf(f, "%s `%s`", i ? "," : "", d->enums[i]);
        break;
    case FY_CT_STRLIST:
        fputs(d->csv ? "list of strings (or comma-separated)" : "list of strings (or one)", f);
        break;
    case FY_CT_STRMAP:
        fputs("map of strings", f);
        break;
    case FY_CT_TABLE:
        fputs("map", f);
        break;
    case FY_CT_TABLE_PTR:
        fputs("map (optional)", f);
        break;
    case FY_CT_TABLE_LIST:
        fputs("list of maps", f);
        break;
    case FY_CT_CUSTOM:
        put_cell(f, d->type_name ? d->type_name : "see description");
        break;
    }
}

/* Roff text for man pages: `code` in bold (breakable after : , /), backslashes escaped,
 * Markdown's "\|" cell escape undone, newlines folded. Called only at the start of a text line or
 * within one. */
static void put_man(FILE *f, const char *s, bool *bold)
{
    for (; *s; s++) {
        if (*s == '`') {
            fputs(*bold ? "\\fR" : "\\fB", f);
            *bold = !*bold;
        } else if (*s == '\\' && s[1] == '|') {
            fputc('|', f);
            s++;
        } else if (*s == '\\') {
            fputs("\\e", f);
        } else if (*s == '\n') {
            fputc(' ', f);
        } else if (*bold && (*s == ':' || *s == ',' || *s == '/')) {
            fprintf(f, "%c\\:", *s); /* a long cipher list or path may break here */
        } else {
            fputc(*s, f);
        }
    }
}

/* One cell of text in either format. */
static void put_text(FILE *f, bool man, const char *s)
{
    if (man) {
        bool bold = false;
        put_man(f, s, &bold);
        if (bold) fputs("\\fR", f);
    } else {
        put_cell(f, s);
    }
}

/* The single walk over the tables behind both docs/CONFIG.md (Markdown) and ferry.yaml(5)
 * (man), so that the two cannot disagree. */
static void doc_walk(const fy_conf_directive_t *table, const char *section, int depth, FILE *f,
                     bool man)
{
    int h = depth < 1 ? 1 : depth > 6 ? 6 : depth;
    const char *title = section && *section ? section : "Top level";
    if (man)
        fprintf(f, ".SS \"%s\"\n", title);
    else
        fprintf(f, "%.*s %s%s%s\n\n", h, "######", section && *section ? "`" : "", title,
                section && *section ? "`" : "");
    if (!table->key) {
        fputs(man ? "No settings.\n" : "No settings.\n\n", f);
        return;
    }
    if (!man) fputs("| key | type | default | description |\n|---|---|---|---|\n", f);
    for (const fy_conf_directive_t *d = table; d->key; d++) {
        char *type = NULL;
        size_t type_len = 0;
        FILE *tf = open_memstream(&type, &type_len);
        if (!tf) continue;
        doc_type(d, tf);
        fclose(tf);
        if (man) {
            fprintf(f, ".TP\n.B %s\n\\&", d->key);
            put_text(f, true, type);
            fputs("; default: ", f);
        } else {
            fprintf(f, "| `%s` | %s | ", d->key, type);
        }
        free(type);
        if (d->required) {
            fputs(man ? "\\fIrequired\\fR" : "**required**", f);
        } else if (d->dflt && !*d->dflt) {
            fputs(man ? "\\fB\"\"\\fR" : "`\"\"`", f);
        } else if (d->dflt) {
            fputs(man ? "\\fB" : "`", f);
            put_text(f, man, d->dflt);
            fputs(man ? "\\fR" : "`", f);
        } else if (d->type == FY_CT_TABLE) {
            fputs("(defaults below)", f);
        } else {
            fputs(man ? "none" : "—", f);
        }
        fputs(man ? "\n.br\n\\&" : " | ", f);
        put_text(f, man, d->doc ? d->doc : "");
        if (d->shorthand_key) {
            char sh[160];
            const fy_conf_directive_t *k = d->sub;
            while (k->key && strcmp(k->key, d->shorthand_key)) k++;
            if (k->key && k->type == FY_CT_BOOL)
                snprintf(sh, sizeof sh, " Shorthand: `%s: %s`.", d->key, k->key);
            else
                snprintf(sh, sizeof sh, " Shorthand: `%s: VALUE` sets `%s`.", d->key,
                         d->shorthand_key);
            put_text(f, man, sh);
        }
        fputs(man ? "\n" : " |\n", f);
    }
    if (!man) fputc('\n', f);
    for (const fy_conf_directive_t *d = table; d->key; d++) {
        if (d->type != FY_CT_TABLE && d->type != FY_CT_TABLE_PTR && d->type != FY_CT_TABLE_LIST)
            continue;
        char sub[PATH_MAX_LEN];
        snprintf(sub, sizeof sub, "%s%s%s%s", section && *section ? section : "",
                 section && *section ? "." : "", d->key, d->type == FY_CT_TABLE_LIST ? "[]" : "");
        doc_walk(d->sub, sub, depth, f, man);
    }
}

void fy_conf_doc(const fy_conf_directive_t *table, const char *section, int depth, void *file)
{
    doc_walk(table, section, depth, file, false);
}

void fy_conf_doc_man(const fy_conf_directive_t *table, const char *section, void *file)
{
    doc_walk(table, section, 1, file, true);
}
