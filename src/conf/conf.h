/* Configuration: YAML text -> node tree with file:line:col marks -> typed structs through
 * directive tables that live beside the modules they configure (CONVENTIONS.md habit 8).
 *
 * Memory: every node, string and typed struct made while loading is owned by one
 * fy_conf_arena_t and freed in one go by fy_conf_arena_free. Config is built once at boot
 * (or reload) and then read-only, so allocation failures abort (fy_xmalloc).
 * Threads: loading runs on one thread (the main thread, at boot or reload); the result is
 * read-only after and may be read from any thread. */
#ifndef FY_CONF_CONF_H
#define FY_CONF_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fy_conf_arena fy_conf_arena_t;

enum fy_conf_node_kind { FY_CONF_SCALAR = 1, FY_CONF_MAP = 2, FY_CONF_SEQ = 3 };

typedef struct fy_conf_node fy_conf_node_t;
struct fy_conf_node {
    int kind;         /* enum fy_conf_node_kind */
    const char *file; /* borrowed from the arena: the file name for error messages */
    int line, col;    /* 1-based position of the node's start */
    /* SCALAR: */
    const char *str; /* NUL-terminated value */
    size_t len;
    bool quoted; /* was written quoted: never a null/bool/number by its look */
    /* MAP: keys[i] (scalar nodes) -> items[i]; SEQ: items[i] */
    fy_conf_node_t **keys;
    fy_conf_node_t **items;
    size_t n;
};

fy_conf_arena_t *fy_conf_arena_new(void);
void fy_conf_arena_free(fy_conf_arena_t *a);
/* Arena allocation, zeroed; aborts on OOM. */
void *fy_conf_alloc(fy_conf_arena_t *a, size_t size);
char *fy_conf_strdup(fy_conf_arena_t *a, const char *s);
char *fy_conf_strndup(fy_conf_arena_t *a, const char *s, size_t n);

/* Parse YAML text. `name` is used in marks ("<embedded>" for the built-in config).
 * Returns the root node (an empty MAP for an empty document), or NULL with a message
 * "name:line:col: yaml: <problem>" written to err (NUL-terminated, truncated to errlen).
 * Anchors/aliases and tags are rejected (a config needs neither; aliases enable bombs).
 * Duplicate keys in one map are an error. Depth is bounded (64). */
fy_conf_node_t *fy_conf_parse(fy_conf_arena_t *a, const char *name, const char *text, size_t len,
                              char *err, size_t errlen);
/* Read and parse a file; errors as above, plus "path: cannot read: <strerror>". */
fy_conf_node_t *fy_conf_parse_file(fy_conf_arena_t *a, const char *path, char *err, size_t errlen);

/* ---- directive tables ---- */

typedef struct fy_conf_ctx fy_conf_ctx_t;

enum fy_conf_type {
    FY_CT_STRING = 1, /* char*  (arena-owned); scalar */
    FY_CT_BOOL,       /* bool;   true/false/yes/no/on/off */
    FY_CT_INT,        /* int64_t; decimal, bounded by min/max */
    FY_CT_SIZE,      /* uint64_t bytes; "512", "16k", "16KiB", "4m", "1g" (binary units), min/max */
    FY_CT_DURATION,  /* uint64_t milliseconds; "250ms", "10s", "5m", "1h", bare number = s */
    FY_CT_ENUM,      /* int; scalar must be one of `enums` (index stored) */
    FY_CT_STRLIST,   /* fy_conf_strlist_t; a sequence of scalars, or one scalar, or (if the
                        directive sets `csv`) a comma-separated scalar */
    FY_CT_STRMAP,    /* fy_conf_strmap_t; a map of scalar -> scalar (e.g. response headers) */
    FY_CT_TABLE,     /* nested struct at `offset`, described by `sub` */
    FY_CT_TABLE_PTR, /* pointer to a nested struct allocated (sub_size bytes) when present;
                        NULL when absent */
    FY_CT_TABLE_LIST, /* fy_conf_list_t of structs of sub_size bytes, each described by `sub`;
                         a sequence of maps */
    FY_CT_CUSTOM,     /* parse(): full control over the node */
};

typedef struct fy_conf_strlist {
    char **v;
    size_t n;
} fy_conf_strlist_t;

typedef struct fy_conf_strmap {
    char **keys;
    char **values;
    size_t n;
} fy_conf_strmap_t;

typedef struct fy_conf_list {
    void *v; /* array of n structs of the directive's sub_size bytes */
    size_t n;
} fy_conf_list_t;

typedef struct fy_conf_directive fy_conf_directive_t;

/* A table: an array of directives ended by one with key == NULL. `check`, if set on the
 * table's terminating entry, runs after all directives of one map were applied (for
 * cross-field rules such as "cert and key go together") and reports with fy_conf_error. */
struct fy_conf_directive {
    const char *key;  /* YAML key; NULL ends the table */
    int type;         /* enum fy_conf_type */
    size_t offset;    /* offsetof(struct, field) */
    const char *dflt; /* default written as YAML scalar text, applied when the key is absent;
                         NULL = leave the zeroed value */
    const char *doc;  /* one line for docs/CONFIG.md and `ferry check` */
    bool required;
    int64_t min, max;               /* INT/SIZE/DURATION bounds when max > min */
    const char *const *enums;       /* ENUM: NULL-terminated names */
    const fy_conf_directive_t *sub; /* TABLE, TABLE_PTR, TABLE_LIST */
    size_t sub_size;                /* TABLE_PTR, TABLE_LIST */
    bool csv;                       /* STRLIST: also split a scalar on commas */
    /* CUSTOM, and the table terminator's post-check. Return 0 or -1 after fy_conf_error. */
    int (*parse)(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field);
    int (*check)(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj);
    /* Scalar shorthand: when a TABLE/TABLE_PTR/TABLE_LIST item is given as a scalar instead of
       a map, it is applied as the value of this key of `sub`. When that key is a BOOL, the
       scalar must be the key's own name and sets it to true (`tls: self-signed` means
       `tls: {self-signed: true}`). */
    const char *shorthand_key;
    /* Optional validator, run after a value (given or default) was converted into `field`;
       `obj` is the struct holding the field, so a validator may fill derived fields (resolved
       addresses, lengths) or rewrite the value (realpath). Return 0 or -1 after fy_conf_error
       with key NULL (the context's path already names the directive). */
    int (*validate)(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj);
    /* CUSTOM: print the field's value as YAML (scalar or flow) for fy_conf_dump; file is a
       FILE*. Without it a CUSTOM directive is dumped as a comment. */
    void (*dump)(const void *field, void *file);
    /* CUSTOM: the type column of the generated docs, e.g. "`auto` or integer". */
    const char *type_name;
};

/* Apply `table` to the MAP `node`, filling `obj` (already zeroed). Unknown keys, wrong types,
 * out-of-range values and missing required keys are errors. Returns 0, or -1 after recording
 * errors (all errors in the node are collected, not just the first).
 * A null value (`key:`, `key: ~`, `key: null`, unquoted) means the same as an absent key: the
 * default applies, a TABLE gets its defaults, a TABLE_PTR stays NULL. Nested TABLEs are always
 * applied, so an absent `limits:` still gets every default of its table. */
int fy_conf_apply(fy_conf_ctx_t *ctx, const fy_conf_directive_t *table, const fy_conf_node_t *node,
                  void *obj);

/* Context of one load: the arena and the error list. */
fy_conf_ctx_t *fy_conf_ctx_new(fy_conf_arena_t *a);
fy_conf_arena_t *fy_conf_ctx_arena(fy_conf_ctx_t *ctx);
/* Record "file:line:col: key: message" for `node` (NULL: no position). The key printed is the
 * dotted path of what is being applied ("listeners[0].tls") extended by `key` when not NULL
 * ("listeners[0].tls.cert"); with an empty path and NULL key it is left out. printf-style.
 * After 100 errors further ones are counted but not recorded. */
void fy_conf_error(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, const char *key, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));
size_t fy_conf_error_count(const fy_conf_ctx_t *ctx);
/* All recorded errors, one per line, NUL-terminated; owned by the context's arena. */
const char *fy_conf_errors(const fy_conf_ctx_t *ctx);

/* Scalar converters used by the engine, exposed for CUSTOM parsers and the CLI.
 * Each returns 0 or -1 (value untouched). */
int fy_conf_parse_size(const char *s, uint64_t *out);
int fy_conf_parse_duration_ms(const char *s, uint64_t *out);
int fy_conf_parse_bool(const char *s, bool *out);

/* Print the effective values of `obj` as YAML at `indent` spaces (for `ferry check`), using
 * the same table: every directive including defaults, sizes and durations in readable units. */
void fy_conf_dump(const fy_conf_directive_t *table, const void *obj, int indent, void *file);

/* Write the tables as Markdown reference (docs/CONFIG.md generator). */
void fy_conf_doc(const fy_conf_directive_t *table, const char *section, int depth, void *file);
/* The same walk as man(7) text: one .SS per section, one .TP per key (ferry.yaml(5)). */
void fy_conf_doc_man(const fy_conf_directive_t *table, const char *section, void *file);

#endif
