/* Tests for h1_parse.c. Every request and every chunked body is checked three ways: fed whole,
 * fed in pieces (byte by byte for requests; split at every position and byte by byte for
 * chunked bodies), and ending exactly at a PROT_NONE guard page (every prefix, too), so that a
 * read of buf[len] faults. */
#include "h1/h1_parse.h"
#include "core/test.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/test_guard.h"

/* ---- requests ---- */

#define OK 1 /* want: success; the head is the input without its `tail` */
enum { F_CLOSE = 1, F_KA = 2, F_EXPECT = 4, F_UPGRADE = 8 };

struct row {
    int line;
    const char *req;
    size_t len;
    size_t tail; /* bytes after the head (body, pipelined request) */
    int want;    /* OK, FY_H1_INCOMPLETE or an enum fy_h1_err */
    /* checked for OK rows when set */
    const char *method, *target, *host, *lastname, *lastval;
    int ver;  /* 10 or 11 */
    int nhdr; /* header count, checked when > 0 */
    int body; /* enum fy_h1_body_kind, always checked */
    uint64_t cl;
    unsigned flags; /* F_*, always checked */
};

#define ROWT(head, tail, ...)                                                                      \
    {                                                                                              \
        __LINE__, head tail, sizeof(head tail) - 1, sizeof(tail) - 1, __VA_ARGS__                  \
    }
#define ROW(head, ...) ROWT(head, "", __VA_ARGS__)
#define H "Host: a\r\n"
#define G "GET / HTTP/1.1\r\n"
#define P "POST /p HTTP/1.1\r\nHost: a\r\n"

/* clang-format off */
static const struct row rows[] = {
    /* valid */
    ROW(G H "\r\n", .want = OK, .method = "GET", .target = "/", .ver = 11, .nhdr = 1, .host = "a"),
    ROW("GET / HTTP/1.0\r\n\r\n", .want = OK, .ver = 10, .host = "", .flags = F_CLOSE),
    ROW("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", .want = OK, .ver = 10, .flags = F_KA),
    ROW("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", .want = OK, .flags = F_KA | F_CLOSE),
    ROW("GET /x HTTP/1.1\nHost: a\n\n", .want = OK, .target = "/x", .host = "a", .nhdr = 1),
    ROW("GET / HTTP/1.1\r\nHost: a\n\r\n", .want = OK, .host = "a"),
    ROW("GET / HTTP/1.1\nHost: a\r\n\n", .want = OK, .host = "a"),
    ROW("\r\n\r\n" G H "\r\n", .want = OK, .method = "GET", .host = "a"),
    ROW("\n\r\n\n" G H "\r\n", .want = OK, .method = "GET"),
    ROWT("GET /a HTTP/1.1\r\n" H "\r\n", "GET /b HTTP/1.1\r\n" H "\r\n", .want = OK, .target = "/a"),
    ROWT(G H "\r\n", "\r\nGET /b HTTP/1.1\r\n", .want = OK),
    ROW("GET http://example.com/x?y HTTP/1.1\r\nHost: example.com\r\n\r\n", .want = OK,
        .target = "http://example.com/x?y", .host = "example.com"),
    ROW("GET HTTPS://Example.COM:8443 HTTP/1.1\r\nHost: Example.COM:8443\r\n\r\n", .want = OK,
        .target = "HTTPS://Example.COM:8443"),
    ROW("GET http://[::1]:80/ HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", .want = OK, .host = "[::1]:80"),
    ROW("GET http://a?q HTTP/1.1\r\n" H "\r\n", .want = OK),
    ROW("OPTIONS * HTTP/1.1\r\n" H "\r\n", .want = OK, .method = "OPTIONS", .target = "*"),
    ROW("OPTIONS /x HTTP/1.1\r\n" H "\r\n", .want = OK, .method = "OPTIONS"),
    ROW("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", .want = OK,
        .method = "CONNECT", .target = "example.com:443"),
    ROW("CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n", .want = OK,
        .target = "[2001:db8::1]:443"),
    ROWT(P "Content-Length: 5\r\n\r\n", "hello", .want = OK, .body = FY_H1_BODY_LENGTH, .cl = 5),
    ROWT(P "Content-Length: 5\r\ncontent-length: 5\r\n\r\n", "hello", .want = OK,
         .body = FY_H1_BODY_LENGTH, .cl = 5, .nhdr = 3),
    ROW(P "Content-Length: 5 , 5,5\r\n\r\n", .want = OK, .body = FY_H1_BODY_LENGTH, .cl = 5),
    ROW(P "Content-Length: 5\r\nContent-Length: 005\r\n\r\n", .want = OK, .body = FY_H1_BODY_LENGTH, .cl = 5),
    ROW(P "Content-Length: 0\r\n\r\n", .want = OK, .body = FY_H1_BODY_LENGTH, .cl = 0),
    ROW(P "Content-Length: 9223372036854775807\r\n\r\n", .want = OK, .body = FY_H1_BODY_LENGTH,
        .cl = INT64_MAX),
    ROWT(P "Transfer-Encoding: chunked\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n", .want = OK,
         .body = FY_H1_BODY_CHUNKED),
    ROW(P "Transfer-Encoding: \t ChUnKeD \t\r\n\r\n", .want = OK, .body = FY_H1_BODY_CHUNKED),
    ROW(G H "X-Tab:\ta\tb \t\r\n\r\n", .want = OK, .lastname = "X-Tab", .lastval = "a\tb"),
    ROW(G H "X-Empty:\r\n\r\n", .want = OK, .lastname = "X-Empty", .lastval = ""),
    ROW(G H "X-Empty: \t \r\n\r\n", .want = OK, .lastval = ""),
    ROW(G H "X-Utf8: caf\xc3\xa9\r\n\r\n", .want = OK, .lastval = "caf\xc3\xa9"),
    ROW(G H "X-Q: \"a, b\" ; q=0.5 \r\n\r\n", .want = OK, .lastval = "\"a, b\" ; q=0.5"),
    ROW(G H "Connection: close\r\n\r\n", .want = OK, .flags = F_CLOSE),
    ROW(G H "Connection: Keep-Alive, Upgrade\r\nUpgrade: websocket\r\n\r\n", .want = OK,
        .flags = F_KA | F_UPGRADE),
    ROW(G H "Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABk\r\n\r\n",
        .want = OK, .flags = F_UPGRADE, .nhdr = 4),
    ROW(G H "Connection: upgrade\r\n\r\n", .want = OK, .flags = 0),
    ROW(G H "Connection: ,, close ,\r\nConnection: foo\r\n\r\n", .want = OK, .flags = F_CLOSE),
    ROW("PUT /u HTTP/1.1\r\n" H "Expect: 100-Continue\r\nContent-Length: 1\r\n\r\n", .want = OK,
        .flags = F_EXPECT, .body = FY_H1_BODY_LENGTH, .cl = 1),
    ROW("PUT /u HTTP/1.0\r\nExpect: 100-continue\r\n\r\n", .want = OK, .flags = F_CLOSE),
    ROW(G "Expect: 200-ok\r\n" H "\r\n", .want = OK, .flags = 0),
    ROW("PURGE /x HTTP/1.1\r\n" H "\r\n", .want = OK, .method = "PURGE"),
    ROW("M-SEARCH_!#$%&'*+.^`|~09 / HTTP/1.1\r\n" H "\r\n", .want = OK,
        .method = "M-SEARCH_!#$%&'*+.^`|~09"),
    ROW(G "Host: 127.0.0.1:8080\r\n\r\n", .want = OK, .host = "127.0.0.1:8080"),
    ROW(G "Host:\r\n\r\n", .want = OK, .host = ""),
    ROW(G "Host: xn--caf-dma.example%41:\r\n\r\n", .want = OK, .host = "xn--caf-dma.example%41:"),
    ROW("GET /p?q=a%20b&r=~!$'()*+,;=:@/?{|}^`\"<>\\ HTTP/1.1\r\n" H "\r\n", .want = OK,
        .target = "/p?q=a%20b&r=~!$'()*+,;=:@/?{|}^`\"<>\\"),
    ROW(G "!#$%&'*+-.^_`|~09azAZ: v\r\n" H "\r\n", .want = OK, .nhdr = 2),
    ROW(G "HOST: a\r\ncontent-LENGTH: 3\r\n\r\n", .want = OK, .body = FY_H1_BODY_LENGTH, .cl = 3),
    ROW("GET //x HTTP/1.1\r\n" H "\r\n", .want = OK, .target = "//x"),
    ROW(G H "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\n\r\n", .want = OK, .nhdr = 8),

    /* long runs through the vectorised paths, with a byte needing a closer look past 16 */
    ROW(G H "X-Long-Name_With.Odd~Chars|Here: a value that is long\tand has a tab in it\r\n\r\n",
        .want = OK, .lastname = "X-Long-Name_With.Odd~Chars|Here",
        .lastval = "a value that is long\tand has a tab in it"),
    ROW(G H "Accept-Charset: utf-8\r\n\r\n", .want = OK, .lastname = "Accept-Charset"),
    ROW("GET /a/very/long/path/that/goes/on/and/on?x=1&y=2 HTTP/1.1\r\n" H "\r\n", .want = OK,
        .target = "/a/very/long/path/that/goes/on/and/on?x=1&y=2"),

    /* incomplete */
    ROW("", .want = FY_H1_INCOMPLETE),
    ROW("\r", .want = FY_H1_INCOMPLETE),
    ROW("\r\n\r\n\n", .want = FY_H1_INCOMPLETE),
    ROW(G H, .want = FY_H1_INCOMPLETE),
    ROW(G H "\r", .want = FY_H1_INCOMPLETE),

    /* malformed request line */
    ROW("GET  / HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW("GET /  HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW("GET / HTTP/1.1 \r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW(" GET / HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW("GET\t/ HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW("G@T / HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW("GET / http/1.1\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW("GET /\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW("GET / HTTP/1.1\rHost: a\r\n\r\n", .want = FY_H1_EBADREQ),
    ROW("GET / HTTP/1.1\r\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW(G " Host: a\r\n\r\n", .want = FY_H1_EBADREQ),
    ROW("GET / HTTP/1.10\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW("GET / HTTP/1\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW("\rGET / HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADREQ),
    ROW("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n", .want = FY_H1_EBADREQ),

    /* request-target */
    ROW("GET /a#f HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET /a\x7f" "b HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET /\xc3\xa9 HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET /a\x01" "b HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET /a\tb HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET a/b HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET * HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("OPTIONS ** HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET example.com:80 HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("CONNECT / HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("CONNECT example.com HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("CONNECT example.com: HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET ftp://x/ HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET http:// HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET http:///x HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET http://u@h/ HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),

    ROW("GET /a/very/long/path/that/goes/on#frag HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET /a/very/long/path/that/goes/on\x7f HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),
    ROW("GET /a/very/long/path/that/goes/on\xff HTTP/1.1\r\n" H "\r\n", .want = FY_H1_EBADTARGET),

    /* version */
    ROW("GET / HTTP/2.0\r\n" H "\r\n", .want = FY_H1_EVERSION),
    ROW("GET / HTTP/1.2\r\n" H "\r\n", .want = FY_H1_EVERSION),
    ROW("GET / HTTP/0.9\r\n\r\n", .want = FY_H1_EVERSION),
    ROWT("PRI * HTTP/2.0\r\n\r\n", "SM\r\n\r\n", .want = FY_H1_EVERSION),

    /* header fields */
    ROW(G "Host : a\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host\t: a\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "X: a\x00" "b\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "X: a\rb\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "X: a\r\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "\rX: a\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "\r\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "X: a\x01" "b\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "X: a\x7f\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H ": v\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "X\x80: v\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "X(y): v\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "NoColon\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host: a b\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host: a/b\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host: u@a\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host: [::1\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host: []\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host: a:80x\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host: a:123456\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host: a%zz\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host: :80\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G "Host: caf\xc3\xa9\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "Connection: close;x\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "Connection: close x\r\n\r\n", .want = FY_H1_EBADHDR),

    ROW(G H "X: a long value that goes past sixteen bytes\x01 here\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "X: a long value that goes past sixteen bytes\x7f here\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "X: a long value that goes past sixteen bytes\r here\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "A-Very-Long-Header-Name-Here-X : v\r\n\r\n", .want = FY_H1_EBADHDR),
    ROW(G H "A-Very-Long-Header-Name-Here-X\x80: v\r\n\r\n", .want = FY_H1_EBADHDR),

    /* obs-fold */
    ROW(G H "X: a\r\n b\r\n\r\n", .want = FY_H1_EOBSFOLD),
    ROW(G H "X: a\n\tb\n\n", .want = FY_H1_EOBSFOLD),

    /* too many fields (limit 8) */
    ROW(G H "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nI: 8\r\n\r\n",
        .want = FY_H1_ETOO_MANY_HDRS),

    /* framing */
    ROW(P "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", .want = FY_H1_ECL_TE),
    ROW(P "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", .want = FY_H1_ECL_TE),
    ROW(P "Content-Length: abc\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length: -1\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length: +5\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length: 5, 6\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length: 5\r\nContent-Length: 6\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length:\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length: 1 2\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length: 9223372036854775808\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length: 99999999999999999999999\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length: 5,,5\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length: 5,\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Content-Length: 0x10\r\n\r\n", .want = FY_H1_EBADCL),
    ROW(P "Transfer-Encoding: gzip, chunked\r\n\r\n", .want = FY_H1_EBADTE),
    ROW(P "Transfer-Encoding: chunked, chunked\r\n\r\n", .want = FY_H1_EBADTE),
    ROW(P "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", .want = FY_H1_EBADTE),
    ROW(P "Transfer-Encoding: chunked, gzip\r\n\r\n", .want = FY_H1_EBADTE),
    ROW(P "Transfer-Encoding:\r\n\r\n", .want = FY_H1_EBADTE),
    ROW(P "Transfer-Encoding: identity\r\n\r\n", .want = FY_H1_EBADTE),
    ROW(P "Transfer-Encoding: chunked;q=1\r\n\r\n", .want = FY_H1_EBADTE),
    ROW("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", .want = FY_H1_EBADTE),

    /* Host */
    ROW("GET / HTTP/1.1\r\n\r\n", .want = FY_H1_ENOHOST),
    ROW("GET / HTTP/1.1\r\nX: a\r\n\r\n", .want = FY_H1_ENOHOST),
    ROW(G H "host: a\r\n\r\n", .want = FY_H1_ENOHOST),
    ROW(G "Host: a\r\nHost: b\r\n\r\n", .want = FY_H1_ENOHOST),
    ROW("GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", .want = FY_H1_ENOHOST),
};
/* clang-format on */

static const fy_h1_limits_t lim = {
    .max_request_line = 100, .max_header_bytes = 400, .max_headers = 8};

static bool is_limit_err(int r)
{
    return r == FY_H1_EURI_TOO_LONG || r == FY_H1_EHDR_TOO_LARGE;
}

static void check_fields(const struct row *w, const fy_h1_req_t *q, const char *buf)
{
    int line = w->line;
#define FCHECK(c)                                                                                  \
    do {                                                                                           \
        CHECK(c);                                                                                  \
        if (!(c)) fprintf(stderr, "  (row at line %d)\n", line);                                   \
    } while (0)
#define FSTR(s, lit)                                                                               \
    FCHECK(!(lit) || ((s).len == strlen(lit) && (!(s).len || memcmp((s).p, (lit), (s).len) == 0)))
    FSTR(q->method, w->method);
    FSTR(q->target, w->target);
    FSTR(q->host, w->host);
    FCHECK(!w->ver || q->minor_version == w->ver - 10);
    FCHECK(w->nhdr <= 0 || q->nheaders == (size_t)w->nhdr);
    FCHECK(q->body_kind == w->body);
    FCHECK(q->content_length == w->cl);
    FCHECK(q->conn_close == !!(w->flags & F_CLOSE));
    FCHECK(q->conn_keep_alive == !!(w->flags & F_KA));
    FCHECK(q->expect_continue == !!(w->flags & F_EXPECT));
    FCHECK(q->conn_upgrade == !!(w->flags & F_UPGRADE));
    if (q->nheaders > 0) {
        FSTR(q->headers[q->nheaders - 1].name, w->lastname);
        FSTR(q->headers[q->nheaders - 1].value, w->lastval);
    }
    /* every slice lies in the head */
    size_t head = w->len - w->tail;
    FCHECK(q->method.p >= buf && q->target.p + q->target.len <= buf + head);
    for (size_t i = 0; i < q->nheaders; i++)
        FCHECK(q->headers[i].name.p >= buf &&
               q->headers[i].value.p + q->headers[i].value.len <= buf + head);
}

/* Parses `req` whole, byte by byte, and at the guard page; all must give `want`. */
static void check_request(const struct row *w)
{
    fy_h1_header_t hdrs[8];
    fy_h1_req_t q;
    size_t len = w->len;
    int want = w->want == OK ? (int)(len - w->tail) : w->want;

    /* whole */
    fy_h1_req_init(&q, hdrs);
    int r = fy_h1_parse_request(&q, w->req, len, &lim);
    if (r != want) fprintf(stderr, "row at line %d: whole\n", w->line);
    CHECK_EQ_INT(r, want);
    if (r > 0 && w->want == OK) check_fields(w, &q, w->req);

    /* byte by byte on one growing buffer: INCOMPLETE until the result; the head search must
     * never fall back more than one byte (the lone CR it may leave for the next call) */
    fy_h1_req_init(&q, hdrs);
    int rb = FY_H1_INCOMPLETE;
    size_t k, first = len + 1;
    bool resumes = true;
    for (k = 1; k <= len; k++) {
        rb = fy_h1_parse_request(&q, w->req, k, &lim);
        if (rb != FY_H1_INCOMPLETE) break;
        if (q.scanned + 1 < k) resumes = false;
    }
    if (k <= len) first = k;
    if (len == 0) rb = fy_h1_parse_request(&q, w->req, 0, &lim);
    if (rb != want || !resumes) fprintf(stderr, "row at line %d: byte by byte\n", w->line);
    CHECK_EQ_INT(rb, want);
    CHECK(resumes);
    if (want > 0) {
        CHECK_EQ_INT(first, want);
        check_fields(w, &q, w->req);
    }

    /* at the guard page: the whole input and every prefix of it, each parsed afresh */
    for (k = 0; k <= len; k++) {
        const char *g = at_guard(w->req, k);
        fy_h1_req_init(&q, hdrs);
        int rg = fy_h1_parse_request(&q, g, k, &lim);
        int expect = k < first ? FY_H1_INCOMPLETE : want;
        if (k == len) expect = want;
        if (rg != expect) fprintf(stderr, "row at line %d: guard prefix %zu\n", w->line, k);
        CHECK_EQ_INT(rg, expect);
        if (k == len && rg > 0 && w->want == OK) check_fields(w, &q, g);
    }
    (void)is_limit_err;
}

/* Builds "GET /aaa... HTTP/1.1" of exactly `n` bytes (n >= 15) into out. */
static size_t make_reqline(char *out, size_t n)
{
    size_t path = n - 13; /* "GET " + " HTTP/1.1" */
    memcpy(out, "GET /", 5);
    memset(out + 5, 'a', path - 1);
    memcpy(out + 4 + path, " HTTP/1.1", 9);
    return n;
}

static void check_built(int line, const char *buf, size_t len, int want)
{
    struct row w = {.line = line, .req = buf, .len = len, .want = want};
    check_request(&w);
}

static void test_limits(void)
{
    static char b[1024];
    size_t n;

    /* request line exactly at max_request_line (100), and one over */
    n = make_reqline(b, 100);
    memcpy(b + n, "\r\n" H "\r\n", 13);
    check_built(__LINE__, b, n + 13, OK);
    n = make_reqline(b, 101);
    memcpy(b + n, "\r\n" H "\r\n", 13);
    check_built(__LINE__, b, n + 13, FY_H1_EURI_TOO_LONG);
    memcpy(b + n, "\n" H "\n", 11);
    check_built(__LINE__, b, n + 11, FY_H1_EURI_TOO_LONG);
    /* incomplete: 100 bytes (+ CR) wait for more, 101 bytes fail at once */
    n = make_reqline(b, 100);
    check_built(__LINE__, b, n, FY_H1_INCOMPLETE);
    b[n] = '\r';
    check_built(__LINE__, b, n + 1, FY_H1_INCOMPLETE);
    n = make_reqline(b, 101);
    check_built(__LINE__, b, n, FY_H1_EURI_TOO_LONG);
    /* leading empty lines do not count against the request line */
    memcpy(b, "\r\n\r\n", 4);
    n = make_reqline(b + 4, 100) + 4;
    memcpy(b + n, "\r\n" H "\r\n", 13);
    check_built(__LINE__, b, n + 13, OK);

    /* head exactly at max_header_bytes (400), one over, and incomplete at the bound */
    const char *pre = G H "X-Pad: ";
    size_t pl = strlen(pre);
    for (size_t total = 399; total <= 401; total++) {
        memcpy(b, pre, pl);
        memset(b + pl, 'v', total - pl - 4);
        memcpy(b + total - 4, "\r\n\r\n", 4);
        check_built(__LINE__, b, total, total <= 400 ? OK : FY_H1_EHDR_TOO_LARGE);
        check_built(__LINE__, b, total - 1,
                    total - 1 >= 400 ? FY_H1_EHDR_TOO_LARGE : FY_H1_INCOMPLETE);
    }
    /* leading empty lines count against max_header_bytes */
    memset(b, '\n', 400);
    check_built(__LINE__, b, 399, FY_H1_INCOMPLETE);
    check_built(__LINE__, b, 400, FY_H1_EHDR_TOO_LARGE);
    /* a long but in-limit value */
    memcpy(b, pre, pl);
    memset(b + pl, 'v', 300);
    memcpy(b + pl + 300, "\r\n\r\n", 4);
    check_built(__LINE__, b, pl + 304, OK);
}

static void test_request_misc(void)
{
    fy_h1_header_t hdrs[8];
    fy_h1_req_t q;
    static const char two[] = "GET /a HTTP/1.1\r\nHost: a\r\nX:  1 \r\n\r\n"
                              "POST /b HTTP/1.0\r\nContent-Length: 2\r\n\r\nok";
    fy_h1_req_init(&q, hdrs);
    int r = fy_h1_parse_request(&q, two, sizeof two - 1, &lim);
    CHECK_EQ_INT(r, 36);
    CHECK_EQ_INT(q.nheaders, 2);
    CHECK_STRN(q.headers[0].name.p, q.headers[0].name.len, "Host");
    CHECK_STRN(q.headers[1].name.p, q.headers[1].name.len, "X");
    CHECK_STRN(q.headers[1].value.p, q.headers[1].value.len, "1");
    /* the pipelined request, parsed from where the first one ended */
    fy_h1_req_init(&q, hdrs);
    int r2 = fy_h1_parse_request(&q, two + r, sizeof two - 1 - (size_t)r, &lim);
    CHECK_EQ_INT(r2, (int)(sizeof two - 1 - (size_t)r - 2));
    CHECK_STRN(q.method.p, q.method.len, "POST");
    CHECK_EQ_INT(q.minor_version, 0);
    CHECK(q.conn_close);
    CHECK_EQ_INT(q.content_length, 2);

    /* resetting only `scanned` restarts on a different buffer */
    fy_h1_req_init(&q, hdrs);
    CHECK_EQ_INT(fy_h1_parse_request(&q, "GET /x HTTP/1.1\r\nHo", 19, &lim), FY_H1_INCOMPLETE);
    q.scanned = 0;
    CHECK_EQ_INT(fy_h1_parse_request(&q, "\r\nGET / HTTP/1.1\r\nHost: b\r\n\r\n", 29, &lim), 29);
    CHECK_STRN(q.host.p, q.host.len, "b");
    /* calling again after success gives the same answer */
    CHECK_EQ_INT(fy_h1_parse_request(&q, "\r\nGET / HTTP/1.1\r\nHost: b\r\n\r\n", 29, &lim), 29);

    /* a limit of 0 headers */
    fy_h1_limits_t l0 = lim;
    l0.max_headers = 0;
    fy_h1_req_init(&q, hdrs);
    CHECK_EQ_INT(fy_h1_parse_request(&q, "GET / HTTP/1.0\r\n\r\n", 18, &l0), 18);
    fy_h1_req_init(&q, hdrs);
    CHECK_EQ_INT(fy_h1_parse_request(&q, "GET / HTTP/1.0\r\nA: b\r\n\r\n", 24, &l0),
                 FY_H1_ETOO_MANY_HDRS);

    /* large head fed byte by byte completes (the search resumes; no quadratic rescans) */
    static char big[60000];
    size_t n = 0;
    memcpy(big, G H, 25);
    n = 25;
    while (n < sizeof big - 40) {
        memcpy(big + n, "X-Some-Header: some value here\r\n", 32);
        n += 32;
    }
    memcpy(big + n, "\r\n", 2);
    n += 2;
    fy_h1_limits_t lb = {.max_request_line = 100, .max_header_bytes = sizeof big, .max_headers = 8};
    fy_h1_req_init(&q, hdrs);
    for (size_t k = 1; k < n; k++) fy_h1_parse_request(&q, big, k, &lb);
    CHECK_EQ_INT(fy_h1_parse_request(&q, big, n, &lb), FY_H1_ETOO_MANY_HDRS);
    CHECK(q.scanned + 2 >= n - 32);
}

static void test_misc(void)
{
    fy_h1_str_t s = {"Keep-ALIVE", 10};
    CHECK(fy_h1_str_eq_lit(s, "keep-alive"));
    CHECK(!fy_h1_str_eq_lit(s, "keep-alivE"));
    CHECK(!fy_h1_str_eq_lit(s, "keep-aliv"));
    fy_h1_str_t cr = {"\r", 1};
    CHECK(!fy_h1_str_eq_lit(cr, "-")); /* '\r' | 0x20 == '-': lowering must be letters only */

    static const struct {
        int err, status;
        const char *needle;
    } errs[] = {
        {FY_H1_EBADREQ, 400, "request line"},
        {FY_H1_EBADTARGET, 400, "target"},
        {FY_H1_EVERSION, 505, "version"},
        {FY_H1_EURI_TOO_LONG, 414, "too long"},
        {FY_H1_EHDR_TOO_LARGE, 431, "too large"},
        {FY_H1_ETOO_MANY_HDRS, 431, "too many"},
        {FY_H1_EBADHDR, 400, "bare CR"},
        {FY_H1_EOBSFOLD, 400, "folding"},
        {FY_H1_ECL_TE, 400, "both Content-Length and Transfer-Encoding"},
        {FY_H1_EBADCL, 400, "Content-Length"},
        {FY_H1_EBADTE, 400, "Transfer-Encoding"},
        {FY_H1_ENOHOST, 400, "Host"},
        {FY_H1_EBADCHUNK, 400, "chunk"},
        {FY_H1_ECHUNK_OVERFLOW, 400, "chunk size"},
        {FY_H1_EBADTRAILER, 400, "trailer"},
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        CHECK_EQ_INT(fy_h1_err_status(errs[i].err), errs[i].status);
        CHECK(strstr(fy_h1_err_str(errs[i].err), errs[i].needle) != NULL);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(fy_h1_err_str(errs[i].err), fy_h1_err_str(errs[j].err)) != 0);
    }
    CHECK(strcmp(fy_h1_err_str(-1), "unknown error") == 0);
    CHECK(strcmp(fy_h1_err_str(FY_H1_INCOMPLETE), "incomplete") == 0);
    CHECK(strcmp(fy_h1_err_str(10), "ok") == 0);
}

/* ---- chunked ---- */

struct crow {
    int line;
    const char *in;
    size_t len;
    size_t tail; /* bytes after the body that must stay unconsumed */
    int want;    /* 1 done, 0 needs more, or an error */
    const char *data;
    const char *trailers; /* "name=value;" each */
    size_t tmax;          /* max_trailer_bytes; 0 means 64 */
};

#define CROWT(body, tail, ...)                                                                     \
    {                                                                                              \
        __LINE__, body tail, sizeof(body tail) - 1, sizeof(tail) - 1, __VA_ARGS__                  \
    }
#define CROW(body, ...) CROWT(body, "", __VA_ARGS__)

/* clang-format off */
static const struct crow crows[] = {
    CROW("5\r\nhello\r\n0\r\n\r\n", .want = 1, .data = "hello"),
    CROW("3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n", .want = 1, .data = "abcdefg"),
    CROW("a\r\n0123456789\r\nA\r\nabcdefghij\r\n0\r\n\r\n", .want = 1, .data = "0123456789abcdefghij"),
    CROW("5;foo=bar\r\nhello\r\n0;x\r\n\r\n", .want = 1, .data = "hello"),
    CROW("5 ; a = b ; c=\"q\\\"x;y\" ;d\t;e=f\r\nhello\r\n0 ;z=\"\"\r\n\r\n", .want = 1, .data = "hello"),
    CROW("5;a=\"\xc3\xa9\"\r\nhello\r\n0\r\n\r\n", .want = 1, .data = "hello"),
    CROW("5\nhello\n0\n\n", .want = 1, .data = "hello"),
    CROW("5\r\nhello\n0\r\n\n", .want = 1, .data = "hello"),
    CROW("1\r\n\r\r\n0\r\n\r\n", .want = 1, .data = "\r"),
    CROW("0\r\nX-T: 1\r\nY:  two words \t\r\n\r\n", .want = 1, .data = "", .trailers = "X-T=1;Y=two words;"),
    CROW("0\nA:\nB: c\n\n", .want = 1, .data = "", .trailers = "A=;B=c;"),
    CROWT("5\r\nhello\r\n0\r\n\r\n", "GET / HTTP/1.1\r\n", .want = 1, .data = "hello"),
    CROWT("0\r\n\r\n", "\r\n", .want = 1, .data = ""),
    CROW("005\r\nhello\r\n0\r\n\r\n", .want = 1, .data = "hello"),
    CROW("0000000000000005\r\nhello\r\n0000000000000000\r\n\r\n", .want = 1, .data = "hello"),
    CROW("0\r\n\r\n", .want = 1, .data = ""),
    CROW("0\n\n", .want = 1, .data = ""),
    CROW("1\r\nx\r\n0\r\nT: v\r\n\r\n", .want = 1, .data = "x", .trailers = "T=v;", .tmax = 6),
    CROW("1\r\nx\r\n0\r\nT: v\n\r\n", .want = 1, .data = "x", .trailers = "T=v;", .tmax = 5),
    CROW("0\r\nA: 1\r\nB: 2\r\n\r\n", .want = 1, .data = "", .trailers = "A=1;B=2;", .tmax = 12),
    /* needs more */
    CROW("", .want = 0, .data = ""),
    CROW("5\r\nhel", .want = 0, .data = "hel"),
    CROW("5;a=\"x", .want = 0, .data = ""),
    CROWT("5\r\nhello\r\n0\r\n", "X: y", .want = 0, .data = "hello"),
    CROWT("0\r\nA: b\r\n", "\r", .want = 0, .data = "", .trailers = "A=b;"),
    CROW("7fffffffffffffff\r\nab", .want = 0, .data = "ab"),
    /* malformed */
    CROW("x\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW(" 5\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5 \r\nhello\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("-5\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("0x5\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5\r\nhelloX\r\n", .want = FY_H1_EBADCHUNK, .data = "hello"),
    CROW("5\r\nhello\rX", .want = FY_H1_EBADCHUNK, .data = "hello"),
    CROW("5\r\nhello0\r\n\r\n", .want = FY_H1_EBADCHUNK, .data = "hello"),
    CROW("5\rX", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5\r\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5;\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5;=b\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5;a=\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5;a b\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5;a=b c\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5;a=\"x\r\n\"\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5;a=\"x\\\x01\"\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5;a=\"x\"b\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("5;a@b\r\n", .want = FY_H1_EBADCHUNK, .data = ""),
    CROW("8000000000000000\r\n", .want = FY_H1_ECHUNK_OVERFLOW, .data = ""),
    CROW("10000000000000000\r\n", .want = FY_H1_ECHUNK_OVERFLOW, .data = ""),
    CROW("00000000000000000\r\n", .want = FY_H1_ECHUNK_OVERFLOW, .data = ""),
    CROW("ffffffffffffffffff\r\n", .want = FY_H1_ECHUNK_OVERFLOW, .data = ""),
    CROW("0\r\nBad Name: x\r\n\r\n", .want = FY_H1_EBADTRAILER, .data = ""),
    CROW("0\r\nX: a\r\n folded\r\n\r\n", .want = FY_H1_EBADTRAILER, .data = "", .trailers = "X=a;"),
    CROW("0\r\nX: a\rb\r\n\r\n", .want = FY_H1_EBADTRAILER, .data = ""),
    CROW("0\r\nnocolon\r\n\r\n", .want = FY_H1_EBADTRAILER, .data = ""),
    CROW("0\r\n : x\r\n\r\n", .want = FY_H1_EBADTRAILER, .data = ""),
    CROW("0\r\nX: a\x00\r\n\r\n", .want = FY_H1_EBADTRAILER, .data = ""),
    CROW("0\r\n\r\r\n", .want = FY_H1_EBADTRAILER, .data = ""),
    CROW("1\r\nx\r\n0\r\nT: v\r\n\r\n", .want = FY_H1_EHDR_TOO_LARGE, .data = "x", .tmax = 5),
    CROW("0\r\nA: 1\r\nB: 2\r\n\r\n", .want = FY_H1_EHDR_TOO_LARGE, .data = "", .trailers = "A=1;", .tmax = 11),
};
/* clang-format on */

struct sink {
    char data[2048];
    size_t n;
    char tr[512];
    size_t trn;
};

static void sink_data(void *ud, const char *p, size_t n)
{
    struct sink *s = ud;
    if (n > sizeof s->data - s->n) n = sizeof s->data - s->n;
    memcpy(s->data + s->n, p, n);
    s->n += n;
}

static void sink_put(struct sink *s, const char *p, size_t n)
{
    if (n > sizeof s->tr - s->trn) n = sizeof s->tr - s->trn;
    memcpy(s->tr + s->trn, p, n);
    s->trn += n;
}

static void sink_trailer(void *ud, fy_h1_str_t name, fy_h1_str_t value)
{
    struct sink *s = ud;
    sink_put(s, name.p, name.len);
    sink_put(s, "=", 1);
    sink_put(s, value.p, value.len);
    sink_put(s, ";", 1);
}

/* Checks one outcome of a way of feeding the crow. */
static void check_chunk_result(const struct crow *w, const char *how, size_t at, int r, size_t used,
                               const struct sink *s, size_t tmax)
{
    bool ok = r == w->want;
    if (r >= 0) ok = ok && used == (r == 1 ? w->len - w->tail : w->len - (w->want ? 0 : w->tail));
    if (w->data) ok = ok && s->n == strlen(w->data) && memcmp(s->data, w->data, s->n) == 0;
    const char *tr = w->trailers ? w->trailers : "";
    ok = ok && s->trn == strlen(tr) && memcmp(s->tr, tr, s->trn) == 0;
    if (!ok)
        fprintf(stderr, "crow at line %d: %s at %zu: r=%d used=%zu data=%zu trailers=%.*s\n",
                w->line, how, at, r, used, s->n, (int)s->trn, s->tr);
    CHECK(ok);
    (void)tmax;
}

static void check_chunked(const struct crow *w)
{
    size_t tmax = w->tmax ? w->tmax : 64;
    fy_h1_chunked_t c;
    struct sink s;
    size_t used, u2;
    int r;

    /* whole, in place and at the guard page */
    for (int g = 0; g < 2; g++) {
        const char *in = g ? at_guard(w->in, w->len) : w->in;
        memset(&s, 0, sizeof s);
        fy_h1_chunked_init(&c);
        r = fy_h1_chunked_decode(&c, in, w->len, &used, tmax, sink_data, sink_trailer, &s);
        check_chunk_result(w, g ? "guard" : "whole", w->len, r, used, &s, tmax);
        if (r < 0) { /* sticky */
            CHECK_EQ_INT(fy_h1_chunked_decode(&c, in, w->len, &u2, tmax, sink_data, NULL, &s), r);
            CHECK_EQ_INT(u2, 0);
        }
        if (r == 1) { /* done: stays done, consumes nothing more */
            CHECK_EQ_INT(
                fy_h1_chunked_decode(&c, in + used, w->len - used, &u2, tmax, NULL, NULL, NULL), 1);
            CHECK_EQ_INT(u2, 0);
        }
    }

    /* split in two at every position; the second call starts where the first stopped */
    for (size_t k = 0; k <= w->len; k++) {
        memset(&s, 0, sizeof s);
        fy_h1_chunked_init(&c);
        r = fy_h1_chunked_decode(&c, w->in, k, &used, tmax, sink_data, sink_trailer, &s);
        if (r == 0) {
            r = fy_h1_chunked_decode(&c, w->in + used, w->len - used, &u2, tmax, sink_data,
                                     sink_trailer, &s);
            used += u2;
        }
        check_chunk_result(w, "split", k, r, used, &s, tmax);
    }

    /* byte by byte, every call's input ending at the guard page */
    memset(&s, 0, sizeof s);
    fy_h1_chunked_init(&c);
    size_t pos = 0;
    r = 0;
    for (size_t end = 1; end <= w->len && r == 0; end++) {
        const char *g = at_guard(w->in + pos, end - pos);
        r = fy_h1_chunked_decode(&c, g, end - pos, &used, tmax, sink_data, sink_trailer, &s);
        pos += used;
    }
    check_chunk_result(w, "byte by byte", pos, r, pos, &s, tmax);
}

static void test_chunked_built(void)
{
    static char b[2048];
    /* a size line of exactly 1024 bytes, and one of 1025 */
    for (size_t n = 1024; n <= 1025; n++) {
        memcpy(b, "1;", 2);
        memset(b + 2, 'a', n - 2);
        memcpy(b + n, "\r\nx\r\n0\r\n\r\n", 10);
        struct crow w = {.line = __LINE__,
                         .in = b,
                         .len = n + 10,
                         .data = n == 1024 ? "x" : "",
                         .want = n == 1024 ? 1 : FY_H1_EBADCHUNK};
        check_chunked(&w);
    }
    /* no trailers allowed at all */
    fy_h1_chunked_t c;
    size_t used;
    fy_h1_chunked_init(&c);
    CHECK_EQ_INT(fy_h1_chunked_decode(&c, "0\r\n\r\n", 5, &used, 0, NULL, NULL, NULL), 1);
    CHECK_EQ_INT(used, 5);
    fy_h1_chunked_init(&c);
    CHECK_EQ_INT(fy_h1_chunked_decode(&c, "0\r\nA", 4, &used, 0, NULL, NULL, NULL),
                 FY_H1_EHDR_TOO_LARGE);
    /* the largest chunk size */
    fy_h1_chunked_init(&c);
    CHECK_EQ_INT(fy_h1_chunked_decode(&c, "7FFFFFFFFFFFFFFF\r\n", 18, &used, 0, NULL, NULL, NULL),
                 0);
    CHECK(c.remaining == INT64_MAX);
}

/* ---- byte classes ---- */

/* Replaces the '?' of tmpl with byte c and parses the result as a request (chunked body if
 * `chunked`); returns whether all of it was accepted. */
static bool accepts(const char *tmpl, int c, bool chunked)
{
    char b[64];
    size_t n = strlen(tmpl), used;
    memcpy(b, tmpl, n);
    b[strchr(tmpl, '?') - tmpl] = (char)c;
    if (chunked) {
        fy_h1_chunked_t ck;
        fy_h1_chunked_init(&ck);
        int r = fy_h1_chunked_decode(&ck, b, n, &used, 0, NULL, NULL, NULL);
        return r >= 0 && used == n;
    }
    fy_h1_header_t hdrs[8];
    fy_h1_req_t q;
    fy_h1_req_init(&q, hdrs);
    return fy_h1_parse_request(&q, b, n, &lim) == (int)n;
}

static void test_classes(void)
{
    /* Every entry of the parser's byte-class table, re-derived from the grammar and checked
     * through the parser: a byte in a header name, a field value, a request-target, a Host, a
     * chunk size and a quoted chunk-ext value. */
    for (int c = 0; c < 256; c++) {
        bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        bool tchar = alnum || (c && strchr("!#$%&'*+-.^_`|~", c));
        bool value = c == '\t' || c == ' ' || (c >= 0x21 && c != 0x7f);
        bool target = c >= 0x21 && c <= 0x7e && c != '#';
        bool host = alnum || (c && strchr("-._~!$&'()*+,;=", c));
        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        bool qdtext = value && c != '"' && c != '\\';
        bool got[6] = {
            accepts(G H "X?: v\r\n\r\n", c, false),
            accepts(G H "Xa: v?\r\n\r\n", c, false),
            accepts("GET /? HTTP/1.1\r\n" H "\r\n", c, false),
            accepts(G "Host: a?b\r\n\r\n", c, false),
            accepts("?\r\n", c, true),
            accepts("1;a=\"?\"\r\nx\r\n0\r\n\r\n", c, true),
        };
        bool want[6] = {
            tchar || c == ':' /* "X::" is name "X" */, value, target, host, hex, qdtext};
        for (int i = 0; i < 6; i++) {
            if (got[i] != want[i]) fprintf(stderr, "class %d, byte 0x%02x\n", i, (unsigned)c);
            CHECK(got[i] == want[i]);
        }
    }
}

FY_TEST_MAIN(guard_init();
             for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) check_request(&rows[i]);
             test_limits(); test_request_misc(); test_misc(); test_classes();
             for (size_t i = 0; i < sizeof crows / sizeof crows[0]; i++) check_chunked(&crows[i]);
             test_chunked_built();
             fprintf(stderr, "%zu request rows, %zu chunked rows\n", sizeof rows / sizeof rows[0],
                     sizeof crows / sizeof crows[0]))
