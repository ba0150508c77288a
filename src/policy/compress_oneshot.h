/* One-shot compression of a whole body held in one buffer (the compression filter's path for
 * bodies that fit `one-shot-max`): gzip with libdeflate, zstd with ZSTD_compressCCtx, br with
 * BrotliEncoderCompress. libdeflate is 2-3x cheaper per byte than zlib's streaming deflate at
 * the same level, and one call has no per-send flush. The libdeflate compressors (one per
 * level, 1..12) and the zstd context are made on first use on each thread and freed when the
 * thread exits (a pthread key destructor). Threads: any; state is per thread. */
#ifndef FY_POLICY_COMPRESS_ONESHOT_H
#define FY_POLICY_COMPRESS_ONESHOT_H

#include <stddef.h>

/* Largest output fy__compress_oneshot may write for n input bytes in `coding`
 * (FY_CODING_GZIP, _BR or _ZSTD) at `level`; 0 for another coding or out of memory. */
size_t fy__compress_oneshot_bound(int coding, int level, size_t n);

/* Compress in[0..n) (in may be NULL when n is 0) into out (cap bytes, at least the bound) as
 * one complete stream: a gzip member (`level` 1..12, libdeflate's), a zstd frame with the
 * content size (`level` 1..22) or a brotli stream (quality 0..11, window 2^22). Returns the
 * output length, or 0: an unknown coding, a level out of range, out of memory or cap too
 * small. Not re-entrant per thread (uses the thread's compressors). */
size_t fy__compress_oneshot(int coding, int level, const void *in, size_t n, void *out, size_t cap);

/* Free this thread's compressors now (they are also freed at thread exit). */
void fy__compress_oneshot_thread_free(void);

#endif
