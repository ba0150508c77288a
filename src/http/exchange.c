#include "http/exchange.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

void fy_headers_add(fy_arena_t *a, fy_headers_t *hs, const char *name, size_t nlen,
                    const char *value, size_t vlen)
{
    if (hs->n == hs->cap) {
        size_t cap = hs->cap ? hs->cap * 2 : 8;
        fy_header_t *v = fy_arena_alloc(a, cap * sizeof *v);
        if (hs->n) memcpy(v, hs->v, hs->n * sizeof *v);
        hs->v = v;
        hs->cap = cap;
    }
    hs->v[hs->n].name = fy_str(name, nlen);
    hs->v[hs->n].value = fy_str(value, vlen);
    hs->n++;
}

const fy_header_t *fy_headers_find(const fy_headers_t *hs, const char *lower, size_t n)
{
    for (size_t i = 0; i < hs->n; i++)
        if (fy_str_ieq(hs->v[i].name, lower, n)) return &hs->v[i];
    return NULL;
}

int fy_http_method_id(fy_str_t m)
{
    switch (m.len) {
    case 3:
        if (memcmp(m.p, "GET", 3) == 0) return FY_M_GET;
        if (memcmp(m.p, "PUT", 3) == 0) return FY_M_PUT;
        break;
    case 4:
        if (memcmp(m.p, "HEAD", 4) == 0) return FY_M_HEAD;
        if (memcmp(m.p, "POST", 4) == 0) return FY_M_POST;
        break;
    case 5:
        if (memcmp(m.p, "PATCH", 5) == 0) return FY_M_PATCH;
        if (memcmp(m.p, "TRACE", 5) == 0) return FY_M_TRACE;
        break;
    case 6:
        if (memcmp(m.p, "DELETE", 6) == 0) return FY_M_DELETE;
        break;
    case 7:
        if (memcmp(m.p, "OPTIONS", 7) == 0) return FY_M_OPTIONS;
        if (memcmp(m.p, "CONNECT", 7) == 0) return FY_M_CONNECT;
        break;
    }
    return FY_M_OTHER;
}

const char *fy_http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 101:
        return "Switching Protocols";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 307:
        return "Temporary Redirect";
    case 308:
        return "Permanent Redirect";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 407:
        return "Proxy Authentication Required";
    case 408:
        return "Request Timeout";
    case 411:
        return "Length Required";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 416:
        return "Range Not Satisfiable";
    case 417:
        return "Expectation Failed";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    case 508:
        return "Loop Detected";
    default:
        return "Unknown";
    }
}

void fy_exchange_respond(fy_exchange_t *ex, int status, const char *content_type, const char *body,
                         size_t len)
{
    static const fy_producer_ops_t none = {NULL, NULL};
    ex->res.status = status;
    if (content_type)
        FY_HDR_ADD(ex->arena, &ex->res.headers, "content-type", content_type, strlen(content_type));
    ex->res.content_length = (int64_t)len;
    fy_exchange_start_response(ex, &none);
    struct iovec iov = {(void *)body, len};
    fy_exchange_send(ex, &iov, len ? 1 : 0, FY_SEND_FINAL);
}

void fy_exchange_fail(fy_exchange_t *ex, int status, const char *reason)
{
    ex->error = reason;
    if (ex->head_sent) {
        fy_exchange_send(ex, NULL, 0, FY_SEND_ERROR);
        return;
    }
    /* nothing has reached the client yet: it gets a proper error response */
    ex->response_started = false;
    ex->res.content_length = 0;
    char *body = fy_arena_alloc(ex->arena, 160);
    int n = snprintf(body, 160,
                     "<html><head><title>%d %s</title></head><body><h1>%d %s</h1></body></html>\n",
                     status, fy_http_reason(status), status, fy_http_reason(status));
    /* headers set for the content that is not coming are dropped; those that describe the
       error itself stay */
    size_t k = 0;
    for (size_t i = 0; i < ex->res.headers.n; i++) {
        fy_str_t nm = ex->res.headers.v[i].name;
        if (fy_str_ieq(nm, "allow", 5) || fy_str_ieq(nm, "www-authenticate", 16) ||
            fy_str_ieq(nm, "retry-after", 11) || fy_str_ieq(nm, "location", 8))
            ex->res.headers.v[k++] = ex->res.headers.v[i];
    }
    ex->res.headers.n = k;
    fy_exchange_respond(ex, status, "text/html; charset=utf-8", body, (size_t)n);
}

void fy_exchange_refuse(fy_exchange_t *ex, int status, const char *reason)
{
    ex->refused = true;
    fy_exchange_fail(ex, status, reason);
}

void fy__exchange_alt_svc(fy_exchange_t *ex)
{
    const char *v = ex->ctx->alt_svc;
    /* final responses over TCP only; once even if the handler starts its response twice */
    if (ex->res.status < 200 || ex->req.version >= 30) return;
    for (size_t i = 0; i < ex->res.headers.n; i++)
        if (ex->res.headers.v[i].value.p == v) return;
    FY_HDR_ADD(ex->arena, &ex->res.headers, "alt-svc", v, strlen(v));
}

void fy_exchange_read_body(fy_exchange_t *ex,
                           void (*on_body)(fy_exchange_t *ex, const char *p, size_t n, bool end))
{
    ex->on_body = on_body;
    if (__builtin_expect(ex->layers != NULL, 0))
        fy__layers_read_body(ex);
    else
        ex->sink->read_body(ex);
}

/* ---- dates ---- */

static const char wdays[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

void fy_http_date_fmt(time_t t, char *buf)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    /* fixed width: 29 bytes */
    int y = tm.tm_year + 1900;
    if (y < 0) y = 0;
    if (y > 9999) y = 9999;
    char *p = buf;
    memcpy(p, wdays[tm.tm_wday], 3);
    p += 3;
    *p++ = ',';
    *p++ = ' ';
    *p++ = (char)('0' + tm.tm_mday / 10);
    *p++ = (char)('0' + tm.tm_mday % 10);
    *p++ = ' ';
    memcpy(p, months[tm.tm_mon], 3);
    p += 3;
    *p++ = ' ';
    *p++ = (char)('0' + y / 1000);
    *p++ = (char)('0' + y / 100 % 10);
    *p++ = (char)('0' + y / 10 % 10);
    *p++ = (char)('0' + y % 10);
    *p++ = ' ';
    *p++ = (char)('0' + tm.tm_hour / 10);
    *p++ = (char)('0' + tm.tm_hour % 10);
    *p++ = ':';
    *p++ = (char)('0' + tm.tm_min / 10);
    *p++ = (char)('0' + tm.tm_min % 10);
    *p++ = ':';
    *p++ = (char)('0' + tm.tm_sec / 10);
    *p++ = (char)('0' + tm.tm_sec % 10);
    memcpy(p, " GMT", 5);
}

const char *fy_http_date(time_t now)
{
    static __thread time_t cached = -1;
    static __thread char buf[32];
    if (now != cached) {
        fy_http_date_fmt(now, buf);
        cached = now;
    }
    return buf;
}

static int digits(const char *p, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

time_t fy_http_date_parse(fy_str_t s)
{
    /* IMF-fixdate only: "Sun, 06 Nov 1994 08:49:37 GMT" (29 bytes); fields range-checked */
    const char *p = s.p;
    if (s.len != 29 || p[3] != ',' || p[4] != ' ' || p[7] != ' ' || p[11] != ' ' || p[16] != ' ' ||
        p[19] != ':' || p[22] != ':' || memcmp(p + 25, " GMT", 4) != 0)
        return -1;
    int m = -1;
    for (int i = 0; i < 12; i++)
        if (memcmp(p + 8, months[i], 3) == 0) m = i;
    int d = digits(p + 5, 2), y = digits(p + 12, 4), hh = digits(p + 17, 2), mm = digits(p + 20, 2),
        ss = digits(p + 23, 2);
    if (m < 0 || d < 1 || d > 31 || y < 1970 || hh > 23 || mm > 59 || ss > 60 || hh < 0 || mm < 0 ||
        ss < 0)
        return -1;
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (d > mdays[m]) return -1;
    struct tm tm = {0};
    tm.tm_mday = d;
    tm.tm_mon = m;
    tm.tm_year = y - 1900;
    tm.tm_hour = hh;
    tm.tm_min = mm;
    tm.tm_sec = ss == 60 ? 59 : ss;
    return timegm(&tm);
}

void fy_http_ctx_drain(fy_http_ctx_t *ctx)
{
    ctx->draining = true;
    fy_list_t *l = ctx->conns.next;
    while (l != &ctx->conns) {
        fy_conn_node_t *n = fy_container_of(l, fy_conn_node_t, link);
        l = l->next; /* drain may close and unlink n */
        n->drain(n);
    }
}

void fy_http_ctx_close_all(fy_http_ctx_t *ctx)
{
    while (!fy_list_empty(&ctx->conns)) {
        fy_conn_node_t *n = fy_container_of(ctx->conns.next, fy_conn_node_t, link);
        n->close(n);
    }
}

int fy_http_ctx_observe(fy_http_ctx_t *ctx, void (*on_done)(fy_exchange_t *ex, void *ud), void *ud)
{
    if (ctx->nobservers == FY_HTTP_MAX_OBSERVERS) return -ENOSPC;
    ctx->observers[ctx->nobservers].on_done = on_done;
    ctx->observers[ctx->nobservers].ud = ud;
    ctx->nobservers++;
    return 0;
}
