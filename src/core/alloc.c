#include "core/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t n)
{
    fprintf(stderr, "ferry: out of memory allocating %zu bytes\n", n);
    abort();
}

void *fy_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *fy_xcalloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    if (!p) oom(nmemb * size);
    return p;
}

void *fy_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *fy_xstrdup(const char *s)
{
    return fy_xstrndup(s, strlen(s));
}

char *fy_xstrndup(const char *s, size_t n)
{
    char *p = fy_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}
