/* Typed config of the compression filter (`compress:` in a route). Table: compress_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_POLICY_COMPRESS_CONF_H
#define FY_POLICY_COMPRESS_CONF_H

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"

typedef struct fy_compress_conf {
    bool enabled;                /* `enabled` (the shorthand `compress: enabled`) */
    fy_conf_strlist_t encodings; /* `encodings`: our preference on equal q: br, zstd, gzip */
    uint64_t min_size;           /* `min-size`: smaller bodies (when known) stay identity */
    fy_conf_strlist_t types;     /* `types`: MIME types compressed; "text/" + "*" wildcards */
    int64_t gzip_level;          /* `gzip-level` 1..12 (libdeflate's; zlib streaming caps at 9) */
    int64_t brotli_level;        /* `brotli-level` 0..11 */
    int64_t zstd_level;          /* `zstd-level` 1..19 */
    uint64_t file_chunk;         /* `file-chunk`: bytes read per send from a static file */
    uint64_t one_shot_max;       /* `one-shot-max`: bodies up to this size are compressed in one
                                    call (0: always stream) */
} fy_compress_conf_t;

extern const fy_conf_directive_t fy_compress_conf_table[];

#endif
