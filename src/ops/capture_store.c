/* The capture store: a bounded queue, one writer thread, segment files and an index. */
#include "ops/capture_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
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

/* ---- record format ----
 * "FYR1", u32 record length, then (little-endian, as the host writes it):
 * u64 id, i64 start_us, u32 duration_ms, u32 ttfb_ms, u32 status, u32 version, u32 stream_id,
 * u32 flags, u64 req_size, u64 res_size, u32 n_req_headers, u32 n_res_headers, then strings as
 * u32 length + bytes: method, scheme, authority, target, error, the request headers (name,
 * value)..., the response headers, the request body, the response body; then, optionally (a
 * record that ends here has none), u32 n_meta and the meta (name, value) strings. */
#define REC_MAGIC "FYR1"
#define REC_FIXED (8 + 8 + 8 + 4 * 6 + 8 + 8 + 4 + 4)
#define REC_MAX (256u << 20) /* a record longer than this is corrupt */

typedef struct qitem {
    struct qitem *next;
    size_t bytes;
    fy_cs_flow_t f; /* strings point into the same allocation */
} qitem_t;

typedef struct seg {
    uint64_t seq;
    uint64_t size;
    int64_t newest_us;
} seg_t;

struct fy_cs {
    fy_cs_conf_t conf;
    char **redact_headers; /* owned, NULL-terminated (defaults + configured) */
    char **redact_json;    /* owned, NULL-terminated */

    /* queue (qlock) */
    pthread_mutex_t qlock;
    pthread_cond_t qcond, qdone;
    qitem_t *qhead, **qtail;
    size_t qn;
    uint64_t qbytes;
    uint64_t submitted, handled; /* flush waits for handled to reach submitted */
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

/* ---- small buffers ---- */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf_t;

static void bgrow(buf_t *b, size_t n)
{
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n) cap *= 2;
    b->p = fy_xrealloc(b->p, cap);
    b->cap = cap;
}

/* Inline with a constant-size copy for the fixed fields: the record's fifty-odd appends were
   the writer's largest cost per flow (callgrind, bench/policy_cost.py capture row). */
static inline void bput(buf_t *b, const void *p, size_t n)
{
    if (__builtin_expect(b->len + n > b->cap, 0)) bgrow(b, n);
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
}

static inline void bu32(buf_t *b, uint32_t v)
{
    if (__builtin_expect(b->len + 4 > b->cap, 0)) bgrow(b, 4);
    memcpy(b->p + b->len, &v, 4);
    b->len += 4;
}

static inline void bu64(buf_t *b, uint64_t v)
{
    if (__builtin_expect(b->len + 8 > b->cap, 0)) bgrow(b, 8);
    memcpy(b->p + b->len, &v, 8);
    b->len += 8;
}

static inline __attribute__((always_inline)) void bstr(buf_t *b, fy_str_t s)
{
    bu32(b, (uint32_t)s.len);
    bput(b, s.p, s.len);
}

static int64_t now_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

/* ---- redaction ---- */

static bool ieq(fy_str_t a, const char *lower)
{
    size_t n = strlen(lower);
    if (a.len != n) return false;
    for (size_t i = 0; i < n; i++)
        if (fy_lower(a.p[i]) != lower[i]) return false;
    return true;
}

bool fy_cs_header_redacted(const fy_cs_t *cs, fy_str_t name)
{
    if (!cs->conf.redact) return false;
    for (char **h = cs->redact_headers; *h; h++)
        if (ieq(name, *h)) return true;
    return false;
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

static void entry_free(fy_cs_entry_t *e)
{
    free(e->method); /* one block: the other strings follow it (index_add) */
}

/* s NUL-terminated at *at, which moves past it */
static char *put_str(char **at, fy_str_t s)
{
    char *p = *at;
    if (s.len) memcpy(p, s.p, s.len);
    p[s.len] = 0;
    *at += s.len + 1;
    return p;
}

static void index_add(fy_cs_t *cs, const fy_cs_flow_t *f, uint64_t seg, uint64_t off, uint32_t len)
{
    if (cs->elen == cs->ecap) {
        if (cs->estart > cs->elen / 2) {
            memmove(cs->ents, cs->ents + cs->estart, (cs->elen - cs->estart) * sizeof *cs->ents);
            cs->elen -= cs->estart;
            cs->estart = 0;
        } else {
            cs->ecap = cs->ecap ? cs->ecap * 2 : 1024;
            cs->ents = fy_xrealloc(cs->ents, cs->ecap * sizeof *cs->ents);
        }
    }
    fy_cs_entry_t *e = &cs->ents[cs->elen++];
    memset(e, 0, sizeof *e);
    e->id = f->id;
    e->start_us = f->start_us;
    e->duration_ms = f->duration_ms;
    e->status = f->status;
    e->version = f->version;
    e->stream_id = f->stream_id;
    e->flags = f->flags;
    e->req_size = f->req_size;
    e->res_size = f->res_size;
    fy_str_t ct = FY_STR_LIT("");
    for (size_t i = 0; i < f->n_res_headers; i++)
        if (f->res_headers[i].name.len == 12 && ieq(f->res_headers[i].name, "content-type")) {
            ct = f->res_headers[i].value;
            break;
        }
    /* one allocation per entry (was four: a tenth of the writer's work per flow) */
    char *at = fy_xmalloc(f->method.len + f->authority.len + f->target.len + ct.len + 4);
    e->method = put_str(&at, f->method);
    e->host = put_str(&at, f->authority);
    e->target = put_str(&at, f->target);
    e->ctype = put_str(&at, ct);
    e->seg = seg;
    e->off = off;
    e->len = len;
    cs->st.flows++;
    cs->st.last_id = f->id;
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
        entry_free(&cs->ents[cs->estart++]);
        cs->st.flows--;
        cs->st.deleted++;
    }
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

/* ---- decoding ---- */

typedef struct rd {
    const char *p;
    size_t n, i;
    bool bad;
} rd_t;

static uint32_t ru32(rd_t *r)
{
    uint32_t v = 0;
    if (r->i + 4 > r->n) {
        r->bad = true;
        return 0;
    }
    memcpy(&v, r->p + r->i, 4);
    r->i += 4;
    return v;
}

static uint64_t ru64(rd_t *r)
{
    uint64_t v = 0;
    if (r->i + 8 > r->n) {
        r->bad = true;
        return 0;
    }
    memcpy(&v, r->p + r->i, 8);
    r->i += 8;
    return v;
}

static fy_str_t rstr(rd_t *r)
{
    uint32_t n = ru32(r);
    if (r->bad || n > r->n - r->i) {
        r->bad = true;
        return FY_STR_LIT("");
    }
    fy_str_t s = fy_str(r->p + r->i, n);
    r->i += n;
    return s;
}

/* Decode a whole record (magic and length included) held in buf. */
static int decode(char *buf, size_t n, fy_cs_loaded_t *out)
{
    memset(out, 0, sizeof *out);
    rd_t r = {buf, n, 8, false};
    if (n < 8 + REC_FIXED || memcmp(buf, REC_MAGIC, 4) != 0) return -EIO;
    fy_cs_flow_t *f = &out->f;
    f->id = ru64(&r);
    f->start_us = (int64_t)ru64(&r);
    f->duration_ms = ru32(&r);
    f->ttfb_ms = ru32(&r);
    f->status = (int)ru32(&r);
    f->version = (int)ru32(&r);
    f->stream_id = ru32(&r);
    f->flags = ru32(&r);
    f->req_size = ru64(&r);
    f->res_size = ru64(&r);
    uint32_t nq = ru32(&r), ns = ru32(&r);
    if (r.bad || nq > n / 8 || ns > n / 8) return -EIO;
    out->hdrs = fy_xcalloc((size_t)nq + ns + 1, sizeof *out->hdrs);
    f->method = rstr(&r);
    f->scheme = rstr(&r);
    f->authority = rstr(&r);
    f->target = rstr(&r);
    f->error = rstr(&r);
    for (uint32_t i = 0; i < nq + ns; i++) {
        out->hdrs[i].name = rstr(&r);
        out->hdrs[i].value = rstr(&r);
    }
    f->req_headers = out->hdrs;
    f->n_req_headers = nq;
    f->res_headers = out->hdrs + nq;
    f->n_res_headers = ns;
    f->req_body = rstr(&r);
    f->res_body = rstr(&r);
    uint32_t nm = r.i < n ? ru32(&r) : 0;
    if (!r.bad && nm && nm <= n / 8) {
        fy_cs_header_t *m = fy_xcalloc(nm, sizeof *m);
        for (uint32_t i = 0; i < nm; i++) {
            m[i].name = rstr(&r);
            m[i].value = rstr(&r);
        }
        out->meta = m;
        f->meta = m;
        f->n_meta = nm;
    } else if (nm) {
        r.bad = true;
    }
    if (r.bad) {
        free(out->meta);
        out->meta = NULL;
        free(out->hdrs);
        out->hdrs = NULL;
        return -EIO;
    }
    out->buf = buf;
    return 0;
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
    if (got != (ssize_t)len || decode(buf, len, out) < 0) {
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
            char *buf = fy_xmalloc(len);
            fy_cs_loaded_t l;
            if (pread(fd, buf, len, (off_t)off) != (ssize_t)len || decode(buf, len, &l) < 0) {
                free(buf);
                break;
            }
            index_add(cs, &l.f, cs->segs[s].seq, off, len);
            if (l.f.id >= cs->next_id) cs->next_id = l.f.id + 1;
            if (l.f.start_us > cs->segs[s].newest_us) cs->segs[s].newest_us = l.f.start_us;
            fy_cs_loaded_free(&l);
            off += len;
        }
        close(fd);
    }
    cs->st.flows = cs->elen - cs->estart;
}

/* ---- the writer ---- */

/* A text WebSocket message (FY_CS_META_WS, opcode 1) with its JSON members redacted: a new
   value (malloc) of *len bytes, or NULL when nothing changed. */
static char *redact_ws(fy_cs_t *cs, fy_cs_header_t m, size_t *len)
{
    if (m.name.len != 2 || memcmp(m.name.p, FY_CS_META_WS, 2) != 0 || m.value.len < 4 ||
        m.value.p[1] != '1' || (m.value.p[2] != '0' && m.value.p[2] != '1'))
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

static void encode(fy_cs_t *cs, const fy_cs_flow_t *f, buf_t *b)
{
    static const fy_str_t red = FY_STR_LIT("[redacted]");
    size_t start = b->len;
    bput(b, REC_MAGIC, 4);
    bu32(b, 0); /* length, filled below */
    bu64(b, f->id);
    bu64(b, (uint64_t)f->start_us);
    bu32(b, f->duration_ms);
    bu32(b, f->ttfb_ms);
    bu32(b, (uint32_t)f->status);
    bu32(b, (uint32_t)f->version);
    bu32(b, f->stream_id);
    bu32(b, f->flags);
    bu64(b, f->req_size);
    bu64(b, f->res_size);
    bu32(b, (uint32_t)f->n_req_headers);
    bu32(b, (uint32_t)f->n_res_headers);
    bstr(b, f->method);
    bstr(b, f->scheme);
    bstr(b, f->authority);
    bstr(b, f->target);
    bstr(b, f->error);
    for (int dir = 0; dir < 2; dir++) {
        const fy_cs_header_t *h = dir ? f->res_headers : f->req_headers;
        size_t n = dir ? f->n_res_headers : f->n_req_headers;
        for (size_t i = 0; i < n; i++) {
            bstr(b, h[i].name);
            bstr(b, fy_cs_header_redacted(cs, h[i].name) ? red : h[i].value);
        }
    }
    for (int dir = 0; dir < 2; dir++) {
        fy_str_t body = dir ? f->res_body : f->req_body;
        size_t rl = 0;
        char *r = cs->conf.redact ? fy_cs_redact_json(body.p, body.len,
                                                      (const char *const *)cs->redact_json, &rl)
                                  : NULL;
        bstr(b, r ? fy_str(r, rl) : body);
        free(r);
    }
    if (f->n_meta) {
        bu32(b, (uint32_t)f->n_meta);
        for (size_t i = 0; i < f->n_meta; i++) {
            bstr(b, f->meta[i].name);
            size_t rl = 0;
            char *r = cs->conf.redact ? redact_ws(cs, f->meta[i], &rl) : NULL;
            bstr(b, r ? fy_str(r, rl) : f->meta[i].value);
            free(r);
        }
    }
    uint32_t len = (uint32_t)(b->len - start);
    memcpy(b->p + start + 4, &len, 4);
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

/* Encode items[0..n) and append them with as few writes as segments allow (one per segment
 * touched), then index them. A failed write drops its records and counts them. */
static void write_batch(fy_cs_t *cs, qitem_t **items, size_t n)
{
    buf_t b = {0};
    size_t *offs = fy_xmalloc((n + 1) * sizeof *offs);
    for (size_t i = 0; i < n; i++) {
        offs[i] = b.len;
        encode(cs, &items[i]->f, &b);
    }
    offs[n] = b.len;
    pthread_mutex_lock(&cs->ilock);
    size_t i = 0;
    while (i < n) {
        size_t first = offs[i + 1] - offs[i];
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
        while (j < n && s->size + (offs[j + 1] - offs[i]) <= cs->conf.segment_size) j++;
        size_t len = offs[j] - offs[i];
        ssize_t w = write(cs->fd, b.p + offs[i], len);
        if (w == (ssize_t)len) {
            for (size_t k = i; k < j; k++) {
                const fy_cs_flow_t *f = &items[k]->f;
                index_add(cs, f, s->seq, s->size + (offs[k] - offs[i]),
                          (uint32_t)(offs[k + 1] - offs[k]));
                if (f->start_us > s->newest_us) s->newest_us = f->start_us;
            }
            s->size += len;
            cs->bytes += len;
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
    free(offs);
    free(b.p);
}

#define BATCH_MAX 1024
#define LINGER_NS 2000000 /* after a wake-up, let a few more flows arrive (2 ms) */

static void *writer_main(void *arg)
{
    fy_cs_t *cs = arg;
    qitem_t **items = fy_xmalloc(BATCH_MAX * sizeof *items);
    pthread_mutex_lock(&cs->qlock);
    for (;;) {
        while (!cs->qhead && !cs->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            cs->writer_idle = true;
            pthread_cond_timedwait(&cs->qcond, &cs->qlock, &ts);
            cs->writer_idle = false;
            if (!cs->qhead) { /* idle: the age bound still applies */
                pthread_mutex_unlock(&cs->qlock);
                pthread_mutex_lock(&cs->ilock);
                enforce_bounds(cs);
                pthread_mutex_unlock(&cs->ilock);
                pthread_mutex_lock(&cs->qlock);
            } else if (!cs->stop && !cs->flushing && cs->qn < BATCH_MAX / 4) {
                pthread_mutex_unlock(&cs->qlock);
                struct timespec l = {0, LINGER_NS};
                nanosleep(&l, NULL);
                pthread_mutex_lock(&cs->qlock);
            }
        }
        if (!cs->qhead) break; /* stopping and empty */
        size_t n = 0;
        while (cs->qhead && n < BATCH_MAX) {
            qitem_t *q = cs->qhead;
            cs->qhead = q->next;
            cs->qn--;
            cs->qbytes -= q->bytes;
            items[n++] = q;
        }
        if (!cs->qhead) cs->qtail = &cs->qhead;
        pthread_mutex_unlock(&cs->qlock);
        write_batch(cs, items, n);
        for (size_t i = 0; i < n; i++) free(items[i]);
        pthread_mutex_lock(&cs->qlock);
        cs->handled += n;
        pthread_cond_broadcast(&cs->qdone);
    }
    pthread_mutex_unlock(&cs->qlock);
    free(items);
    return NULL;
}

/* ---- submit ---- */

static size_t flow_bytes(const fy_cs_flow_t *f)
{
    size_t n = f->method.len + f->scheme.len + f->authority.len + f->target.len + f->error.len +
               f->req_body.len + f->res_body.len;
    n += (f->n_req_headers + f->n_res_headers) * sizeof(fy_cs_header_t);
    for (size_t i = 0; i < f->n_req_headers; i++)
        n += f->req_headers[i].name.len + f->req_headers[i].value.len;
    for (size_t i = 0; i < f->n_res_headers; i++)
        n += f->res_headers[i].name.len + f->res_headers[i].value.len;
    n += f->n_meta * sizeof(fy_cs_header_t);
    for (size_t i = 0; i < f->n_meta; i++) n += f->meta[i].name.len + f->meta[i].value.len;
    return n;
}

static fy_str_t cp(char **at, fy_str_t s)
{
    if (s.len) memcpy(*at, s.p, s.len);
    fy_str_t r = fy_str(*at, s.len);
    *at += s.len;
    return r;
}

int fy_cs_submit(fy_cs_t *cs, const fy_cs_flow_t *f)
{
    size_t n = flow_bytes(f);
    pthread_mutex_lock(&cs->qlock);
    bool full = cs->stop || cs->qn >= cs->conf.max_queue ||
                cs->qbytes + n + sizeof(qitem_t) > cs->conf.max_queue_bytes;
    pthread_mutex_unlock(&cs->qlock);
    if (full) {
        atomic_fetch_add_explicit(&cs->dropped_queue, 1, memory_order_relaxed);
        return -1;
    }
    qitem_t *q = malloc(sizeof *q + n);
    if (!q) {
        atomic_fetch_add_explicit(&cs->dropped_queue, 1, memory_order_relaxed);
        return -1;
    }
    q->next = NULL;
    q->bytes = sizeof *q + n;
    q->f = *f;
    fy_cs_flow_t *g = &q->f;
    size_t nh = f->n_req_headers + f->n_res_headers + f->n_meta;
    fy_cs_header_t *h = (fy_cs_header_t *)(q + 1);
    char *at = (char *)(h + nh);
    for (size_t i = 0; i < f->n_req_headers; i++) {
        h[i].name = cp(&at, f->req_headers[i].name);
        h[i].value = cp(&at, f->req_headers[i].value);
    }
    for (size_t i = 0; i < f->n_res_headers; i++) {
        h[f->n_req_headers + i].name = cp(&at, f->res_headers[i].name);
        h[f->n_req_headers + i].value = cp(&at, f->res_headers[i].value);
    }
    fy_cs_header_t *m = h + f->n_req_headers + f->n_res_headers;
    for (size_t i = 0; i < f->n_meta; i++) {
        m[i].name = cp(&at, f->meta[i].name);
        m[i].value = cp(&at, f->meta[i].value);
    }
    g->req_headers = h;
    g->res_headers = h + f->n_req_headers;
    g->meta = m;
    g->method = cp(&at, f->method);
    g->scheme = cp(&at, f->scheme);
    g->authority = cp(&at, f->authority);
    g->target = cp(&at, f->target);
    g->error = cp(&at, f->error);
    uint64_t cap = cs->conf.body_cap;
    if (f->req_body.len > cap) {
        g->req_body.len = cap;
        g->flags |= FY_CS_REQ_TRUNCATED;
    }
    if (f->res_body.len > cap) {
        g->res_body.len = cap;
        g->flags |= FY_CS_RES_TRUNCATED;
    }
    g->req_body = cp(&at, fy_str(f->req_body.p, f->req_body.len > cap ? cap : f->req_body.len));
    g->res_body = cp(&at, fy_str(f->res_body.p, f->res_body.len > cap ? cap : f->res_body.len));
    pthread_mutex_lock(&cs->qlock);
    if (cs->qn >= cs->conf.max_queue || cs->qbytes + q->bytes > cs->conf.max_queue_bytes ||
        cs->stop) {
        pthread_mutex_unlock(&cs->qlock);
        free(q);
        atomic_fetch_add_explicit(&cs->dropped_queue, 1, memory_order_relaxed);
        return -1;
    }
    g->id = cs->next_id++; /* ids are given in queue order, under qlock */
    *cs->qtail = q;
    cs->qtail = &q->next;
    cs->qn++;
    cs->qbytes += q->bytes;
    cs->submitted++;
    if (cs->writer_idle) { /* one wake-up per batch, not per flow */
        cs->writer_idle = false;
        pthread_cond_signal(&cs->qcond);
    }
    pthread_mutex_unlock(&cs->qlock);
    return 0;
}

void fy_cs_flush(fy_cs_t *cs)
{
    pthread_mutex_lock(&cs->qlock);
    uint64_t target = cs->submitted;
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
    pthread_mutex_lock(&cs->qlock);
    out->queued = cs->qn;
    pthread_mutex_unlock(&cs->qlock);
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
    cs->redact_json = strv(NULL, conf->redact_json, false);
    cs->conf.redact_headers = NULL;
    cs->conf.redact_json = NULL;
    pthread_mutex_init(&cs->qlock, NULL);
    pthread_mutex_init(&cs->ilock, NULL);
    pthread_cond_init(&cs->qcond, NULL);
    pthread_cond_init(&cs->qdone, NULL);
    pthread_cond_init(&cs->icond, NULL);
    cs->qtail = &cs->qhead;
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
    if (pthread_create(&cs->writer, NULL, writer_main, cs) != 0) {
        fy_cs_close(cs);
        return NULL;
    }
    return cs;
}

void fy_cs_close(fy_cs_t *cs)
{
    if (!cs) return;
    pthread_mutex_lock(&cs->qlock);
    bool started = !cs->stop;
    cs->stop = true;
    pthread_cond_signal(&cs->qcond);
    pthread_mutex_unlock(&cs->qlock);
    if (started && cs->writer) pthread_join(cs->writer, NULL);
    for (qitem_t *q = cs->qhead, *n; q; q = n) {
        n = q->next;
        free(q);
    }
    if (cs->fd >= 0) close(cs->fd);
    for (size_t i = cs->estart; i < cs->elen; i++) entry_free(&cs->ents[i]);
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
