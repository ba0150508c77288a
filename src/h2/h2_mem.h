/* nghttp2 sessions on an allocator of their own (nghttp2_mem, issue 19): small blocks come from
 * the per-thread size classes of core/spool.h (nghttp2 takes and gives back several per
 * request; a pop and a push instead of glibc), each counted by its size header, so a
 * connection knows what its session holds; and the
 * large ones (the 16 KiB outbound frame buffer nghttp2 keeps for the session's whole life) are
 * page-aligned so that an idle connection can give their pages back (MADV_DONTNEED: the
 * buffer's bytes are dead between frames; the next frame touches fresh zero pages).
 *
 * Thread rules: one fy_h2_mem_t per session, used on the thread that owns the session. */
#ifndef FY_H2_H2_MEM_H
#define FY_H2_H2_MEM_H

#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stddef.h>

#define FY_H2_MEM_BIG 16384 /* blocks this large or larger are page-aligned and trimmable */
#define FY_H2_MEM_NBIG 4

typedef struct fy_h2_mem {
    nghttp2_mem mem;           /* give &mem to nghttp2_session_*_new3; mem_user_data = this */
    size_t bytes;              /* usable bytes of every block the session holds now */
    size_t trimmed;            /* of those, bytes whose pages were given back (fy_h2_mem_trim) */
    void *big[FY_H2_MEM_NBIG]; /* page-aligned blocks (borrowed: nghttp2 owns them) */
    size_t big_len[FY_H2_MEM_NBIG];
} fy_h2_mem_t;

/* Set up m (it must stay at this address for the session's life: nghttp2 keeps the pointer). */
void fy_h2_mem_init(fy_h2_mem_t *m);
/* The session is idle (nothing queued, nghttp2_session_want_write() false, no stream open):
 * the whole pages of its large blocks go back to the kernel. Safe to call repeatedly. A no-op
 * in FY_NO_POOL (sanitizer) builds. */
void fy_h2_mem_trim(fy_h2_mem_t *m);
/* The session is about to be used again: count the trimmed blocks as held (their pages come
 * back as nghttp2 touches them). */
static inline void fy_h2_mem_wake(fy_h2_mem_t *m)
{
    m->trimmed = 0;
}
/* Bytes the session holds now (resident or about to be). */
static inline size_t fy_h2_mem_held(const fy_h2_mem_t *m)
{
    return m->bytes - m->trimmed;
}

#endif
