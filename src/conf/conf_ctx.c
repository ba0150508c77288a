/* The apply context: its arena and the list of `file:line:col: key: message` errors (bounded,
 * joined on demand). The thread loading the config only (see conf_int.h). */
#include "conf/conf_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
