/* libFuzzer entry for the HTTP/1.1 request parser and chunked decoder (src/h1/h1_parse.c).
 * Parses the input as a request whole and again restarted (split at data[0] % size), and traps
 * if the two disagree; then decodes what follows the head as a chunked body, whole and split at
 * a second point, and traps if those disagree. Prints nothing. */
#include "h1/h1_parse.h"

#include <stdint.h>
#include <string.h>

#define MAX_HEADERS 16

static const fy_h1_limits_t limits = {
    .max_request_line = 256, .max_header_bytes = 1024, .max_headers = MAX_HEADERS};

struct sum {
    uint64_t hash; /* FNV-1a over data bytes and trailer fields */
    size_t n;
};

static void mix(struct sum *s, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) s->hash = (s->hash ^ (uint8_t)p[i]) * 0x100000001b3ull;
    s->n += n;
}

static void on_data(void *ud, const char *p, size_t n)
{
    mix(ud, p, n);
}

static void on_trailer(void *ud, fy_h1_str_t name, fy_h1_str_t value)
{
    mix(ud, name.p, name.len);
    mix(ud, ":", 1);
    mix(ud, value.p, value.len);
}

/* Decodes in[0..len) after a first call on in[0..split); returns the result, *used the bytes
 * consumed in all. */
static int decode(const char *in, size_t len, size_t split, struct sum *s, size_t *used)
{
    fy_h1_chunked_t c;
    size_t u1 = 0, u2 = 0;
    s->hash = 0xcbf29ce484222325ull;
    s->n = 0;
    fy_h1_chunked_init(&c);
    int r = fy_h1_chunked_decode(&c, in, split, &u1, 128, on_data, on_trailer, s);
    if (r == 0) r = fy_h1_chunked_decode(&c, in + u1, len - u1, &u2, 128, on_data, on_trailer, s);
    *used = u1 + u2;
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    fy_h1_header_t h1[MAX_HEADERS], h2[MAX_HEADERS];
    fy_h1_req_t whole, split;

    fy_h1_req_init(&whole, h1);
    int r = fy_h1_parse_request(&whole, buf, size, &limits);

    fy_h1_req_init(&split, h2);
    size_t at = size ? data[0] % size : 0;
    int r1 = fy_h1_parse_request(&split, buf, at, &limits);
    int r2 = r1 == FY_H1_INCOMPLETE ? fy_h1_parse_request(&split, buf, size, &limits) : r1;
    if (r2 != r) __builtin_trap();
    if (r > 0 && (whole.nheaders != split.nheaders || whole.body_kind != split.body_kind ||
                  whole.content_length != split.content_length))
        __builtin_trap();
    if (r == FY_H1_INCOMPLETE || r > 0) (void)fy_h1_err_str(r);
    if (r < 0 && r != FY_H1_INCOMPLETE && fy_h1_err_status(r) < 400) __builtin_trap();
    if (r <= 0) return 0;

    /* the bytes after the head, as a chunked body (whatever the framing said: more coverage) */
    const char *body = buf + r;
    size_t blen = size - (size_t)r;
    struct sum s1, s2;
    size_t used1, used2;
    int d1 = decode(body, blen, blen, &s1, &used1);
    size_t at2 = size > 1 ? data[1] % (blen + 1) : 0;
    int d2 = decode(body, blen, at2, &s2, &used2);
    if (d1 != d2 || used1 > blen) __builtin_trap();
    if (d1 >= 0 && (used1 != used2 || s1.hash != s2.hash || s1.n != s2.n)) __builtin_trap();
    return 0;
}
