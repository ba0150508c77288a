/* The capture store: a bounded queue, one writer thread, segment files and an index. */
#include "ops/capture_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "ops/capture_record.h"

/* ---- record format ----
 * "FYR1", u32 record length, then (little-endian, as the host writes it):
 * u64 id, i64 start_us, u32 duration_ms, u32 ttfb_ms, u32 status, u32 version, u32 stream_id,
 * u32 flags, u64 req_size, u64 res_size, u32 n_req_headers, u32 n_res_headers, then strings as
 * u32 length + bytes: method, scheme, authority, target, error, the request headers (name,
 * value)..., the response headers, the request body, the response body; then, optionally (a
 * record that ends here has none), u32 n_meta and the meta (name, value) strings. */
#define REC_MAGIC FY__CS_REC_MAGIC
#define REC_FIXED FY__CS_REC_FIXED
#define REC_MAX FY__CS_REC_MAX

/* Index strings, bump-allocated per segment: a segment's entries go with it (drop_oldest). */
typedef struct strchunk {
    struct strchunk *next;
    size_t len, cap;
    char data[];
} strchunk_t;

typedef struct seg {
    uint64_t seq;
    uint64_t size;
    int64_t newest_us;
    strchunk_t *strs; /* owned: its entries' strings */
} seg_t;

struct fy_cs {
    fy_cs_conf_t conf;
    char **redact_headers; /* owned, NULL-terminated (defaults + configured) */
    char **redact_json;    /* owned, NULL-terminated */
    fy__cs_hred_t hred;    /* redact_headers compiled */

    /* queue: the records and their counts under qspin (a submit's critical section is its
       encoding: a spin lock costs a tenth of a mutex's lock and unlock, ~57 instructions a
       flow); qlock and its conditions only for the writer's sleep, flush and close */
    atomic_bool qspin;
    pthread_mutex_t qlock;
    pthread_cond_t qcond, qdone;
    char *q; /* encoded records back to back (malloc), q_len of q_cap bytes */
    size_t q_len, q_cap;
    uint32_t (*qct)[2]; /* per queued record: its Content-Type (fy__cs_rec_encode) */
    size_t qct_cap;
    size_t qn;
    uint64_t qbytes;
    uint64_t submitted, handled; /* flush waits for handled (qlock) to reach submitted */
    bool stop;
    bool writer_idle; /* waiting on qcond with an empty queue: a submit signals it */
    int flushing;     /* fy_cs_flush callers waiting: no linger */
    pthread_t writer;

    /* index and segments (ilock) */
    pthread_mutex_t ilock;
    pthread_cond_t icond; /* a flow was added */
    fy_cs_entry_t *ents;
    size_t estart, elen, ecap; /* live entries are ents[estart..elen) */
    seg_t *segs;
    size_t nsegs, segcap;
    uint64_t bytes;
    uint64_t next_id;
    int fd; /* the open segment (the last of segs), or -1 */
    bool dir_ok;
    fy_cs_stats_t st;
    atomic_uint_fast64_t dropped_queue;
};

static inline void qspin_lock(fy_cs_t *cs)
{
    while (atomic_exchange_explicit(&cs->qspin, true, memory_order_acquire))
        while (atomic_load_explicit(&cs->qspin, memory_order_relaxed)) sched_yield();
}

static inline void qspin_unlock(fy_cs_t *cs)
{
    atomic_store_explicit(&cs->qspin, false, memory_order_release);
}

static int64_t now_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

/* ---- redaction ---- */

bool fy_cs_header_redacted(const fy_cs_t *cs, fy_str_t name)
{
    return cs->conf.redact && fy__cs_hred_match(&cs->hred, name);
}

char *fy_cs_redact_body(const fy_cs_t *cs, const char *body, size_t len, size_t *out_len)
{
    if (!cs->conf.redact) return NULL;
    return fy_cs_redact_json(body, len, (const char *const *)cs->redact_json, out_len);
}

/* ---- segments and index ---- */

static void seg_path(const fy_cs_t *cs, uint64_t seq, char *out, size_t n)
{
    snprintf(out, n, "%s/seg-%016" PRIx64 ".fys", cs->conf.dir, seq);
}

/* n bytes for index strings of segment s */
static char *seg_alloc(seg_t *s, size_t n)
{
    strchunk_t *c = s->strs;
    if (!c || c->cap - c->len < n) {
        size_t cap = n > 16000 ? n : 16000;
        c = fy_xmalloc(sizeof *c + cap);
        c->next = s->strs;
        c->len = 0;
        c->cap = cap;
        s->strs = c;
    }
    char *p = c->data + c->len;
    c->len += n;
    return p;
}

static void seg_free_strs(seg_t *s)
{
    for (strchunk_t *c = s->strs, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    s->strs = NULL;
}

/* s NUL-terminated at *at, which moves past it */
static char *put_str(char **at, fy_str_t s)
{
    char *p = *at;
    fy__cs_copy(p, s.p, s.len);
    p[s.len] = 0;
    *at += s.len + 1;
    return p;
}

/* Index the record rec[0..len) at off in segment s (ilock held, or before the writer runs).
   ct: NULL for a record read back (-EIO when it is not a valid one), or the Content-Type
   position fy__cs_rec_encode gave for one the store encoded. */
static int index_add(fy_cs_t *cs, seg_t *s, const char *rec, uint64_t off, uint32_t len,
                     const uint32_t *ct)
{
    if (cs->elen == cs->ecap) {
        if (cs->estart > cs->elen / 2) {
            memmove(cs->ents, cs->ents + cs->estart, (cs->elen - cs->estart) * sizeof *cs->ents);
            cs->elen -= cs->estart;
            cs->estart = 0;
        } else {
            /* 2,048 entries (~230 KB) is above malloc's mmap threshold: a growth is an
               mremap, not a copy of the index (callgrind: ~100 instructions a flow when the
               bench crossed 1,024 entries) */
            cs->ecap = cs->ecap ? cs->ecap * 2 : 2048;
            cs->ents = fy_xrealloc(cs->ents, cs->ecap * sizeof *cs->ents);
        }
    }
    fy_cs_entry_t *e = &cs->ents[cs->elen];
    fy_str_t str[4];
    if (ct)
        fy__cs_rec_index_encoded(rec, ct, e, str);
    else if (fy__cs_rec_index(rec, len, e, str) < 0)
        return -EIO;
    cs->elen++;
    /* one bump allocation per entry from its segment's strings (was four mallocs). Method,
       authority and target lie in the record in that order, between length prefixes (and the
       scheme): they are copied as one run, each ended by a NUL over the prefix after it. */
    size_t run = (size_t)(str[2].p + str[2].len - str[0].p);
    char *at = seg_alloc(s, run + 1 + str[3].len + 1);
    fy__cs_copy(at, str[0].p, run);
    e->method = at;
    e->host = at + (str[1].p - str[0].p);
    e->target = at + (str[2].p - str[0].p);
    e->method[str[0].len] = 0;
    e->host[str[1].len] = 0;
    e->target[str[2].len] = 0;
    at += run + 1;
    e->ctype = put_str(&at, str[3]);
    e->seg = s->seq;
    e->off = off;
    e->len = len;
    if (e->start_us > s->newest_us) s->newest_us = e->start_us;
    cs->st.flows++;
    cs->st.last_id = e->id;
    return 0;
}

/* Delete the oldest segment and its entries (ilock held). */
static void drop_oldest(fy_cs_t *cs)
{
    seg_t s = cs->segs[0];
    char path[4096];
    seg_path(cs, s.seq, path, sizeof path);
    unlink(path);
    memmove(cs->segs, cs->segs + 1, (cs->nsegs - 1) * sizeof *cs->segs);
    cs->nsegs--;
    cs->bytes -= s.size;
    while (cs->estart < cs->elen && cs->ents[cs->estart].seg == s.seq) {
        cs->estart++;
        cs->st.flows--;
        cs->st.deleted++;
    }
    seg_free_strs(&s); /* after its entries: their strings are in it */
    if (cs->nsegs == 0 && cs->fd >= 0) {
        close(cs->fd);
        cs->fd = -1;
    }
}

static void enforce_bounds(fy_cs_t *cs)
{
    int64_t now = now_us();
    while (cs->nsegs > 1 && cs->bytes > cs->conf.max_size) drop_oldest(cs);
    while (cs->nsegs > 1 && cs->conf.max_age_ms &&
           cs->segs[0].newest_us < now - (int64_t)cs->conf.max_age_ms * 1000)
        drop_oldest(cs);
}

void fy_cs_loaded_free(fy_cs_loaded_t *l)
{
    free(l->buf);
    free(l->hdrs);
    free(l->meta);
    memset(l, 0, sizeof *l);
}

static int read_record(const fy_cs_t *cs, uint64_t seg, uint64_t off, uint32_t len,
                       fy_cs_loaded_t *out)
{
    char path[4096];
    seg_path(cs, seg, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? -ENOENT : -EIO;
    char *buf = fy_xmalloc(len ? len : 1);
    ssize_t got = pread(fd, buf, len, (off_t)off);
    close(fd);
    if (got != (ssize_t)len || fy__cs_rec_decode(buf, len, out) < 0) {
        free(buf);
        return -EIO;
    }
    return 0;
}

/* Rebuild the index from the directory's segments (at open, before the writer runs). */
static void rebuild(fy_cs_t *cs)
{
    DIR *d = opendir(cs->conf.dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        uint64_t seq;
        char tail[8];
        if (sscanf(de->d_name, "seg-%16" SCNx64 ".%4s", &seq, tail) != 2 || strcmp(tail, "fys"))
            continue;
        if (cs->nsegs == cs->segcap) {
            cs->segcap = cs->segcap ? cs->segcap * 2 : 16;
            cs->segs = fy_xrealloc(cs->segs, cs->segcap * sizeof *cs->segs);
        }
        cs->segs[cs->nsegs++] = (seg_t){.seq = seq};
    }
    closedir(d);
    /* sort by sequence (insertion sort: a few hundred segments at most) */
    for (size_t i = 1; i < cs->nsegs; i++)
        for (size_t j = i; j > 0 && cs->segs[j - 1].seq > cs->segs[j].seq; j--) {
            seg_t t = cs->segs[j];
            cs->segs[j] = cs->segs[j - 1];
            cs->segs[j - 1] = t;
        }
    char *buf = NULL; /* one record at a time, indexed in place */
    size_t bufcap = 0;
    for (size_t s = 0; s < cs->nsegs; s++) {
        char path[4096];
        seg_path(cs, cs->segs[s].seq, path, sizeof path);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat sb;
        if (fstat(fd, &sb) == 0) cs->segs[s].size = (uint64_t)sb.st_size;
        cs->bytes += cs->segs[s].size;
        uint64_t off = 0;
        for (;;) {
            char h[8];
            if (pread(fd, h, 8, (off_t)off) != 8 || memcmp(h, REC_MAGIC, 4) != 0) break;
            uint32_t len;
            memcpy(&len, h + 4, 4);
            if (len < 8 + REC_FIXED || len > REC_MAX || off + len > cs->segs[s].size) break;
            if (len > bufcap) {
                bufcap = len;
                buf = fy_xrealloc(buf, bufcap);
            }
            if (pread(fd, buf, len, (off_t)off) != (ssize_t)len ||
                index_add(cs, &cs->segs[s], buf, off, len, NULL) < 0)
                break;
            off += len;
        }
        close(fd);
    }
    free(buf);
    for (size_t i = cs->estart; i < cs->elen; i++)
        if (cs->ents[i].id >= cs->next_id) cs->next_id = cs->ents[i].id + 1;
    cs->st.flows = cs->elen - cs->estart;
}

/* ---- the writer ---- */

/* A text WebSocket message (FY_CS_META_WS, opcode 1) with its JSON members redacted: a new
   value (malloc) of *len bytes, or NULL when nothing changed. */
static char *redact_ws(fy_cs_t *cs, fy_cs_header_t m, size_t *len)
{
    if (m.name.len != 2 || memcmp(m.name.p, FY_CS_META_WS, 2) != 0 || m.value.len < 4 ||
        m.value.p[1] != '1' ||
        (m.value.p[2] != '0' && m.value.p[2] != '1' && m.value.p[2] != '6' && m.value.p[2] != '7'))
        return NULL;
    const char *colon = memchr(m.value.p, ':', m.value.len);
    if (!colon) return NULL;
    size_t head = (size_t)(colon + 1 - m.value.p), rl = 0;
    char *r =
        fy_cs_redact_json(colon + 1, m.value.len - head, (const char *const *)cs->redact_json, &rl);
    if (!r) return NULL;
    char *v = fy_xmalloc(head + rl + 1);
    memcpy(v, m.value.p, head);
    memcpy(v + head, r, rl);
    *len = head + rl;
    free(r);
    return v;
}

/* mkdir -p (0700); 0 or -errno */
static int mkdirs(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0700) < 0 && errno != EEXIST) return -errno;
        *s = '/';
    }
    if (mkdir(p, 0700) < 0 && errno != EEXIST) return -errno;
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : -ENOTDIR;
}

static int open_segment(fy_cs_t *cs)
{
    if (!cs->dir_ok) {
        int e = mkdirs(cs->conf.dir);
        if (e < 0) return e;
        cs->dir_ok = true;
    }
    uint64_t seq = cs->nsegs ? cs->segs[cs->nsegs - 1].seq + 1 : 1;
    char path[4096];
    seg_path(cs, seq, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        cs->dir_ok = false; /* maybe the directory went: create it again next time */
        return -e;
    }
    if (cs->nsegs == cs->segcap) {
        cs->segcap = cs->segcap ? cs->segcap * 2 : 16;
        cs->segs = fy_xrealloc(cs->segs, cs->segcap * sizeof *cs->segs);
    }
    cs->segs[cs->nsegs++] = (seg_t){.seq = seq};
    cs->st.segments = cs->nsegs;
    cs->fd = fd;
    return 0;
}

static void log_drop(fy_cs_t *cs, int err)
{
    static int64_t last_log;
    int64_t now = now_us();
    if (now - last_log > 10 * 1000000) { /* once per 10 s at most */
        last_log = now;
        fy_error("inspector: store %s: %s (flows are dropped and counted)", cs->conf.dir,
                 strerror(-err));
    }
}

/* Append the records q[0..len) (n of them) with as few writes as segments allow (one per
 * segment touched), then index them. A failed write drops its records and counts them.
 * *offs: the writer's scratch array of record offsets. */
static void write_batch(fy_cs_t *cs, const char *q, const uint32_t (*ct)[2], size_t n,
                        size_t **offs, size_t *offcap)
{
    if (n + 1 > *offcap) {
        *offcap = n + 1 > 2 * *offcap ? n + 1 : 2 * *offcap;
        *offs = fy_xrealloc(*offs, *offcap * sizeof **offs);
    }
    size_t *o = *offs, at = 0;
    for (size_t i = 0; i < n; i++) {
        o[i] = at;
        uint32_t rl;
        memcpy(&rl, q + at + 4, 4);
        at += rl;
    }
    o[n] = at;
    pthread_mutex_lock(&cs->ilock);
    size_t i = 0;
    while (i < n) {
        size_t first = o[i + 1] - o[i];
        if (cs->fd >= 0 && cs->segs[cs->nsegs - 1].size &&
            cs->segs[cs->nsegs - 1].size + first > cs->conf.segment_size) {
            close(cs->fd);
            cs->fd = -1;
        }
        int err = cs->fd < 0 ? open_segment(cs) : 0;
        if (err) {
            cs->st.dropped_write += n - i;
            log_drop(cs, err);
            break;
        }
        seg_t *s = &cs->segs[cs->nsegs - 1];
        size_t j = i + 1;
        while (j < n && s->size + (o[j + 1] - o[i]) <= cs->conf.segment_size) j++;
        size_t wl = o[j] - o[i];
        ssize_t w = write(cs->fd, q + o[i], wl);
        if (w == (ssize_t)wl) {
            for (size_t k = i; k < j; k++)
                index_add(cs, s, q + o[k], s->size + (o[k] - o[i]), (uint32_t)(o[k + 1] - o[k]),
                          ct[k]);
            s->size += wl;
            cs->bytes += wl;
            cs->st.stored += j - i;
        } else {
            err = w < 0 ? -errno : -ENOSPC;
            if (w > 0 && ftruncate(cs->fd, (off_t)s->size) < 0) { /* the torn record stays */
            }
            close(cs->fd); /* the next batch tries a new segment */
            cs->fd = -1;
            cs->st.dropped_write += j - i;
            log_drop(cs, err);
        }
        i = j;
    }
    enforce_bounds(cs);
    pthread_cond_broadcast(&cs->icond);
    pthread_mutex_unlock(&cs->ilock);
}

#define BATCH_LINGER 256    /* fewer flows queued than this: linger after a wake-up */
#define LINGER_NS 2000000   /* after a wake-up, let a few more flows arrive (2 ms) */
#define KEEP_BUF (4u << 20) /* a queue buffer larger than this is freed once written */

static void *writer_main(void *arg)
{
    fy_cs_t *cs = arg;
    char *w = NULL; /* the writer's half of the double buffer */
    uint32_t(*wct)[2] = NULL;
    size_t wcap = 0, wct_cap = 0, *offs = NULL, offcap = 0;
    pthread_mutex_lock(&cs->qlock);
    for (;;) {
        for (;;) {
            /* idle is set under qspin while qlock is held: a submit that sees it takes qlock
               to signal, so it cannot signal before this thread waits */
            qspin_lock(cs);
            bool empty = !cs->qn && !cs->stop;
            if (empty) cs->writer_idle = true;
            qspin_unlock(cs);
            if (!empty) break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&cs->qcond, &cs->qlock, &ts);
            qspin_lock(cs);
            cs->writer_idle = false;
            size_t qn = cs->qn;
            bool stop = cs->stop;
            qspin_unlock(cs);
            if (!qn) { /* idle: the age bound still applies */
                pthread_mutex_unlock(&cs->qlock);
                pthread_mutex_lock(&cs->ilock);
                enforce_bounds(cs);
                pthread_mutex_unlock(&cs->ilock);
                pthread_mutex_lock(&cs->qlock);
            } else if (!stop && !cs->flushing && qn < BATCH_LINGER) {
                pthread_mutex_unlock(&cs->qlock);
                struct timespec l = {0, LINGER_NS};
                nanosleep(&l, NULL);
                pthread_mutex_lock(&cs->qlock);
            }
        }
        qspin_lock(cs);
        if (!cs->qn) { /* stopping and empty */
            qspin_unlock(cs);
            break;
        }
        /* take the whole queue: swap buffers, so submitters never wait for the disk */
        char *q = cs->q;
        uint32_t(*ct)[2] = cs->qct;
        size_t n = cs->qn, cap = cs->q_cap, ct_cap = cs->qct_cap;
        cs->q = w;
        cs->q_cap = wcap;
        cs->qct = wct;
        cs->qct_cap = wct_cap;
        cs->q_len = 0;
        cs->qn = 0;
        cs->qbytes = 0;
        qspin_unlock(cs);
        pthread_mutex_unlock(&cs->qlock);
        write_batch(cs, q, (const uint32_t(*)[2])ct, n, &offs, &offcap);
        if (cap > KEEP_BUF) {
            free(q);
            q = NULL;
            cap = 0;
            free(ct);
            ct = NULL;
            ct_cap = 0;
        }
        w = q;
        wcap = cap;
        wct = ct;
        wct_cap = ct_cap;
        pthread_mutex_lock(&cs->qlock);
        cs->handled += n;
        pthread_cond_broadcast(&cs->qdone);
    }
    pthread_mutex_unlock(&cs->qlock);
    free(w);
    free(wct);
    free(offs);
    return NULL;
}

/* ---- submit ---- */

/* The WebSocket text messages of f redacted (NULL when none changed; else n_meta values, the
   changed ones malloc'd: free them with free_meta). */
static fy_str_t *redact_meta(fy_cs_t *cs, const fy_cs_flow_t *f)
{
    fy_str_t *v = NULL;
    for (size_t i = 0; i < f->n_meta; i++) {
        size_t rl = 0;
        char *r = redact_ws(cs, f->meta[i], &rl);
        if (!r) continue;
        if (!v) {
            v = fy_xmalloc(f->n_meta * sizeof *v);
            for (size_t k = 0; k < f->n_meta; k++) v[k] = FY_STR_NULL;
        }
        v[i] = fy_str(r, rl);
    }
    for (size_t i = 0; v && i < f->n_meta; i++)
        if (!v[i].p) v[i] = f->meta[i].value;
    return v;
}

static void free_meta(const fy_cs_flow_t *f, fy_str_t *v)
{
    for (size_t i = 0; v && i < f->n_meta; i++)
        if (v[i].p != f->meta[i].value.p) free((char *)v[i].p);
    free(v);
}

int fy_cs_submit(fy_cs_t *cs, const fy_cs_flow_t *f)
{
    fy__cs_rec_edit_t e = {.flags = f->flags, .hred = cs->conf.redact ? &cs->hred : NULL};
    uint64_t cap = cs->conf.body_cap;
    e.req_body = fy_str(f->req_body.p, f->req_body.len > cap ? cap : f->req_body.len);
    e.res_body = fy_str(f->res_body.p, f->res_body.len > cap ? cap : f->res_body.len);
    if (f->req_body.len > cap) e.flags |= FY_CS_REQ_TRUNCATED;
    if (f->res_body.len > cap) e.flags |= FY_CS_RES_TRUNCATED;
    char *rq = NULL, *rs = NULL;
    fy_str_t *mv = NULL;
    if (cs->conf.redact && cs->redact_json[0]) {
        const char *const *names = (const char *const *)cs->redact_json;
        size_t rl = 0;
        if ((rq = fy_cs_redact_json(e.req_body.p, e.req_body.len, names, &rl)))
            e.req_body = fy_str(rq, rl);
        if ((rs = fy_cs_redact_json(e.res_body.p, e.res_body.len, names, &rl)))
            e.res_body = fy_str(rs, rl);
        mv = f->n_meta ? redact_meta(cs, f) : NULL;
        e.meta_values = mv;
    }
    int r = -1;
    bool wake = false;
    qspin_lock(cs);
    if (!cs->stop && cs->qn < cs->conf.max_queue && cs->qbytes < cs->conf.max_queue_bytes) {
        if (cs->qn == cs->qct_cap) {
            size_t nc = cs->qct_cap ? cs->qct_cap * 2 : 256;
            void *nq = realloc(cs->qct, nc * sizeof *cs->qct);
            if (nq) {
                cs->qct = nq;
                cs->qct_cap = nc;
            }
        }
        /* encoded once, in place, in one pass: a record that does not fit grows the queue
           (doubling) and is encoded again; one past max_queue_bytes is dropped */
        uint64_t lim = cs->conf.max_queue_bytes - cs->qbytes;
        size_t n = 0;
        while (cs->qn < cs->qct_cap) {
            size_t room = cs->q_cap - cs->q_len;
            if (room > lim) room = (size_t)lim;
            /* ids are given in queue order, under qspin (the id is taken only when stored) */
            n = cs->q ? fy__cs_rec_encode(cs->q + cs->q_len, room, f, &e, cs->next_id,
                                          cs->qct[cs->qn])
                      : 0;
            if (n || room == lim) break;
            size_t nc = cs->q_cap ? cs->q_cap * 2 : 64 * 1024;
            char *nq = realloc(cs->q, nc);
            if (!nq) break;
            cs->q = nq;
            cs->q_cap = nc;
        }
        if (n) {
            cs->next_id++;
            cs->q_len += n;
            cs->qn++;
            cs->qbytes += n;
            cs->submitted++;
            r = 0;
            wake = cs->writer_idle; /* one wake-up per batch, not per flow */
            cs->writer_idle = false;
        }
    }
    qspin_unlock(cs);
    if (wake) {
        pthread_mutex_lock(&cs->qlock);
        pthread_cond_signal(&cs->qcond);
        pthread_mutex_unlock(&cs->qlock);
    }
    if (r < 0) atomic_fetch_add_explicit(&cs->dropped_queue, 1, memory_order_relaxed);
    free(rq);
    free(rs);
    free_meta(f, mv);
    return r;
}

void fy_cs_flush(fy_cs_t *cs)
{
    pthread_mutex_lock(&cs->qlock);
    qspin_lock(cs);
    uint64_t target = cs->submitted;
    qspin_unlock(cs);
    cs->flushing++;
    pthread_cond_signal(&cs->qcond);
    while (cs->handled < target) pthread_cond_wait(&cs->qdone, &cs->qlock);
    cs->flushing--;
    pthread_mutex_unlock(&cs->qlock);
}

void fy_cs_stats(fy_cs_t *cs, fy_cs_stats_t *out)
{
    pthread_mutex_lock(&cs->ilock);
    *out = cs->st;
    out->bytes = cs->bytes;
    out->segments = cs->nsegs;
    out->flows = cs->elen - cs->estart;
    pthread_mutex_unlock(&cs->ilock);
    qspin_lock(cs);
    out->queued = cs->qn;
    qspin_unlock(cs);
    out->dropped_queue = atomic_load_explicit(&cs->dropped_queue, memory_order_relaxed);
}

/* ---- reading ---- */

static fy_cs_entry_t *find(fy_cs_t *cs, uint64_t id)
{
    size_t lo = cs->estart, hi = cs->elen;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cs->ents[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < cs->elen && cs->ents[lo].id == id ? &cs->ents[lo] : NULL;
}

void fy_cs_walk(fy_cs_t *cs, bool reverse, uint64_t from_id,
                bool (*cb)(const fy_cs_entry_t *e, void *ud), void *ud)
{
    pthread_mutex_lock(&cs->ilock);
    if (reverse) {
        for (size_t i = cs->elen; i > cs->estart; i--) {
            const fy_cs_entry_t *e = &cs->ents[i - 1];
            if (from_id && e->id >= from_id) continue;
            if (!cb(e, ud)) break;
        }
    } else {
        for (size_t i = cs->estart; i < cs->elen; i++) {
            const fy_cs_entry_t *e = &cs->ents[i];
            if (e->id <= from_id) continue;
            if (!cb(e, ud)) break;
        }
    }
    pthread_mutex_unlock(&cs->ilock);
}

int fy_cs_load_entry(fy_cs_t *cs, const fy_cs_entry_t *e, fy_cs_loaded_t *out)
{
    return read_record(cs, e->seg, e->off, e->len, out);
}

int fy_cs_load(fy_cs_t *cs, uint64_t id, fy_cs_loaded_t *out)
{
    pthread_mutex_lock(&cs->ilock);
    fy_cs_entry_t *e = find(cs, id);
    int r = e ? read_record(cs, e->seg, e->off, e->len, out) : -ENOENT;
    pthread_mutex_unlock(&cs->ilock);
    return r;
}

bool fy_cs_wait_newer(fy_cs_t *cs, uint64_t after_id, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&cs->ilock);
    while (cs->st.last_id <= after_id)
        if (pthread_cond_timedwait(&cs->icond, &cs->ilock, &ts) != 0) break;
    bool r = cs->st.last_id > after_id;
    pthread_mutex_unlock(&cs->ilock);
    return r;
}

/* ---- open / close ---- */

static char **strv(const char *const *defaults, const char *const *more, bool lower)
{
    size_t n = 0, m = 0;
    while (defaults && defaults[n]) n++;
    while (more && more[m]) m++;
    char **v = fy_xcalloc(n + m + 1, sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = fy_xstrdup(defaults[i]);
    for (size_t i = 0; i < m; i++) {
        v[n + i] = fy_xstrdup(more[i]);
        for (char *p = v[n + i]; lower && *p; p++) *p = fy_lower(*p);
    }
    return v;
}

static void strv_free(char **v)
{
    for (char **p = v; p && *p; p++) free(*p);
    free(v);
}

fy_cs_t *fy_cs_open(const fy_cs_conf_t *conf)
{
    static const char *const dflt_headers[] = {"authorization", "cookie", "set-cookie",
                                               "proxy-authorization", NULL};
    fy_cs_t *cs = fy_xcalloc(1, sizeof *cs);
    cs->conf = *conf;
    cs->conf.dir = fy_xstrdup(conf->dir);
    if (!cs->conf.segment_size || cs->conf.segment_size > cs->conf.max_size / 4)
        cs->conf.segment_size = cs->conf.max_size / 4;
    if (cs->conf.segment_size < 4096) cs->conf.segment_size = 4096;
    if (!cs->conf.max_queue) cs->conf.max_queue = 1;
    if (!cs->conf.max_queue_bytes) cs->conf.max_queue_bytes = 1;
    cs->redact_headers = strv(dflt_headers, conf->redact_headers, true);
    fy__cs_hred_init(&cs->hred, (const char *const *)cs->redact_headers);
    cs->redact_json = strv(NULL, conf->redact_json, false);
    cs->conf.redact_headers = NULL;
    cs->conf.redact_json = NULL;
    pthread_mutex_init(&cs->qlock, NULL);
    pthread_mutex_init(&cs->ilock, NULL);
    pthread_cond_init(&cs->qcond, NULL);
    pthread_cond_init(&cs->qdone, NULL);
    pthread_cond_init(&cs->icond, NULL);
    cs->fd = -1;
    cs->next_id = 1;
    int e = mkdirs(cs->conf.dir);
    if (e == 0)
        cs->dir_ok = true;
    else
        fy_error("inspector: store %s: %s (flows are dropped and counted until it can be "
                 "written)",
                 cs->conf.dir, strerror(-e));
    rebuild(cs);
    enforce_bounds(cs);
    /* the server may start the store before main blocks the signals it waits for: a
       SIGTERM delivered to this thread would end the process (seen as exit -15 in tests) */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    int rc = pthread_create(&cs->writer, NULL, writer_main, cs);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        fy_cs_close(cs);
        return NULL;
    }
    return cs;
}

void fy_cs_close(fy_cs_t *cs)
{
    if (!cs) return;
    pthread_mutex_lock(&cs->qlock);
    qspin_lock(cs);
    bool started = !cs->stop;
    cs->stop = true;
    qspin_unlock(cs);
    pthread_cond_signal(&cs->qcond);
    pthread_mutex_unlock(&cs->qlock);
    if (started && cs->writer) pthread_join(cs->writer, NULL);
    free(cs->q);
    free(cs->qct);
    if (cs->fd >= 0) close(cs->fd);
    for (size_t i = 0; i < cs->nsegs; i++) seg_free_strs(&cs->segs[i]);
    free(cs->ents);
    free(cs->segs);
    strv_free(cs->redact_headers);
    strv_free(cs->redact_json);
    free((char *)cs->conf.dir);
    pthread_mutex_destroy(&cs->qlock);
    pthread_mutex_destroy(&cs->ilock);
    pthread_cond_destroy(&cs->qcond);
    pthread_cond_destroy(&cs->qdone);
    pthread_cond_destroy(&cs->icond);
    free(cs);
}
