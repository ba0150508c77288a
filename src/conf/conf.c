/* YAML text -> node tree. The libyaml event parser is driven by hand (not yaml_document_t)
 * so that anchors, aliases and tags can be refused as they appear and every node keeps the
 * mark of its first character. */
#include "conf/conf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/alloc.h"

#define FY_CONF_MAX_DEPTH 64
#define ARENA_BLOCK 16384
#define ARENA_ALIGN 16

struct arena_block {
    struct arena_block *next;
    size_t size, used;
    _Alignas(ARENA_ALIGN) unsigned char data[];
};

struct fy_conf_arena {
    struct arena_block *head;
};

fy_conf_arena_t *fy_conf_arena_new(void)
{
    return fy_xcalloc(1, sizeof(fy_conf_arena_t));
}

void fy_conf_arena_free(fy_conf_arena_t *a)
{
    if (!a) return;
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(a);
}

void *fy_conf_alloc(fy_conf_arena_t *a, size_t size)
{
    size = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (size == 0) size = ARENA_ALIGN;
    struct arena_block *b = a->head;
    if (!b || b->size - b->used < size) {
        /* Big allocations get a block of their own, linked behind the current one so the
           current block's free space is not wasted. */
        size_t bsize = size > ARENA_BLOCK / 4 ? size : ARENA_BLOCK;
        struct arena_block *nb = fy_xmalloc(sizeof(*nb) + bsize);
        nb->size = bsize;
        nb->used = 0;
        if (b && bsize != ARENA_BLOCK) {
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            a->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

char *fy_conf_strndup(fy_conf_arena_t *a, const char *s, size_t n)
{
    char *p = fy_conf_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *fy_conf_strdup(fy_conf_arena_t *a, const char *s)
{
    return fy_conf_strndup(a, s, strlen(s));
}

/* One open MAP or SEQ while parsing; children are collected in arena arrays that double. */
struct frame {
    fy_conf_node_t *node;
    size_t cap;
    fy_conf_node_t *key; /* MAP: key waiting for its value */
};

struct parse_state {
    fy_conf_arena_t *a;
    const char *file;
    char *err;
    size_t errlen;
    struct frame stack[FY_CONF_MAX_DEPTH + 1];
    int depth;
    fy_conf_node_t *root;
};

__attribute__((format(printf, 4, 5))) static void perr(struct parse_state *ps, size_t line,
                                                       size_t col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ps->errlen) snprintf(ps->err, ps->errlen, "%s:%zu:%zu: yaml: %s", ps->file, line, col, msg);
}

static fy_conf_node_t *new_node(struct parse_state *ps, int kind, const yaml_mark_t *m)
{
    fy_conf_node_t *n = fy_conf_alloc(ps->a, sizeof(*n));
    n->kind = kind;
    n->file = ps->file;
    n->line = (int)m->line + 1;
    n->col = (int)m->column + 1;
    return n;
}

/* Room for one more child in arr (n used of cap); keys and items of a MAP share n and cap. */
static fy_conf_node_t **grow(fy_conf_arena_t *a, fy_conf_node_t **arr, size_t n, size_t cap)
{
    if (n < cap) return arr;
    fy_conf_node_t **na = fy_conf_alloc(a, (cap ? cap * 2 : 8) * sizeof(*na));
    if (n) memcpy(na, arr, n * sizeof(*na));
    return na;
}

/* Attach a finished node to its parent (or make it the root). Returns -1 on a bad key. */
static int attach(struct parse_state *ps, fy_conf_node_t *n)
{
    if (ps->depth == 0) {
        ps->root = n;
        return 0;
    }
    struct frame *f = &ps->stack[ps->depth - 1];
    fy_conf_node_t *p = f->node;
    if (p->kind == FY_CONF_MAP && !f->key) {
        if (n->kind != FY_CONF_SCALAR) {
            perr(ps, (size_t)n->line, (size_t)n->col, "%s", "a map key must be a plain value");
            return -1;
        }
        f->key = n;
        return 0;
    }
    p->items = grow(ps->a, p->items, p->n, f->cap);
    if (p->kind == FY_CONF_MAP) {
        p->keys = grow(ps->a, p->keys, p->n, f->cap);
        p->keys[p->n] = f->key;
        f->key = NULL;
    }
    if (p->n == f->cap) f->cap = f->cap ? f->cap * 2 : 8;
    p->items[p->n++] = n;
    return 0;
}

static int cmp_keys(const void *x, const void *y)
{
    const fy_conf_node_t *a = *(fy_conf_node_t *const *)x, *b = *(fy_conf_node_t *const *)y;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    int c = memcmp(a->str, b->str, a->len);
    if (c) return c;
    /* equal keys: by position, so the later one of a pair is the duplicate */
    if (a->line != b->line) return a->line < b->line ? -1 : 1;
    return a->col < b->col ? -1 : (a->col > b->col);
}

/* Sort a copy of the keys so duplicates are found in O(n log n) even in hostile input;
   report the duplicate that appears first in the text. */
static int check_duplicates(struct parse_state *ps, const fy_conf_node_t *map)
{
    if (map->n < 2) return 0;
    fy_conf_node_t **k = fy_xmalloc(map->n * sizeof(*k));
    memcpy(k, map->keys, map->n * sizeof(*k));
    qsort(k, map->n, sizeof(*k), cmp_keys);
    const fy_conf_node_t *dup = NULL;
    for (size_t i = 1; i < map->n; i++) {
        if (k[i]->len != k[i - 1]->len || memcmp(k[i]->str, k[i - 1]->str, k[i]->len)) continue;
        if (!dup || k[i]->line < dup->line || (k[i]->line == dup->line && k[i]->col < dup->col))
            dup = k[i];
    }
    free(k);
    if (!dup) return 0;
    char q[96];
    snprintf(q, sizeof q, "%.80s%s", dup->str, dup->len > 80 ? "..." : "");
    perr(ps, (size_t)dup->line, (size_t)dup->col, "duplicate key '%s'", q);
    return -1;
}

static bool has_nul(const char *s, size_t len)
{
    return memchr(s, '\0', len) != NULL;
}

/* Does line `line` (0-based) of text have a tab in its indentation? */
static bool tab_indented(const char *text, size_t len, size_t line)
{
    size_t i = 0;
    for (size_t l = 0; l < line && i < len; i++)
        if (text[i] == '\n') l++;
    for (; i < len && (text[i] == ' ' || text[i] == '\t'); i++)
        if (text[i] == '\t') return true;
    return false;
}

/* libyaml's problems say what the parser saw, not what the writer did: add what usually
   causes each one (tabs, indentation, an unquoted ": "). */
static void syntax_hint(const char *text, size_t len, const yaml_parser_t *p, char *buf, size_t cap)
{
    const char *pr = p->problem ? p->problem : "";
    buf[0] = '\0';
    if (tab_indented(text, len, p->problem_mark.line) ||
        (p->context && tab_indented(text, len, p->context_mark.line)) ||
        (strstr(pr, "cannot start any token") && p->problem_mark.index < len &&
         text[p->problem_mark.index] == '\t')) {
        snprintf(buf, cap, "; tabs are not allowed for indentation in YAML: indent with spaces");
        return;
    }
    const char *h = NULL;
    if (strstr(pr, "mapping values are not allowed"))
        h = "a 'key:' where a plain value was expected: check this line's indentation, or quote "
            "a value that holds ': '";
    else if (strstr(pr, "did not find expected key"))
        h = "check the indentation: a key must line up with the other keys of its map";
    else if (strstr(pr, "did not find expected '-' indicator"))
        h = "check the indentation: a list item must line up with the other '- ' items";
    else if (strstr(pr, "could not find expected ':'"))
        h = "a key needs ': ' after it (or quote a value that spans lines)";
    else if (strstr(pr, "expected ',' or '}'") || strstr(pr, "expected ',' or ']'"))
        h = "inside { } or [ ], quote a value that holds ':' or ',', and close the bracket";
    else if (strstr(pr, "found unexpected end of stream") || strstr(pr, "did not find expected"))
        h = "an opened quote or bracket is not closed";
    char ctx[80] = "";
    if (p->context)
        snprintf(ctx, sizeof ctx, " (%s at line %zu)", p->context, p->context_mark.line + 1);
    snprintf(buf, cap, "%s%s%s", ctx, h ? "; " : "", h ? h : "");
}

fy_conf_node_t *fy_conf_parse(fy_conf_arena_t *a, const char *name, const char *text, size_t len,
                              char *err, size_t errlen)
{
    struct parse_state ps = {.a = a, .file = fy_conf_strdup(a, name), .err = err, .errlen = errlen};
    if (errlen) err[0] = '\0';
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        perr(&ps, 0, 0, "%s", "cannot initialise the parser");
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int docs = 0;
    bool ok = true, done = false;
    while (ok && !done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            char hint[200];
            syntax_hint(text, len, &parser, hint, sizeof hint);
            perr(&ps, parser.problem_mark.line + 1, parser.problem_mark.column + 1, "%s%s",
                 parser.problem ? parser.problem : "syntax error", hint);
            ok = false;
            break;
        }
        const yaml_mark_t *m = &ev.start_mark;
        size_t ml = m->line + 1, mc = m->column + 1;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) {
                perr(&ps, ml, mc, "%s", "only one document is allowed");
                ok = false;
            }
            break;
        case YAML_ALIAS_EVENT:
            perr(&ps, ml, mc, "%s", "aliases are not allowed");
            ok = false;
            break;
        case YAML_SCALAR_EVENT: {
            if (ev.data.scalar.anchor) {
                perr(&ps, ml, mc, "%s", "anchors are not allowed");
                ok = false;
                break;
            }
            if (ev.data.scalar.tag) {
                perr(&ps, ml, mc, "%s", "tags are not allowed");
                ok = false;
                break;
            }
            const char *v = (const char *)ev.data.scalar.value;
            size_t vlen = ev.data.scalar.length;
            if (has_nul(v, vlen)) {
                perr(&ps, ml, mc, "%s", "a value contains a NUL character");
                ok = false;
                break;
            }
            fy_conf_node_t *n = new_node(&ps, FY_CONF_SCALAR, m);
            n->str = fy_conf_strndup(a, v, vlen);
            n->len = vlen;
            n->quoted = ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
            if (attach(&ps, n) < 0) ok = false;
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT: {
            bool seq = ev.type == YAML_SEQUENCE_START_EVENT;
            const yaml_char_t *anchor =
                seq ? ev.data.sequence_start.anchor : ev.data.mapping_start.anchor;
            const yaml_char_t *tag = seq ? ev.data.sequence_start.tag : ev.data.mapping_start.tag;
            if (anchor || tag) {
                perr(&ps, ml, mc, "%s",
                     anchor ? "anchors are not allowed" : "tags are not allowed");
                ok = false;
                break;
            }
            if (ps.depth >= FY_CONF_MAX_DEPTH) {
                perr(&ps, ml, mc, "nesting deeper than %d levels", FY_CONF_MAX_DEPTH);
                ok = false;
                break;
            }
            if (ps.depth > 0) {
                struct frame *pf = &ps.stack[ps.depth - 1];
                if (pf->node->kind == FY_CONF_MAP && !pf->key) {
                    perr(&ps, ml, mc, "%s", "a map key must be a plain value");
                    ok = false;
                    break;
                }
            }
            struct frame *f = &ps.stack[ps.depth++];
            f->node = new_node(&ps, seq ? FY_CONF_SEQ : FY_CONF_MAP, m);
            f->cap = 0;
            f->key = NULL;
            break;
        }
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT: {
            fy_conf_node_t *n = ps.stack[--ps.depth].node;
            if (n->kind == FY_CONF_MAP && check_duplicates(&ps, n) < 0) {
                ok = false;
                break;
            }
            if (attach(&ps, n) < 0) ok = false;
            break;
        }
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    if (!ok) return NULL;

    fy_conf_node_t *root = ps.root;
    /* No document, or an empty one: an empty map, so the defaults apply. */
    if (!root || (root->kind == FY_CONF_SCALAR && !root->quoted && root->len == 0)) {
        yaml_mark_t m0 = {0};
        if (root) {
            m0.line = (size_t)root->line - 1;
            m0.column = (size_t)root->col - 1;
        }
        root = new_node(&ps, FY_CONF_MAP, &m0);
    }
    return root;
}

fy_conf_node_t *fy_conf_parse_file(fy_conf_arena_t *a, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errlen) snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = fy_xmalloc(cap);
    for (;;) {
        if (len == cap) buf = fy_xrealloc(buf, cap *= 2);
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (rerr) {
        if (errlen) snprintf(err, errlen, "%s: cannot read: %s", path, strerror(rerr));
        free(buf);
        return NULL;
    }
    fy_conf_node_t *root = fy_conf_parse(a, path, buf, len, err, errlen);
    free(buf);
    return root;
}
