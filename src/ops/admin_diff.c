/* The dry-run diff: listeners, routes and upstreams added, removed or changed between two
 * configs, and the other top-level sections that changed. Works on the directive tables only
 * (each item is compared by its effective dump, as `ferry check` prints it), so it needs no
 * knowledge of the typed config. */
#include "ops/admin.h"

#include <stdlib.h>
#include <string.h>

typedef struct item {
    char *id;    /* owned: what pairs an item with its counterpart (name, address, match) */
    char *label; /* owned: how the diff shows it */
    char *body;  /* owned: the item's effective dump */
    bool paired;
} item_t;

static char *dump_table(const fy_conf_directive_t *sub, const void *obj)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) abort();
    fy_conf_dump(sub, obj, 0, f);
    fclose(f);
    return buf;
}

static const fy_conf_directive_t *find_key(const fy_conf_directive_t *t, const char *key)
{
    for (; t->key; t++)
        if (strcmp(t->key, key) == 0) return t;
    return NULL;
}

/* "a: x\nb: []\n" -> "a: x" : the lines that say something, joined by "; " */
static char *compact(const char *dump)
{
    size_t n = strlen(dump);
    char *out = malloc(n + 1), *o = out;
    if (!out) abort();
    for (const char *p = dump; *p;) {
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        const char *colon = memchr(p, ':', l);
        const char *v = colon ? colon + 1 : p + l;
        while (v < p + l && *v == ' ') v++;
        size_t vl = (size_t)(p + l - v);
        bool empty = p[0] == '#' || l == 0 || vl == 0 ||
                     (vl == 2 && (!memcmp(v, "[]", 2) || !memcmp(v, "{}", 2))) ||
                     (vl == 1 && *v == '~') || (vl == 4 && !memcmp(v, "null", 4));
        if (!empty) {
            if (o != out) *o++ = ';', *o++ = ' ';
            const char *q = p;
            while (q < p + l && *q == ' ') q++;
            memcpy(o, q, (size_t)(p + l - q));
            o += p + l - q;
        }
        p += l + (e != NULL);
    }
    *o = '\0';
    return out;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d) abort();
    return d;
}

/* The items of list directive `d` of `cfg`. */
static item_t *items_of(const fy_conf_directive_t *d, const void *cfg, size_t *n)
{
    const fy_conf_list_t *l = (const fy_conf_list_t *)((const char *)cfg + d->offset);
    item_t *v = calloc(l->n ? l->n : 1, sizeof *v);
    if (!v) abort();
    const fy_conf_directive_t *name = find_key(d->sub, "name");
    const fy_conf_directive_t *addr = find_key(d->sub, "address");
    const fy_conf_directive_t *match = find_key(d->sub, "match");
    for (size_t i = 0; i < l->n; i++) {
        const char *obj = (const char *)l->v + i * d->sub_size;
        const char *nm =
            name && name->type == FY_CT_STRING ? *(char *const *)(obj + name->offset) : NULL;
        const char *ad =
            addr && addr->type == FY_CT_STRING ? *(char *const *)(obj + addr->offset) : NULL;
        v[i].body = dump_table(d->sub, obj);
        if (nm || ad) {
            v[i].id = xstrdup(nm ? nm : ad);
        } else if (match && match->type == FY_CT_TABLE) {
            char *m = dump_table(match->sub, obj + match->offset);
            v[i].id = compact(m);
            free(m);
        } else {
            char b[32];
            snprintf(b, sizeof b, "#%zu", i);
            v[i].id = xstrdup(b);
        }
        v[i].label = xstrdup(v[i].id);
    }
    *n = l->n;
    return v;
}

static void free_items(item_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) free(v[i].id), free(v[i].label), free(v[i].body);
    free(v);
}

static void entry(FILE *out, bool *first, const char *label, size_t index, bool with_index)
{
    fputs(*first ? "" : ", ", out);
    *first = false;
    if (with_index) {
        fprintf(out, "{\"index\": %zu, \"match\": ", index);
        fy_admin_json_str(out, label);
        fputc('}', out);
    } else {
        fy_admin_json_str(out, label);
    }
}

static void diff_list(const fy_conf_directive_t *d, const void *from, const void *to, FILE *out)
{
    size_t na, nb;
    item_t *a = items_of(d, from, &na), *b = items_of(d, to, &nb);
    bool routes = find_key(d->sub, "name") == NULL && find_key(d->sub, "address") == NULL;
    /* pair the k-th item with an id in `to` with the k-th one with that id in `from` */
    size_t *peer = calloc(nb ? nb : 1, sizeof *peer);
    if (!peer) abort();
    for (size_t j = 0; j < nb; j++) {
        peer[j] = (size_t)-1;
        for (size_t i = 0; i < na; i++)
            if (!a[i].paired && strcmp(a[i].id, b[j].id) == 0) {
                a[i].paired = b[j].paired = true;
                peer[j] = i;
                break;
            }
    }
    bool first = true;
    fprintf(out, "{\"added\": [");
    for (size_t j = 0; j < nb; j++)
        if (!b[j].paired) entry(out, &first, b[j].label, j, routes);
    fprintf(out, "], \"removed\": [");
    first = true;
    for (size_t i = 0; i < na; i++)
        if (!a[i].paired) entry(out, &first, a[i].label, i, routes);
    fprintf(out, "], \"changed\": [");
    first = true;
    for (size_t j = 0; j < nb; j++)
        if (b[j].paired && strcmp(a[peer[j]].body, b[j].body) != 0)
            entry(out, &first, b[j].label, j, routes);
    fprintf(out, "]}");
    free(peer);
    free_items(a, na);
    free_items(b, nb);
}

void fy_admin_diff(const fy_conf_directive_t *table, const void *from, const void *to, FILE *out)
{
    static const char *const lists[] = {"listeners", "routes", "upstreams"};
    fputc('{', out);
    for (size_t k = 0; k < 3; k++) {
        const fy_conf_directive_t *d = find_key(table, lists[k]);
        if (!d || d->type != FY_CT_TABLE_LIST) continue;
        fprintf(out, "\"%s\": ", lists[k]);
        diff_list(d, from, to, out);
        fputs(", ", out);
    }
    fputs("\"sections\": [", out);
    bool first = true;
    for (const fy_conf_directive_t *d = table; d->key; d++) {
        if (d->type == FY_CT_TABLE_LIST &&
            (!strcmp(d->key, "listeners") || !strcmp(d->key, "routes") ||
             !strcmp(d->key, "upstreams")))
            continue;
        fy_conf_directive_t one[2] = {*d, {.key = NULL}};
        char *x = dump_table(one, from), *y = dump_table(one, to);
        if (strcmp(x, y) != 0) {
            fputs(first ? "" : ", ", out);
            first = false;
            fy_admin_json_str(out, d->key);
        }
        free(x);
        free(y);
    }
    fputs("]}", out);
}
