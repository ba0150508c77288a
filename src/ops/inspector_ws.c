/* WebSocket framing for the inspector (inspector_ws.h). The frame header is collected byte by
 * byte (at most 14), so any split of the stream parses the same. */
#include "ops/inspector_ws.h"

#include <string.h>
#include <zlib.h>

void fy_insp_ws_init(fy_insp_ws_t *w, fy_arena_t *arena, uint64_t budget)
{
    memset(w, 0, sizeof *w);
    w->arena = arena;
    w->up = (fy_insp_ws_dir_t){.from_client = true, .budget = budget, .cur = -1, .frag = -1};
    w->down = (fy_insp_ws_dir_t){.from_client = false, .budget = budget, .cur = -1, .frag = -1};
}

/* A new message; -1 when the list is full. */
static int begin(fy_insp_ws_t *w, bool from_client, uint8_t opcode)
{
    if (w->n >= FY_INSP_WS_MAX_MSGS) {
        w->dropped++;
        return -1;
    }
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 16;
        fy_insp_ws_msg_t *v = fy_arena_alloc(w->arena, nc * sizeof *v);
        if (w->n) memcpy(v, w->msgs, w->n * sizeof *v);
        w->msgs = v;
        w->cap = nc;
    }
    fy_insp_ws_msg_t *m = &w->msgs[w->n];
    memset(m, 0, sizeof *m);
    m->from_client = from_client;
    m->opcode = opcode;
    return (int)w->n++;
}

static void keep_as(fy_insp_ws_t *w, fy_insp_ws_dir_t *d, fy_insp_ws_msg_t *m, const uint8_t *p,
                    size_t n, bool masked)
{
    m->size += n;
    size_t k = n < d->budget ? n : (size_t)d->budget;
    if (k < n) m->cut = true;
    if (!k) return;
    if (m->len + k > m->cap) { /* doubling in the arena, from 256 bytes */
        size_t nc = m->cap ? m->cap * 2 : 256;
        while (nc < m->len + k) nc *= 2;
        char *nb = fy_arena_alloc(w->arena, nc);
        if (m->len) memcpy(nb, m->data, m->len);
        m->data = nb;
        m->cap = nc;
    }
    char *out = m->data + m->len;
    for (size_t i = 0; i < k; i++)
        out[i] = (char)(masked ? p[i] ^ d->mask[(d->mpos + i) & 3] : p[i]);
    m->len += k;
    d->budget -= k;
}

static void keep(fy_insp_ws_t *w, fy_insp_ws_dir_t *d, fy_insp_ws_msg_t *m, const uint8_t *p,
                 size_t n)
{
    keep_as(w, d, m, p, n, d->masked);
}

static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
    return fy_arena_alloc(opaque, (size_t)items * size);
}

static void z_free(voidpf opaque, voidpf p)
{
    (void)opaque, (void)p; /* the arena's */
}

/* Inflate `n` unmasked deflate bytes of m into its payload. False: the data is bad (the
 * direction stops inflating; what came out is kept, the message marked cut). */
static bool inflate_into(fy_insp_ws_t *w, fy_insp_ws_dir_t *d, fy_insp_ws_msg_t *m,
                         const uint8_t *p, size_t n)
{
    z_stream *z = d->z;
    z->next_in = (Bytef *)p;
    z->avail_in = (uInt)n;
    uint8_t out[4096];
    do {
        z->next_out = out;
        z->avail_out = sizeof out;
        int r = inflate(z, Z_SYNC_FLUSH);
        size_t got = sizeof out - z->avail_out;
        if (got) keep_as(w, d, m, out, got, false);
        if (r == Z_BUF_ERROR && !z->avail_in) break; /* all taken, no output pending */
        if (r != Z_OK) return false;
    } while (z->avail_in || !z->avail_out);
    return true;
}

/* Payload bytes of a compressed data message: unmask, inflate, keep what comes out. */
static void keep_compressed(fy_insp_ws_t *w, fy_insp_ws_dir_t *d, fy_insp_ws_msg_t *m,
                            const uint8_t *p, size_t n, bool last)
{
    uint8_t buf[4096];
    bool ok = true;
    for (size_t off = 0; off < n && ok;) {
        size_t k = n - off < sizeof buf ? n - off : sizeof buf;
        for (size_t i = 0; i < k; i++)
            buf[i] = d->masked ? p[off + i] ^ d->mask[(d->mpos + off + i) & 3] : p[off + i];
        ok = inflate_into(w, d, m, buf, k);
        off += k;
    }
    /* the message's end: the 0x00 0x00 0xff 0xff its sender took off (RFC 7692 §7.2.1) */
    static const uint8_t tail[4] = {0, 0, 0xff, 0xff};
    if (ok && last) ok = inflate_into(w, d, m, tail, sizeof tail);
    if (!ok || !d->budget) {
        if (!ok) m->cut = true;
        d->zoff = true; /* bad data, or nothing more could be kept: later ones as sent */
    }
}

/* Whether the message that starts now (compressed) is inflated; makes the context on first use. */
static bool inflating(fy_insp_ws_t *w, fy_insp_ws_dir_t *d)
{
    if (d->zoff || !d->budget) return false;
    if (!d->z) {
        z_stream *z = fy_arena_calloc(w->arena, sizeof *z);
        z->zalloc = z_alloc;
        z->zfree = z_free;
        z->opaque = w->arena;
        if (inflateInit2(z, -15) != Z_OK) { /* raw deflate, the largest window */
            d->zoff = true;
            return false;
        }
        d->z = z;
    }
    return true;
}

/* A whole frame header in d->hdr: start its payload. */
static void frame(fy_insp_ws_t *w, fy_insp_ws_dir_t *d, uint64_t len)
{
    uint8_t b0 = d->hdr[0], op = b0 & 0x0f;
    bool fin = b0 & 0x80, control = op & 0x08;
    /* RSV1 is permessage-deflate's (RFC 7692, on a message's first frame); RSV2/3 have no
       extension we know */
    if ((b0 & 0x30) || (op > 2 && op < 8) || op > 10 ||
        (control && (!fin || len > 125 || b0 & 0x40))) {
        d->bad = true;
        return;
    }
    d->left = len;
    d->mpos = 0;
    d->fin = fin;
    if (control) {
        d->cur = begin(w, d->from_client, op);
    } else if (op == 0) {
        d->cur = d->frag; /* continuation of the data message (or lost: -1) */
    } else {
        d->cur = begin(w, d->from_client, op);
        d->frag = d->cur;
        if (d->cur >= 0 && (b0 & 0x40)) {
            w->msgs[d->cur].compressed = true;
            w->msgs[d->cur].inflated = inflating(w, d);
        }
    }
    if (!control && fin) d->frag = -1;
}

void fy_insp_ws_feed(fy_insp_ws_t *w, bool from_client, const void *data, size_t n)
{
    fy_insp_ws_dir_t *d = from_client ? &w->up : &w->down;
    const uint8_t *p = data;
    while (n && !d->bad) {
        if (d->left) {
            size_t k = n < d->left ? n : (size_t)d->left;
            fy_insp_ws_msg_t *m = d->cur >= 0 ? &w->msgs[d->cur] : NULL;
            if (m && m->inflated && !d->zoff)
                keep_compressed(w, d, m, p, k, d->fin && k == d->left);
            else if (m && !m->inflated)
                keep(w, d, m, p, k);
            d->mpos += (unsigned)k;
            d->left -= k;
            p += k;
            n -= k;
            continue;
        }
        d->hdr[d->hlen++] = *p++;
        n--;
        if (d->hlen < 2) continue;
        unsigned l7 = d->hdr[1] & 0x7fu;
        bool masked = d->hdr[1] & 0x80u;
        unsigned ext = l7 == 126 ? 2u : l7 == 127 ? 8u : 0u;
        unsigned need = 2u + ext + (masked ? 4u : 0u);
        if (d->hlen < need) continue;
        uint64_t len = l7;
        if (ext) {
            len = 0;
            for (unsigned i = 0; i < ext; i++) len = len << 8 | d->hdr[2 + i];
        }
        d->masked = masked;
        if (masked) memcpy(d->mask, d->hdr + 2 + ext, 4);
        d->hlen = 0;
        frame(w, d, len);
        /* an empty last frame still ends a compressed message */
        if (!d->bad && !d->left && d->fin && d->cur >= 0 && w->msgs[d->cur].inflated && !d->zoff)
            keep_compressed(w, d, &w->msgs[d->cur], NULL, 0, true);
    }
}
