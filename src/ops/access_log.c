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
    char tlocal[40];                      /* "30/Nov/2026:04:24:53 +0000" */
    char tiso[40];                        /* "2026-11-30T04:24:53Z" */
    uint8_t fields[FY_ACCESS_MAX_FIELDS]; /* json: the keys; text: appended after the line */
    size_t nfields;
};

/* json's keys when `access-fields` names none: error and trace_id only when there is one */
static const uint8_t json_default[] = {
    FY_AF_TIME,       FY_AF_REMOTE, FY_AF_METHOD,   FY_AF_TARGET,      FY_AF_HOST,
    FY_AF_PROTO,      FY_AF_STATUS, FY_AF_BYTES,    FY_AF_DURATION_MS, FY_AF_REFERER,
    FY_AF_USER_AGENT, FY_AF_ERROR,  FY_AF_TRACE_ID,
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

void fy_access_log_set_fields(fy_access_log_t *l, const uint8_t *ids, size_t n)
{
    if (n > FY_ACCESS_MAX_FIELDS) n = FY_ACCESS_MAX_FIELDS;
    memcpy(l->fields, ids, n);
    l->nfields = n;
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

static const char *proto_of(const fy_exchange_t *ex)
{
    return ex->req.version == 10   ? "HTTP/1.0"
           : ex->req.version == 20 ? "HTTP/2.0"
           : ex->req.version == 30 ? "HTTP/3.0"
                                   : "HTTP/1.1";
}

/* Unchecked appends: the caller reserved room for the whole line (see `need` below). */
static char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}
#define PUT_LIT(p, lit) put((p), (lit), sizeof(lit) - 1)

static char *put_u64(char *p, uint64_t v)
{
    char t[20];
    size_t n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) *p++ = t[--n];
    return p;
}

typedef struct line {
    const fy_access_log_t *l;
    const fy_exchange_t *ex;
    const char *host;
} line_t;

/* One field's value: json strings quoted and escaped; text strings quoted, "-" when absent;
 * numbers bare. The caller left at least 4096 bytes plus 4 per target byte. */
static char *put_field(const line_t *ln, char *p, char *end, int id, bool json)
{
    const fy_exchange_t *ex = ln->ex;
    fy_str_t s;
    switch (id) {
    case FY_AF_TIME:
        s = json ? fy_str(ln->l->tiso, strlen(ln->l->tiso))
                 : fy_str(ln->l->tlocal, strlen(ln->l->tlocal));
        break;
    case FY_AF_REMOTE:
        s = fy_str(ln->host, strlen(ln->host));
        break;
    case FY_AF_METHOD:
        s = ex->req.method;
        break;
    case FY_AF_TARGET:
        s = ex->req.target;
        break;
    case FY_AF_HOST:
        s = ex->req.authority;
        if (!json && !s.len) s = FY_STR_LIT("-");
        break;
    case FY_AF_PROTO: {
        const char *pr = proto_of(ex);
        s = fy_str(pr, strlen(pr));
        break;
    }
    case FY_AF_STATUS:
        return put_u64(p, ex->res.status > 0 ? (uint64_t)ex->res.status : 0);
    case FY_AF_BYTES:
        return put_u64(p, ex->bytes_sent);
    case FY_AF_REQUEST_BYTES:
        return put_u64(p, ex->body_received);
    case FY_AF_DURATION_MS:
        return put_u64(p, ex->ctx->loop->now_ms - ex->start_ms);
    case FY_AF_REFERER:
        s = hdr(ex, "referer", 7);
        break;
    case FY_AF_USER_AGENT:
        s = hdr(ex, "user-agent", 10);
        break;
    case FY_AF_ERROR:
        if (!ex->error) return json ? PUT_LIT(p, "null") : PUT_LIT(p, "-");
        s = fy_str(ex->error, strlen(ex->error));
        break;
    case FY_AF_TRACE_ID:
        if (!ex->trace_id) return json ? PUT_LIT(p, "null") : PUT_LIT(p, "-");
        s = fy_str(ex->trace_id, 32);
        break;
    default:
        return p;
    }
    *p++ = '"';
    p = esc(p, end, s, json);
    *p++ = '"';
    return p;
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
    /* room for the whole line: every string escaped (at most 6 bytes a byte), the rest fixed */
    size_t strs = ex->req.method.len + ex->req.target.len + ex->req.authority.len +
                  hdr(ex, "referer", 7).len + hdr(ex, "user-agent", 10).len +
                  (ex->error ? strlen(ex->error) : 0) + 64;
    if (l->format != FY_ACCESS_JSON && l->nfields) strs *= 2; /* appended fields: again */
    size_t need = 1024 + 6 * strs;
    if (l->cap - l->len < need) fy_access_log_flush(l);
    if (l->cap - l->len < need) return; /* absurd line: drop */
    char *p = l->buf + l->len, *end = l->buf + l->cap;
    char host[64];
    fy_sock_host_str(ex->remote, host, sizeof host);
    line_t ln = {l, ex, host};
    if (l->format == FY_ACCESS_JSON) {
        const uint8_t *f = l->nfields ? l->fields : json_default;
        size_t nf = l->nfields ? l->nfields : sizeof json_default;
        bool listed = l->nfields != 0;
        *p++ = '{';
        bool first = true;
        for (size_t i = 0; i < nf; i++) {
            /* by default error and trace_id only when there is one */
            if (!listed &&
                ((f[i] == FY_AF_ERROR && !ex->error) || (f[i] == FY_AF_TRACE_ID && !ex->trace_id)))
                continue;
            if (!first) *p++ = ',';
            first = false;
            *p++ = '"';
            p = put(p, fy_access_field_names[f[i]], strlen(fy_access_field_names[f[i]]));
            p = PUT_LIT(p, "\":");
            p = put_field(&ln, p, end, f[i], true);
        }
        p = PUT_LIT(p, "}\n");
    } else {
        p = put(p, host, strlen(host));
        p = PUT_LIT(p, " - - [");
        p = put(p, l->tlocal, strlen(l->tlocal));
        p = PUT_LIT(p, "] \"");
        p = esc(p, end, ex->req.method, false);
        *p++ = ' ';
        p = esc(p, end, ex->req.target, false);
        *p++ = ' ';
        p = put(p, proto_of(ex), 8);
        p = PUT_LIT(p, "\" ");
        p = put_u64(p, ex->res.status > 0 ? (uint64_t)ex->res.status : 0);
        *p++ = ' ';
        p = put_u64(p, ex->bytes_sent);
        if (l->format == FY_ACCESS_COMBINED) {
            p = PUT_LIT(p, " \"");
            p = esc(p, end, hdr(ex, "referer", 7), false);
            p = PUT_LIT(p, "\" \"");
            p = esc(p, end, hdr(ex, "user-agent", 10), false);
            *p++ = '"';
        }
        for (size_t i = 0; i < l->nfields; i++) {
            *p++ = ' ';
            p = put_field(&ln, p, end, l->fields[i], false);
        }
        *p++ = '\n';
    }
    l->len = (size_t)(p - l->buf);
}
