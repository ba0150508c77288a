/* WebSocket framing for the inspector (inspector_ws.h). The frame header is collected byte by
 * byte (at most 14), so any split of the stream parses the same. */
#include "ops/inspector_ws.h"

#include <string.h>

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

static void keep(fy_insp_ws_t *w, fy_insp_ws_dir_t *d, fy_insp_ws_msg_t *m, const uint8_t *p,
                 size_t n)
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
        out[i] = (char)(d->masked ? p[i] ^ d->mask[(d->mpos + i) & 3] : p[i]);
    m->len += k;
    d->budget -= k;
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
    if (control) {
        d->cur = begin(w, d->from_client, op);
    } else if (op == 0) {
        d->cur = d->frag; /* continuation of the data message (or lost: -1) */
    } else {
        d->cur = begin(w, d->from_client, op);
        d->frag = d->cur;
        if (d->cur >= 0) w->msgs[d->cur].compressed = b0 & 0x40;
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
            if (d->cur >= 0) keep(w, d, &w->msgs[d->cur], p, k);
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
    }
}
