#include "ops/access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "net/sock.h"

struct fy_access_log {
    int fd;
    int format;
    char *buf;
    size_t len, cap;
    time_t tcached;
    char tlocal[40]; /* "30/Nov/2026:04:24:53 +0000" */
    char tiso[40];   /* "2026-11-30T04:24:53Z" */
};

int fy_access_log_open(const fy_log_conf_t *conf, int *fd_out, const char **err)
{
    *fd_out = -1;
    if (!conf->access || strcmp(conf->access, "off") == 0) return 0;
    if (strcmp(conf->access, "stdout") == 0) {
        *fd_out = 1;
        return 0;
    }
    if (strcmp(conf->access, "stderr") == 0) {
        *fd_out = 2;
        return 0;
    }
    int fd = open(conf->access, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        *err = strerror(errno);
        return -1;
    }
    *fd_out = fd;
    return 0;
}

fy_access_log_t *fy_access_log_new(int fd, int format, size_t bufsize)
{
    fy_access_log_t *l = fy_xcalloc(1, sizeof *l);
    l->fd = fd;
    l->format = format;
    l->cap = bufsize < 8192 ? 8192 : bufsize;
    l->buf = fy_xmalloc(l->cap);
    l->tcached = -1;
    return l;
}

void fy_access_log_flush(fy_access_log_t *l)
{
    size_t off = 0;
    while (off < l->len) {
        ssize_t w = write(l->fd, l->buf + off, l->len - off);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            break; /* a full disk must not stop serving */
        }
        off += (size_t)w;
    }
    l->len = 0;
}

void fy_access_log_free(fy_access_log_t *l)
{
    if (!l) return;
    fy_access_log_flush(l);
    free(l->buf);
    free(l);
}

/* Append s, escaping quotes, backslashes and control bytes (the log stays one line). */
static char *esc(char *p, char *end, fy_str_t s, bool json)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < s.len && p + 6 < end; i++) {
        unsigned char c = (unsigned char)s.p[i];
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c < 0x20 || c == 0x7f || (json && c >= 0x80)) {
            if (json) {
                memcpy(p, "\\u00", 4);
                p += 4;
            } else {
                *p++ = '\\';
                *p++ = 'x';
            }
            *p++ = hx[c >> 4];
            *p++ = hx[c & 15];
        } else {
            *p++ = (char)c;
        }
    }
    return p;
}

static fy_str_t hdr(const fy_exchange_t *ex, const char *name, size_t n)
{
    const fy_header_t *h = fy_headers_find(&ex->req.headers, name, n);
    return h ? h->value : FY_STR_LIT("-");
}

void fy_access_log_exchange(fy_exchange_t *ex, void *arg)
{
    fy_access_log_t *l = arg;
    time_t now = ex->ctx->loop->now_sec;
    if (now != l->tcached) {
        /* the lines of the previous second go out first: with every worker doing so (and
           flushing just after each second, server.c), the log stays in time order */
        if (l->len) fy_access_log_flush(l);
        struct tm tm;
        localtime_r(&now, &tm);
        strftime(l->tlocal, sizeof l->tlocal, "%d/%b/%Y:%H:%M:%S %z", &tm);
        gmtime_r(&now, &tm);
        strftime(l->tiso, sizeof l->tiso, "%Y-%m-%dT%H:%M:%SZ", &tm);
        l->tcached = now;
    }
    if (l->cap - l->len < 4096 + ex->req.target.len * 4) fy_access_log_flush(l);
    if (l->cap - l->len < 4096 + ex->req.target.len * 4) return; /* absurd line: drop */
    char *p = l->buf + l->len, *end = l->buf + l->cap;
    char host[64];
    fy_sock_host_str(ex->remote, host, sizeof host);
    const char *proto = ex->req.version == 10   ? "HTTP/1.0"
                        : ex->req.version == 20 ? "HTTP/2.0"
                        : ex->req.version == 30 ? "HTTP/3.0"
                                                : "HTTP/1.1";
    int n;
    if (l->format == FY_ACCESS_JSON) {
        n = snprintf(p, (size_t)(end - p), "{\"time\":\"%s\",\"remote\":\"%s\",\"method\":\"",
                     l->tiso, host);
        p += n;
        p = esc(p, end, ex->req.method, true);
        p += snprintf(p, (size_t)(end - p), "\",\"target\":\"");
        p = esc(p, end, ex->req.target, true);
        p += snprintf(p, (size_t)(end - p), "\",\"host\":\"");
        p = esc(p, end, ex->req.authority, true);
        p += snprintf(p, (size_t)(end - p),
                      "\",\"proto\":\"%s\",\"status\":%d,\"bytes\":%llu,\"duration_ms\":%llu,"
                      "\"referer\":\"",
                      proto, ex->res.status, (unsigned long long)ex->bytes_sent,
                      (unsigned long long)(ex->ctx->loop->now_ms - ex->start_ms));
        p = esc(p, end, hdr(ex, "referer", 7), true);
        p += snprintf(p, (size_t)(end - p), "\",\"user_agent\":\"");
        p = esc(p, end, hdr(ex, "user-agent", 10), true);
        p += snprintf(p, (size_t)(end - p), "\"");
        if (ex->error) {
            p += snprintf(p, (size_t)(end - p), ",\"error\":\"");
            p = esc(p, end, fy_str(ex->error, strlen(ex->error)), true);
            p += snprintf(p, (size_t)(end - p), "\"");
        }
        p += snprintf(p, (size_t)(end - p), "}\n");
    } else {
        n = snprintf(p, (size_t)(end - p), "%s - - [%s] \"", host, l->tlocal);
        p += n;
        p = esc(p, end, ex->req.method, false);
        *p++ = ' ';
        p = esc(p, end, ex->req.target, false);
        p += snprintf(p, (size_t)(end - p), " %s\" %d %llu", proto, ex->res.status,
                      (unsigned long long)ex->bytes_sent);
        if (l->format == FY_ACCESS_COMBINED) {
            p += snprintf(p, (size_t)(end - p), " \"");
            p = esc(p, end, hdr(ex, "referer", 7), false);
            p += snprintf(p, (size_t)(end - p), "\" \"");
            p = esc(p, end, hdr(ex, "user-agent", 10), false);
            *p++ = '"';
        }
        *p++ = '\n';
    }
    l->len = (size_t)(p - l->buf);
}
