/* Typed config of the static file handler (`static:` in a route). Table: handler/static_conf.c
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_HANDLER_STATIC_CONF_H
#define FY_HANDLER_STATIC_CONF_H

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"

typedef struct fy_static_conf {
    char *root;                   /* required; made absolute and realpath()-ed when loaded */
    fy_conf_strlist_t index;      /* `index`, default [index.html] */
    bool listing;                 /* `listing`, default false: directory listing */
    int dotfiles;                 /* `dotfiles`: 0 deny (default: 404), 1 allow */
    bool precompressed;           /* `precompressed`, default true: serve .br / .gz siblings */
    bool etag;                    /* `etag`, default true */
    char *cache_control;          /* `cache-control`, optional header value */
    int64_t file_cache_entries;   /* `file-cache`, default 1024 entries per worker; 0 disables */
    uint64_t file_cache_max_size; /* `file-cache-max-size`, default 64k: files up to this size
                                     are kept in memory */
    uint64_t file_cache_ttl_ms;   /* `file-cache-ttl`, default 1s: revalidate with stat() */
} fy_static_conf_t;

extern const fy_conf_directive_t fy_static_conf_table[];

#endif
