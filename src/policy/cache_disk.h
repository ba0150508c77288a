/* The cache's disk tier: complete objects of a zone kept as files under a directory, behind
 * the memory tier (policy/cache_store.h). A file holds one variant (head, freshness, body)
 * with a checksum; it is named by a hash of the key and the secondary key, so a newer
 * response of one variant replaces the older by rename.
 *
 * Threads: the index (key -> file, LRU, bytes) is under one mutex, held only for index work
 * (never for I/O). A writer thread takes complete objects from a bounded queue and writes
 * them (a full queue drops the write and counts it); a reader thread takes loads from another
 * bounded queue, reads the file whole, checks it and fills a PENDING memory object that the
 * asking request follows like a collapsed fetch. No call here blocks the caller on a disk
 * except fy_cache_disk_open (the start-up scan) and fy_cache_disk_close (joins the threads).
 * A file that fails its checks (truncated, corrupted, another key) is removed, counted, and
 * the load fails: its followers go to the origin. */
#ifndef FY_POLICY_CACHE_DISK_H
#define FY_POLICY_CACHE_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "http/exchange.h"

typedef struct fy_cache_disk fy_cache_disk_t;
struct fy_cache_obj;
struct fy_cache_zone;

typedef struct fy_cache_disk_stats {
    uint64_t entries, bytes, max_bytes;
    uint64_t writes, write_drops, write_errors, write_skips;
    uint64_t reads, read_drops, read_errors, corrupt;
    uint64_t evictions, removed;
} fy_cache_disk_stats_t;

/* Open (creating it when missing) the directory `dir` holding at most `max_bytes` of files,
 * scan it to rebuild the index (bad and partial files are removed), and start the writer and
 * reader threads with queues of `queue` jobs each. `zone` is the memory tier loads fill
 * (borrowed: it outlives the disk). NULL with a logged error when the directory cannot be
 * made or read. Main thread, at start or reload. */
fy_cache_disk_t *fy_cache_disk_open(const char *dir, uint64_t max_bytes, unsigned queue,
                                    struct fy_cache_zone *zone);
/* Stop the threads (queued writes are finished first, queued loads failed) and free. */
void fy_cache_disk_close(fy_cache_disk_t *d);
/* The directory this disk was opened on (owned by d). */
const char *fy_cache_disk_dir(const fy_cache_disk_t *d);
/* Set the size bound (evicting in the writer thread past it). Any thread. */
void fy_cache_disk_set_max(fy_cache_disk_t *d, uint64_t max_bytes);

/* Queue a write of the complete object o (a reference is taken until written). Returns 0, or
 * -EAGAIN when the queue is full (counted in write_drops). Any thread. */
int fy_cache_disk_store(fy_cache_disk_t *d, struct fy_cache_obj *o);

/* Is there a file for key whose variant matches `req_headers`? Returns its name (nonzero),
 * or 0. `a` holds temporaries. Any thread. */
uint64_t fy_cache_disk_find(fy_cache_disk_t *d, uint64_t hash, const char *key, size_t keylen,
                            const fy_headers_t *req_headers, fy_arena_t *a);
/* Queue a load of file `name` into o (PENDING, made by fy_cache_begin; a reference is taken).
 * The reader makes o STREAMING then COMPLETE, or PASS when the file is gone or bad. Returns
 * 0, or -EAGAIN when the queue is full (o is untouched). Any thread. */
int fy_cache_disk_load(fy_cache_disk_t *d, struct fy_cache_obj *o, uint64_t name);

/* Remove files: every variant of key / keys starting with prefix / objects whose Cache-Tag
 * or Surrogate-Key lists tag. Returns how many. The unlinks run in the writer thread (or
 * here when its queue is full). Any thread. */
size_t fy_cache_disk_remove_key(fy_cache_disk_t *d, uint64_t hash, const char *key, size_t keylen);
size_t fy_cache_disk_remove_prefix(fy_cache_disk_t *d, const char *prefix, size_t plen);
size_t fy_cache_disk_remove_tag(fy_cache_disk_t *d, const char *tag, size_t tlen);

void fy_cache_disk_stats(fy_cache_disk_t *d, fy_cache_disk_stats_t *out);

/* Wait until the write queue is empty and the writer idle (tests, shutdown). */
void fy_cache_disk_drain(fy_cache_disk_t *d);

#endif
