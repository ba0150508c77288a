/* Field rules shared by the HTTP/1.1 request and response parsers; see h1_fields.h. */
#include "h1/h1_fields.h"

/* Bits: 1 tchar, 2 value, 4 target, 8 host, 16 hex, 32 qdtext, 64 digit (FY__H1_C_*). */
const uint8_t fy__h1_cls[256] = {
    0,   0,   0,   0,   0,   0,   0,   0,   0,   34,  0,  0,  0,  0,  0,  0,  /* 0x00 */
    0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,  0,  0,  0,  0,  0,  /* 0x10 */
    34,  47,  6,   35,  47,  39,  47,  47,  46,  46,  47, 47, 46, 47, 47, 38, /* 0x20 */
    127, 127, 127, 127, 127, 127, 127, 127, 127, 127, 38, 46, 38, 46, 38, 38, /* 0x30 */
    38,  63,  63,  63,  63,  63,  63,  47,  47,  47,  47, 47, 47, 47, 47, 47, /* 0x40 */
    47,  47,  47,  47,  47,  47,  47,  47,  47,  47,  47, 38, 6,  38, 39, 47, /* 0x50 */
    39,  63,  63,  63,  63,  63,  63,  47,  47,  47,  47, 47, 47, 47, 47, 47, /* 0x60 */
    47,  47,  47,  47,  47,  47,  47,  47,  47,  47,  47, 38, 39, 38, 47, 0,  /* 0x70 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0x80 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0x90 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xa0 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xb0 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xc0 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xd0 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xe0 */
    34,  34,  34,  34,  34,  34,  34,  34,  34,  34,  34, 34, 34, 34, 34, 34, /* 0xf0 */
};

/* Content-Length = 1#DIGIT; a list must repeat one value (RFC 9110 §8.6). Empty list elements
 * are refused: they have no business in a framing header. */
static int parse_content_length(fy_h1_str_t v, uint64_t *out)
{
    const unsigned char *p = (const unsigned char *)v.p, *e = p + v.len;
    bool have = false;
    uint64_t val = 0;
    for (;;) {
        if (p == e || !(fy__h1_cls[*p] & FY__H1_C_DIGIT)) return FY_H1_EBADCL;
        uint64_t x = 0;
        for (; p < e && (fy__h1_cls[*p] & FY__H1_C_DIGIT); p++) {
            unsigned d = *p - '0';
            if (x > ((uint64_t)INT64_MAX - d) / 10) return FY_H1_EBADCL;
            x = x * 10 + d;
        }
        if (have && x != val) return FY_H1_EBADCL;
        val = x;
        have = true;
        while (p < e && fy__h1_is_ows(*p)) p++;
        if (p == e) break;
        if (*p++ != ',') return FY_H1_EBADCL;
        while (p < e && fy__h1_is_ows(*p)) p++;
    }
    *out = val;
    return 0;
}

int fy__h1_on_content_length(struct fy__h1_framing *f, fy_h1_str_t v)
{
    uint64_t cl;
    if (parse_content_length(v, &cl) < 0 || (f->have_cl && cl != f->cl)) return FY_H1_EBADCL;
    f->have_cl = true;
    f->cl = cl;
    return 0;
}

/* A repeated header is a list too (RFC 9110 §5.3), and a final chunked after another coding
 * would hand a proxy a body it cannot pass on as is: only one lone "chunked" is accepted. */
int fy__h1_on_transfer_encoding(struct fy__h1_framing *f, fy_h1_str_t v)
{
    if (f->have_te || !FY__H1_EQ_LIT(v.p, v.len, "chunked")) return FY_H1_EBADTE;
    f->have_te = true;
    return 0;
}

/* Empty list elements are allowed (RFC 9110 §5.6.1). */
int fy__h1_parse_connection(struct fy__h1_framing *f, fy_h1_str_t v)
{
    const char *p = v.p, *e = p + v.len;
    while (p < e) {
        if (*p == ',' || fy__h1_is_ows(*p)) {
            p++;
            continue;
        }
        const char *t = p;
        while (p < e && (fy__h1_cls[(unsigned char)*p] & FY__H1_C_TCHAR)) p++;
        size_t n = (size_t)(p - t);
        if (n == 0) return FY_H1_EBADHDR;
        while (p < e && fy__h1_is_ows(*p)) p++;
        if (p < e && *p != ',') return FY_H1_EBADHDR;
        if (FY__H1_EQ_LIT(t, n, "close"))
            f->tok_close = true;
        else if (FY__H1_EQ_LIT(t, n, "keep-alive"))
            f->tok_keep_alive = true;
        else if (FY__H1_EQ_LIT(t, n, "upgrade"))
            f->tok_upgrade = true;
    }
    return 0;
}
