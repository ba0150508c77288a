/* Static files: root directory, index files, MIME types, ETag / Last-Modified with conditional
 * requests (304), single byte ranges (206 / 416), precompressed .br / .gz siblings, sendfile on
 * plain connections, and a per-worker open-file cache that keeps small files in memory.
 * Paths never leave the root: ".." above the root is 403, and files are opened with
 * openat2(RESOLVE_BENEATH), so symlinks pointing outside the root are refused (403). */
#ifndef FY_HANDLER_STATIC_H
#define FY_HANDLER_STATIC_H

#include "handler/static_conf.h"
#include "http/handler.h"

/* Build the handler; `conf` is borrowed. Returns NULL after logging if the root can't be
 * opened. */
fy_handler_t *fy_static_handler_new(const fy_static_conf_t *conf);

/* Free the calling worker thread's open-file cache (at worker exit). */
void fy_static_thread_cleanup(void);

/* MIME type for a file name by its extension ("text/html; charset=utf-8", default
 * "application/octet-stream"). */
const char *fy_static_mime_type(const char *name, size_t len);

/* Percent-decode and normalise a request path into `out` (capacity `cap`): collapses "//",
 * drops "." segments, resolves ".." (never above the root). The result has no leading '/'
 * ("" for the root) and keeps a trailing '/' when the request had one.
 * Returns the length, or -400 (bad escape, NUL byte, too long), -403 (".." above the root),
 * -404 (an encoded '/', which never names a file here). */
int fy_static_normalize(const char *path, size_t len, char *out, size_t cap);

#endif
