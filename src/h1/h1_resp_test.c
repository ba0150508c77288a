/* Tests for h1_resp.c. Every response is checked three ways: fed whole, fed byte by byte on one
 * growing buffer, and ending exactly at a PROT_NONE guard page (every prefix, too), so that a
 * read of buf[len] faults. */
#include "h1/h1_resp.h"
#include "core/test.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/test_guard.h"

/* ---- the table ---- */

#define OK 1 /* want: success; the head is the input without its `tail` */
enum { F_CLOSE = 1, F_UPGRADE = 2 };
enum { NONE = FY_H1_RESP_NONE, LEN = FY_H1_RESP_LENGTH, CHK = FY_H1_RESP_CHUNKED };
#define CLOSE FY_H1_RESP_CLOSE

struct row {
    int line;
    const char *in;
    size_t len;
    size_t tail; /* bytes after the head (body, the final response after a 1xx) */
    bool head;   /* the request was HEAD */
    int want;    /* OK or an enum fy_h1_err */
    size_t maxh; /* limits for this row, when not 0: max_header_bytes ... */
    int maxn;    /* ... and max_headers (-1: 0) */
    /* checked for OK rows */
    int status;           /* always */
    const char *reason;   /* when set */
    int ver;              /* 10 or 11, when set */
    int nhdr;             /* when > 0 */
    int body;             /* enum fy_h1_resp_body, always */
    uint64_t cl;          /* always */
    unsigned flags;       /* F_*, always */
    const char *lastname; /* when set */
    const char *lastval;
};

#define ROWT(head_, tail_, ...)                                                                    \
    {                                                                                              \
        .line = __LINE__, .in = head_ tail_, .len = sizeof(head_ tail_) - 1,                       \
        .tail = sizeof(tail_) - 1, __VA_ARGS__                                                     \
    }
#define ROW(head_, ...) ROWT(head_, "", __VA_ARGS__)
#define S "HTTP/1.1 200 OK\r\n"
#define S10 "HTTP/1.0 200 OK\r\n"
#define CL5 "Content-Length: 5\r\n"
#define TE "Transfer-Encoding: chunked\r\n"
#define BAD(head_, err) ROW(head_, .want = (err))
#define BADH(head_, err) ROW(head_, .want = (err), .head = true)

/* clang-format off */
static const struct row rows[] = {
    /* valid: framing */
    ROWT(S CL5 "\r\n", "hello", .want = OK, .status = 200, .reason = "OK", .ver = 11, .nhdr = 1,
         .body = LEN, .cl = 5, .lastname = "Content-Length", .lastval = "5"),
    ROWT(S TE "\r\n", "5\r\nhello\r\n0\r\n\r\n", .want = OK, .status = 200, .body = CHK),
    ROWT(S "Server: x\r\n\r\n", "until close", .want = OK, .status = 200, .body = CLOSE),
    ROW(S "\r\n", .want = OK, .status = 200, .body = CLOSE, .nhdr = 0),
    ROWT(S10 "Server: x\r\n\r\n", "until close", .want = OK, .status = 200, .ver = 10,
         .body = CLOSE, .flags = F_CLOSE),
    ROWT(S10 "Connection: keep-alive\r\n" CL5 "\r\n", "hello", .want = OK, .status = 200,
         .ver = 10, .body = LEN, .cl = 5),
    ROW(S10 "Connection: Keep-Alive\r\n\r\n", .want = OK, .status = 200, .body = CLOSE),
    ROW(S10 "Connection: keep-alive, close\r\n\r\n", .want = OK, .status = 200, .body = CLOSE,
        .flags = F_CLOSE),
    ROW(S "Connection: close\r\n" CL5 "\r\n", .want = OK, .status = 200, .body = LEN, .cl = 5,
        .flags = F_CLOSE),
    ROW(S "Connection: ,, foo , CLOSE\r\n\r\n", .want = OK, .status = 200, .body = CLOSE,
        .flags = F_CLOSE),
    ROW(S "Content-Length: 0\r\n\r\n", .want = OK, .status = 200, .body = LEN, .cl = 0),
    ROW(S "Content-Length: 007\r\n\r\n", .want = OK, .status = 200, .body = LEN, .cl = 7),
    ROW(S "Content-Length: 5\r\ncontent-length: 5\r\n\r\n", .want = OK, .status = 200,
        .body = LEN, .cl = 5, .nhdr = 2),
    ROW(S "Content-Length: 5 ,5,\t05\r\n\r\n", .want = OK, .status = 200, .body = LEN, .cl = 5),
    ROW(S "Content-Length: 9223372036854775807\r\n\r\n", .want = OK, .status = 200, .body = LEN,
        .cl = INT64_MAX),
    ROW(S "Transfer-Encoding: \t ChUnKeD \t\r\n\r\n", .want = OK, .status = 200, .body = CHK,
        .lastval = "ChUnKeD"),
    ROW("HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\n", .want = OK, .status = 404,
        .reason = "Not Found", .body = LEN, .cl = 3),
    ROW("HTTP/1.1 205 Reset Content\r\n\r\n", .want = OK, .status = 205, .body = CLOSE),
    /* valid: no body */
    ROW("HTTP/1.1 204 No Content\r\n" CL5 "\r\n", .want = OK, .status = 204, .body = NONE),
    ROW("HTTP/1.1 304 Not Modified\r\n" CL5 "ETag: \"x\"\r\n\r\n", .want = OK, .status = 304,
        .body = NONE, .lastval = "\"x\""),
    ROW("HTTP/1.1 304 Not Modified\r\n" TE "\r\n", .want = OK, .status = 304, .body = NONE),
    ROW(S CL5 "\r\n", .head = true, .want = OK, .status = 200, .body = NONE),
    ROW(S TE "\r\n", .head = true, .want = OK, .status = 200, .body = NONE),
    ROW(S "\r\n", .head = true, .want = OK, .status = 200, .body = NONE),
    ROW(S10 CL5 "\r\n", .head = true, .want = OK, .status = 200, .body = NONE, .flags = F_CLOSE),
    ROW("HTTP/1.1 404 Not Found\r\n" CL5 "\r\n", .head = true, .want = OK, .status = 404),
    ROW("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n", .want = OK, .status = 101,
        .reason = "Switching Protocols", .body = NONE, .flags = F_UPGRADE, .nhdr = 3),
    ROWT("HTTP/1.1 101 Switching Protocols\r\nConnection: keep-alive, upgrade\r\nUpgrade: h2c\r\n\r\n",
         "\x00\x00\x12\x04", .want = OK, .status = 101, .flags = F_UPGRADE),
    ROW(S "Upgrade: h2,h2c\r\nConnection: Upgrade\r\n" CL5 "\r\n", .want = OK, .status = 200,
        .body = LEN, .cl = 5, .flags = 0),
    ROWT("HTTP/1.1 100 Continue\r\n\r\n", S CL5 "\r\nhello", .want = OK, .status = 100,
         .reason = "Continue", .body = NONE, .nhdr = 0),
    ROWT("HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n", S "\r\n", .want = OK,
         .status = 103, .body = NONE, .lastname = "Link", .lastval = "</s.css>; rel=preload"),
    ROW("HTTP/1.1 100 Continue\r\n" CL5 "\r\n", .want = OK, .status = 100, .body = NONE),
    /* valid: status line and header syntax */
    ROW("HTTP/1.1 200\r\n" CL5 "\r\n", .want = OK, .status = 200, .reason = "", .body = LEN, .cl = 5),
    ROW("HTTP/1.1 200\n\n", .want = OK, .status = 200, .reason = "", .body = CLOSE),
    ROW("HTTP/1.1 200 \r\n\r\n", .want = OK, .status = 200, .reason = "", .body = CLOSE),
    ROW("HTTP/1.1 999 \tW\xe9ird \x7e reason  \r\n\r\n", .want = OK, .status = 999,
        .reason = "\tW\xe9ird \x7e reason  ", .body = CLOSE),
    ROW("HTTP/1.1 500 Internal Server Error\r\n\r\n", .want = OK, .status = 500,
        .reason = "Internal Server Error", .body = CLOSE),
    ROW("HTTP/1.0 200 OK\nContent-Length: 2\n\n", .want = OK, .status = 200, .ver = 10,
        .body = LEN, .cl = 2, .flags = F_CLOSE),
    ROWT("HTTP/1.1 200 OK\nContent-Length: 2\r\n\n", "hi", .want = OK, .status = 200,
         .body = LEN, .cl = 2),
    ROW("HTTP/1.1 200 OK\r\nX: a\n\r\n", .want = OK, .status = 200, .lastval = "a", .body = CLOSE),
    ROW(S "X-Tab:\ta\tb \t\r\nX-Empty:\r\n\r\n", .want = OK, .status = 200, .nhdr = 2,
        .lastname = "X-Empty", .lastval = "", .body = CLOSE),
    ROW(S "X-Utf8: caf\xc3\xa9\r\n\r\n", .want = OK, .status = 200, .lastval = "caf\xc3\xa9",
        .body = CLOSE),
    ROW(S "!#$%&'*+-.^_`|~09azAZ: v\r\n\r\n", .want = OK, .status = 200,
        .lastname = "!#$%&'*+-.^_`|~09azAZ", .body = CLOSE),
    ROW(S "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\n\r\n", .want = OK,
        .status = 200, .nhdr = 8, .lastname = "H", .lastval = "8", .body = CLOSE),
    ROW(S "Set-Cookie: a=b; Path=/\r\nSet-Cookie: c=d\r\n\r\n", .want = OK, .status = 200,
        .nhdr = 2, .body = CLOSE),
    ROW(S "X: 0123456789\r\n\r\n", .maxh = 34, .want = OK, .status = 200, .body = CLOSE),

    /* malformed status line */
    BAD("HTTP/1.1 20 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 2000 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 099 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 2a0 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 -20 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1  200 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1\t200 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 200\tOK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 200OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 200 O\rK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 200 OK\r\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 200 O\0K\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 200 O\x7fK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 200 O\x01K\r\n\r\n", FY_H1_EBADREQ),
    BAD("http/1.1 200 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.1 \r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/11 200 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/2 200\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/1.10 200 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD(" HTTP/1.1 200 OK\r\n\r\n", FY_H1_EBADREQ),
    BAD("ICY 200 OK\r\n\r\n", FY_H1_EBADREQ),
    ROWT("\r\n", S "\r\n", .want = FY_H1_EBADREQ), /* no leading empty lines */
    BAD("\n", FY_H1_EBADREQ),
    BAD("\r\n", FY_H1_EBADREQ),
    BAD("garbage\n\n", FY_H1_EBADREQ),
    BAD(S " X: y\r\n\r\n", FY_H1_EBADREQ),
    BAD(S "\tX: y\r\n\r\n", FY_H1_EBADREQ),
    BAD("HTTP/2.0 200 OK\r\n\r\n", FY_H1_EVERSION),
    BAD("HTTP/1.2 200 OK\r\n\r\n", FY_H1_EVERSION),
    BAD("HTTP/0.9 200 OK\r\n\r\n", FY_H1_EVERSION),
    BAD("HTTP/3.0 200\r\n\r\n", FY_H1_EVERSION),
    /* header syntax */
    BAD(S "X : y\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X\t: y\r\n\r\n", FY_H1_EBADHDR),
    BAD(S ": y\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X y\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X@Y: y\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X\xc3\xa9: y\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X: a\0b\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X: a\rb\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X: a\r\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X: a\x7f\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X: a\x0b\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X: a\r\n\rY: b\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X: a\r\n\r\r\n\r\n", FY_H1_EBADHDR),
    ROW(S "X: a\r\n\r\r\n", .want = FY_H1_INCOMPLETE), /* not an empty line yet */
    BAD(S "Connection: close;x\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "Connection: \"close\"\r\n\r\n", FY_H1_EBADHDR),
    BAD(S "X: a\r\n b\r\n\r\n", FY_H1_EOBSFOLD),
    BAD(S "X: a\n\tb\n\n", FY_H1_EOBSFOLD),
    /* framing */
    BAD(S CL5 TE "\r\n", FY_H1_ECL_TE),
    BAD(S TE CL5 "\r\n", FY_H1_ECL_TE),
    BADH(S TE CL5 "\r\n", FY_H1_ECL_TE),
    BAD("HTTP/1.1 304 Not Modified\r\n" TE CL5 "\r\n", FY_H1_ECL_TE),
    BAD(S "Content-Length: abc\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Content-Length:\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Content-Length: -1\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Content-Length: +5\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Content-Length: 5 6\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Content-Length: 5,\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Content-Length: 5, 6\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Content-Length: 5\r\nContent-Length: 6\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Content-Length: 9223372036854775808\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Content-Length: 99999999999999999999999\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Content-Length: 0x5\r\n\r\n", FY_H1_EBADCL),
    BAD("HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n", FY_H1_EBADCL),
    BADH(S "Content-Length: 1\r\nContent-Length: 2\r\n\r\n", FY_H1_EBADCL),
    BAD(S "Transfer-Encoding: gzip, chunked\r\n\r\n", FY_H1_EBADTE),
    BAD(S "Transfer-Encoding: chunked, chunked\r\n\r\n", FY_H1_EBADTE),
    BAD(S "Transfer-Encoding: chunked, gzip\r\n\r\n", FY_H1_EBADTE),
    BAD(S "Transfer-Encoding: gzip\r\n\r\n", FY_H1_EBADTE),
    BAD(S "Transfer-Encoding:\r\n\r\n", FY_H1_EBADTE),
    BAD(S "Transfer-Encoding: chunked;q=1\r\n\r\n", FY_H1_EBADTE),
    BAD(S "Transfer-Encoding: chunkedx\r\n\r\n", FY_H1_EBADTE),
    BAD(S TE TE "\r\n", FY_H1_EBADTE),
    BAD(S10 TE "\r\n", FY_H1_EBADTE),
    BADH(S "Transfer-Encoding: identity\r\n\r\n", FY_H1_EBADTE),
    BAD("HTTP/1.1 100 Continue\r\nTransfer-Encoding: gzip\r\n\r\n", FY_H1_EBADTE),
    /* limits */
    ROW(S "X: 01234567890\r\n\r\n", .maxh = 34, .want = FY_H1_EHDR_TOO_LARGE),
    ROW(S "X: 0123456789\r\n\r\n", .maxh = 33, .want = FY_H1_EHDR_TOO_LARGE),
    ROW("HTTP/1.1 200 OK", .maxh = 15, .want = FY_H1_EHDR_TOO_LARGE),
    ROW("HTTP/1.1 200 OK", .maxh = 1, .want = FY_H1_EHDR_TOO_LARGE),
    ROW(S "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\n\r\n",
        .want = FY_H1_ETOO_MANY_HDRS),
    ROW(S "A: 1\r\n\r\n", .maxn = -1, .want = FY_H1_ETOO_MANY_HDRS),
    ROW(S "A: 1\r\nB: 2\r\n\r\n", .maxn = 1, .want = FY_H1_ETOO_MANY_HDRS),
    ROW(S "\r\n", .maxn = -1, .want = OK, .status = 200, .body = CLOSE),
    /* incomplete */
    ROW(S, .want = FY_H1_INCOMPLETE),
    ROW(S "X: y\r\n\r", .want = FY_H1_INCOMPLETE),
    ROW("HTTP/1.1 200 OK\r", .want = FY_H1_INCOMPLETE),
    ROW("", .want = FY_H1_INCOMPLETE),
};
/* clang-format on */

static fy_h1_limits_t row_limits(const struct row *w)
{
    fy_h1_limits_t l = {.max_request_line = 1, .max_header_bytes = 400, .max_headers = 8};
    if (w->maxh) l.max_header_bytes = w->maxh;
    if (w->maxn) l.max_headers = w->maxn < 0 ? 0 : (size_t)w->maxn;
    return l;
}

static void check_fields(const struct row *w, const fy_h1_resp_t *q, const char *buf)
{
    int line = w->line;
#define FCHECK(c)                                                                                  \
    do {                                                                                           \
        CHECK(c);                                                                                  \
        if (!(c)) fprintf(stderr, "  (row at line %d)\n", line);                                   \
    } while (0)
#define FSTR(s, lit)                                                                               \
    FCHECK(!(lit) || ((s).len == strlen(lit) && (!(s).len || memcmp((s).p, (lit), (s).len) == 0)))
    FCHECK(q->status == w->status);
    FSTR(q->reason, w->reason);
    FCHECK(!w->ver || q->minor_version == w->ver - 10);
    FCHECK(w->nhdr <= 0 || q->nheaders == (size_t)w->nhdr);
    FCHECK(q->body_kind == w->body);
    FCHECK(q->content_length == w->cl);
    FCHECK(q->conn_close == !!(w->flags & F_CLOSE));
    FCHECK(q->conn_upgrade == !!(w->flags & F_UPGRADE));
    if (q->nheaders > 0) {
        FSTR(q->headers[q->nheaders - 1].name, w->lastname);
        FSTR(q->headers[q->nheaders - 1].value, w->lastval);
    }
    /* every slice lies in the head */
    size_t head = w->len - w->tail;
    FCHECK(q->reason.p >= buf && q->reason.p + q->reason.len <= buf + head);
    for (size_t i = 0; i < q->nheaders; i++)
        FCHECK(q->headers[i].name.p >= buf &&
               q->headers[i].value.p + q->headers[i].value.len <= buf + head);
}

static bool is_limit_err(int r)
{
    return r == FY_H1_EHDR_TOO_LARGE;
}

static int rows_ok, rows_err;

/* Parses a row whole, byte by byte, and at the guard page; all must give `want`. */
static void check_row(const struct row *w)
{
    fy_h1_header_t hdrs[8];
    fy_h1_resp_t q;
    fy_h1_limits_t lim = row_limits(w);
    size_t len = w->len;
    int want = w->want == OK ? (int)(len - w->tail) : w->want;
    if (w->want == OK)
        rows_ok++;
    else
        rows_err++;

    /* whole */
    fy_h1_resp_init(&q, hdrs);
    int r = fy_h1_parse_response(&q, w->in, len, w->head, &lim);
    if (r != want) fprintf(stderr, "row at line %d: whole\n", w->line);
    CHECK_EQ_INT(r, want);
    if (r > 0) check_fields(w, &q, w->in);

    /* byte by byte on one growing buffer: INCOMPLETE until the result, which comes with the
     * head's last byte (a limit error may come earlier); the head search never goes back */
    fy_h1_resp_init(&q, hdrs);
    int rb = FY_H1_INCOMPLETE;
    size_t k, first = len + 1; /* the length of the first prefix with a result */
    bool resumes = true;
    for (k = 0; k <= len; k++) {
        rb = fy_h1_parse_response(&q, w->in, k, w->head, &lim);
        if (rb != FY_H1_INCOMPLETE) {
            first = k;
            break;
        }
        if (q.scanned != k) resumes = false;
    }
    if (rb != want || !resumes) fprintf(stderr, "row at line %d: byte by byte\n", w->line);
    CHECK_EQ_INT(rb, want);
    CHECK(resumes);
    if (want > 0) {
        CHECK_EQ_INT(first, want);
        check_fields(w, &q, w->in);
    } else if (want != FY_H1_INCOMPLETE && !is_limit_err(want)) {
        CHECK_EQ_INT(first, len - w->tail); /* decided when the head is complete, not before */
    }

    /* at the guard page: every prefix, each parsed afresh */
    for (k = 0; k <= len; k++) {
        const char *g = at_guard(w->in, k);
        fy_h1_resp_init(&q, hdrs);
        int rg = fy_h1_parse_response(&q, g, k, w->head, &lim);
        int expect = k < first ? FY_H1_INCOMPLETE : want;
        if (rg != expect) fprintf(stderr, "row at line %d: guard prefix %zu\n", w->line, k);
        CHECK_EQ_INT(rg, expect);
        if (k == len && rg > 0) check_fields(w, &q, g);
    }
}

/* ---- other cases ---- */

static const fy_h1_limits_t lim = {
    .max_request_line = 1, .max_header_bytes = 400, .max_headers = 8};

/* A 100 Continue and the final response in one buffer: the caller parses again after it. */
static void test_interim(void)
{
    static const char in[] = "HTTP/1.1 100 Continue\r\n\r\n"
                             "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                             "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
    size_t len = sizeof in - 1;
    fy_h1_header_t hdrs[8];
    fy_h1_resp_t q;
    const char *g = at_guard(in, len);
    static const int want_status[] = {100, 103, 200};
    static const int want_len[] = {25, 40, 38};

    /* whole, at the guard page */
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        fy_h1_resp_init(&q, hdrs);
        int r = fy_h1_parse_response(&q, g + off, len - off, false, &lim);
        CHECK_EQ_INT(r, want_len[i]);
        CHECK_EQ_INT(q.status, want_status[i]);
        CHECK_EQ_INT(q.body_kind, i < 2 ? FY_H1_RESP_NONE : FY_H1_RESP_LENGTH);
        if (r <= 0) return;
        off += (size_t)r;
    }
    CHECK_EQ_INT(q.content_length, 2);
    CHECK_STRN(g + off, len - off, "hi");

    /* byte by byte, as a client codec would see it arrive */
    off = 0;
    int i = 0;
    fy_h1_resp_init(&q, hdrs);
    for (size_t k = 1; k <= len && i < 3; k++) {
        int r = fy_h1_parse_response(&q, in + off, k - off, false, &lim);
        if (r == FY_H1_INCOMPLETE) continue;
        CHECK_EQ_INT(r, want_len[i]);
        CHECK_EQ_INT(k - off, want_len[i]);
        CHECK_EQ_INT(q.status, want_status[i]);
        off += (size_t)r;
        i++;
        fy_h1_resp_init(&q, hdrs);
    }
    CHECK_EQ_INT(i, 3);
    CHECK_EQ_INT(off, len - 2);
}

static void test_restart(void)
{
    static const char in[] = "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\n";
    size_t len = sizeof in - 1;
    fy_h1_header_t hdrs[8];
    fy_h1_resp_t q;

    /* scanned set back to 0 restarts; a shorter buffer than scanned restarts too */
    fy_h1_resp_init(&q, hdrs);
    CHECK_EQ_INT(fy_h1_parse_response(&q, in, 20, false, &lim), FY_H1_INCOMPLETE);
    CHECK_EQ_INT(q.scanned, 20);
    q.scanned = 0;
    CHECK_EQ_INT(fy_h1_parse_response(&q, in, len, false, &lim), (int)len);
    CHECK_EQ_INT(q.nheaders, 2);
    fy_h1_resp_init(&q, hdrs);
    CHECK_EQ_INT(fy_h1_parse_response(&q, in, 25, false, &lim), FY_H1_INCOMPLETE);
    static const char other[] = "HTTP/1.1 204 No\r\n\r\n";
    CHECK_EQ_INT(fy_h1_parse_response(&q, other, sizeof other - 1, false, &lim),
                 (int)sizeof other - 1);
    CHECK_EQ_INT(q.status, 204);

    /* a second call after success gives the same result; so does a HEAD flag flip */
    fy_h1_resp_init(&q, hdrs);
    static const char cl[] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
    CHECK_EQ_INT(fy_h1_parse_response(&q, cl, sizeof cl - 1, false, &lim), 38);
    CHECK_EQ_INT(q.body_kind, FY_H1_RESP_LENGTH);
    CHECK_EQ_INT(fy_h1_parse_response(&q, cl, sizeof cl - 1, true, &lim), 38);
    CHECK_EQ_INT(q.body_kind, FY_H1_RESP_NONE);
    CHECK_EQ_INT(q.content_length, 0);

    /* the state is cleared on a new parse: no field of an earlier response survives */
    static const char ten[] = "HTTP/1.0 101 Switching\r\nConnection: upgrade\r\n\r\n";
    fy_h1_resp_init(&q, hdrs);
    CHECK_EQ_INT(fy_h1_parse_response(&q, ten, sizeof ten - 1, false, &lim), (int)sizeof ten - 1);
    CHECK(q.conn_close && q.conn_upgrade);
    fy_h1_resp_init(&q, hdrs);
    CHECK_EQ_INT(fy_h1_parse_response(&q, cl, sizeof cl - 1, false, &lim), 38);
    CHECK(!q.conn_close && !q.conn_upgrade && q.nheaders == 1);
}

/* A large head fed byte by byte costs O(n): the head search never rescans. */
static void test_linear(void)
{
    static char big[64 * 1024];
    size_t n = 0;
    memcpy(big, "HTTP/1.1 200 OK\r\n", 17);
    n = 17;
    while (n < sizeof big - 200) {
        memcpy(big + n, "X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 63);
        n += 63;
    }
    memcpy(big + n, "\r\n", 2);
    n += 2;
    fy_h1_header_t hdrs[2048];
    fy_h1_limits_t l = {.max_request_line = 1, .max_header_bytes = n, .max_headers = 2048};
    fy_h1_resp_t q;
    fy_h1_resp_init(&q, hdrs);
    int r = FY_H1_INCOMPLETE;
    size_t k;
    bool resumes = true;
    for (k = 1; k <= n && r == FY_H1_INCOMPLETE; k++) {
        r = fy_h1_parse_response(&q, big, k, false, &l);
        if (r == FY_H1_INCOMPLETE && q.scanned != k) resumes = false;
    }
    CHECK_EQ_INT(r, (int)n);
    CHECK(resumes);
    CHECK_EQ_INT(q.nheaders, (n - 19) / 63);
    /* one byte less of budget: too large, and said so as soon as the budget is used */
    l.max_header_bytes = n - 1;
    fy_h1_resp_init(&q, hdrs);
    CHECK_EQ_INT(fy_h1_parse_response(&q, big, n - 2, false, &l), FY_H1_INCOMPLETE);
    CHECK_EQ_INT(fy_h1_parse_response(&q, big, n - 1, false, &l), FY_H1_EHDR_TOO_LARGE);
    CHECK_EQ_INT(fy_h1_parse_response(&q, big, n, false, &l), FY_H1_EHDR_TOO_LARGE);
}

static void on_data(void *ud, const char *p, size_t n)
{
    char **w = ud;
    memcpy(*w, p, n);
    *w += n;
}

/* The chunked decoder of h1_parse.h takes the bytes after a chunked head. */
static void test_chunked_body(void)
{
    static const char in[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
    size_t len = sizeof in - 1;
    const char *g = at_guard(in, len);
    fy_h1_header_t hdrs[8];
    fy_h1_resp_t q;
    fy_h1_resp_init(&q, hdrs);
    int r = fy_h1_parse_response(&q, g, len, false, &lim);
    CHECK_EQ_INT(r, 47);
    CHECK_EQ_INT(q.body_kind, FY_H1_RESP_CHUNKED);
    if (r <= 0) return;
    char out[64], *w = out;
    fy_h1_chunked_t c;
    fy_h1_chunked_init(&c);
    size_t used = 0;
    CHECK_EQ_INT(fy_h1_chunked_decode(&c, g + r, len - (size_t)r, &used, 64, on_data, NULL, &w), 1);
    CHECK_EQ_INT(used, len - (size_t)r);
    CHECK_STRN(out, (size_t)(w - out), "hello world");
}

/* Every status from 100 to 999 parses; its framing follows RFC 9112 §6.3. */
static void test_statuses(void)
{
    char buf[64];
    fy_h1_header_t hdrs[8];
    fy_h1_resp_t q;
    int bad = 0;
    for (int s = 0; s <= 1000; s++) {
        int n = snprintf(buf, sizeof buf, "HTTP/1.1 %03d X\r\nContent-Length: 1\r\n\r\n", s);
        fy_h1_resp_init(&q, hdrs);
        int r = fy_h1_parse_response(&q, buf, (size_t)n, false, &lim);
        bool valid = s >= 100 && s <= 999;
        int body = s < 200 || s == 204 || s == 304 ? FY_H1_RESP_NONE : FY_H1_RESP_LENGTH;
        if (valid ? (r != n || q.status != s || q.body_kind != body) : r != FY_H1_EBADREQ) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

/* Every byte value in the reason phrase, a header name and a header value. */
static void test_bytes(void)
{
    fy_h1_header_t hdrs[8];
    fy_h1_resp_t q;
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        if (c == '\n') continue;
        char buf[64];
        bool vchar = c == '\t' || c == ' ' || (c > 0x20 && c != 0x7f);
        bool tchar = (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
                     (c && strchr("!#$%&'*+-.^_`|~", c));
        static const char *tmpl[] = {"HTTP/1.1 200 a@b\r\n\r\n",
                                     "HTTP/1.1 200 OK\r\na@b: v\r\n\r\n",
                                     "HTTP/1.1 200 OK\r\nN: a@b\r\n\r\n"};
        for (int t = 0; t < 3; t++) {
            size_t n = strlen(tmpl[t]);
            memcpy(buf, tmpl[t], n);
            *(char *)memchr(buf, '@', n) = (char)c;
            fy_h1_resp_init(&q, hdrs);
            int r = fy_h1_parse_response(&q, at_guard(buf, n), n, false, &lim);
            bool ok = t == 1 ? tchar || c == ':' : vchar; /* "a:b: v" */
            int err = t == 0 ? FY_H1_EBADREQ : FY_H1_EBADHDR;
            if (ok ? r != (int)n : r != err) {
                fprintf(stderr, "byte 0x%02x in template %d: %d\n", c, t, r);
                bad++;
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_rows(void)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) check_row(&rows[i]);
    printf("rows: %d valid, %d invalid or incomplete\n", rows_ok, rows_err);
}

/* fy_h1_put_field_name: canonical case for lowercase names, others as given */
static void test_field_name_case(void)
{
    static const char *const cases[][2] = {
        {"content-type", "Content-Type"},
        {"etag", "ETag"},
        {"last-modified", "Last-Modified"},
        {"www-authenticate", "WWW-Authenticate"},
        {"x-a-b", "X-A-B"},
        {"a", "A"},
        {"-x--y-", "-X--Y-"},
        {"x-9p", "X-9p"},
        {"X-lower-kept", "X-lower-kept"},
        {"CONTENT-TYPE", "CONTENT-TYPE"},
        {"sec-websocket-accept", "Sec-WebSocket-Accept"},
        {"etags", "Etags"},
        {"", ""},
        {"abcdefg-hij", "Abcdefg-Hij"},
        {"abcdefgh-ijklmno-pq", "Abcdefgh-Ijklmno-Pq"},
        {"x-forwarded-for", "X-Forwarded-For"},
        {"content-security-policy", "Content-Security-Policy"},
        /* every irregular spelling, and regular names of the same lengths */
        {"te", "TE"},
        {"dnt", "DNT"},
        {"content-md5", "Content-MD5"},
        {"x-ua-compatible", "X-UA-Compatible"},
        {"x-frame-options", "X-Frame-Options"},
        {"x-xss-protection", "X-XSS-Protection"},
        {"x-content-digest", "X-Content-Digest"},
        {"sec-websocket-version", "Sec-WebSocket-Version"},
        {"sec-websocket-protocol", "Sec-WebSocket-Protocol"},
        {"x-dns-prefetch-control", "X-DNS-Prefetch-Control"},
        {"x-dns-prefetch-controm", "X-Dns-Prefetch-Controm"},
        {"sec-websocket-extensions", "Sec-WebSocket-Extensions"},
        {"tf", "Tf"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[64];
        memset(out, 'Z', sizeof out);
        size_t n = strlen(cases[i][0]);
        char *e = fy_h1_put_field_name(out, cases[i][0], n);
        CHECK(e == out + n);
        CHECK_STRN(out, n, cases[i][1]);
        CHECK(out[n] == 'Z');
    }
    /* a capital anywhere (eight bytes at a time, then the tail) keeps the name as given; the
       bytes next to 'A'..'Z' ('@', '[', '`', '{') are no capitals */
    for (size_t len = 1; len <= 24; len++)
        for (size_t at = 0; at < len; at++) {
            char in[32], out[32];
            memset(in, 'x', len);
            in[len] = '\0'; /* CHECK_STRN compares with strlen(in) */
            in[at] = 'Q';
            fy_h1_put_field_name(out, in, len);
            CHECK_STRN(out, len, in);
            in[at] = at & 1 ? '@' : '[';
            fy_h1_put_field_name(out, in, len);
            CHECK(out[0] == (at == 0 ? in[0] : 'X'));
            in[at] = at & 1 ? '`' : '{';
            fy_h1_put_field_name(out, in, len);
            CHECK(out[0] == (at == 0 ? in[0] : 'X'));
        }
}

FY_TEST_MAIN(guard_init(); test_rows(); test_interim(); test_restart(); test_linear();
             test_chunked_body(); test_statuses(); test_bytes(); test_field_name_case())
