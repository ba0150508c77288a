/* Internals shared by the directive engine's files (conf_ctx.c: the apply context and its
 * errors; conf_scalar.c: scalar converters and readable units; conf_apply.c: node tree +
 * table -> typed struct; conf_dump.c: the tables back out as YAML; conf_doc.c: the tables as
 * Markdown and man pages). Not for use outside them.
 *
 * Thread rules: none of it is shared; a context belongs to the thread loading one config
 * (the main thread), and the tables are read-only. */
#ifndef FY_CONF_INT_H
#define FY_CONF_INT_H

#include "conf/conf.h"

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

/* conf_apply.c */
bool has_bounds(const fy_conf_directive_t *d);

/* conf_scalar.c */
int parse_int(const char *s, int64_t *out);
void fmt_size(char *buf, size_t len, uint64_t v);
void fmt_duration(char *buf, size_t len, uint64_t ms);

#endif
