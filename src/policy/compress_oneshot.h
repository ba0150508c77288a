/* One-shot compression of a whole body held in one buffer (the compression filter's path for
 * bodies that fit `one-shot-max`): gzip with libdeflate, zstd with ZSTD_compressCCtx. On 64 KiB
 * of text libdeflate level 1 takes about 0.6x the instructions of zlib's streaming level 1
 * (and writes 13% less), ZSTD_compressCCtx 0.66x the streaming zstd (docs/BENCHMARKS.md, session
 * 8). Brotli is not here: BrotliEncoderCompress saved 1% over streaming and wrote 1.5% more. The
 * libdeflate compressors (one per level, 1..12) and the zstd context are made on first use on each
 * thread and freed when the thread exits (a pthread key destructor). Threads: any; state is per
 * thread. */
#ifndef FY_POLICY_COMPRESS_ONESHOT_H
#define FY_POLICY_COMPRESS_ONESHOT_H

#include <stddef.h>

/* Largest output fy__compress_oneshot may write for n input bytes in `coding`
 * (FY_CODING_GZIP or _ZSTD) at `level`; 0 for another coding or out of memory. */
size_t fy__compress_oneshot_bound(int coding, int level, size_t n);

/* Compress in[0..n) (in may be NULL when n is 0) into out (cap bytes, at least the bound) as
 * one complete stream: a gzip member (`level` 1..12, libdeflate's) or a zstd frame with the
 * content size (`level` 1..22). Returns the
 * output length, or 0: an unknown coding, a level out of range, out of memory or cap too
 * small. Not re-entrant per thread (uses the thread's compressors). */
size_t fy__compress_oneshot(int coding, int level, const void *in, size_t n, void *out, size_t cap);

/* Free this thread's compressors now (they are also freed at thread exit). */
void fy__compress_oneshot_thread_free(void);

#endif
