/* The compression filter (policy/compress.h). */
#include "policy/compress.h"

#include <brotli/encode.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "policy/compress_neg.h"
#include "policy/compress_oneshot.h"

typedef struct compress_filter {
    fy_filter_t f;
    const fy_compress_conf_t *conf;
    int offer[3];
    size_t noffer;
} compress_filter_t;

enum { ST_UNDECIDED = 0, ST_PASS, ST_ON };

typedef struct clayer {
    fy_sink_layer_t l;
    const compress_filter_t *cf;
    int coding; /* negotiated (FY_CODING_*) */
    int state;
    /* encoders (one of) */
    z_stream z;
    bool z_init;
    BrotliEncoderState *br;
    ZSTD_CCtx *zs;
    /* output, reused for each send (valid until the codec's next proceed) */
    unsigned char *out; /* owned (malloc) */
    size_t cap;
    /* a static file being read (send_file) */
    int fd;
    off_t off;
    size_t left;
    int file_state;
    unsigned char *in;             /* owned (malloc): file_chunk bytes */
    const fy_producer_ops_t *orig; /* the handler's producer (for stop) */
    /* one shot: a body of known length up to `one-shot-max` is held until it is whole, then
       compressed in one call (compress_oneshot.h) */
    bool one;           /* holding the body for the one-shot call */
    bool one_done;      /* its output went: later sends carry nothing */
    int64_t want;       /* the body's length (Content-Length, or the FINAL first send's) */
    unsigned char *buf; /* owned (malloc): the bytes held */
    size_t blen;
    fy_defer_t defer; /* asks the handler for the next piece while holding */
    fy_exchange_t *ex;
} clayer_t;

static void enc_free(clayer_t *c)
{
    if (c->z_init) deflateEnd(&c->z);
    c->z_init = false;
    if (c->br) BrotliEncoderDestroyInstance(c->br);
    c->br = NULL;
    if (c->zs) ZSTD_freeCCtx(c->zs);
    c->zs = NULL;
}

static void on_reset(void *arg)
{
    clayer_t *c = arg;
    enc_free(c);
    fy_defer_cancel(c->ex->ctx->loop, &c->defer);
    free(c->out);
    free(c->in);
    free(c->buf);
    c->out = c->in = c->buf = NULL;
}

static bool grow(clayer_t *c, size_t need)
{
    if (c->cap >= need) return true;
    size_t cap = c->cap ? c->cap : 16384;
    while (cap < need) cap *= 2;
    unsigned char *p = realloc(c->out, cap);
    if (!p) return false;
    c->out = p;
    c->cap = cap;
    return true;
}

static bool enc_init(clayer_t *c, int64_t len)
{
    const fy_compress_conf_t *cf = c->cf->conf;
    switch (c->coding) {
    case FY_CODING_GZIP: {
        int wbits = 15;
        /* a small body of known length needs no 32 KiB window (less memory to set up) */
        while (len >= 0 && wbits > 9 && (1 << (wbits - 1)) >= len + 262) wbits--;
        memset(&c->z, 0, sizeof c->z);
        int level = cf->gzip_level > 9 ? 9 : (int)cf->gzip_level; /* 10..12: libdeflate's */
        if (deflateInit2(&c->z, level, Z_DEFLATED, wbits + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            return false;
        c->z_init = true;
        return true;
    }
    case FY_CODING_BR:
        c->br = BrotliEncoderCreateInstance(NULL, NULL, NULL);
        if (!c->br) return false;
        BrotliEncoderSetParameter(c->br, BROTLI_PARAM_QUALITY, (uint32_t)cf->brotli_level);
        BrotliEncoderSetParameter(c->br, BROTLI_PARAM_LGWIN, 22);
        if (len >= 0) BrotliEncoderSetParameter(c->br, BROTLI_PARAM_SIZE_HINT, (uint32_t)len);
        return true;
    case FY_CODING_ZSTD:
        c->zs = ZSTD_createCCtx();
        if (!c->zs) return false;
        ZSTD_CCtx_setParameter(c->zs, ZSTD_c_compressionLevel, (int)cf->zstd_level);
        if (len >= 0) ZSTD_CCtx_setPledgedSrcSize(c->zs, (unsigned long long)len);
        return true;
    }
    return false;
}

/* Compress bufs (then flush, or finish when `last`) into c->out; the output length, or -1. */
static ssize_t encode(clayer_t *c, const struct iovec *bufs, size_t n, bool last)
{
    size_t o = 0;
    for (size_t i = 0; i <= n; i++) {
        const unsigned char *p = i < n ? bufs[i].iov_base : NULL;
        size_t len = i < n ? bufs[i].iov_len : 0;
        bool end = i == n; /* the flush / finish step */
        for (;;) {
            if (!grow(c, o + 4096 + len / 2) && c->cap - o < 64) return -1;
            size_t room = c->cap - o;
            size_t before = room;
            bool done = false;
            if (c->coding == FY_CODING_GZIP) {
                c->z.next_in = (Bytef *)p;
                c->z.avail_in = (uInt)len;
                c->z.next_out = c->out + o;
                c->z.avail_out = (uInt)room;
                int rc = deflate(&c->z, end ? (last ? Z_FINISH : Z_SYNC_FLUSH) : Z_NO_FLUSH);
                if (rc == Z_STREAM_ERROR) return -1;
                p = c->z.next_in;
                len = c->z.avail_in;
                room = c->z.avail_out;
                done = len == 0 && (!end || (last ? rc == Z_STREAM_END : room != 0));
            } else if (c->coding == FY_CODING_BR) {
                size_t ai = len, ao = room;
                const uint8_t *ni = p;
                uint8_t *no = c->out + o;
                if (!BrotliEncoderCompressStream(
                        c->br,
                        end ? (last ? BROTLI_OPERATION_FINISH : BROTLI_OPERATION_FLUSH)
                            : BROTLI_OPERATION_PROCESS,
                        &ai, &ni, &ao, &no, NULL))
                    return -1;
                p = ni;
                len = ai;
                room = ao;
                done = len == 0 && !BrotliEncoderHasMoreOutput(c->br) &&
                       (!end || !last || BrotliEncoderIsFinished(c->br));
            } else {
                ZSTD_inBuffer in = {p, len, 0};
                ZSTD_outBuffer out = {c->out + o, room, 0};
                size_t r = ZSTD_compressStream2(
                    c->zs, &out, &in, end ? (last ? ZSTD_e_end : ZSTD_e_flush) : ZSTD_e_continue);
                if (ZSTD_isError(r)) return -1;
                p = p ? p + in.pos : NULL;
                len -= in.pos;
                room -= out.pos;
                done = len == 0 && (!end || r == 0);
            }
            o += before - room;
            if (done) break;
            if (room == 0 && !grow(c, c->cap * 2)) return -1;
        }
    }
    return (ssize_t)o;
}

static void remove_named(fy_headers_t *hs, const char *name, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < hs->n; i++)
        if (!fy_str_ieq(hs->v[i].name, name, n)) hs->v[k++] = hs->v[i];
    hs->n = k;
}

/* At the first send: compress this response or let it pass. `final_len` is what this first
   send carries when it is also the last (FINAL), else -1. One pass over the response headers. */
static void decide(clayer_t *c, fy_exchange_t *ex, int64_t final_len)
{
    c->state = ST_PASS;
    fy_response_t *r = &ex->res;
    const fy_compress_conf_t *conf = c->cf->conf;
    if (r->status < 200 || r->status == 204 || r->status == 304 || r->status == 206) return;
    int64_t len = r->content_length >= 0 ? r->content_length : final_len;
    /* never compressed, whatever the client accepts: no Vary either */
    if (len >= 0 && (uint64_t)len < conf->min_size) return;
    const fy_header_t *ct = NULL;
    bool vary = false, skip = false;
    for (size_t i = 0; i < r->headers.n; i++) {
        const fy_header_t *h = &r->headers.v[i];
        switch (h->name.len) {
        case 4:
            if (fy_str_ieq(h->name, "vary", 4))
                vary = vary || fy_str_list_has(h->value, "accept-encoding", 15) ||
                       fy_str_list_has(h->value, "*", 1);
            break;
        case 12:
            if (fy_str_ieq(h->name, "content-type", 12)) ct = h;
            break;
        case 13:
            if (fy_str_ieq(h->name, "content-range", 13) ||
                (fy_str_ieq(h->name, "cache-control", 13) &&
                 fy_str_list_has(h->value, "no-transform", 12)))
                skip = true;
            break;
        case 16:
            if (fy_str_ieq(h->name, "content-encoding", 16)) skip = true;
            break;
        }
    }
    if (skip || !ct || !fy_compress_type_matches(ct->value, &conf->types)) return;
    if (!vary) FY_HDR_ADD(ex->arena, &r->headers, "vary", "Accept-Encoding", 15);
    if (ex->req.method_id == FY_M_HEAD) return;
    const fy_header_t *ae = FY_HDR_FIND(&ex->req.headers, "accept-encoding");
    if (!ae) return;
    c->coding = fy_compress_negotiate(ae->value, c->cf->offer, c->cf->noffer);
    if (c->coding == FY_CODING_IDENTITY) return;
    /* br streams whatever the length: its one-shot call was no cheaper (compress_oneshot.h) */
    c->one = len >= 0 && c->coding != FY_CODING_BR && conf->one_shot_max > 0 &&
             (uint64_t)len <= conf->one_shot_max;
    c->want = len;
    if (!c->one && !enc_init(c, len)) return;
    c->state = ST_ON;
    const char *name = fy_compress_coding_name(c->coding);
    FY_HDR_ADD(ex->arena, &r->headers, "content-encoding", name, strlen(name));
    remove_named(&r->headers, "accept-ranges", 13);
    for (size_t i = 0; i < r->headers.n; i++) {
        fy_header_t *h = &r->headers.v[i];
        if (fy_str_ieq(h->name, "etag", 4) && h->value.len && h->value.p[0] == '"') {
            char *w = fy_arena_alloc(ex->arena, h->value.len + 2);
            memcpy(w, "W/", 2);
            memcpy(w + 2, h->value.p, h->value.len);
            h->value = fy_str(w, h->value.len + 2);
        }
    }
    r->content_length = -1;
    fy_arena_on_reset(ex->arena, on_reset, c);
}

/* ---- one shot: hold a body that fits, compress it in one call ---- */

static const fy_layer_ops_t clayer_ops;

/* While a piece is held the layer stands in for the handler's producer, so that a stop from
   the codec cancels the deferred proceed before it reaches a stopped handler. */
static void hold_proceed(fy_exchange_t *ex)
{
    (void)ex; /* the codec took nothing of ours: the deferred proceed is already due */
}

static void hold_stop(fy_exchange_t *ex)
{
    clayer_t *c = (clayer_t *)fy_exchange_find_layer(ex, &clayer_ops);
    if (!c) return;
    fy_defer_cancel(ex->ctx->loop, &c->defer);
    ex->producer = c->orig;
    if (c->orig && c->orig->stop) c->orig->stop(ex);
}

static const fy_producer_ops_t hold_producer = {hold_proceed, hold_stop};

static void held_cb(fy_defer_t *d)
{
    clayer_t *c = d->data;
    fy_exchange_t *ex = c->ex;
    ex->producer = c->orig;
    if (ex->producer && ex->producer->proceed) ex->producer->proceed(ex);
}

/* The piece is in c->buf and the body is not whole yet: ask for the next one. */
static void hold(clayer_t *c, fy_exchange_t *ex)
{
    if (ex->producer != &hold_producer) {
        c->orig = ex->producer;
        ex->producer = &hold_producer;
    }
    fy_defer(ex->ctx->loop, &c->defer);
}

/* Holding ends (the body went, streams, or failed): the handler's producer is back. */
static void unhold(clayer_t *c, fy_exchange_t *ex)
{
    if (ex->producer != &hold_producer) return;
    fy_defer_cancel(ex->ctx->loop, &c->defer);
    ex->producer = c->orig;
}

static bool buf_room(clayer_t *c, size_t add)
{
    if (!c->buf) c->buf = malloc(c->want > 0 ? (size_t)c->want : 1); /* want <= one-shot-max */
    return c->buf && c->blen + add <= (size_t)(c->want > 0 ? c->want : 1);
}

static void fail(clayer_t *c, fy_exchange_t *ex)
{
    unhold(c, ex);
    enc_free(c);
    c->one = false;
    fy_layer_next_send(&c->l, ex, NULL, 0, FY_SEND_ERROR);
}

/* Compress the whole body in[0..n) in one call and send it with `state`; Content-Length is
   the output's. */
static void one_finish(clayer_t *c, fy_exchange_t *ex, const void *in, size_t n, int state)
{
    const fy_compress_conf_t *cf = c->cf->conf;
    int level = (int)(c->coding == FY_CODING_GZIP ? cf->gzip_level : cf->zstd_level);
    size_t b = fy__compress_oneshot_bound(c->coding, level, n);
    if (b && c->cap < b) {
        unsigned char *p = realloc(c->out, b);
        if (p) c->out = p, c->cap = b;
    }
    size_t o = b && c->cap >= b ? fy__compress_oneshot(c->coding, level, in, n, c->out, c->cap) : 0;
    free(c->buf);
    c->buf = NULL;
    if (!o) {
        fail(c, ex);
        return;
    }
    unhold(c, ex);
    c->one = false;
    c->one_done = true;
    ex->res.content_length = (int64_t)o;
    struct iovec iov = {c->out, o};
    fy_layer_next_send(&c->l, ex, &iov, 1, state);
}

/* More than the announced length came: give up holding, stream from here (the held bytes
   first). The encoder starts now; bufs[0..n) is what to encode, `v` room for n + 1. */
static size_t to_stream(clayer_t *c, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                        struct iovec *v)
{
    unhold(c, ex);
    c->one = false;
    if (!enc_init(c, -1)) return (size_t)-1;
    size_t m = 0;
    if (c->blen) v[m++] = (struct iovec){c->buf, c->blen};
    for (size_t i = 0; i < n; i++) v[m++] = bufs[i];
    return m;
}

static void l_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *bufs, size_t n,
                   int state)
{
    clayer_t *c = (clayer_t *)l;
    if (c->state == ST_UNDECIDED) {
        int64_t fl = -1;
        if (state == FY_SEND_FINAL) {
            fl = 0;
            for (size_t i = 0; i < n; i++) fl += (int64_t)bufs[i].iov_len;
        }
        decide(c, ex, fl);
    }
    if (c->state != ST_ON || state == FY_SEND_ERROR) {
        if (c->state == ST_ON) unhold(c, ex); /* no deferred proceed into a failed handler */
        fy_layer_next_send(l, ex, bufs, n, state);
        return;
    }
    size_t t = 0;
    for (size_t i = 0; i < n; i++) t += bufs[i].iov_len;
    if (c->one_done) { /* the whole body went already */
        if (t)
            fail(c, ex);
        else
            fy_layer_next_send(l, ex, NULL, 0, state);
        return;
    }
    if (c->one && c->blen + t <= (uint64_t)c->want) {
        bool whole = state == FY_SEND_FINAL || c->blen + t == (uint64_t)c->want;
        if (whole && c->blen == 0 && n <= 1) { /* all of it in one piece: no copy */
            one_finish(c, ex, n ? bufs[0].iov_base : NULL, t, state);
            return;
        }
        if (!buf_room(c, t)) {
            fail(c, ex);
            return;
        }
        for (size_t i = 0; i < n; i++) {
            if (!bufs[i].iov_len) continue; /* an empty piece may have no pointer */
            memcpy(c->buf + c->blen, bufs[i].iov_base, bufs[i].iov_len);
            c->blen += bufs[i].iov_len;
        }
        if (whole)
            one_finish(c, ex, c->buf, c->blen, state);
        else
            hold(c, ex);
        return;
    }
    if (c->one) {
        struct iovec *v = fy_arena_alloc(ex->arena, sizeof *v * (n + 1));
        size_t m = v ? to_stream(c, ex, bufs, n, v) : (size_t)-1;
        if (m == (size_t)-1) {
            fail(c, ex);
            return;
        }
        bufs = v;
        n = m;
    }
    ssize_t o = encode(c, bufs, n, state == FY_SEND_FINAL);
    free(c->buf);
    c->buf = NULL;
    c->blen = 0;
    if (o < 0) {
        fail(c, ex);
        return;
    }
    if (state == FY_SEND_FINAL) enc_free(c);
    struct iovec iov = {c->out, (size_t)o};
    fy_layer_next_send(l, ex, &iov, o ? 1 : 0, state);
}

/* ---- static files: read and compress one chunk per proceed ---- */

static void file_step(clayer_t *c, fy_exchange_t *ex)
{
    size_t want = c->left < c->cf->conf->file_chunk ? c->left : c->cf->conf->file_chunk;
    ssize_t r;
    do r = pread(c->fd, c->in, want, c->off);
    while (r < 0 && errno == EINTR);
    if (r <= 0 && want > 0) { /* an error, or the file shrank under us */
        enc_free(c);
        ex->producer = c->orig;
        fy_layer_next_send(&c->l, ex, NULL, 0, FY_SEND_ERROR);
        return;
    }
    c->off += r;
    c->left -= (size_t)r;
    bool last = c->left == 0 && c->file_state == FY_SEND_FINAL;
    struct iovec in = {c->in, (size_t)r};
    ssize_t o = encode(c, &in, r ? 1 : 0, last);
    if (o < 0) {
        enc_free(c);
        ex->producer = c->orig;
        fy_layer_next_send(&c->l, ex, NULL, 0, FY_SEND_ERROR);
        return;
    }
    if (c->left == 0) {
        ex->producer = c->orig; /* a MORE file send: the handler goes on after this one */
        if (last) enc_free(c);
    }
    struct iovec iov = {c->out, (size_t)o};
    fy_layer_next_send(&c->l, ex, &iov, o ? 1 : 0, last ? FY_SEND_FINAL : FY_SEND_MORE);
}

static void file_proceed(fy_exchange_t *ex)
{
    clayer_t *c = (clayer_t *)fy_exchange_find_layer(ex, &clayer_ops);
    if (c) file_step(c, ex);
}

static void file_stop(fy_exchange_t *ex)
{
    clayer_t *c = (clayer_t *)fy_exchange_find_layer(ex, &clayer_ops);
    if (c && c->orig && c->orig->stop) c->orig->stop(ex);
}

static const fy_producer_ops_t file_producer = {file_proceed, file_stop};

static void l_send_file(fy_sink_layer_t *l, fy_exchange_t *ex, int fd, off_t off, size_t len,
                        int state)
{
    clayer_t *c = (clayer_t *)l;
    if (c->state == ST_UNDECIDED) decide(c, ex, state == FY_SEND_FINAL ? (int64_t)len : -1);
    if (c->state != ST_ON || state == FY_SEND_ERROR) {
        if (c->state == ST_ON) unhold(c, ex);
        fy_layer_next_send_file(l, ex, fd, off, len, state);
        return;
    }
    if (c->one_done) {
        if (len)
            fail(c, ex);
        else
            fy_layer_next_send(l, ex, NULL, 0, state);
        return;
    }
    if (c->one && c->blen + len <= (uint64_t)c->want) { /* read it all now: it fits */
        if (!buf_room(c, len)) {
            fail(c, ex);
            return;
        }
        for (size_t got = 0; got < len;) {
            ssize_t r = pread(fd, c->buf + c->blen, len - got, off + (off_t)got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { /* an error, or the file shrank under us */
                fail(c, ex);
                return;
            }
            got += (size_t)r;
            c->blen += (size_t)r;
        }
        if (state == FY_SEND_FINAL || c->blen == (uint64_t)c->want)
            one_finish(c, ex, c->buf, c->blen, state);
        else
            hold(c, ex);
        return;
    }
    if (c->one) { /* longer than announced: stream, what was held first */
        unhold(c, ex);
        c->one = false;
        if (!enc_init(c, -1)) {
            fail(c, ex);
            return;
        }
        if (c->blen) {
            struct iovec held = {c->buf, c->blen};
            ssize_t o = encode(c, &held, 1, false);
            free(c->buf);
            c->buf = NULL;
            c->blen = 0;
            if (o < 0 || !(c->in = malloc(c->cf->conf->file_chunk))) {
                fail(c, ex);
                return;
            }
            /* the held bytes now; the file from the next proceed */
            c->fd = fd;
            c->off = off;
            c->left = len;
            c->file_state = state;
            c->orig = ex->producer;
            ex->producer = &file_producer;
            struct iovec iov = {c->out, (size_t)o};
            fy_layer_next_send(l, ex, &iov, o ? 1 : 0, FY_SEND_MORE);
            return;
        }
    }
    if (!c->in) c->in = malloc(c->cf->conf->file_chunk);
    if (!c->in) {
        fy_layer_next_send(l, ex, NULL, 0, FY_SEND_ERROR);
        return;
    }
    c->fd = fd;
    c->off = off;
    c->left = len;
    c->file_state = state;
    c->orig = ex->producer;
    ex->producer = &file_producer;
    file_step(c, ex);
}

static const fy_layer_ops_t clayer_ops = {
    .name = "compress",
    .send = l_send,
    .send_file = l_send_file,
};

static fy_filter_verdict_t on_request(fy_filter_t *f, fy_exchange_t *ex)
{
    compress_filter_t *cf = (compress_filter_t *)f;
    /* nothing to do for what can never be compressed */
    if (ex->req.method_id == FY_M_CONNECT || ex->req.protocol.len) return FY_FILTER_NEXT;
    clayer_t *c = fy_arena_alloc(ex->arena, sizeof *c);
    memset(c, 0, sizeof *c);
    c->cf = cf;
    c->fd = -1;
    c->ex = ex;
    c->defer.cb = held_cb;
    c->defer.data = c;
    fy_exchange_push_layer(ex, &c->l, &clayer_ops, FY_STAGE_COMPRESS);
    return FY_FILTER_NEXT;
}

static void destroy(fy_filter_t *f)
{
    free(f);
}

static const fy_filter_ops_t compress_ops = {
    .name = "compress",
    .stage = FY_STAGE_COMPRESS,
    .on_request = on_request,
    .destroy = destroy,
};

fy_filter_t *fy_compress_filter_new(const fy_compress_conf_t *conf, char *err, size_t errlen)
{
    compress_filter_t *cf = calloc(1, sizeof *cf);
    if (!cf) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    cf->f.ops = &compress_ops;
    cf->conf = conf;
    for (size_t i = 0; i < conf->encodings.n && cf->noffer < 3; i++) {
        int id = fy_compress_coding_id(conf->encodings.v[i], strlen(conf->encodings.v[i]));
        bool dup = false;
        for (size_t k = 0; k < cf->noffer; k++) dup = dup || cf->offer[k] == id;
        if (id > 0 && !dup) cf->offer[cf->noffer++] = id;
    }
    return &cf->f;
}
