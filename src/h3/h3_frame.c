/* HTTP/3 varints, frame headers and SETTINGS (see h3_frame.h). */
#include "h3/h3_frame.h"

#include <string.h>

size_t fy_h3_varint_decode(const uint8_t *p, size_t n, uint64_t *v)
{
    if (n == 0) return 0;
    size_t len = (size_t)1 << (p[0] >> 6);
    if (n < len) return 0;
    uint64_t x = p[0] & 0x3f;
    for (size_t i = 1; i < len; i++) x = (x << 8) | p[i];
    *v = x;
    return len;
}

size_t fy_h3_varint_len(uint64_t v)
{
    return v < 64 ? 1 : v < 16384 ? 2 : v < 1073741824 ? 4 : 8;
}

size_t fy_h3_varint_encode(uint8_t *p, uint64_t v)
{
    size_t len = fy_h3_varint_len(v);
    static const uint8_t tag[9] = {0, 0x00, 0x40, 0, 0x80, 0, 0, 0, 0xc0};
    for (size_t i = len; i-- > 0;) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
    p[0] |= tag[len];
    return len;
}

size_t fy_h3_frame_hdr_feed(fy_h3_frame_rd_t *rd, const uint8_t *p, size_t n)
{
    size_t used = 0;
    while (used < n && !rd->have_hdr) {
        rd->hb[rd->hn++] = p[used++];
        uint64_t t, l;
        size_t a = fy_h3_varint_decode(rd->hb, rd->hn, &t);
        if (!a) continue;
        size_t b = fy_h3_varint_decode(rd->hb + a, rd->hn - a, &l);
        if (!b) continue;
        rd->type = t;
        rd->len = rd->left = l;
        rd->have_hdr = true;
        rd->hn = 0;
    }
    return used;
}

bool fy_h3_frame_is_h2_reserved(uint64_t type)
{
    return type == 0x2 || type == 0x6 || type == 0x8 || type == 0x9;
}

uint64_t fy_h3_settings_parse(const uint8_t *p, size_t n,
                              uint64_t (*cb)(void *ud, uint64_t id, uint64_t value), void *ud)
{
    uint64_t seen[16];
    size_t nseen = 0;
    while (n) {
        uint64_t id, v;
        size_t a = fy_h3_varint_decode(p, n, &id);
        if (!a) return FY_H3_FRAME_ERROR;
        size_t b = fy_h3_varint_decode(p + a, n - a, &v);
        if (!b) return FY_H3_FRAME_ERROR;
        p += a + b;
        n -= a + b;
        /* HTTP/2 settings that HTTP/3 reserves (RFC 9114 §7.2.4.1) */
        if (id == 0x2 || id == 0x3 || id == 0x4 || id == 0x5) return FY_H3_SETTINGS_ERROR;
        if (id <= 0x3f) { /* known range: no duplicates (remembered up to 16 ids) */
            for (size_t i = 0; i < nseen; i++)
                if (seen[i] == id) return FY_H3_SETTINGS_ERROR;
            if (nseen < 16) seen[nseen++] = id;
        }
        uint64_t e = cb ? cb(ud, id, v) : 0;
        if (e) return e;
    }
    return 0;
}
