#include "core/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

struct fy_arena_block {
    fy_arena_block_t *prev;
    size_t size;
    _Alignas(16) char mem[];
};

struct fy_arena_dtor {
    fy_arena_dtor_t *next;
    void (*fn)(void *);
    void *arg;
};

void fy_arena_init(fy_arena_t *a, void *first, size_t first_size, size_t block_size)
{
    memset(a, 0, sizeof *a);
    a->block_size = block_size ? block_size : 4096;
    a->first_mem = first;
    a->first_size = first_size;
    a->cur = first;
    a->end = first ? (char *)first + first_size : NULL;
}

static void *slow_alloc(fy_arena_t *a, size_t n)
{
    size_t size = n > a->block_size / 2 ? n : a->block_size;
    fy_arena_block_t *b = fy_xmalloc(sizeof *b + size);
    b->prev = a->head;
    b->size = size;
    a->head = b;
    if (n > a->block_size / 2) {
        /* big allocation: its own block; keep bumping in the previous region */
        char *p = b->mem;
        if (a->cur == NULL) {
            a->cur = a->end = p + n;
        }
        return p;
    }
    a->cur = b->mem + n;
    a->end = b->mem + size;
    return b->mem;
}

void *fy_arena_alloc(fy_arena_t *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (a->cur) {
        char *p = (char *)(((uintptr_t)a->cur + 15) & ~(uintptr_t)15);
        if (p <= a->end && (size_t)(a->end - p) >= n) {
            a->cur = p + n;
            return p;
        }
    }
    return slow_alloc(a, n);
}

void *fy_arena_calloc(fy_arena_t *a, size_t n)
{
    void *p = fy_arena_alloc(a, n);
    memset(p, 0, n);
    return p;
}

char *fy_arena_strndup(fy_arena_t *a, const char *s, size_t n)
{
    char *p = fy_arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void fy_arena_on_reset(fy_arena_t *a, void (*fn)(void *arg), void *arg)
{
    fy_arena_dtor_t *d = fy_arena_alloc(a, sizeof *d);
    d->fn = fn;
    d->arg = arg;
    d->next = a->dtors;
    a->dtors = d;
}

void fy_arena_reset(fy_arena_t *a)
{
    while (a->dtors) {
        fy_arena_dtor_t *d = a->dtors;
        a->dtors = d->next;
        d->fn(d->arg);
    }
    while (a->head) {
        fy_arena_block_t *b = a->head;
        a->head = b->prev;
        free(b);
    }
    a->cur = a->first_mem;
    a->end = a->first_mem ? a->first_mem + a->first_size : NULL;
}

void fy_arena_free(fy_arena_t *a)
{
    fy_arena_reset(a);
    a->first_mem = NULL;
    a->cur = a->end = NULL;
}

size_t fy__arena_bytes_slow(const fy_arena_t *a)
{
    size_t n = a->first_mem ? a->first_size : 0;
    for (const fy_arena_block_t *b = a->head; b; b = b->prev) n += sizeof *b + b->size;
    return n;
}
