/* Region allocator for per-conn and per-exchange memory: bump allocation in blocks, freed in
 * one go, with destructors for resources (fds, SSL*, cache references) run at reset/free in
 * reverse order of registration. fy_arena_reset keeps the first block, so a keep-alive
 * connection reuses its memory without calling malloc per request.
 * Threads: an arena belongs to one thread (its connection's or exchange's worker); not
 * thread-safe. */
#ifndef FY_CORE_ARENA_H
#define FY_CORE_ARENA_H

#include <stddef.h>

#include "core/fwd.h"

typedef struct fy_arena_block fy_arena_block_t;
typedef struct fy_arena_dtor fy_arena_dtor_t;

struct fy_arena {
    fy_arena_block_t *head; /* current block (owned) */
    char *cur, *end;
    fy_arena_dtor_t *dtors;
    size_t block_size;
    char *first_mem; /* caller-provided first block, never freed by the arena */
    size_t first_size;
};

/* Initialise with an optional caller-owned first block (may be NULL/0). Blocks allocated
 * later are `block_size` bytes (default 4096 when 0) or larger for big requests. */
void fy_arena_init(fy_arena_t *a, void *first, size_t first_size, size_t block_size);
/* Zero-initialised? No: fy_arena_alloc returns uninitialised memory, 16-byte aligned.
 * Aborts on OOM (memory per request is bounded by the limits, so OOM is not a peer's doing). */
void *fy_arena_alloc(fy_arena_t *a, size_t n);
void *fy_arena_calloc(fy_arena_t *a, size_t n);
char *fy_arena_strndup(fy_arena_t *a, const char *s, size_t n);
/* Register fn(arg) to run at reset/free. */
void fy_arena_on_reset(fy_arena_t *a, void (*fn)(void *arg), void *arg);
/* Run destructors, free extra blocks, rewind to the first block. */
void fy_arena_reset(fy_arena_t *a);
/* Bytes the arena holds: its first block (caller-provided or not) and every block it took. */
size_t fy__arena_bytes_slow(const fy_arena_t *a);
static inline size_t fy_arena_bytes(const fy_arena_t *a)
{
    if (!a->head) return a->first_mem ? a->first_size : 0;
    return fy__arena_bytes_slow(a);
}
/* fy_arena_reset plus nothing kept. */
void fy_arena_free(fy_arena_t *a);

#endif
