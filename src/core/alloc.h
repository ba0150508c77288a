/* Boot-time allocation that aborts on OOM (config, worker setup). Hot paths use arenas and
 * pools instead (core/arena.h, core/pool.h).
 * Threads: thread-safe (the C allocator underneath). */
#ifndef FY_CORE_ALLOC_H
#define FY_CORE_ALLOC_H

#include <stddef.h>

void *fy_xmalloc(size_t n);
void *fy_xcalloc(size_t nmemb, size_t size);
void *fy_xrealloc(void *p, size_t n);
char *fy_xstrdup(const char *s);
char *fy_xstrndup(const char *s, size_t n);

#endif
