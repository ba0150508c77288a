/* A small strict JSON parser (RFC 8259) for the JWT filter's header and payload and for JWKS
 * documents: peer bytes, so it is bounded in depth and memory and refuses what a lenient parser
 * would guess at (trailing commas, leading zeros, control characters, lone surrogates, invalid
 * UTF-8, duplicate object keys, trailing bytes). Pure: no allocation, no global state; every
 * node and decoded string is carved from the caller's buffer. Any thread. */
#ifndef FY_POLICY_JSON_H
#define FY_POLICY_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum fy_json_type {
    FY_JSON_NULL = 1,
    FY_JSON_FALSE,
    FY_JSON_TRUE,
    FY_JSON_NUMBER,
    FY_JSON_STRING,
    FY_JSON_ARRAY,
    FY_JSON_OBJECT,
};

typedef struct fy_json fy_json_t;
struct fy_json {
    int type;        /* enum fy_json_type */
    const char *key; /* member of an OBJECT: its decoded name (NUL-terminated), else NULL */
    size_t key_len;
    const char *str;  /* STRING: decoded UTF-8, NUL-terminated (may hold NUL: use len) */
    size_t len;       /* STRING: bytes; ARRAY/OBJECT: number of children */
    double num;       /* NUMBER */
    int64_t i;        /* NUMBER: the value when is_int */
    bool is_int;      /* NUMBER written without fraction/exponent and within int64 */
    fy_json_t *child; /* ARRAY/OBJECT: first element or member */
    fy_json_t *next;  /* next sibling in the parent */
};

/* Parse `in[0..len)` as one JSON value. Nodes and strings come from `mem[0..cap)` (8-byte
 * aligned by the parser); nesting deeper than max_depth is refused. Returns the root, or NULL
 * with *err set to a static reason ("unexpected character", "nesting too deep", "out of
 * memory", "duplicate key", ...) and *at (if not NULL) to the byte offset of the problem. */
fy_json_t *fy_json_parse(const char *in, size_t len, void *mem, size_t cap, int max_depth,
                         const char **err, size_t *at);

/* The member `key` of OBJECT o (NULL when o is not an object or has no such member). */
const fy_json_t *fy_json_get(const fy_json_t *o, const char *key);
/* The STRING member `key` of o as a NUL-terminated string, or NULL when absent/not a string. */
const char *fy_json_get_str(const fy_json_t *o, const char *key);

#endif
