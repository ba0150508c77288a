/* One-shot body compression (policy/compress_oneshot.h). */
#include "policy/compress_oneshot.h"

#include <libdeflate.h>
#include <pthread.h>
#include <stdlib.h>
#include <zstd.h>

#include "policy/compress_neg.h"

enum { GZ_LEVEL_MAX = 12 };

typedef struct oneshot_tls {
    struct libdeflate_compressor *gz[GZ_LEVEL_MAX + 1]; /* owned; by level */
    ZSTD_CCtx *zs;                                      /* owned */
} oneshot_tls_t;

/* The pointer is kept in both: _Thread_local for the fast lookup, the key for the destructor
   that runs at thread exit. */
static _Thread_local oneshot_tls_t *mine;
static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static int key_ok;

static void tls_free(void *p)
{
    oneshot_tls_t *t = p;
    if (!t) return;
    for (int i = 0; i <= GZ_LEVEL_MAX; i++)
        if (t->gz[i]) libdeflate_free_compressor(t->gz[i]);
    if (t->zs) ZSTD_freeCCtx(t->zs);
    free(t);
}

static void key_init(void)
{
    key_ok = pthread_key_create(&key, tls_free) == 0;
}

static oneshot_tls_t *tls_get(void)
{
    if (mine) return mine;
    pthread_once(&key_once, key_init);
    oneshot_tls_t *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (key_ok) pthread_setspecific(key, t);
    mine = t;
    return t;
}

void fy__compress_oneshot_thread_free(void)
{
    if (!mine) return;
    if (key_ok) pthread_setspecific(key, NULL);
    tls_free(mine);
    mine = NULL;
}

static struct libdeflate_compressor *gz_get(int level)
{
    if (level < 1 || level > GZ_LEVEL_MAX) return NULL;
    oneshot_tls_t *t = tls_get();
    if (!t) return NULL;
    if (!t->gz[level]) t->gz[level] = libdeflate_alloc_compressor(level);
    return t->gz[level];
}

size_t fy__compress_oneshot_bound(int coding, int level, size_t n)
{
    switch (coding) {
    case FY_CODING_GZIP: {
        /* libdeflate's bound does not depend on the compressor when given NULL (1.14) but
           passing ours keeps it exact for the level */
        struct libdeflate_compressor *c = gz_get(level);
        return c ? libdeflate_gzip_compress_bound(c, n) : 0;
    }
    case FY_CODING_ZSTD:
        return ZSTD_compressBound(n);
    }
    return 0;
}

size_t fy__compress_oneshot(int coding, int level, const void *in, size_t n, void *out, size_t cap)
{
    static const char empty[1];
    if (!in) in = empty;
    switch (coding) {
    case FY_CODING_GZIP: {
        struct libdeflate_compressor *c = gz_get(level);
        return c ? libdeflate_gzip_compress(c, in, n, out, cap) : 0;
    }
    case FY_CODING_ZSTD: {
        if (level < 1 || level > ZSTD_maxCLevel()) return 0;
        oneshot_tls_t *t = tls_get();
        if (!t) return 0;
        if (!t->zs) t->zs = ZSTD_createCCtx();
        if (!t->zs) return 0;
        size_t r = ZSTD_compressCCtx(t->zs, out, cap, in, n, level);
        return ZSTD_isError(r) ? 0 : r;
    }
    }
    return 0;
}
