/* The inspector's listener: a small blocking HTTP/1.1 server on its own threads (one accept
 * thread, one thread per connection up to max-clients), off the workers' loops. One request
 * per connection (Connection: close); the event stream keeps its connection. */
#include "ops/inspector_int.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "ops/inspector_filter.h"

#define HEAD_MAX (16 << 10)
#define BODY_MAX (32 << 20) /* HAR import, replay edits */
#define IO_TIMEOUT_MS 10000

/* ---- output buffer ---- */

void fy__sb_put(fy__sb_t *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        b->p = fy_xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
}

void fy__sb_puts(fy__sb_t *b, const char *s)
{
    fy__sb_put(b, s, strlen(s));
}

void fy__sb_printf(fy__sb_t *b, const char *fmt, ...)
{
    char t[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof t) {
        fy__sb_put(b, t, (size_t)n);
        return;
    }
    char *big = fy_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    fy__sb_put(b, big, (size_t)n);
    free(big);
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80) return 1;
    size_t k = (s[0] & 0xe0) == 0xc0   ? 2
               : (s[0] & 0xf0) == 0xe0 ? 3
               : (s[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
    if (!k || k > n || s[0] == 0xc0 || s[0] == 0xc1 || s[0] > 0xf4) return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (k == 3 && s[0] == 0xe0 && s[1] < 0xa0) return 0;
    if (k == 3 && s[0] == 0xed && s[1] >= 0xa0) return 0;
    if (k == 4 && s[0] == 0xf0 && s[1] < 0x90) return 0;
    if (k == 4 && s[0] == 0xf4 && s[1] >= 0x90) return 0;
    return k;
}

void fy__sb_json(fy__sb_t *b, const char *s, size_t n)
{
    fy__sb_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char e[8];
        size_t k = 1;
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(e, sizeof e, "\\u%04x", c);
            esc = e;
        } else if (c >= 0x80) {
            k = utf8_len((const unsigned char *)s + i, n - i);
            if (!k) {
                esc = "\\ufffd";
                k = 1;
            } else if (k == 3 && (unsigned char)s[i] == 0xe2 && (unsigned char)s[i + 1] == 0x80 &&
                       ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9)) {
                esc = (unsigned char)s[i + 2] == 0xa8 ? "\\u2028" : "\\u2029";
            }
        }
        if (esc) {
            fy__sb_put(b, s + i - run, run);
            run = 0;
            fy__sb_puts(b, esc);
            i += k;
        } else {
            run += k;
            i += k;
        }
    }
    fy__sb_put(b, s + n - run, run);
    fy__sb_put(b, "\"", 1);
}

void fy__sb_base64(fy__sb_t *b, const char *s, size_t n)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)(unsigned char)s[i] << 16;
        if (i + 1 < n) v |= (unsigned)(unsigned char)s[i + 1] << 8;
        if (i + 2 < n) v |= (unsigned char)s[i + 2];
        char o[4] = {t[v >> 18 & 63], t[v >> 12 & 63], i + 1 < n ? t[v >> 6 & 63] : '=',
                     i + 2 < n ? t[v & 63] : '='};
        fy__sb_put(b, o, 4);
    }
}

/* ---- connections ---- */

typedef struct conn {
    fy_inspector_t *ins;
    int fd;
} conn_t;

static bool write_all(int fd, const char *p, size_t n)
{
    while (n) {
        struct pollfd pf = {fd, POLLOUT, 0};
        if (poll(&pf, 1, IO_TIMEOUT_MS) <= 0) return false;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void simple(int fd, int status, const char *msg)
{
    char b[512];
    int n = snprintf(b, sizeof b,
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s\n",
                     status, msg, strlen(msg) + 1, msg);
    write_all(fd, b, (size_t)n);
}

/* Header value of `name` (lowercase) in the head, or NULL; *len its length. */
static const char *hdr(const char *head, size_t n, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    const char *p = memchr(head, '\n', n), *end = head + n;
    while (p && p + 1 < end) {
        p++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) break;
        if ((size_t)(eol - p) > nl && p[nl] == ':') {
            size_t k = 0;
            while (k < nl && fy_lower(p[k]) == name[k]) k++;
            if (k == nl) {
                const char *v = p + nl + 1, *ve = eol;
                while (v < ve && (*v == ' ' || *v == '\t')) v++;
                while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) ve--;
                *len = (size_t)(ve - v);
                return v;
            }
        }
        p = eol;
    }
    return NULL;
}

static bool loopback_host(const char *h, size_t n)
{
    static const char *const ok[] = {"127.0.0.1", "localhost", "[::1]"};
    for (size_t i = 0; i < 3; i++) {
        size_t k = strlen(ok[i]);
        if (n >= k && strncasecmp(h, ok[i], k) == 0 && (n == k || h[k] == ':')) return true;
    }
    return false;
}

static bool token_ok(fy_inspector_t *ins, const char *head, size_t hn, const fy__insp_req_t *r)
{
    if (!ins->token) return true;
    size_t tl = strlen(ins->token), al;
    const char *a = hdr(head, hn, "authorization", &al);
    if (a && al == tl + 7 && strncasecmp(a, "bearer ", 7) == 0 &&
        memcmp(a + 7, ins->token, tl) == 0)
        return true;
    char q[256];
    long ql = fy_insp_query_get(r->query, r->query_len, "token", q, sizeof q);
    return ql == (long)tl && memcmp(q, ins->token, tl) == 0;
}

static void *conn_main(void *arg)
{
    conn_t *c = arg;
    fy_inspector_t *ins = c->ins;
    int fd = c->fd;
    free(c);
    char *head = fy_xmalloc(HEAD_MAX + 1);
    size_t hn = 0;
    char *body = NULL;
    const char *eoh = NULL;
    while (!eoh) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (hn >= HEAD_MAX) {
            simple(fd, 431, "request head too large");
            goto out;
        }
        if (poll(&pf, 1, IO_TIMEOUT_MS) <= 0) goto out;
        ssize_t n = recv(fd, head + hn, HEAD_MAX - hn, 0);
        if (n <= 0) goto out;
        hn += (size_t)n;
        head[hn] = 0;
        eoh = strstr(head, "\r\n\r\n");
    }
    size_t head_len = (size_t)(eoh - head) + 4;
    /* request line */
    char method[16], target[8192];
    const char *sp1 = memchr(head, ' ', head_len),
               *sp2 = sp1 ? memchr(sp1 + 1, ' ', head_len - (size_t)(sp1 + 1 - head)) : NULL;
    if (!sp1 || !sp2 || (size_t)(sp1 - head) >= sizeof method ||
        (size_t)(sp2 - sp1 - 1) >= sizeof target || strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
        simple(fd, 400, "bad request line");
        goto out;
    }
    memcpy(method, head, (size_t)(sp1 - head));
    method[sp1 - head] = 0;
    memcpy(target, sp1 + 1, (size_t)(sp2 - sp1 - 1));
    target[sp2 - sp1 - 1] = 0;
    char *qm = strchr(target, '?');
    fy__insp_req_t r = {.method = method, .path = target, .query = "", .query_len = 0};
    if (qm) {
        *qm = 0;
        r.query = qm + 1;
        r.query_len = strlen(qm + 1);
    }
    size_t vl;
    const char *host = hdr(head, head_len, "host", &vl);
    if (!ins->token && (!host || !loopback_host(host, vl))) {
        /* without a token, only loopback names: a rebinding DNS name is refused */
        simple(fd, 403, "the inspector answers loopback host names only (or set a token)");
        goto out;
    }
    if (!token_ok(ins, head, head_len, &r)) {
        simple(fd, 401, "token required");
        goto out;
    }
    if (strcmp(method, "GET") != 0) {
        /* state-changing requests come from the UI itself: no cross-site form posts */
        size_t ol;
        const char *origin = hdr(head, head_len, "origin", &ol);
        bool same = origin && host && ol == vl + 7 && strncmp(origin, "http://", 7) == 0 &&
                    memcmp(origin + 7, host, vl) == 0;
        if (origin && !same) {
            simple(fd, 403, "cross-origin request refused");
            goto out;
        }
    }
    const char *cl = hdr(head, head_len, "content-length", &vl);
    size_t blen = 0;
    if (cl) {
        char t[24];
        if (vl >= sizeof t) vl = sizeof t - 1;
        memcpy(t, cl, vl);
        t[vl] = 0;
        char *end;
        unsigned long long v = strtoull(t, &end, 10);
        if (*end || v > BODY_MAX) {
            simple(fd, 413, "request body too large");
            goto out;
        }
        blen = (size_t)v;
    }
    body = fy_xmalloc(blen + 1);
    size_t have = hn - head_len < blen ? hn - head_len : blen;
    memcpy(body, head + head_len, have);
    while (have < blen) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, IO_TIMEOUT_MS) <= 0) goto out;
        ssize_t n = recv(fd, body + have, blen - have, 0);
        if (n <= 0) goto out;
        have += (size_t)n;
    }
    body[blen] = 0;
    r.body = body;
    r.body_len = blen;
    fy__sb_t o = {0};
    int st = fy__insp_api(ins, &r, &o);
    if (st == 0) {
        const char *le = hdr(head, head_len, "last-event-id", &vl);
        uint64_t last = le ? strtoull(le, NULL, 10) : 0;
        free(head);
        head = NULL;
        fy__insp_events(ins, fd, &r, last);
    } else {
        write_all(fd, o.p, o.len);
    }
    free(o.p);
out:
    free(head);
    free(body);
    shutdown(fd, SHUT_WR);
    close(fd);
    atomic_fetch_sub(&ins->clients, 1);
    return NULL;
}

void *fy__insp_http_main(void *arg)
{
    fy_inspector_t *ins = arg;
    while (!atomic_load(&ins->stopping)) {
        struct pollfd pf[2] = {{ins->lfd, POLLIN, 0}, {ins->wake[0], POLLIN, 0}};
        if (poll(pf, 2, 500) <= 0 || !(pf[0].revents & POLLIN)) continue;
        int fd = accept4(ins->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        if (atomic_fetch_add(&ins->clients, 1) >= ins->max_clients) {
            simple(fd, 503, "too many inspector clients (inspector.max-clients)");
            close(fd);
            atomic_fetch_sub(&ins->clients, 1);
            continue;
        }
        conn_t *c = fy_xmalloc(sizeof *c);
        c->ins = ins;
        c->fd = fd;
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, conn_main, c) != 0) {
            close(fd);
            free(c);
            atomic_fetch_sub(&ins->clients, 1);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}
