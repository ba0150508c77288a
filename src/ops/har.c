/* HAR 1.2 writer: always-valid file, one pwrite per flow. */
#include "ops/har.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "handler/mitm.h"

struct fy_har {
    int fd;
    pthread_mutex_t lock;
    off_t tail; /* where the closing "\n]}}\n" starts */
    size_t n;
};

static const char head[] = "{\"log\": {\"version\": \"1.2\", \"creator\": {\"name\": \"ferry\", "
                           "\"version\": \"0.1.0\"}, \"pages\": [], \"entries\": [";
static const char closing[] = "\n]}}\n";

typedef struct sb {
    char *p;
    size_t len, cap;
} sb_t;

static void put(sb_t *b, const char *s, size_t n)
{
    if (b->len + n > b->cap) {
        while (b->len + n > b->cap) b->cap = b->cap ? b->cap * 2 : 4096;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

#define PUT(b, lit) put((b), (lit), sizeof(lit) - 1)

static void putn(sb_t *b, long long v)
{
    char t[32];
    int n = snprintf(t, sizeof t, "%lld", v);
    put(b, t, (size_t)n);
}

/* JSON string body (without quotes): escapes quotes, backslash and control bytes; other bytes
   pass (HTTP fields are Latin-1/ASCII; invalid UTF-8 is replaced by \ufffd). */
static void jstr(sb_t *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else if (c < 0x20 || c == 0x7f) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            put(b, e, 6);
        } else if (c >= 0x80) {
            PUT(b, "\\ufffd");
        } else {
            put(b, (const char *)&c, 1);
        }
    }
}

static void jfield(sb_t *b, const char *name, fy_str_t v)
{
    PUT(b, "\"");
    put(b, name, strlen(name));
    PUT(b, "\": \"");
    jstr(b, v.p, v.len);
    PUT(b, "\"");
}

static void headers(sb_t *b, const fy_headers_t *hs)
{
    PUT(b, "[");
    for (size_t i = 0; i < hs->n; i++) {
        if (i) PUT(b, ", ");
        PUT(b, "{");
        jfield(b, "name", hs->v[i].name);
        PUT(b, ", ");
        jfield(b, "value", hs->v[i].value);
        PUT(b, "}");
    }
    PUT(b, "]");
}

static bool printable(fy_str_t s)
{
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.p[i];
        if ((c < 0x20 && c != '\n' && c != '\r' && c != '\t') || c >= 0x7f) return false;
    }
    return true;
}

static void base64(sb_t *b, fy_str_t s)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < s.len; i += 3) {
        unsigned v = (unsigned)(unsigned char)s.p[i] << 16;
        if (i + 1 < s.len) v |= (unsigned)(unsigned char)s.p[i + 1] << 8;
        if (i + 2 < s.len) v |= (unsigned char)s.p[i + 2];
        char o[4] = {t[v >> 18 & 63], t[v >> 12 & 63], i + 1 < s.len ? t[v >> 6 & 63] : '=',
                     i + 2 < s.len ? t[v & 63] : '='};
        put(b, o, 4);
    }
}

/* "text": the body as a JSON string, base64 with "encoding" when it is not printable text */
static void body_text(sb_t *b, fy_str_t s, bool allow_base64)
{
    PUT(b, ", \"text\": \"");
    if (printable(s)) {
        jstr(b, s.p, s.len);
        PUT(b, "\"");
    } else if (allow_base64) {
        base64(b, s);
        PUT(b, "\", \"encoding\": \"base64\"");
    } else {
        PUT(b, "\", \"comment\": \"binary body not shown\"");
    }
}

static const char *version(int v)
{
    return v == 10 ? "HTTP/1.0" : v == 20 ? "HTTP/2.0" : v == 30 ? "HTTP/3.0" : "HTTP/1.1";
}

fy_har_t *fy_har_open(const char *path, const char **err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        *err = strerror(errno);
        return NULL;
    }
    fy_har_t *h = fy_xcalloc(1, sizeof *h);
    h->fd = fd;
    pthread_mutex_init(&h->lock, NULL);
    char buf[sizeof head + sizeof closing];
    memcpy(buf, head, sizeof head - 1);
    memcpy(buf + sizeof head - 1, closing, sizeof closing - 1);
    if (pwrite(fd, buf, sizeof head + sizeof closing - 2, 0) < 0) {
        *err = strerror(errno);
        fy_har_close(h);
        return NULL;
    }
    h->tail = (off_t)(sizeof head - 1);
    return h;
}

void fy_har_exchange(fy_exchange_t *ex, void *arg)
{
    fy_har_t *h = arg;
    if (ex->req.method_id == FY_M_CONNECT || !ex->res.status) return;
    struct timeval now;
    gettimeofday(&now, NULL);
    uint64_t total = ex->ctx->loop->now_ms - ex->start_ms;
    time_t start = now.tv_sec - (time_t)(total / 1000);
    struct tm tm;
    gmtime_r(&start, &tm);
    char when[64];
    size_t wl = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + wl, sizeof when - wl, ".%03dZ", (int)((now.tv_usec / 1000) % 1000));

    sb_t b = {0};
    PUT(&b, "\n  {\"startedDateTime\": \"");
    put(&b, when, strlen(when));
    PUT(&b, "\", \"time\": ");
    putn(&b, (long long)total);
    PUT(&b, ", \"request\": {");
    jfield(&b, "method", ex->req.method);
    PUT(&b, ", \"url\": \"");
    jstr(&b, ex->req.scheme.p, ex->req.scheme.len);
    PUT(&b, "://");
    jstr(&b, ex->req.authority.p, ex->req.authority.len);
    if (ex->req.target.len && ex->req.target.p[0] == '/')
        jstr(&b, ex->req.target.p, ex->req.target.len);
    else
        PUT(&b, "/");
    PUT(&b, "\", \"httpVersion\": \"");
    put(&b, version(ex->req.version), 8);
    PUT(&b, "\", \"cookies\": [], \"headers\": ");
    headers(&b, &ex->req.headers);
    fy_str_t qb, rb;
    bool cut = false, have = fy_mitm_captured(ex, &qb, &rb, &cut);
    PUT(&b, ", \"queryString\": [], \"headersSize\": -1, \"bodySize\": ");
    putn(&b, (long long)ex->body_received);
    if (have && qb.len) {
        const fy_header_t *qct = FY_HDR_FIND(&ex->req.headers, "content-type");
        PUT(&b, ", \"postData\": {\"mimeType\": \"");
        if (qct) jstr(&b, qct->value.p, qct->value.len);
        PUT(&b, "\"");
        body_text(&b, qb, false); /* HAR 1.2 postData has no encoding field */
        PUT(&b, "}");
    }
    PUT(&b, "}, \"response\": {\"status\": ");

    putn(&b, ex->res.status);
    PUT(&b, ", \"statusText\": \"");
    const char *r = fy_http_reason(ex->res.status);
    jstr(&b, r, strlen(r));
    PUT(&b, "\", \"httpVersion\": \"");
    put(&b, version(ex->req.version), 8);
    PUT(&b, "\", \"cookies\": [], \"headers\": ");
    headers(&b, &ex->res.headers);
    PUT(&b, ", \"content\": {\"size\": ");
    putn(&b, (long long)ex->bytes_sent);
    PUT(&b, ", \"mimeType\": \"");
    const fy_header_t *ct = FY_HDR_FIND(&ex->res.headers, "content-type");
    if (ct) jstr(&b, ct->value.p, ct->value.len);
    PUT(&b, "\"");
    if (have) body_text(&b, rb, true);
    if (have && cut) PUT(&b, ", \"comment\": \"bodies cut at intercept.capture.body-cap\"");
    PUT(&b, "}, \"redirectURL\": \"\", \"headersSize\": -1, \"bodySize\": ");

    putn(&b, (long long)ex->bytes_sent);
    PUT(&b, "}, \"cache\": {}, \"timings\": {\"send\": 0, \"wait\": ");
    putn(&b, (long long)total);
    PUT(&b, ", \"receive\": 0}");
    if (ex->error) {
        PUT(&b, ", \"comment\": \"");
        jstr(&b, ex->error, strlen(ex->error));
        PUT(&b, "\"");
    }
    PUT(&b, "}");
    put(&b, closing, sizeof closing - 1);

    pthread_mutex_lock(&h->lock);
    sb_t w = {0};
    if (h->n) PUT(&w, ","); /* written over the previous closing */
    put(&w, b.p, b.len);
    ssize_t n = pwrite(h->fd, w.p, w.len, h->tail);
    if (n == (ssize_t)w.len) {
        h->tail += (off_t)(w.len - (sizeof closing - 1));
        h->n++;
    } else {
        fy_error("har: write failed: %s", n < 0 ? strerror(errno) : "short write");
    }
    pthread_mutex_unlock(&h->lock);
    free(w.p);
    free(b.p);
}

size_t fy_har_count(fy_har_t *h)
{
    pthread_mutex_lock(&h->lock);
    size_t n = h->n;
    pthread_mutex_unlock(&h->lock);
    return n;
}

void fy_har_close(fy_har_t *h)
{
    if (!h) return;
    close(h->fd);
    pthread_mutex_destroy(&h->lock);
    free(h);
}
