#include "h2/h2_mem.h"

#include "core/spool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE 4096u

static void note_big(fy_h2_mem_t *m, void *p, size_t n)
{
    for (int i = 0; i < FY_H2_MEM_NBIG; i++)
        if (!m->big[i]) {
            m->big[i] = p;
            m->big_len[i] = n;
            return;
        }
    /* more large blocks than slots: counted, just not trimmed */
}

static void forget_big(fy_h2_mem_t *m, void *p)
{
    for (int i = 0; i < FY_H2_MEM_NBIG; i++)
        if (m->big[i] == p) {
            size_t whole = m->big_len[i] & ~(size_t)(PAGE - 1);
            m->trimmed -= m->trimmed >= whole ? whole : m->trimmed;
            m->big[i] = NULL;
            m->big_len[i] = 0;
            return;
        }
}

static bool is_big(const fy_h2_mem_t *m, const void *p)
{
    if ((uintptr_t)p & (PAGE - 1)) return false; /* (a spool block may be aligned too) */
    for (int i = 0; i < FY_H2_MEM_NBIG; i++)
        if (m->big[i] == p) return true;
    return false;
}

static size_t big_len(const fy_h2_mem_t *m, const void *p)
{
    for (int i = 0; i < FY_H2_MEM_NBIG; i++)
        if (m->big[i] == p) return m->big_len[i];
    return 0;
}

static void *mem_malloc(size_t n, void *ud)
{
    fy_h2_mem_t *m = ud;
    if (n >= FY_H2_MEM_BIG) {
        void *p;
        if (posix_memalign(&p, PAGE, n) != 0) return NULL;
        note_big(m, p, n);
        m->bytes += n;
        return p;
    }
    void *p = fy_spool_alloc(n);
    if (p) m->bytes += fy_spool_size(p);
    return p;
}

static void mem_free(void *p, void *ud)
{
    if (!p) return;
    fy_h2_mem_t *m = ud;
    if (is_big(m, p)) {
        m->bytes -= big_len(m, p);
        forget_big(m, p);
        free(p);
        return;
    }
    m->bytes -= fy_spool_size(p);
    fy_spool_free(p);
}

static void *mem_calloc(size_t nmemb, size_t size, void *ud)
{
    if (size && nmemb > SIZE_MAX / size) return NULL;
    size_t n = nmemb * size;
    void *p = mem_malloc(n, ud);
    if (p) memset(p, 0, n);
    return p;
}

static void *mem_realloc(void *p, size_t n, void *ud)
{
    fy_h2_mem_t *m = ud;
    if (!p) return mem_malloc(n, ud);
    if (is_big(m, p) || n >= FY_H2_MEM_BIG) { /* large blocks stay page-aligned */
        size_t old = is_big(m, p) ? big_len(m, p) : fy_spool_size(p);
        void *q = mem_malloc(n, ud);
        if (!q) return NULL;
        memcpy(q, p, old < n ? old : n);
        mem_free(p, ud);
        return q;
    }
    size_t old = fy_spool_size(p);
    void *q = fy_spool_realloc(p, n);
    if (!q) return NULL;
    m->bytes += fy_spool_size(q);
    m->bytes -= old;
    return q;
}

void fy_h2_mem_init(fy_h2_mem_t *m)
{
    memset(m, 0, sizeof *m);
    m->mem.mem_user_data = m;
    m->mem.malloc = mem_malloc;
    m->mem.free = mem_free;
    m->mem.calloc = mem_calloc;
    m->mem.realloc = mem_realloc;
}

void fy_h2_mem_trim(fy_h2_mem_t *m)
{
#ifndef FY_NO_POOL
    size_t t = 0;
    for (int i = 0; i < FY_H2_MEM_NBIG; i++) {
        size_t whole = m->big_len[i] & ~(size_t)(PAGE - 1);
        if (!m->big[i] || !whole) continue;
        if (madvise(m->big[i], whole, MADV_DONTNEED) == 0) t += whole;
    }
    m->trimmed = t;
#else
    (void)m;
#endif
}
