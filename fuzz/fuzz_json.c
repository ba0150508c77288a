/* libFuzzer entry for the strict JSON parser (src/policy/json.c): JWT headers and payloads
 * and JWKS documents are peer bytes. Checks that a success accounts for its children (counts
 * match the sibling lists) and that strings stay NUL-terminated within the memory given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/json.h"

static size_t walk(const fy_json_t *v, const char *lo, const char *hi, int depth)
{
    if (depth > 16) abort();
    if (v->type == FY_JSON_STRING && (v->str < lo || v->str + v->len >= hi || v->str[v->len]))
        abort();
    size_t n = 0, total = 1;
    for (const fy_json_t *c = v->child; c; c = c->next) {
        if ((v->type == FY_JSON_OBJECT) != (c->key != NULL)) abort();
        n++;
        total += walk(c, lo, hi, depth + 1);
    }
    if ((v->type == FY_JSON_ARRAY || v->type == FY_JSON_OBJECT) && n != v->len) abort();
    return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char mem[1 << 16];
    const char *err = NULL;
    fy_json_t *v = fy_json_parse((const char *)data, size, mem, sizeof mem, 16, &err, NULL);
    if (v)
        walk(v, mem, mem + sizeof mem, 0);
    else if (!err)
        abort();
    return 0;
}
