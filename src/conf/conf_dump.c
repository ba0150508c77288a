/* The tables back out as YAML (fy_conf_dump: the effective config `ferry check` prints), with
 * scalars quoted only where YAML would read them as something else. Any thread, on a config
 * nobody changes meanwhile. */
#include "conf/conf_int.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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
