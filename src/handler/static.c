#include "handler/static.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "http/exchange.h"

/* ---- MIME types ---- */

static const struct {
    const char *ext;
    const char *type;
} mime_types[] = {
    {"html", "text/html; charset=utf-8"},
    {"htm", "text/html; charset=utf-8"},
    {"css", "text/css; charset=utf-8"},
    {"js", "text/javascript; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"},
    {"json", "application/json"},
    {"map", "application/json"},
    {"txt", "text/plain; charset=utf-8"},
    {"md", "text/markdown; charset=utf-8"},
    {"csv", "text/csv; charset=utf-8"},
    {"xml", "application/xml"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"avif", "image/avif"},
    {"ico", "image/x-icon"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"ttf", "font/ttf"},
    {"otf", "font/otf"},
    {"pdf", "application/pdf"},
    {"zip", "application/zip"},
    {"gz", "application/gzip"},
    {"tar", "application/x-tar"},
    {"wasm", "application/wasm"},
    {"mp4", "video/mp4"},
    {"webm", "video/webm"},
    {"mp3", "audio/mpeg"},
    {"ogg", "audio/ogg"},
    {"wav", "audio/wav"},
};

const char *fy_static_mime_type(const char *name, size_t len)
{
    size_t i = len;
    while (i > 0 && name[i - 1] != '.' && name[i - 1] != '/') i--;
    if (i == 0 || name[i - 1] != '.') return "application/octet-stream";
    const char *ext = name + i;
    size_t el = len - i;
    for (size_t k = 0; k < sizeof mime_types / sizeof mime_types[0]; k++)
        if (strlen(mime_types[k].ext) == el && strncasecmp(mime_types[k].ext, ext, el) == 0)
            return mime_types[k].type;
    return "application/octet-stream";
}

/* ---- path normalisation ---- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int fy_static_normalize(const char *path, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    size_t i = 0;
    while (i < len && path[i] == '/') i++;
    while (i < len) {
        /* one segment, decoded */
        size_t seg = o;
        while (i < len && path[i] != '/') {
            char ch = path[i];
            if (ch == '%') {
                if (i + 2 >= len) return -400;
                int h = hexval(path[i + 1]), l = hexval(path[i + 2]);
                if (h < 0 || l < 0) return -400;
                ch = (char)(h * 16 + l);
                i += 3;
                if (ch == '\0') return -400;
                if (ch == '/') return -404; /* an encoded slash never names a file here */
            } else {
                if (ch == '\0') return -400;
                i++;
            }
            if (o + 1 >= cap) return -400;
            out[o++] = ch;
        }
        size_t sl = o - seg;
        bool had_slash = i < len; /* segment ended by '/' */
        while (i < len && path[i] == '/') i++;
        if (sl == 1 && out[seg] == '.') {
            o = seg; /* "." */
        } else if (sl == 2 && out[seg] == '.' && out[seg + 1] == '.') {
            /* "..": back to the previous segment; never above the root */
            if (seg == 0) return -403;
            size_t k = seg - 1; /* the '/' before this segment */
            while (k > 0 && out[k - 1] != '/') k--;
            o = k;
        } else if (had_slash) {
            if (o + 1 >= cap) return -400;
            out[o++] = '/';
        }
    }
    out[o] = '\0';
    return (int)o;
}

/* ---- per-worker open-file cache ---- */

typedef struct fc_entry fc_entry_t;
struct fc_entry {
    fc_entry_t *hnext;         /* hash chain */
    fc_entry_t *lprev, *lnext; /* LRU: head = most recent */
    const void *owner;         /* the handler (several roots share one cache) */
    char *key;                 /* relative path (owned) */
    size_t keylen;
    uint64_t hash;
    int refs; /* the table holds one while cached */
    bool cached;
    int err; /* 0, or a negative HTTP status (404/403) cached briefly */
    int fd;  /* O_RDONLY; -1 for errors and directories */
    bool is_dir;
    uint64_t size;
    time_t mtime;
    struct timespec mtim, ctim; /* full precision: a same-size edit within a second counts */
    dev_t dev;
    ino_t ino;
    char *data;          /* whole content when small (owned) */
    uint64_t checked_ms; /* last validation */
    bool has_br, has_gz;
    char etag[48];
    size_t etag_len;
    char last_modified[32];
};

typedef struct file_cache {
    fc_entry_t **buckets;
    size_t nbuckets;
    size_t count;
    fc_entry_t *lru_head, *lru_tail;
} file_cache_t;

static __thread file_cache_t *tl_cache;

typedef struct static_handler {
    fy_handler_t h;
    const fy_static_conf_t *conf;
    int rootfd;
    const void *cache_owner; /* unique per handler ever made: a handler of a newer config
                                generation may get a freed one's address, never its entries */
} static_handler_t;

static atomic_uintptr_t next_owner = 1;

static uint64_t hash_key(const void *owner, const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)owner;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)k[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void entry_free(fc_entry_t *e)
{
    if (e->fd >= 0) close(e->fd);
    free(e->data);
    free(e->key);
    free(e);
}

static void entry_unref(void *arg)
{
    fc_entry_t *e = arg;
    if (--e->refs == 0) entry_free(e);
}

static file_cache_t *cache_get(void)
{
    if (!tl_cache) {
        tl_cache = fy_xcalloc(1, sizeof *tl_cache);
        tl_cache->nbuckets = 1024;
        tl_cache->buckets = fy_xcalloc(tl_cache->nbuckets, sizeof *tl_cache->buckets);
    }
    return tl_cache;
}

static void cache_remove(struct file_cache *fc, fc_entry_t *e);

void fy_static_thread_cleanup(void)
{
    file_cache_t *fc = tl_cache;
    if (!fc) return;
    while (fc->lru_tail) cache_remove(fc, fc->lru_tail);
    free(fc->buckets);
    free(fc);
    tl_cache = NULL;
}

static void lru_unlink(file_cache_t *fc, fc_entry_t *e)
{
    if (e->lprev)
        e->lprev->lnext = e->lnext;
    else
        fc->lru_head = e->lnext;
    if (e->lnext)
        e->lnext->lprev = e->lprev;
    else
        fc->lru_tail = e->lprev;
    e->lprev = e->lnext = NULL;
}

static void lru_push_front(file_cache_t *fc, fc_entry_t *e)
{
    e->lprev = NULL;
    e->lnext = fc->lru_head;
    if (fc->lru_head) fc->lru_head->lprev = e;
    fc->lru_head = e;
    if (!fc->lru_tail) fc->lru_tail = e;
}

static void cache_remove(file_cache_t *fc, fc_entry_t *e)
{
    fc_entry_t **pp = &fc->buckets[e->hash & (fc->nbuckets - 1)];
    while (*pp && *pp != e) pp = &(*pp)->hnext;
    if (*pp) *pp = e->hnext;
    lru_unlink(fc, e);
    fc->count--;
    e->cached = false;
    entry_unref(e);
}

static fc_entry_t *cache_find(file_cache_t *fc, const void *owner, const char *k, size_t n,
                              uint64_t h)
{
    for (fc_entry_t *e = fc->buckets[h & (fc->nbuckets - 1)]; e; e = e->hnext)
        if (e->hash == h && e->owner == owner && e->keylen == n && memcmp(e->key, k, n) == 0)
            return e;
    return NULL;
}

/* Is the open file `fd` inside the directory `rootfd`? (by their resolved paths) */
static bool fd_is_beneath(int rootfd, int fd)
{
    char lr[64], lf[64], root[4096], file[4096];
    snprintf(lr, sizeof lr, "/proc/self/fd/%d", rootfd);
    snprintf(lf, sizeof lf, "/proc/self/fd/%d", fd);
    ssize_t nr = readlink(lr, root, sizeof root - 1), nf = readlink(lf, file, sizeof file - 1);
    if (nr <= 0 || nf <= 0) return false;
    if (nr == 1) return true; /* root is "/" */
    return nf >= nr && memcmp(root, file, (size_t)nr) == 0 && (nf == nr || file[nr] == '/');
}

static int open_beneath(int rootfd, const char *rel, int flags)
{
    static atomic_bool no_openat2;
    if (!atomic_load_explicit(&no_openat2, memory_order_relaxed)) {
        struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
                               .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
        int fd = (int)syscall(SYS_openat2, rootfd, rel[0] ? rel : ".", &how, sizeof how);
        if (fd >= 0 || errno != ENOSYS) return fd;
        /* kernels before 5.6 and valgrind lack openat2: open, then check where it landed */
        atomic_store(&no_openat2, true);
    }
    int fd = openat(rootfd, rel[0] ? rel : ".", flags | O_CLOEXEC);
    if (fd < 0) return fd;
    if (!fd_is_beneath(rootfd, fd)) {
        close(fd);
        errno = EXDEV;
        return -1;
    }
    return fd;
}

static bool sibling_exists(int rootfd, const char *rel, size_t n, const char *suffix)
{
    char buf[4200];
    if (n + 4 >= sizeof buf) return false;
    memcpy(buf, rel, n);
    memcpy(buf + n, suffix, strlen(suffix) + 1);
    struct stat st;
    int fd = open_beneath(rootfd, buf, O_RDONLY | O_PATH);
    if (fd < 0) return false;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    close(fd);
    return ok;
}

/* (Re)fill `e` from the file system. */
static void entry_load(static_handler_t *sh, fc_entry_t *e, uint64_t now_ms)
{
    const fy_static_conf_t *conf = sh->conf;
    e->checked_ms = now_ms;
    int fd = open_beneath(sh->rootfd, e->key, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        e->err = (errno == ENOENT || errno == ENOTDIR || errno == ENAMETOOLONG) ? -404 : -403;
        if (errno == EXDEV || errno == ELOOP)
            fy_info("static: '%s' resolves outside the root: refused", e->key);
        return;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        e->err = -403;
        return;
    }
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        close(fd);
        e->err = -403;
        return;
    }
    e->err = 0;
    e->is_dir = S_ISDIR(st.st_mode);
    e->size = (uint64_t)st.st_size;
    e->mtime = st.st_mtime;
    e->mtim = st.st_mtim;
    e->ctim = st.st_ctim;
    e->dev = st.st_dev;
    e->ino = st.st_ino;
    if (e->is_dir) {
        close(fd);
        e->fd = -1;
        return;
    }
    e->fd = fd;
    /* mtime in nanoseconds: two versions written within one second differ */
    e->etag_len = (size_t)snprintf(e->etag, sizeof e->etag, "\"%llx-%llx\"",
                                   (unsigned long long)st.st_mtim.tv_sec * 1000000000ull +
                                       (unsigned long long)st.st_mtim.tv_nsec,
                                   (unsigned long long)st.st_size);
    fy_http_date_fmt(st.st_mtime, e->last_modified);
    if (conf->precompressed) {
        e->has_br = sibling_exists(sh->rootfd, e->key, e->keylen, ".br");
        e->has_gz = sibling_exists(sh->rootfd, e->key, e->keylen, ".gz");
    }
    if (e->size <= conf->file_cache_max_size && e->size > 0 && conf->file_cache_entries > 0) {
        e->data = malloc(e->size);
        if (e->data) {
            ssize_t r = pread(fd, e->data, e->size, 0);
            if (r != (ssize_t)e->size) {
                free(e->data);
                e->data = NULL;
            }
        }
    }
}

/* A referenced entry for `rel`: from the cache when fresh, else loaded. The caller owns one
 * reference (released by the exchange's arena). */
static fc_entry_t *lookup(static_handler_t *sh, fy_exchange_t *ex, const char *rel, size_t n)
{
    const fy_static_conf_t *conf = sh->conf;
    uint64_t now = ex->ctx->loop->now_ms;
    file_cache_t *fc = cache_get();
    uint64_t h = hash_key(sh->cache_owner, rel, n);
    fc_entry_t *e =
        conf->file_cache_entries > 0 ? cache_find(fc, sh->cache_owner, rel, n, h) : NULL;
    if (e) {
        if (now - e->checked_ms < conf->file_cache_ttl_ms) {
            if (fc->lru_head != e) {
                lru_unlink(fc, e);
                lru_push_front(fc, e);
            }
            e->refs++;
            fy_arena_on_reset(ex->arena, entry_unref, e);
            return e;
        }
        /* stale: is it still the same file? */
        struct stat st;
        int fd = open_beneath(sh->rootfd, e->key, O_RDONLY | O_PATH);
        bool same = fd >= 0 && fstat(fd, &st) == 0 && e->err == 0 && st.st_ino == e->ino &&
                    st.st_dev == e->dev && st.st_mtim.tv_sec == e->mtim.tv_sec &&
                    st.st_mtim.tv_nsec == e->mtim.tv_nsec && st.st_ctim.tv_sec == e->ctim.tv_sec &&
                    st.st_ctim.tv_nsec == e->ctim.tv_nsec && (uint64_t)st.st_size == e->size;
        if (fd >= 0) close(fd);
        if (same) {
            e->checked_ms = now;
            if (conf->precompressed && !e->is_dir) {
                e->has_br = sibling_exists(sh->rootfd, e->key, e->keylen, ".br");
                e->has_gz = sibling_exists(sh->rootfd, e->key, e->keylen, ".gz");
            }
            e->refs++;
            fy_arena_on_reset(ex->arena, entry_unref, e);
            return e;
        }
        cache_remove(fc, e);
    }
    e = fy_xcalloc(1, sizeof *e);
    e->fd = -1;
    e->owner = sh->cache_owner;
    e->key = fy_xstrndup(rel, n);
    e->keylen = n;
    e->hash = h;
    e->refs = 1;
    entry_load(sh, e, now);
    if (conf->file_cache_entries > 0) {
        while (fc->count >= (size_t)conf->file_cache_entries && fc->lru_tail)
            cache_remove(fc, fc->lru_tail);
        e->hnext = fc->buckets[h & (fc->nbuckets - 1)];
        fc->buckets[h & (fc->nbuckets - 1)] = e;
        lru_push_front(fc, e);
        fc->count++;
        e->cached = true;
        e->refs++;
    }
    fy_arena_on_reset(ex->arena, entry_unref, e);
    return e;
}

/* ---- conditional requests and ranges ---- */

static bool etag_list_matches(fy_str_t list, const char *etag, size_t elen)
{
    size_t i = 0;
    while (i < list.len) {
        while (i < list.len && (list.p[i] == ' ' || list.p[i] == '\t' || list.p[i] == ',')) i++;
        if (i < list.len && list.p[i] == '*') return true;
        size_t b = i;
        if (i + 1 < list.len && list.p[i] == 'W' && list.p[i + 1] == '/') b = i += 2; /* weak */
        if (i < list.len && list.p[i] == '"') {
            i++;
            while (i < list.len && list.p[i] != '"') i++;
            if (i < list.len) i++;
        } else {
            while (i < list.len && list.p[i] != ',') i++;
        }
        if (i - b == elen && memcmp(list.p + b, etag, elen) == 0) return true;
    }
    return false;
}

/* 304 when the client's copy is current (RFC 9110 §13.2.2 order: If-None-Match first). */
static bool not_modified(fy_exchange_t *ex, const fc_entry_t *e)
{
    const fy_header_t *inm = FY_HDR_FIND(&ex->req.headers, "if-none-match");
    if (inm) return etag_list_matches(inm->value, e->etag, e->etag_len);
    const fy_header_t *ims = FY_HDR_FIND(&ex->req.headers, "if-modified-since");
    if (ims) {
        time_t t = fy_http_date_parse(ims->value);
        return t >= 0 && e->mtime <= t;
    }
    return false;
}

/* Parse one "bytes=a-b" range. Returns 1 with [*start, *end] inclusive, 0 to ignore the header
 * (invalid syntax or several ranges: a full 200 is allowed), -1 when unsatisfiable (416). */
static int parse_range(fy_str_t v, uint64_t size, uint64_t *start, uint64_t *end)
{
    if (v.len < 7 || strncasecmp(v.p, "bytes=", 6) != 0) return 0;
    if (memchr(v.p + 6, ',', v.len - 6)) return 0;
    const char *p = v.p + 6, *e = v.p + v.len;
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    uint64_t a = 0, b = 0;
    bool has_a = false, has_b = false;
    while (p < e && *p >= '0' && *p <= '9') {
        if (a > (UINT64_MAX - 9) / 10) return 0;
        a = a * 10 + (uint64_t)(*p++ - '0');
        has_a = true;
    }
    if (p >= e || *p != '-') return 0;
    p++;
    while (p < e && *p >= '0' && *p <= '9') {
        if (b > (UINT64_MAX - 9) / 10) return 0;
        b = b * 10 + (uint64_t)(*p++ - '0');
        has_b = true;
    }
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    if (p != e || (!has_a && !has_b)) return 0;
    if (!has_a) { /* suffix: last b bytes */
        if (b == 0) return -1;
        *start = b >= size ? 0 : size - b;
        *end = size - 1;
        return size ? 1 : -1;
    }
    if (has_b && b < a) return 0;
    if (a >= size) return -1;
    *start = a;
    *end = (!has_b || b >= size) ? size - 1 : b;
    return 1;
}

/* ---- responses ---- */

static void add_hdr(fy_exchange_t *ex, const char *name, const char *v, size_t vl)
{
    fy_headers_add(ex->arena, &ex->res.headers, name, strlen(name), v, vl);
}

static void redirect_dir(fy_exchange_t *ex)
{
    /* "/dir" -> "/dir/" keeping the query */
    size_t n = ex->req.path.len + 2 + ex->req.query.len;
    char *loc = fy_arena_alloc(ex->arena, n + 1);
    size_t o = 0;
    memcpy(loc, ex->req.path.p, ex->req.path.len);
    o = ex->req.path.len;
    loc[o++] = '/';
    if (ex->req.query.len) {
        loc[o++] = '?';
        memcpy(loc + o, ex->req.query.p, ex->req.query.len);
        o += ex->req.query.len;
    }
    add_hdr(ex, "location", loc, o);
    static const char body[] = "<html><body><h1>301 Moved Permanently</h1></body></html>\n";
    fy_exchange_respond(ex, 301, "text/html; charset=utf-8", body, sizeof body - 1);
}

static size_t html_escape(char *out, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const char *r = NULL;
        switch (s[i]) {
        case '<':
            r = "&lt;";
            break;
        case '>':
            r = "&gt;";
            break;
        case '&':
            r = "&amp;";
            break;
        case '"':
            r = "&quot;";
            break;
        case '\'':
            r = "&#39;";
            break;
        }
        if (r) {
            size_t l = strlen(r);
            memcpy(out + o, r, l);
            o += l;
        } else {
            out[o++] = s[i];
        }
    }
    return o;
}

static size_t url_escape(char *out, const char *s, size_t n)
{
    static const char hx[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hx[ch >> 4];
            out[o++] = hx[ch & 15];
        }
    }
    return o;
}

static size_t cat(char *buf, size_t o, const char *s)
{
    size_t l = strlen(s);
    memcpy(buf + o, s, l);
    return o + l;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void listing(static_handler_t *sh, fy_exchange_t *ex, const char *rel)
{
    int fd = open_beneath(sh->rootfd, rel, O_RDONLY | O_DIRECTORY);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        fy_exchange_fail(ex, 403, "directory not readable");
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0, bytes = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 10000) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = fy_xrealloc(names, cap * sizeof *names);
        }
        bool dir = de->d_type == DT_DIR;
        size_t l = strlen(de->d_name);
        names[n] = fy_arena_alloc(ex->arena, l + 2);
        memcpy(names[n], de->d_name, l);
        names[n][l] = dir ? '/' : '\0';
        names[n][l + 1] = '\0';
        bytes += l * 9 + 40;
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    size_t pl = ex->req.path.len;
    char *body = fy_arena_alloc(ex->arena, bytes + pl * 6 + 256);
    size_t o = 0;
    o = cat(body, o, "<!DOCTYPE html>\n<html><head><title>Index of ");
    o += html_escape(body + o, ex->req.path.p, pl);
    o = cat(body, o, "</title></head><body><h1>Index of ");
    o += html_escape(body + o, ex->req.path.p, pl);
    o = cat(body, o, "</h1><ul>\n");
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(names[i]);
        o = cat(body, o, "<li><a href=\"");
        char tmp[4096];
        size_t tl = url_escape(tmp, names[i], l > 1300 ? 1300 : l);
        if (l && names[i][l - 1] == '/') tmp[tl - 3] = '/', tl -= 2; /* keep the slash */
        memcpy(body + o, tmp, tl);
        o += tl;
        o = cat(body, o, "\">");
        o += html_escape(body + o, names[i], l);
        o = cat(body, o, "</a></li>\n");
    }
    o = cat(body, o, "</ul></body></html>\n");
    free(names);
    fy_exchange_respond(ex, 200, "text/html; charset=utf-8", body, o);
}

static void serve_entry(static_handler_t *sh, fy_exchange_t *ex, fc_entry_t *e, const char *rel,
                        size_t reln)
{
    const fy_static_conf_t *conf = sh->conf;
    fc_entry_t *body = e;
    const char *encoding = NULL;
    if ((e->has_br || e->has_gz)) {
        const fy_header_t *ae = FY_HDR_FIND(&ex->req.headers, "accept-encoding");
        const char *suffix = NULL;
        if (ae && e->has_br && fy_str_list_has(ae->value, "br", 2)) {
            suffix = ".br";
            encoding = "br";
        } else if (ae && e->has_gz && fy_str_list_has(ae->value, "gzip", 4)) {
            suffix = ".gz";
            encoding = "gzip";
        }
        if (suffix) {
            char *k = fy_arena_alloc(ex->arena, reln + 4);
            memcpy(k, rel, reln);
            memcpy(k + reln, suffix, 4);
            fc_entry_t *v = lookup(sh, ex, k, reln + 3);
            if (v->err == 0 && !v->is_dir)
                body = v;
            else
                encoding = NULL;
        }
        add_hdr(ex, "vary", "Accept-Encoding", 15);
    }
    const char *mime = fy_static_mime_type(rel, reln);
    add_hdr(ex, "content-type", mime, strlen(mime));
    add_hdr(ex, "last-modified", e->last_modified, 29);
    if (conf->etag) add_hdr(ex, "etag", body->etag, body->etag_len);
    if (conf->cache_control)
        add_hdr(ex, "cache-control", conf->cache_control, strlen(conf->cache_control));
    if (encoding) add_hdr(ex, "content-encoding", encoding, strlen(encoding));

    if (not_modified(ex, body)) {
        ex->res.status = 304;
        ex->res.content_length = -1;
        static const fy_producer_ops_t none = {NULL, NULL};
        fy_exchange_start_response(ex, &none);
        fy_exchange_send(ex, NULL, 0, FY_SEND_FINAL);
        return;
    }
    add_hdr(ex, "accept-ranges", "bytes", 5);
    uint64_t start = 0, len = body->size;
    int status = 200;
    const fy_header_t *rh =
        ex->req.method_id == FY_M_GET ? FY_HDR_FIND(&ex->req.headers, "range") : NULL;
    if (rh) {
        const fy_header_t *ir = FY_HDR_FIND(&ex->req.headers, "if-range");
        bool use = true;
        if (ir) {
            if (ir->value.len && ir->value.p[0] == '"')
                use = ir->value.len == body->etag_len &&
                      memcmp(ir->value.p, body->etag, body->etag_len) == 0;
            else
                use = fy_http_date_parse(ir->value) == body->mtime;
        }
        uint64_t a, b;
        int r = use ? parse_range(rh->value, body->size, &a, &b) : 0;
        if (r < 0) {
            char *cr = fy_arena_alloc(ex->arena, 48);
            int n = snprintf(cr, 48, "bytes */%llu", (unsigned long long)body->size);
            ex->res.headers.n = 0;
            add_hdr(ex, "content-range", cr, (size_t)n);
            static const char msg[] =
                "<html><body><h1>416 Range Not Satisfiable</h1></body></html>\n";
            fy_exchange_respond(ex, 416, "text/html; charset=utf-8", msg, sizeof msg - 1);
            return;
        }
        if (r > 0) {
            status = 206;
            start = a;
            len = b - a + 1;
            char *cr = fy_arena_alloc(ex->arena, 80);
            int n = snprintf(cr, 80, "bytes %llu-%llu/%llu", (unsigned long long)a,
                             (unsigned long long)b, (unsigned long long)body->size);
            add_hdr(ex, "content-range", cr, (size_t)n);
        }
    }
    ex->res.status = status;
    ex->res.content_length = (int64_t)len;
    static const fy_producer_ops_t none = {NULL, NULL};
    fy_exchange_start_response(ex, &none);
    if (ex->req.method_id == FY_M_HEAD || len == 0) {
        fy_exchange_send(ex, NULL, 0, FY_SEND_FINAL);
    } else if (body->data) {
        struct iovec iov = {body->data + start, len};
        fy_exchange_send(ex, &iov, 1, FY_SEND_FINAL);
    } else {
        fy_exchange_send_file(ex, body->fd, (off_t)start, len, FY_SEND_FINAL);
    }
}

/* Does the normalised relative path name a dotfile or something inside a dot-directory
 * (`.env`, `.git/config`, `a/.htpasswd`)? `.well-known/` as the first segment is public
 * (RFC 8615). */
static bool is_hidden(const char *rel, size_t n)
{
    static const char wk[] = ".well-known";
    size_t i = 0;
    if (n >= sizeof wk - 1 && memcmp(rel, wk, sizeof wk - 1) == 0 &&
        (n == sizeof wk - 1 || rel[sizeof wk - 1] == '/'))
        i = sizeof wk - 1;
    for (; i < n; i++)
        if (rel[i] == '.' && (i == 0 || rel[i - 1] == '/')) return true;
    return false;
}

static void on_request(fy_handler_t *h, fy_exchange_t *ex)
{
    static_handler_t *sh = (static_handler_t *)h;
    const fy_static_conf_t *conf = sh->conf;
    if (ex->req.method_id != FY_M_GET && ex->req.method_id != FY_M_HEAD) {
        add_hdr(ex, "allow", "GET, HEAD", 9);
        fy_exchange_fail(ex, 405, "method not allowed for static files");
        return;
    }
    char rel[4096];
    int n = fy_static_normalize(ex->req.path.p, ex->req.path.len, rel, sizeof rel - 256);
    if (n < 0) {
        fy_exchange_fail(ex, -n, n == -403 ? "path escapes the root" : "bad path");
        return;
    }
    if (conf->dotfiles == 0 && is_hidden(rel, (size_t)n)) {
        fy_exchange_fail(ex, 404, "not found (a dotfile: static.dotfiles is deny)");
        return;
    }
    bool want_dir = n == 0 || rel[n - 1] == '/';
    if (want_dir) {
        if (n > 0) rel[--n] = '\0'; /* lookups use "dir" not "dir/" */
        for (size_t i = 0; i < conf->index.n; i++) {
            size_t il = strlen(conf->index.v[i]);
            size_t k = (size_t)n;
            char path[4352];
            if (k) path[k] = '/';
            memcpy(path, rel, (size_t)n);
            if (k) k++;
            memcpy(path + k, conf->index.v[i], il);
            k += il;
            path[k] = '\0';
            fc_entry_t *e = lookup(sh, ex, path, k);
            if (e->err == 0 && !e->is_dir) {
                serve_entry(sh, ex, e, path, k);
                return;
            }
        }
        fc_entry_t *d = lookup(sh, ex, rel, (size_t)n);
        if (d->err) {
            fy_exchange_fail(ex, -d->err, "not found");
            return;
        }
        if (!d->is_dir) {
            fy_exchange_fail(ex, 404, "not a directory");
            return;
        }
        if (conf->listing) {
            listing(sh, ex, rel);
            return;
        }
        fy_exchange_fail(ex, 403, "directory listing is off");
        return;
    }
    fc_entry_t *e = lookup(sh, ex, rel, (size_t)n);
    if (e->err) {
        fy_exchange_fail(ex, -e->err, e->err == -404 ? "not found" : "forbidden");
        return;
    }
    if (e->is_dir) {
        redirect_dir(ex);
        return;
    }
    serve_entry(sh, ex, e, rel, (size_t)n);
}

static void destroy(fy_handler_t *h)
{
    static_handler_t *sh = (static_handler_t *)h;
    close(sh->rootfd);
    free(sh);
}

static const fy_handler_ops_t static_ops = {"static", on_request, destroy};

fy_handler_t *fy_static_handler_new(const fy_static_conf_t *conf)
{
    int fd = open(conf->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        fy_log(FY_LOG_EMERG, "static: root %s: %s", conf->root, strerror(errno));
        return NULL;
    }
    static_handler_t *sh = fy_xcalloc(1, sizeof *sh);
    sh->h.ops = &static_ops;
    sh->conf = conf;
    sh->rootfd = fd;
    sh->cache_owner = (const void *)atomic_fetch_add(&next_owner, 1);
    return &sh->h;
}
