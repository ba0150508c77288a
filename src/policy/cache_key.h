/* Cache keys (policy/cache.c): the primary key of a request (scheme, authority lowercased
 * with the default port dropped, the router's normalised path, the query, and configured
 * request headers), the normalised list of names of a response's Vary, and a request's
 * secondary key for such a list (RFC 9111 §4.1). Output goes into caller buffers or an
 * arena; any thread. */
#ifndef FY_POLICY_CACHE_KEY_H
#define FY_POLICY_CACHE_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "http/exchange.h"

/* The primary key of `req` (arena memory; *len set). `extra` are lowercase header names
 * whose values join the key (NULL-terminated array, or NULL). */
char *fy_cache_key(fy_arena_t *a, const fy_request_t *req, char *const *extra, size_t nextra,
                   size_t *len);

/* The same into buf (cap bytes) when it fits, else into the arena. */
char *fy_cache_key_into(char *buf, size_t cap, fy_arena_t *a, const fy_request_t *req,
                        char *const *extra, size_t nextra, size_t *len);

/* The field names of every Vary line of `hs`, lowercased, deduplicated and sorted, joined by
 * '\n' (arena memory), or NULL with *len 0 when there is none. Empty members and
 * whitespace are dropped; "*" is kept as a name of its own. */
char *fy_cache_vary_names(fy_arena_t *a, const fy_headers_t *hs, size_t *len);

/* The secondary key of `req_headers` for the names `names[0..nlen)` (from
 * fy_cache_vary_names): per name, the request's lines of that name combined with ',' and
 * whitespace around members removed; an absent field differs from an empty one.
 * Accept-Encoding is keyed by its meaning instead: the known codings (br, compress, deflate,
 * gzip, identity, zstd; x-gzip is gzip) that are acceptable, by falling q-value ("br,gzip" /
 * "identity>gzip"), so order, case, q=1 and unknown codings make no new variant. Arena
 * memory. */
char *fy_cache_vary_key(fy_arena_t *a, const fy_headers_t *req_headers, const char *names,
                        size_t nlen, size_t *len);

/* 64-bit hash of a key (FNV-1a; the store's shard and bucket index). */
uint64_t fy_cache_hash(const char *p, size_t n);

#endif
