/* The cache's disk tier (policy/cache_disk.h). */
#include "policy/cache_disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "policy/cache_key.h"
#include "policy/cache_store.h"

#define NBUCKETS 4096
#define TMP_PREFIX ".fyc-tmp-"

/* The file: this head, then key, tags, vary names, vary key, nhdrs (u32 name length, u32 value
   length) pairs, the header bytes, the body. `sum` covers every byte after itself. */
typedef struct fhdr {
    char magic[8];
    uint64_t sum;
    uint64_t hash, body_len;
    int64_t lifetime, swr, sie, age_value, date, request_time, response_time, content_length;
    uint32_t keylen, taglen, vnlen, vklen, nhdrs, hdrbytes;
    int32_t status;
    uint8_t no_cache, never_stale, pad[2];
} fhdr_t;

static const char MAGIC[8] = {'F', 'Y', 'C', 'A', 'C', 'H', 'E', '1'};

typedef struct dentry {
    uint64_t hash, name, size;
    char *key, *tags, *vn, *vk; /* one allocation behind the struct */
    uint32_t keylen, taglen, vnlen, vklen;
    struct dentry *hnext, *lprev, *lnext;
} dentry_t;

enum { J_WRITE = 1, J_UNLINK, J_LOAD };

typedef struct job {
    int type;
    fy_cache_obj_t *obj; /* ref (write, load) */
    uint64_t name;
} job_t;

typedef struct jqueue {
    job_t *v;
    unsigned cap, head, n;
    bool busy; /* the thread is working on a job it took */
    pthread_cond_t cv, idle;
    pthread_t th;
} jqueue_t;

struct fy_cache_disk {
    char *dir;
    int dfd;
    fy_cache_zone_t *zone; /* borrowed */
    pthread_mutex_t mu;    /* index, counters, both queues */
    dentry_t *buckets[NBUCKETS];
    dentry_t lru; /* sentinel: lru.lnext the most recent */
    uint64_t bytes, max, count;
    fy_cache_disk_stats_t st;
    jqueue_t wq, rq;
    bool stopping;
};

/* ---- index (under mu) ---- */

static void lru_unlink(dentry_t *e)
{
    e->lprev->lnext = e->lnext;
    e->lnext->lprev = e->lprev;
}

static void lru_front(fy_cache_disk_t *d, dentry_t *e)
{
    e->lnext = d->lru.lnext;
    e->lprev = &d->lru;
    d->lru.lnext->lprev = e;
    d->lru.lnext = e;
}

static void index_remove(fy_cache_disk_t *d, dentry_t *e)
{
    dentry_t **p = &d->buckets[e->hash % NBUCKETS];
    while (*p && *p != e) p = &(*p)->hnext;
    if (*p) *p = e->hnext;
    lru_unlink(e);
    d->bytes -= e->size;
    d->count--;
    free(e);
}

static dentry_t *index_by_name(fy_cache_disk_t *d, uint64_t hash, uint64_t name)
{
    for (dentry_t *e = d->buckets[hash % NBUCKETS]; e; e = e->hnext)
        if (e->name == name) return e;
    return NULL;
}

/* Insert (replacing the entry of the same name); the caller evicts past the bound. */
static void index_add(fy_cache_disk_t *d, dentry_t *e, bool front)
{
    dentry_t *old = index_by_name(d, e->hash, e->name);
    if (old) index_remove(d, old);
    e->hnext = d->buckets[e->hash % NBUCKETS];
    d->buckets[e->hash % NBUCKETS] = e;
    if (front)
        lru_front(d, e);
    else { /* the scan adds oldest last */
        e->lprev = d->lru.lprev;
        e->lnext = &d->lru;
        d->lru.lprev->lnext = e;
        d->lru.lprev = e;
    }
    d->bytes += e->size;
    d->count++;
}

static dentry_t *entry_new(const fhdr_t *h, uint64_t name, uint64_t size, const char *p)
{
    size_t n = (size_t)h->keylen + h->taglen + h->vnlen + h->vklen;
    dentry_t *e = fy_xcalloc(1, sizeof *e + n + 4);
    char *w = (char *)(e + 1);
    e->hash = h->hash;
    e->name = name;
    e->size = size;
    e->keylen = h->keylen;
    e->taglen = h->taglen;
    e->vnlen = h->vnlen;
    e->vklen = h->vklen;
    e->key = w;
    memcpy(w, p, h->keylen), w += h->keylen + 1, p += h->keylen;
    e->tags = w;
    memcpy(w, p, h->taglen), w += h->taglen + 1, p += h->taglen;
    e->vn = w;
    memcpy(w, p, h->vnlen), w += h->vnlen + 1, p += h->vnlen;
    e->vk = w;
    memcpy(w, p, h->vklen);
    return e;
}

static void fname(char out[17], uint64_t name)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, name >>= 4) out[i] = hex[name & 15];
    out[16] = '\0';
}

static bool parse_name(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (x < 0) return false;
        v = v << 4 | (uint64_t)x;
    }
    *out = v;
    return s[16] == '\0' && v != 0;
}

static uint64_t payload_size(const fhdr_t *h)
{
    return (uint64_t)h->keylen + h->taglen + h->vnlen + h->vklen + (uint64_t)h->nhdrs * 8 +
           h->hdrbytes + h->body_len;
}

static bool head_ok(const fhdr_t *h, uint64_t file_size)
{
    return !memcmp(h->magic, MAGIC, 8) && h->keylen > 0 && h->keylen < (1u << 20) &&
           h->taglen < (1u << 20) && h->vnlen < (1u << 20) && h->vklen < (1u << 20) &&
           h->nhdrs < (1u << 16) && h->hdrbytes < (1u << 26) && h->body_len < ((uint64_t)1 << 40) &&
           sizeof *h + payload_size(h) == file_size;
}

/* ---- queues ---- */

static int push(fy_cache_disk_t *d, jqueue_t *q, job_t j)
{
    if (d->stopping || q->n == q->cap) return -EAGAIN;
    q->v[(q->head + q->n++) % q->cap] = j;
    pthread_cond_signal(&q->cv);
    return 0;
}

/* Under mu: wait for a job; false when stopping and nothing is left. */
static bool pop(fy_cache_disk_t *d, jqueue_t *q, job_t *j)
{
    q->busy = false;
    while (!q->n && !d->stopping) {
        pthread_cond_broadcast(&q->idle);
        pthread_cond_wait(&q->cv, &d->mu);
    }
    if (!q->n) {
        pthread_cond_broadcast(&q->idle);
        return false;
    }
    *j = q->v[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    q->busy = true;
    return true;
}

/* ---- the writer ---- */

static uint64_t name_of(const fy_cache_obj_t *o)
{
    /* the key, then the variant: one file per variant */
    uint64_t h = o->hash;
    h ^= fy_cache_hash(o->vary_names ? o->vary_names : "", o->vnlen) * 0x9e3779b97f4a7c15ull;
    h ^= fy_cache_hash(o->vary_key ? o->vary_key : "", o->vklen) * 0xc2b2ae3d27d4eb4full;
    return h ? h : 1;
}

static bool is_tag_field(fy_str_t n)
{
    return fy_str_ieq(n, "cache-tag", 9) || fy_str_ieq(n, "surrogate-key", 13);
}

/* The whole file for o in one buffer (malloc), or NULL. */
static char *serialize(const fy_cache_obj_t *o, size_t *len, fhdr_t *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, MAGIC, 8);
    h->hash = o->hash;
    h->body_len = atomic_load(&o->body_len);
    h->lifetime = o->fresh.lifetime;
    h->swr = o->fresh.swr;
    h->sie = o->fresh.sie;
    h->no_cache = o->fresh.no_cache;
    h->never_stale = o->fresh.never_stale;
    h->age_value = o->age_value;
    h->date = o->date;
    h->request_time = o->request_time;
    h->response_time = o->response_time;
    h->content_length = o->content_length;
    h->status = o->status;
    h->keylen = (uint32_t)o->keylen;
    h->vnlen = (uint32_t)o->vnlen;
    h->vklen = (uint32_t)o->vklen;
    h->nhdrs = (uint32_t)o->nhdrs;
    for (size_t i = 0; i < o->nhdrs; i++) {
        h->hdrbytes += (uint32_t)(o->hdrs[i].name.len + o->hdrs[i].value.len);
        if (is_tag_field(o->hdrs[i].name)) h->taglen += (uint32_t)o->hdrs[i].value.len + 1;
    }
    size_t total = sizeof *h + (size_t)payload_size(h);
    char *buf = malloc(total), *w = buf + sizeof *h;
    if (!buf) return NULL;
    memcpy(w, o->key, o->keylen), w += o->keylen;
    for (size_t i = 0; i < o->nhdrs; i++)
        if (is_tag_field(o->hdrs[i].name)) {
            memcpy(w, o->hdrs[i].value.p, o->hdrs[i].value.len);
            w += o->hdrs[i].value.len;
            *w++ = ' ';
        }
    if (o->vnlen) memcpy(w, o->vary_names, o->vnlen), w += o->vnlen;
    if (o->vklen) memcpy(w, o->vary_key, o->vklen), w += o->vklen;
    for (size_t i = 0; i < o->nhdrs; i++) {
        uint32_t l[2] = {(uint32_t)o->hdrs[i].name.len, (uint32_t)o->hdrs[i].value.len};
        memcpy(w, l, 8), w += 8;
    }
    for (size_t i = 0; i < o->nhdrs; i++) {
        memcpy(w, o->hdrs[i].name.p, o->hdrs[i].name.len), w += o->hdrs[i].name.len;
        memcpy(w, o->hdrs[i].value.p, o->hdrs[i].value.len), w += o->hdrs[i].value.len;
    }
    size_t off = 0, co = 0;
    const fy_cache_chunk_t *ch = NULL;
    const char *p;
    size_t k;
    while (off < h->body_len && (k = fy_cache_obj_read(o, off, &ch, &co, &p)) > 0) {
        memcpy(w + off, p, k);
        off += k;
    }
    if (off != h->body_len) {
        free(buf);
        return NULL;
    }
    memcpy(buf, h, sizeof *h);
    h->sum = fy_cache_hash(buf + 16, total - 16);
    memcpy(buf + 8, &h->sum, 8);
    *len = total;
    return buf;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -errno : -ENOSPC;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void count(fy_cache_disk_t *d, uint64_t *c)
{
    pthread_mutex_lock(&d->mu);
    (*c)++;
    pthread_mutex_unlock(&d->mu);
}

/* Under mu: drop LRU entries past the bound; their names go to `names` (up to cap). */
static size_t evict_locked(fy_cache_disk_t *d, uint64_t *names, size_t cap)
{
    size_t n = 0;
    while (d->bytes > d->max && d->lru.lprev != &d->lru && n < cap) {
        dentry_t *v = d->lru.lprev;
        names[n++] = v->name;
        index_remove(d, v);
        d->st.evictions++;
    }
    return n;
}

static void unlink_name(fy_cache_disk_t *d, uint64_t name)
{
    char fn[17];
    fname(fn, name);
    if (unlinkat(d->dfd, fn, 0) < 0 && errno != ENOENT)
        fy_warn("cache: disk %s: unlink %s: %s", d->dir, fn, strerror(errno));
}

static void do_write(fy_cache_disk_t *d, fy_cache_obj_t *o)
{
    if (atomic_load(&o->dead) || atomic_load(&o->state) != FY_CACHE_COMPLETE) {
        count(d, &d->st.write_skips);
        return;
    }
    fhdr_t h;
    size_t len;
    char *buf = serialize(o, &len, &h);
    if (!buf) {
        count(d, &d->st.write_errors);
        return;
    }
    uint64_t name = name_of(o);
    char fn[17], tmp[40];
    fname(fn, name);
    snprintf(tmp, sizeof tmp, TMP_PREFIX "%s", fn);
    int fd = openat(d->dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = fd < 0 ? -errno : write_all(fd, buf, len);
    if (fd >= 0 && close(fd) < 0 && !rc) rc = -errno;
    if (!rc && renameat(d->dfd, tmp, d->dfd, fn) < 0) rc = -errno;
    if (rc) {
        if (fd >= 0) unlinkat(d->dfd, tmp, 0);
        pthread_mutex_lock(&d->mu);
        if (!d->st.write_errors++)
            fy_warn("cache: disk %s: cannot write %s: %s (counted; traffic goes on from memory)",
                    d->dir, fn, strerror(-rc));
        pthread_mutex_unlock(&d->mu);
        free(buf);
        return;
    }
    dentry_t *e = entry_new(&h, name, len, buf + sizeof h);
    free(buf);
    uint64_t ev[64];
    size_t nev;
    pthread_mutex_lock(&d->mu);
    d->st.writes++;
    bool dead = atomic_load(&o->dead); /* invalidated while being written: not indexed */
    if (!dead) index_add(d, e, true);
    nev = evict_locked(d, ev, 64);
    pthread_mutex_unlock(&d->mu);
    if (dead) {
        free(e);
        unlinkat(d->dfd, fn, 0);
    }
    for (size_t i = 0; i < nev; i++) unlink_name(d, ev[i]);
}

static void *writer_main(void *arg)
{
    fy_cache_disk_t *d = arg;
    job_t j;
    pthread_mutex_lock(&d->mu);
    while (pop(d, &d->wq, &j)) {
        pthread_mutex_unlock(&d->mu);
        if (j.type == J_WRITE) {
            do_write(d, j.obj);
            fy_cache_obj_release(j.obj);
        } else
            unlink_name(d, j.name);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- the reader ---- */

static int read_all(int fd, char *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t r = pread(fd, p + off, n - off, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? -errno : -EIO;
        off += (size_t)r;
    }
    return 0;
}

/* A file that failed its checks: out of the index and off the disk. */
static void drop_bad(fy_cache_disk_t *d, uint64_t hash, uint64_t name, const char *why)
{
    pthread_mutex_lock(&d->mu);
    dentry_t *e = index_by_name(d, hash, name);
    if (e) index_remove(d, e);
    d->st.corrupt++;
    pthread_mutex_unlock(&d->mu);
    char fn[17];
    fname(fn, name);
    fy_warn("cache: disk %s: %s is %s: removed", d->dir, fn, why);
    unlinkat(d->dfd, fn, 0);
}

/* Fill o from file `name`: 0, or -1 (o not filled). */
static int load(fy_cache_disk_t *d, fy_cache_obj_t *o, uint64_t name)
{
    char fn[17];
    fname(fn, name);
    int fd = openat(d->dfd, fn, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1; /* evicted or purged meanwhile */
    struct stat sb;
    char *buf = NULL;
    int rc = -1;
    const char *why = "truncated";
    if (fstat(fd, &sb) < 0 || (uint64_t)sb.st_size < sizeof(fhdr_t) ||
        (uint64_t)sb.st_size > ((uint64_t)1 << 40))
        goto bad;
    buf = malloc((size_t)sb.st_size);
    if (!buf || read_all(fd, buf, (size_t)sb.st_size) < 0) goto out;
    fhdr_t h;
    memcpy(&h, buf, sizeof h);
    if (!head_ok(&h, (uint64_t)sb.st_size)) goto bad;
    why = "corrupted";
    if (fy_cache_hash(buf + 16, (size_t)sb.st_size - 16) != h.sum) goto bad;
    const char *p = buf + sizeof h;
    why = "another key's";
    if (h.hash != o->hash || h.keylen != o->keylen || memcmp(p, o->key, o->keylen)) goto bad;
    p += h.keylen + h.taglen;
    const char *vn = h.vnlen ? p : NULL, *vk = h.vnlen ? p + h.vnlen : NULL;
    p += h.vnlen + h.vklen;
    fy_headers_t hs = {0};
    hs.v = calloc(h.nhdrs ? h.nhdrs : 1, sizeof *hs.v);
    if (!hs.v) goto out;
    const char *lens = p, *hb = p + (size_t)h.nhdrs * 8;
    for (uint32_t i = 0; i < h.nhdrs; i++) {
        uint32_t l[2];
        memcpy(l, lens + (size_t)i * 8, 8);
        hs.v[i].name = fy_str(hb, l[0]);
        hs.v[i].value = fy_str(hb + l[0], l[1]);
        hb += l[0] + l[1];
    }
    hs.n = hs.cap = h.nhdrs;
    const char *body = p + (size_t)h.nhdrs * 8 + h.hdrbytes;
    o->fresh.lifetime = h.lifetime;
    o->fresh.swr = h.swr;
    o->fresh.sie = h.sie;
    o->fresh.no_cache = h.no_cache;
    o->fresh.never_stale = h.never_stale;
    o->age_value = h.age_value;
    o->date = (time_t)h.date;
    o->request_time = (time_t)h.request_time;
    o->response_time = (time_t)h.response_time;
    o->content_length = (int64_t)h.body_len; /* complete: known (and sizes the first chunk) */
    o->from_disk = true;
    rc = fy_cache_set_head(d->zone, o, h.status, &hs, vn, h.vnlen, vk, h.vklen, SIZE_MAX);
    free(hs.v);
    if (rc == 0) {
        if (h.body_len && fy_cache_append(d->zone, o, body, h.body_len, SIZE_MAX) < 0)
            rc = -1;
        else
            fy_cache_finish(d->zone, o);
    }
    goto out;
bad:
    close(fd);
    fd = -1;
    drop_bad(d, o->hash, name, why);
out:
    if (fd >= 0) close(fd);
    free(buf);
    return rc;
}

static void *reader_main(void *arg)
{
    fy_cache_disk_t *d = arg;
    job_t j;
    pthread_mutex_lock(&d->mu);
    while (pop(d, &d->rq, &j)) {
        pthread_mutex_unlock(&d->mu);
        int rc = d->stopping ? -1 : load(d, j.obj, j.name);
        pthread_mutex_lock(&d->mu);
        if (rc)
            d->st.read_errors++;
        else
            d->st.reads++;
        pthread_mutex_unlock(&d->mu);
        if (rc && atomic_load(&j.obj->state) == FY_CACHE_PENDING)
            fy_cache_abort(d->zone, j.obj, FY_CACHE_PASS); /* followers go to the origin */
        else if (rc)
            fy_cache_abort(d->zone, j.obj, FY_CACHE_ABORTED);
        fy_cache_obj_release(j.obj);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- open, scan, close ---- */

typedef struct scanned {
    dentry_t *e;
    int64_t mtime;
} scanned_t;

static int by_mtime_desc(const void *a, const void *b)
{
    const scanned_t *x = a, *y = b;
    return x->mtime < y->mtime ? 1 : x->mtime > y->mtime ? -1 : 0;
}

static int mkdirs(const char *dir)
{
    char p[4096];
    size_t n = strlen(dir);
    if (n >= sizeof p) return -ENAMETOOLONG;
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++)
        if (p[i] == '/' || p[i] == '\0') {
            char c = p[i];
            p[i] = '\0';
            if (mkdir(p, 0700) < 0 && errno != EEXIST) return -errno;
            p[i] = c;
        }
    return 0;
}

static void scan(fy_cache_disk_t *d)
{
    int fd = openat(d->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dp) {
        if (fd >= 0) close(fd);
        return;
    }
    scanned_t *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        uint64_t name;
        if (!strncmp(de->d_name, TMP_PREFIX, sizeof TMP_PREFIX - 1)) {
            unlinkat(d->dfd, de->d_name, 0); /* a write a stop cut short */
            continue;
        }
        if (!parse_name(de->d_name, &name)) continue; /* not ours: left alone */
        int f = openat(d->dfd, de->d_name, O_RDONLY | O_CLOEXEC);
        struct stat sb;
        fhdr_t h;
        bool ok = f >= 0 && fstat(f, &sb) == 0 && S_ISREG(sb.st_mode) &&
                  pread(f, &h, sizeof h, 0) == (ssize_t)sizeof h &&
                  head_ok(&h, (uint64_t)sb.st_size);
        char *meta = NULL;
        size_t ml = ok ? (size_t)h.keylen + h.taglen + h.vnlen + h.vklen : 0;
        if (ok) {
            meta = fy_xmalloc(ml + 1);
            ok = pread(f, meta, ml, sizeof h) == (ssize_t)ml;
        }
        if (f >= 0) close(f);
        if (!ok) {
            free(meta);
            d->st.corrupt++;
            fy_warn("cache: disk %s: %s is truncated or not a cache file: removed", d->dir,
                    de->d_name);
            unlinkat(d->dfd, de->d_name, 0);
            continue;
        }
        if (n == cap) v = fy_xrealloc(v, (cap = cap ? cap * 2 : 64) * sizeof *v);
        v[n].e = entry_new(&h, name, (uint64_t)sb.st_size, meta);
        v[n].mtime = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
        n++;
        free(meta);
    }
    closedir(dp);
    if (n) qsort(v, n, sizeof *v, by_mtime_desc); /* the newest first: the LRU's front */
    for (size_t i = 0; i < n; i++) index_add(d, v[i].e, false);
    free(v);
    uint64_t ev[64];
    size_t k;
    while ((k = evict_locked(d, ev, 64)) > 0)
        for (size_t i = 0; i < k; i++) unlink_name(d, ev[i]);
}

fy_cache_disk_t *fy_cache_disk_open(const char *dir, uint64_t max_bytes, unsigned queue,
                                    fy_cache_zone_t *zone)
{
    int rc = mkdirs(dir);
    int dfd = rc ? -1 : open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        fy_error("cache: disk %s: %s", dir, strerror(rc ? -rc : errno));
        return NULL;
    }
    fy_cache_disk_t *d = fy_xcalloc(1, sizeof *d);
    d->dir = fy_xstrdup(dir);
    d->dfd = dfd;
    d->zone = zone;
    d->max = max_bytes;
    d->lru.lnext = d->lru.lprev = &d->lru;
    pthread_mutex_init(&d->mu, NULL);
    scan(d);
    if (queue < 1) queue = 1;
    jqueue_t *qs[2] = {&d->wq, &d->rq};
    for (int i = 0; i < 2; i++) {
        qs[i]->cap = queue;
        qs[i]->v = fy_xcalloc(queue, sizeof(job_t));
        pthread_cond_init(&qs[i]->cv, NULL);
        pthread_cond_init(&qs[i]->idle, NULL);
    }
    pthread_create(&d->wq.th, NULL, writer_main, d);
    pthread_create(&d->rq.th, NULL, reader_main, d);
    fy_info("cache: disk %s: %llu files, %llu bytes", dir, (unsigned long long)d->count,
            (unsigned long long)d->bytes);
    return d;
}

void fy_cache_disk_close(fy_cache_disk_t *d)
{
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    pthread_cond_broadcast(&d->wq.cv);
    pthread_cond_broadcast(&d->rq.cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->wq.th, NULL);
    pthread_join(d->rq.th, NULL);
    /* writes still queued were dropped by `push` refusing; jobs left: release */
    jqueue_t *qs[2] = {&d->wq, &d->rq};
    for (int i = 0; i < 2; i++) {
        for (unsigned k = 0; k < qs[i]->n; k++) {
            job_t *j = &qs[i]->v[(qs[i]->head + k) % qs[i]->cap];
            if (j->obj) fy_cache_obj_release(j->obj);
        }
        free(qs[i]->v);
        pthread_cond_destroy(&qs[i]->cv);
        pthread_cond_destroy(&qs[i]->idle);
    }
    while (d->lru.lnext != &d->lru) index_remove(d, d->lru.lnext);
    pthread_mutex_destroy(&d->mu);
    close(d->dfd);
    free(d->dir);
    free(d);
}

const char *fy_cache_disk_dir(const fy_cache_disk_t *d)
{
    return d->dir;
}

void fy_cache_disk_set_max(fy_cache_disk_t *d, uint64_t max_bytes)
{
    pthread_mutex_lock(&d->mu);
    d->max = max_bytes;
    pthread_mutex_unlock(&d->mu);
}

/* ---- the workers' calls ---- */

int fy_cache_disk_store(fy_cache_disk_t *d, fy_cache_obj_t *o)
{
    fy_cache_obj_ref(o);
    pthread_mutex_lock(&d->mu);
    int rc = push(d, &d->wq, (job_t){J_WRITE, o, 0});
    if (rc) d->st.write_drops++;
    pthread_mutex_unlock(&d->mu);
    if (rc) fy_cache_obj_release(o);
    return rc;
}

uint64_t fy_cache_disk_find(fy_cache_disk_t *d, uint64_t hash, const char *key, size_t keylen,
                            const fy_headers_t *req_headers, fy_arena_t *a)
{
    uint64_t name = 0;
    pthread_mutex_lock(&d->mu);
    for (dentry_t *e = d->buckets[hash % NBUCKETS]; e && !name; e = e->hnext) {
        if (e->hash != hash || e->keylen != keylen || memcmp(e->key, key, keylen)) continue;
        if (e->vnlen) {
            if (e->vnlen == 1 && e->vn[0] == '*') continue;
            size_t l;
            char *k = fy_cache_vary_key(a, req_headers, e->vn, e->vnlen, &l);
            if (l != e->vklen || memcmp(k, e->vk, l)) continue;
        }
        name = e->name;
        lru_unlink(e);
        lru_front(d, e);
    }
    pthread_mutex_unlock(&d->mu);
    return name;
}

int fy_cache_disk_load(fy_cache_disk_t *d, fy_cache_obj_t *o, uint64_t name)
{
    fy_cache_obj_ref(o);
    pthread_mutex_lock(&d->mu);
    int rc = push(d, &d->rq, (job_t){J_LOAD, o, name});
    if (rc) d->st.read_drops++;
    pthread_mutex_unlock(&d->mu);
    if (rc) fy_cache_obj_release(o);
    return rc;
}

static bool tag_listed(const dentry_t *e, const char *tag, size_t tlen)
{
    const char *p = e->tags, *end = p + e->taglen;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == ',' || *p == '\t')) p++;
        const char *s = p;
        while (p < end && *p != ' ' && *p != ',' && *p != '\t') p++;
        if ((size_t)(p - s) == tlen && memcmp(s, tag, tlen) == 0) return true;
    }
    return false;
}

/* Remove matching entries and queue their unlinks. */
static size_t remove_if(fy_cache_disk_t *d, uint64_t hash, const char *key, size_t keylen,
                        const char *prefix, size_t plen, const char *tag, size_t tlen)
{
    size_t n = 0;
    uint64_t sync[64];
    size_t ns = 0;
    pthread_mutex_lock(&d->mu);
    dentry_t *e = key ? d->buckets[hash % NBUCKETS] : d->lru.lnext;
    while (e && e != &d->lru) {
        dentry_t *nx = key ? e->hnext : e->lnext;
        bool hit = key      ? e->hash == hash && e->keylen == keylen && !memcmp(e->key, key, keylen)
                   : prefix ? e->keylen >= plen && !memcmp(e->key, prefix, plen)
                            : tag_listed(e, tag, tlen);
        if (hit) {
            uint64_t name = e->name;
            index_remove(d, e);
            d->st.removed++;
            n++;
            if (push(d, &d->wq, (job_t){J_UNLINK, NULL, name}) < 0 && ns < 64) sync[ns++] = name;
        }
        e = nx;
    }
    pthread_mutex_unlock(&d->mu);
    for (size_t i = 0; i < ns; i++) unlink_name(d, sync[i]); /* the queue was full */
    return n;
}

size_t fy_cache_disk_remove_key(fy_cache_disk_t *d, uint64_t hash, const char *key, size_t keylen)
{
    return remove_if(d, hash, key, keylen, NULL, 0, NULL, 0);
}

size_t fy_cache_disk_remove_prefix(fy_cache_disk_t *d, const char *prefix, size_t plen)
{
    return remove_if(d, 0, NULL, 0, prefix, plen, NULL, 0);
}

size_t fy_cache_disk_remove_tag(fy_cache_disk_t *d, const char *tag, size_t tlen)
{
    return remove_if(d, 0, NULL, 0, NULL, 0, tag, tlen);
}

void fy_cache_disk_stats(fy_cache_disk_t *d, fy_cache_disk_stats_t *out)
{
    pthread_mutex_lock(&d->mu);
    *out = d->st;
    out->entries = d->count;
    out->bytes = d->bytes;
    out->max_bytes = d->max;
    pthread_mutex_unlock(&d->mu);
}

void fy_cache_disk_drain(fy_cache_disk_t *d)
{
    pthread_mutex_lock(&d->mu);
    while ((d->wq.n || d->wq.busy || d->rq.n || d->rq.busy) && !d->stopping) {
        jqueue_t *q = d->wq.n || d->wq.busy ? &d->wq : &d->rq;
        pthread_cond_wait(&q->idle, &d->mu);
    }
    pthread_mutex_unlock(&d->mu);
}
