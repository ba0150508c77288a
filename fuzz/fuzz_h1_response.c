/* libFuzzer entry for the HTTP/1.1 response head parser (src/h1/h1_resp.c). Parses the input as
 * a response whole and again restarted (split at data[0] % size), as the answer to a HEAD
 * request when the size is odd, and traps if the two disagree; after a chunked head, decodes
 * what follows with the chunked decoder of h1_parse.h. Prints nothing. */
#include "h1/h1_resp.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEADERS 16

static const fy_h1_limits_t limits = {
    .max_request_line = 256, .max_header_bytes = 1024, .max_headers = MAX_HEADERS};

static void on_data(void *ud, const char *p, size_t n)
{
    size_t *total = ud;
    if (n == 0 || !p) abort();
    *total += n;
}

static void on_trailer(void *ud, fy_h1_str_t name, fy_h1_str_t value)
{
    (void)ud;
    if (name.len == 0 || (value.len && !value.p)) abort();
}

static bool same(const fy_h1_resp_t *a, const fy_h1_resp_t *b, const char *buf)
{
    if (a->status != b->status || a->minor_version != b->minor_version ||
        a->nheaders != b->nheaders || a->body_kind != b->body_kind ||
        a->content_length != b->content_length || a->conn_close != b->conn_close ||
        a->conn_upgrade != b->conn_upgrade || a->reason.p != b->reason.p ||
        a->reason.len != b->reason.len)
        return false;
    for (size_t i = 0; i < a->nheaders; i++) {
        const fy_h1_header_t *x = &a->headers[i], *y = &b->headers[i];
        if (x->name.p != y->name.p || x->name.len != y->name.len || x->value.p != y->value.p ||
            x->value.len != y->value.len || x->name.p < buf)
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    bool head = size & 1;
    fy_h1_header_t h1[MAX_HEADERS], h2[MAX_HEADERS];
    fy_h1_resp_t whole, split;

    fy_h1_resp_init(&whole, h1);
    int r = fy_h1_parse_response(&whole, buf, size, head, &limits);

    fy_h1_resp_init(&split, h2);
    size_t at = size ? data[0] % size : 0;
    int r1 = fy_h1_parse_response(&split, buf, at, head, &limits);
    int r2 = r1 == FY_H1_INCOMPLETE ? fy_h1_parse_response(&split, buf, size, head, &limits) : r1;
    if (r2 != r) abort();
    if (r1 > 0 && (size_t)r1 > at) abort(); /* a head found in the prefix lies in it */
    if (r > 0 && ((size_t)r > size || (size_t)r > limits.max_header_bytes)) abort();
    if (r > 0 && !same(&whole, &split, buf)) abort();
    if (r > 0 && (whole.status < 100 || whole.status > 999 || whole.nheaders > MAX_HEADERS))
        abort();
    if (r < 0 && r != FY_H1_INCOMPLETE && fy_h1_err_status(r) < 400) abort();
    if (r <= 0 || whole.body_kind != FY_H1_RESP_CHUNKED) return 0;

    /* the bytes after a chunked head, as its body */
    fy_h1_chunked_t c;
    size_t used = 0, total = 0, blen = size - (size_t)r;
    fy_h1_chunked_init(&c);
    int d = fy_h1_chunked_decode(&c, buf + r, blen, &used, 128, on_data, on_trailer, &total);
    if (used > blen || total > blen ||
        (d < 0 && d != FY_H1_EBADCHUNK && d != FY_H1_ECHUNK_OVERFLOW && d != FY_H1_EBADTRAILER &&
         d != FY_H1_EHDR_TOO_LARGE))
        abort();
    return 0;
}
