/* Interception rules: matching, header edits, synthetic answers, body rewriting filter. */
#include "handler/mitm_rules.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <brotli/decode.h>
#include <brotli/encode.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "http/filter.h"

typedef struct rule_rt {
    const fy_mitm_rule_t *c;
    pcre2_code **re; /* per replace item (NULL for literals) */
    char *file_body; /* respond.file contents (owned) */
    size_t file_len;
    char map_host[256];
    int map_port;
    bool map_tls;
} rule_rt_t;

struct fy_mitm_rules {
    const fy_intercept_conf_t *conf;
    rule_rt_t *rt;
    size_t n;
};

/* ---- setup ---- */

static int read_file(const char *path, size_t cap, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size > cap) {
        close(fd);
        return -EFBIG;
    }
    char *b = fy_xmalloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, b + got, (size_t)st.st_size - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    *out = b;
    *len = got;
    return 0;
}

fy_mitm_rules_t *fy__mitm_rules_new(const fy_intercept_conf_t *conf)
{
    fy_mitm_rules_t *r = fy_xcalloc(1, sizeof *r);
    r->conf = conf;
    r->n = conf->rules.n;
    r->rt = fy_xcalloc(r->n ? r->n : 1, sizeof *r->rt);
    const fy_mitm_rule_t *rules = conf->rules.v;
    for (size_t i = 0; i < r->n; i++) {
        rule_rt_t *rt = &r->rt[i];
        rt->c = &rules[i];
        const fy_mitm_replace_t *rp = rules[i].replace.v;
        rt->re = fy_xcalloc(rules[i].replace.n ? rules[i].replace.n : 1, sizeof *rt->re);
        for (size_t k = 0; k < rules[i].replace.n; k++) {
            if (!rp[k].regex) continue;
            int ec;
            PCRE2_SIZE off;
            rt->re[k] =
                pcre2_compile((PCRE2_SPTR)rp[k].regex, PCRE2_ZERO_TERMINATED, 0, &ec, &off, NULL);
            if (!rt->re[k]) {
                fy_log(FY_LOG_EMERG, "intercept.rules[%zu]: regex '%s' does not compile", i,
                       rp[k].regex);
                fy__mitm_rules_free(r);
                return NULL;
            }
            pcre2_jit_compile(rt->re[k], PCRE2_JIT_COMPLETE);
        }
        if (rules[i].respond && rules[i].respond->file) {
            int e = read_file(rules[i].respond->file, 64u << 20, &rt->file_body, &rt->file_len);
            if (e < 0) {
                fy_log(FY_LOG_EMERG, "intercept.rules[%zu].respond.file: %s: %s", i,
                       rules[i].respond->file, strerror(-e));
                fy__mitm_rules_free(r);
                return NULL;
            }
        }
        if (rules[i].map_remote) {
            const char *u = rules[i].map_remote;
            rt->map_tls = u[4] == 's';
            const char *h = strstr(u, "://") + 3;
            const char *colon = strrchr(h, ':');
            if (h[0] == '[') colon = strstr(h, "]:") ? strstr(h, "]:") + 1 : NULL;
            size_t hl = colon ? (size_t)(colon - h) : strlen(h);
            if (h[0] == '[') {
                h++;
                hl -= 2;
            }
            snprintf(rt->map_host, sizeof rt->map_host, "%.*s", (int)hl, h);
            rt->map_port = colon ? (int)strtol(colon + 1, NULL, 10) : rt->map_tls ? 443 : 80;
        }
    }
    return r;
}

void fy__mitm_rules_free(fy_mitm_rules_t *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        for (size_t k = 0; r->rt[i].re && k < r->rt[i].c->replace.n; k++)
            pcre2_code_free(r->rt[i].re[k]);
        free(r->rt[i].re);
        free(r->rt[i].file_body);
    }
    free(r->rt);
    free(r);
}

/* ---- body codecs ---- */

long fy__mitm_decode(const char *enc, const char *in, size_t len, size_t cap, char **out)
{
    size_t ocap = len * 4 + 1024 < cap ? len * 4 + 1024 : cap;
    char *o = fy_xmalloc(ocap ? ocap : 1);
    size_t olen = 0;
    long rc = -1;
    if (strcmp(enc, "gzip") == 0) {
        z_stream zs = {0};
        if (inflateInit2(&zs, 15 + 32) != Z_OK) goto out;
        zs.next_in = (Bytef *)in;
        zs.avail_in = (uInt)len;
        int r;
        do {
            if (olen == ocap) {
                if (ocap >= cap) break;
                ocap = ocap * 2 < cap ? ocap * 2 : cap;
                o = realloc(o, ocap);
            }
            zs.next_out = (Bytef *)o + olen;
            zs.avail_out = (uInt)(ocap - olen);
            r = inflate(&zs, Z_NO_FLUSH);
            olen = ocap - zs.avail_out;
        } while (r == Z_OK || (r == Z_BUF_ERROR && olen == ocap));
        inflateEnd(&zs);
        if (r == Z_STREAM_END) rc = (long)olen;
    } else if (strcmp(enc, "br") == 0) {
        BrotliDecoderState *st = BrotliDecoderCreateInstance(NULL, NULL, NULL);
        const uint8_t *ni = (const uint8_t *)in;
        size_t ai = len;
        BrotliDecoderResult r;
        do {
            if (olen == ocap) {
                if (ocap >= cap) break;
                ocap = ocap * 2 < cap ? ocap * 2 : cap;
                o = realloc(o, ocap);
            }
            uint8_t *no = (uint8_t *)o + olen;
            size_t ao = ocap - olen;
            r = BrotliDecoderDecompressStream(st, &ai, &ni, &ao, &no, NULL);
            olen = ocap - ao;
        } while (r == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT);
        BrotliDecoderDestroyInstance(st);
        if (r == BROTLI_DECODER_RESULT_SUCCESS) rc = (long)olen;
    } else if (strcmp(enc, "zstd") == 0) {
        ZSTD_DCtx *z = ZSTD_createDCtx();
        ZSTD_inBuffer ib = {in, len, 0};
        size_t r = 1;
        while (r != 0) {
            if (olen == ocap) {
                if (ocap >= cap) break;
                ocap = ocap * 2 < cap ? ocap * 2 : cap;
                o = realloc(o, ocap);
            }
            ZSTD_outBuffer ob = {o + olen, ocap - olen, 0};
            r = ZSTD_decompressStream(z, &ob, &ib);
            olen += ob.pos;
            if (ZSTD_isError(r)) break;
            if (ib.pos == ib.size && ob.pos < ob.size && r != 0) break; /* truncated */
        }
        ZSTD_freeDCtx(z);
        if (r == 0) rc = (long)olen;
    }
out:
    if (rc < 0) {
        free(o);
        *out = NULL;
    } else {
        *out = o;
    }
    return rc;
}

long fy__mitm_encode(const char *enc, const char *in, size_t len, char **out)
{
    long rc = -1;
    char *o = NULL;
    if (strcmp(enc, "gzip") == 0) {
        z_stream zs = {0};
        if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
        size_t ocap = deflateBound(&zs, (uLong)len) + 32;
        o = fy_xmalloc(ocap);
        zs.next_in = (Bytef *)in;
        zs.avail_in = (uInt)len;
        zs.next_out = (Bytef *)o;
        zs.avail_out = (uInt)ocap;
        if (deflate(&zs, Z_FINISH) == Z_STREAM_END) rc = (long)zs.total_out;
        deflateEnd(&zs);
    } else if (strcmp(enc, "br") == 0) {
        size_t ocap = BrotliEncoderMaxCompressedSize(len);
        if (!ocap) ocap = len + 1024;
        o = fy_xmalloc(ocap);
        if (BrotliEncoderCompress(5, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_GENERIC, len,
                                  (const uint8_t *)in, &ocap, (uint8_t *)o))
            rc = (long)ocap;
    } else if (strcmp(enc, "zstd") == 0) {
        size_t ocap = ZSTD_compressBound(len);
        o = fy_xmalloc(ocap);
        size_t r = ZSTD_compress(o, ocap, in, len, 3);
        if (!ZSTD_isError(r)) rc = (long)r;
    }
    if (rc < 0) {
        free(o);
        o = NULL;
    }
    *out = o;
    return rc;
}

/* ---- matching and edits ---- */

static bool rule_matches(const fy_mitm_rule_t *c, const fy_exchange_t *ex, const char *host)
{
    const fy_mitm_match_t *m = &c->match;
    if (m->host.n && !fy_host_list_match(&m->host, host)) return false;
    size_t pl = strlen(m->path);
    if (pl > 1 && (ex->req.path.len < pl || memcmp(ex->req.path.p, m->path, pl) != 0)) return false;
    if (m->methods.n) {
        bool ok = false;
        for (size_t i = 0; i < m->methods.n && !ok; i++)
            ok = fy_str_eq(ex->req.method, m->methods.v[i], strlen(m->methods.v[i]));
        if (!ok) return false;
    }
    for (size_t i = 0; i < m->headers.n; i++) {
        const char *name = m->headers.keys[i], *want = m->headers.values[i];
        const fy_header_t *h = NULL;
        for (size_t k = 0; k < ex->req.headers.n && !h; k++)
            if (fy_str_ieq(ex->req.headers.v[k].name, name, strlen(name)))
                h = &ex->req.headers.v[k];
        if (!h) return false;
        if (strcmp(want, "*") != 0 && !fy_str_eq(h->value, want, strlen(want))) return false;
    }
    return true;
}

static bool in_strlist(const fy_conf_strlist_t *l, fy_str_t n)
{
    for (size_t i = 0; i < l->n; i++)
        if (fy_str_ieq(n, l->v[i], strlen(l->v[i]))) return true;
    return false;
}

static bool in_strmap(const fy_conf_strmap_t *m, fy_str_t n)
{
    for (size_t i = 0; i < m->n; i++)
        if (fy_str_ieq(n, m->keys[i], strlen(m->keys[i]))) return true;
    return false;
}

static void edit_headers(fy_arena_t *a, fy_headers_t *hs, const fy_mitm_hdr_edit_t *e)
{
    if (!e->set.n && !e->append.n && !e->remove.n) return;
    /* in place: the list is this exchange's own (a codec's parse of this message, or its
       arena); a rebuilt copy cost an arena array per edit on every request */
    if (e->set.n || e->remove.n) {
        size_t k = 0;
        for (size_t i = 0; i < hs->n; i++) {
            if (in_strlist(&e->remove, hs->v[i].name) || in_strmap(&e->set, hs->v[i].name))
                continue;
            if (k != i) hs->v[k] = hs->v[i];
            k++;
        }
        hs->n = k;
    }
    for (size_t i = 0; i < e->set.n; i++)
        fy_headers_add(a, hs, e->set.keys[i], strlen(e->set.keys[i]), e->set.values[i],
                       strlen(e->set.values[i]));
    for (size_t i = 0; i < e->append.n; i++)
        fy_headers_add(a, hs, e->append.keys[i], strlen(e->append.keys[i]), e->append.values[i],
                       strlen(e->append.values[i]));
}

/* ---- body rewriting ---- */

typedef struct filt {
    fy_sink_layer_t l; /* first: a FY_STAGE_REWRITE layer (http/filter.h) */
    fy_mitm_rules_t *rs;
    fy_exchange_t *ex;
    int *idx; /* matched rules */
    size_t nidx;
    bool res_replace, req_replace;
    bool head_done, buffering;
    char *buf; /* response bytes buffered (owned) */
    size_t len, cap;
    char *out; /* rewritten response (owned) */
    struct iovec iov;
    fy_defer_t defer;
    /* request body */
    char *rbuf; /* owned */
    size_t rlen;
    bool req_collecting, req_over, req_given;
    void (*go)(fy_exchange_t *ex, const fy_mitm_target_t *t, void *ud);
    void *go_ud;
    fy_mitm_target_t target; /* for go() after the request body: host in the arena */
} filt_t;

static void filt_cleanup(void *arg)
{
    filt_t *f = arg;
    fy_defer_cancel(f->ex->ctx->loop, &f->defer);
    free(f->buf);
    free(f->out);
    free(f->rbuf);
    f->buf = f->out = f->rbuf = NULL;
}

/* Apply every matched rule's replacements for `which` (0 response, 1 request) to data;
   returns a malloc'd result (or NULL: unchanged). */
static char *replace_all(filt_t *f, int which, const char *data, size_t len, size_t *olen)
{
    char *cur = NULL;
    size_t clen = len;
    const char *src = data;
    for (size_t i = 0; i < f->nidx; i++) {
        const rule_rt_t *rt = &f->rs->rt[f->idx[i]];
        const fy_mitm_replace_t *rp = rt->c->replace.v;
        for (size_t k = 0; k < rt->c->replace.n; k++) {
            if (rp[k].in != 2 && rp[k].in != which) continue;
            char *next = NULL;
            size_t nlen = 0;
            if (rt->re[k]) {
                pcre2_match_data *md = pcre2_match_data_create_from_pattern(rt->re[k], NULL);
                PCRE2_SIZE need = clen + 256;
                for (int tries = 0; tries < 2; tries++) {
                    next = realloc(next, need + 1);
                    PCRE2_SIZE outl = need;
                    int r = pcre2_substitute(
                        rt->re[k], (PCRE2_SPTR)src, clen, 0,
                        PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH, md, NULL,
                        (PCRE2_SPTR)rp[k].with, PCRE2_ZERO_TERMINATED, (PCRE2_UCHAR *)next, &outl);
                    if (r >= 0) {
                        nlen = outl;
                        break;
                    }
                    if (r != PCRE2_ERROR_NOMEMORY) {
                        free(next);
                        next = NULL;
                        break;
                    }
                    need = outl;
                }
                pcre2_match_data_free(md);
                if (!next) continue;
            } else {
                size_t sl = strlen(rp[k].search), wl = strlen(rp[k].with), cnt = 0;
                for (const char *p = src;
                     (p = memmem(p, clen - (size_t)(p - src), rp[k].search, sl)) != NULL; p += sl)
                    cnt++;
                if (!cnt) continue;
                nlen = clen - cnt * sl + cnt * wl;
                next = fy_xmalloc(nlen + 1);
                size_t o = 0;
                const char *p = src, *end = src + clen;
                const char *hit;
                while ((hit = memmem(p, (size_t)(end - p), rp[k].search, sl)) != NULL) {
                    memcpy(next + o, p, (size_t)(hit - p));
                    o += (size_t)(hit - p);
                    memcpy(next + o, rp[k].with, wl);
                    o += wl;
                    p = hit + sl;
                }
                memcpy(next + o, p, (size_t)(end - p));
            }
            free(cur);
            cur = next;
            src = cur;
            clen = nlen;
        }
    }
    *olen = clen;
    return cur;
}

static const char *encoding_of(const fy_headers_t *hs, bool *ok)
{
    const fy_header_t *h = FY_HDR_FIND(hs, "content-encoding");
    *ok = true;
    if (!h || fy_str_ieq(h->value, "identity", 8)) return NULL;
    if (fy_str_ieq(h->value, "gzip", 4)) return "gzip";
    if (fy_str_ieq(h->value, "br", 2)) return "br";
    if (fy_str_ieq(h->value, "zstd", 4)) return "zstd";
    *ok = false; /* deflate, chains: left alone */
    return NULL;
}

/* Rewrite data (encoded as `enc`) into a malloc'd buffer; NULL when nothing changed or the
   body cannot be decoded within the cap. */
static char *rewrite(filt_t *f, int which, const char *enc, const char *data, size_t len,
                     size_t *olen)
{
    char *plain = NULL;
    const char *src = data;
    size_t slen = len;
    if (enc) {
        long n = fy__mitm_decode(enc, data, len, f->rs->conf->body_cap, &plain);
        if (n < 0) return NULL;
        src = plain;
        slen = (size_t)n;
    }
    size_t rl;
    char *r = replace_all(f, which, src, slen, &rl);
    free(plain);
    if (!r || !enc) {
        *olen = rl;
        return r;
    }
    char *coded;
    long cl = fy__mitm_encode(enc, r, rl, &coded);
    free(r);
    if (cl < 0) return NULL;
    *olen = (size_t)cl;
    return coded;
}

static void proceed_cb(fy_defer_t *d)
{
    filt_t *f = d->data;
    if (f->ex->producer && f->ex->producer->proceed) f->ex->producer->proceed(f->ex);
}

static const fy_layer_ops_t f_ops;

static void f_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                   int state)
{
    filt_t *f = (filt_t *)l;
    if (!f->head_done) {
        f->head_done = true;
        for (size_t i = 0; i < f->nidx; i++) {
            const fy_mitm_rule_t *c = f->rs->rt[f->idx[i]].c;
            edit_headers(ex->arena, &ex->res.headers, &c->response_headers);
            if (c->status) ex->res.status = (int)c->status;
        }
        bool ok;
        encoding_of(&ex->res.headers, &ok);
        f->buffering = f->res_replace && ok && state != FY_SEND_ERROR &&
                       ex->req.method_id != FY_M_HEAD && ex->res.status != 204 &&
                       ex->res.status != 304 &&
                       (ex->res.content_length < 0 ||
                        (uint64_t)ex->res.content_length <= f->rs->conf->body_cap);
    }
    if (!f->buffering || state == FY_SEND_ERROR) {
        fy_layer_next_send(l, ex, bufs, n, state);
        return;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += bufs[i].iov_len;
    if (f->len + total > f->rs->conf->body_cap) {
        /* past the cap: what we hold goes out first, then everything streams unchanged */
        f->buffering = false;
        struct iovec *v = fy_arena_alloc(ex->arena, sizeof *v * (n + 1));
        v[0].iov_base = f->buf;
        v[0].iov_len = f->len;
        memcpy(v + 1, bufs, sizeof *v * n);
        fy_layer_next_send(l, ex, v, n + 1, state);
        return;
    }
    if (f->len + total > f->cap) {
        f->cap = f->cap ? f->cap : 16384;
        while (f->cap < f->len + total) f->cap *= 2;
        f->buf = realloc(f->buf, f->cap);
        if (!f->buf) abort();
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(f->buf + f->len, bufs[i].iov_base, bufs[i].iov_len);
        f->len += bufs[i].iov_len;
    }
    if (state == FY_SEND_MORE) {
        fy_defer(ex->ctx->loop, &f->defer); /* consumed: ask the producer for more */
        return;
    }
    bool ok;
    const char *enc = encoding_of(&ex->res.headers, &ok);
    size_t ol = 0;
    f->out = rewrite(f, 0, enc, f->buf, f->len, &ol);
    f->iov.iov_base = f->out ? f->out : f->buf;
    f->iov.iov_len = f->out ? ol : f->len;
    ex->res.content_length = (int64_t)f->iov.iov_len;
    fy_layer_next_send(l, ex, &f->iov, 1, FY_SEND_FINAL);
}

static void f_read_body(fy_sink_layer_t *l, fy_exchange_t *ex)
{
    filt_t *f = (filt_t *)l;
    if (f->req_replace && !f->req_collecting && !f->req_given) {
        /* the buffered (rewritten) body in one piece; the rest, if over the cap, streams */
        f->req_given = true;
        ex->on_body(ex, f->rbuf ? f->rbuf : "", f->rlen, !f->req_over);
        return;
    }
    fy_layer_next_read_body(l, ex);
}

/* send_file, send_informational and detach pass through (NULL) */
static const fy_layer_ops_t f_ops = {
    .name = "mitm-rules", .send = f_send, .read_body = f_read_body};

static void req_collect(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    filt_t *f = (filt_t *)fy_exchange_find_layer(ex, &f_ops);
    f->rbuf = realloc(f->rbuf, f->rlen + n + 1);
    if (!f->rbuf) abort();
    if (n) memcpy(f->rbuf + f->rlen, p, n); /* the end may come with no bytes (and no pointer) */
    f->rlen += n;
    if (!end && f->rlen <= f->rs->conf->body_cap) {
        fy_exchange_read_body(ex, req_collect);
        return;
    }
    f->req_collecting = false;
    if (end) {
        bool ok;
        const char *enc = encoding_of(&ex->req.headers, &ok);
        size_t ol;
        char *r = ok ? rewrite(f, 1, enc, f->rbuf, f->rlen, &ol) : NULL;
        if (r) {
            free(f->rbuf);
            f->rbuf = r;
            f->rlen = ol;
        }
        ex->req.content_length = (int64_t)f->rlen;
    } else {
        f->req_over = true; /* past the cap: the rest streams through unchanged */
    }
    f->go(ex, &f->target, f->go_ud);
}

/* ---- entry ---- */

static void respond_rule(const rule_rt_t *rt, fy_exchange_t *ex)
{
    const fy_mitm_respond_t *r = rt->c->respond;
    const char *ct = NULL;
    for (size_t i = 0; i < r->headers.n; i++) {
        if (strcasecmp(r->headers.keys[i], "content-type") == 0) {
            ct = r->headers.values[i];
            continue;
        }
        fy_headers_add(ex->arena, &ex->res.headers, r->headers.keys[i], strlen(r->headers.keys[i]),
                       r->headers.values[i], strlen(r->headers.values[i]));
    }
    const char *body = rt->file_body ? rt->file_body : r->body ? r->body : "";
    size_t len = rt->file_body ? rt->file_len : strlen(body);
    ex->error = "answered by an intercept rule";
    fy_exchange_respond(ex, (int)r->status, ct, body, len);
}

void fy__mitm_rules_run(fy_mitm_rules_t *r, fy_exchange_t *ex, const fy_mitm_target_t *t,
                        void (*go)(fy_exchange_t *ex, const fy_mitm_target_t *t, void *ud),
                        void *ud)
{
    if (!r || r->n == 0 || ex->req.protocol.len) {
        go(ex, t, ud);
        return;
    }
    int *idx = fy_arena_alloc(ex->arena, sizeof *idx * r->n);
    size_t nidx = 0;
    bool res_replace = false, req_replace = false;
    fy_mitm_target_t target = *t;
    for (size_t i = 0; i < r->n; i++) {
        const rule_rt_t *rt = &r->rt[i];
        if (!rule_matches(rt->c, ex, t->host)) continue;
        if (rt->c->block) {
            static const char msg[] = "Blocked by an intercept rule\n";
            ex->error = "blocked by an intercept rule";
            fy_exchange_respond(ex, 403, "text/plain", msg, sizeof msg - 1);
            return;
        }
        if (rt->c->respond) {
            respond_rule(rt, ex);
            return;
        }
        idx[nidx++] = (int)i;
        edit_headers(ex->arena, &ex->req.headers, &rt->c->request_headers);
        const fy_mitm_replace_t *rp = rt->c->replace.v;
        for (size_t k = 0; k < rt->c->replace.n; k++) {
            res_replace |= rp[k].in != 1;
            req_replace |= rp[k].in != 0;
        }
        if (rt->c->map_remote && target.host == t->host) {
            target.host = rt->map_host;
            target.port = rt->map_port;
            target.tls = rt->map_tls;
            target.sni = NULL;
            target.insecure = false;
            target.h2 = false; /* another origin: its ALPN was never probed */
            char *a = fy_arena_alloc(ex->arena, 300);
            int n = snprintf(a, 300, "%s:%d", rt->map_host, rt->map_port);
            ex->req.authority = fy_str(a, (size_t)n);
        }
    }
    if (nidx == 0) {
        go(ex, t, ud);
        return;
    }
    bool has_resp_edits = res_replace;
    for (size_t i = 0; i < nidx && !has_resp_edits; i++) {
        const fy_mitm_rule_t *c = r->rt[idx[i]].c;
        has_resp_edits = c->status || c->response_headers.set.n || c->response_headers.append.n ||
                         c->response_headers.remove.n;
    }
    req_replace = req_replace && ex->req.content_length != 0;
    if (!has_resp_edits && !req_replace) {
        go(ex, &target, ud);
        return;
    }
    filt_t *f = fy_arena_calloc(ex->arena, sizeof *f);
    f->rs = r;
    f->ex = ex;
    f->idx = idx;
    f->nidx = nidx;
    f->res_replace = res_replace;
    f->req_replace = req_replace;
    f->defer.cb = proceed_cb;
    f->defer.data = f;
    f->go = go;
    f->go_ud = ud;
    fy_exchange_push_layer(ex, &f->l, &f_ops, FY_STAGE_REWRITE);
    fy_arena_on_reset(ex->arena, filt_cleanup, f);
    if (req_replace) {
        /* go() runs later, from req_collect: the target's host may live on our caller's
           stack, so it is copied */
        f->target = target;
        f->target.host = fy_arena_strndup(ex->arena, target.host, strlen(target.host));
        f->req_collecting = true;
        fy_exchange_read_body(ex, req_collect);
        return;
    }
    go(ex, &target, ud);
}
