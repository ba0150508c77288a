/* The tables as documentation: Markdown (fy_conf_doc, docs/CONFIG.md) and man page text
 * (fy_conf_doc_man, ferry.yaml(5)). Read-only tables; any thread. */
#include "conf/conf_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
