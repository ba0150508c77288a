/* JSON redaction for the capture store (capture_store.h, fy_cs_redact_json): the values of
 * listed members, at any depth, replaced by "[redacted]". A scanner, not a parser: it skips
 * strings and nested values by their brackets and stops at the first thing that is not JSON,
 * so a body that is not JSON comes back unchanged. Pure. */
#include "ops/capture_store.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

typedef struct obuf {
    char *p;
    size_t len, cap;
} obuf_t;

static void oput(obuf_t *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n) cap *= 2;
        b->p = fy_xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
}

static size_t skip_ws(const char *p, size_t i, size_t n)
{
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n')) i++;
    return i;
}

/* Index after the JSON string starting at p[i] == '"', or n when unterminated. */
static size_t skip_string(const char *p, size_t i, size_t n)
{
    for (i++; i < n; i++) {
        if (p[i] == '\\')
            i++;
        else if (p[i] == '"')
            return i + 1;
    }
    return n;
}

/* Index after the JSON value starting at p[i]. */
static size_t skip_value(const char *p, size_t i, size_t n)
{
    if (i >= n) return n;
    if (p[i] == '"') return skip_string(p, i, n);
    if (p[i] == '{' || p[i] == '[') {
        int depth = 0;
        while (i < n) {
            char c = p[i];
            if (c == '"') {
                i = skip_string(p, i, n);
                continue;
            }
            if (c == '{' || c == '[') depth++;
            if (c == '}' || c == ']') {
                if (--depth == 0) return i + 1;
            }
            i++;
        }
        return n;
    }
    while (i < n && p[i] != ',' && p[i] != '}' && p[i] != ']' && p[i] != ' ' && p[i] != '\n' &&
           p[i] != '\r' && p[i] != '\t')
        i++;
    return i;
}

static bool name_listed(const char *p, size_t n, const char *const *names)
{
    for (const char *const *k = names; *k; k++)
        if (strlen(*k) == n && memcmp(*k, p, n) == 0) return true;
    return false;
}

char *fy_cs_redact_json(const char *body, size_t len, const char *const *names, size_t *out_len)
{
    if (!names || !names[0] || !len) return NULL;
    size_t i = skip_ws(body, 0, len);
    if (i >= len || (body[i] != '{' && body[i] != '[')) return NULL;
    obuf_t o = {0};
    size_t copied = 0;
    bool any = false;
    while (i < len) {
        if (body[i] != '"') {
            i++;
            continue;
        }
        size_t ks = i, ke = skip_string(body, i, len);
        size_t j = skip_ws(body, ke, len);
        if (j < len && body[j] == ':' && ke - ks >= 2 &&
            name_listed(body + ks + 1, ke - ks - 2, names)) {
            size_t vs = skip_ws(body, j + 1, len), ve = skip_value(body, vs, len);
            oput(&o, body + copied, vs - copied);
            oput(&o, "\"[redacted]\"", 12);
            copied = ve;
            any = true;
            i = ve;
            continue;
        }
        i = ke;
    }
    if (!any) {
        free(o.p);
        return NULL;
    }
    oput(&o, body + copied, len - copied);
    *out_len = o.len;
    return o.p;
}
