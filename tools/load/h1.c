/* HTTP/1.1 client codec: requests copied from pre-rendered templates, a minimal restartable
 * response parser (Content-Length, chunked, close-delimited, 1xx, HEAD/204/304). */
#include "fl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    S_HEAD,
    S_BODY_LEN,
    S_BODY_CLOSE,
    S_CHUNK_SIZE,
    S_CHUNK_EXT,
    S_CHUNK_SIZE_LF,
    S_CHUNK_DATA,
    S_CHUNK_DATA_CR,
    S_CHUNK_DATA_LF,
    S_TRAILER,
    S_TRAILER_LINE,
    S_TRAILER_END_LF,
};

#define MAX_HEAD (16 * 1024)

int fl_h1_build_templates(void)
{
    /* head: request line, Host, user headers, Content-Length; then the body */
    for (int u = 0; u < fl_cfg.nurls; u++) {
        fl_url_t *url = &fl_cfg.urls[u];
        size_t cap = 256 + strlen(url->path) + 2 * strlen(fl_cfg.authority) + fl_cfg.body_len;
        for (int i = 0; i < fl_cfg.nheaders; i++)
            cap += strlen(fl_cfg.headers[i].name) + strlen(fl_cfg.headers[i].value) + 4;
        char *t = malloc(cap);
        if (!t) return -1;
        size_t n = 0;
        if (fl_cfg.proxy_absolute) /* through an explicit proxy: absolute-form */
            n += (size_t)snprintf(t + n, cap - n, "%s http://%s%s HTTP/1.1\r\n", fl_cfg.method,
                                  fl_cfg.authority, url->path);
        else
            n += (size_t)snprintf(t + n, cap - n, "%s %s HTTP/1.1\r\n", fl_cfg.method, url->path);
        if (!fl_cfg.user_host)
            n += (size_t)snprintf(t + n, cap - n, "Host: %s\r\n", fl_cfg.authority);
        for (int i = 0; i < fl_cfg.nheaders; i++)
            n += (size_t)snprintf(t + n, cap - n, "%s: %s\r\n", fl_cfg.headers[i].name,
                                  fl_cfg.headers[i].value);
        bool wants_len = fl_cfg.body || !strcmp(fl_cfg.method, "POST") ||
                         !strcmp(fl_cfg.method, "PUT") || !strcmp(fl_cfg.method, "PATCH");
        if (wants_len)
            n += (size_t)snprintf(t + n, cap - n, "Content-Length: %zu\r\n", fl_cfg.body_len);
        n += (size_t)snprintf(t + n, cap - n, "\r\n");
        if (fl_cfg.body_len) memcpy(t + n, fl_cfg.body, fl_cfg.body_len);
        n += fl_cfg.body_len;
        url->tmpl = t;
        url->tmpl_len = n;
    }
    return 0;
}

static int h1_on_ready(fl_conn_t *c)
{
    fl_h1_state_t *s = &c->u.h1;
    memset(s, 0, offsetof(fl_h1_state_t, sent_at));
    s->head = s->count = s->sendq = 0;
    s->url_next = (uint32_t)c->idx % (uint32_t)fl_cfg.nurls;
    s->tmpl_off = 0;
    return 0;
}

static bool h1_can_issue(fl_conn_t *c)
{
    return c->u.h1.count < (uint32_t)fl_cfg.pipeline;
}

static int h1_issue(fl_conn_t *c, uint64_t t)
{
    fl_h1_state_t *s = &c->u.h1;
    s->sent_at[(s->head + s->count) % FL_PIPELINE_MAX] = t;
    s->count++;
    s->sendq++;
    fl_conn_want_flush(c);
    return 0;
}

static int h1_fill_obuf(fl_conn_t *c)
{
    fl_h1_state_t *s = &c->u.h1;
    while (s->sendq && c->oend < FL_OBUF_SIZE) {
        const fl_url_t *u = &fl_cfg.urls[s->url_next];
        size_t take = u->tmpl_len - s->tmpl_off;
        if (take > FL_OBUF_SIZE - c->oend) take = FL_OBUF_SIZE - c->oend;
        memcpy(c->obuf + c->oend, u->tmpl + s->tmpl_off, take);
        c->oend += take;
        s->tmpl_off += take;
        if (s->tmpl_off == u->tmpl_len) {
            s->tmpl_off = 0;
            s->sendq--;
            if (++s->url_next == (uint32_t)fl_cfg.nurls) s->url_next = 0;
        }
    }
    return 0;
}

static void complete(fl_conn_t *c, int err)
{
    fl_h1_state_t *s = &c->u.h1;
    uint64_t t = s->sent_at[s->head];
    s->head = (s->head + 1) % FL_PIPELINE_MAX;
    s->count--;
    fl_finish(c, t, s->status, s->body_seen, err);
    s->state = S_HEAD;
    s->scan_from = 0;
    if (s->close_after) {
        /* requests pipelined behind the last response are given back, not failed */
        while (s->count) {
            s->count--;
            fl_unissue(c);
        }
        s->sendq = 0;
        c->draining = true;
    }
}

static bool token_in(const char *v, size_t n, const char *tok)
{
    size_t tl = strlen(tok);
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
        size_t st = i;
        while (i < n && v[i] != ',') i++;
        size_t e = i;
        while (e > st && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
        if (e - st == tl && strncasecmp(v + st, tok, tl) == 0) return true;
    }
    return false;
}

/* Parses the head [p, p+len) (ending with the empty line); sets status and body mode. */
static int parse_head(fl_conn_t *c, const char *p, size_t len)
{
    fl_h1_state_t *s = &c->u.h1;
    const char *end = p + len;
    if (len < 14 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') || p[8] != ' ')
        return -1;
    if (p[9] < '1' || p[9] > '9' || p[10] < '0' || p[10] > '9' || p[11] < '0' || p[11] > '9')
        return -1;
    if (p[12] != ' ' && p[12] != '\r') return -1;
    s->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    bool http10 = p[7] == '0';
    s->close_after = http10;
    bool chunked = false, te = false, have_len = false;
    uint64_t clen = 0;
    const char *l = memchr(p, '\n', len);
    if (!l) return -1;
    l++;
    while (l < end) {
        const char *eol = memchr(l, '\n', (size_t)(end - l));
        if (!eol) return -1;
        size_t ll = (size_t)(eol - l);
        if (ll && l[ll - 1] == '\r') ll--;
        if (ll == 0) break;
        const char *colon = memchr(l, ':', ll);
        if (!colon || colon == l) return -1;
        size_t nl = (size_t)(colon - l);
        const char *v = colon + 1;
        const char *ve = l + ll;
        while (v < ve && (*v == ' ' || *v == '\t')) v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        size_t vl = (size_t)(ve - v);
        if (nl == 14 && strncasecmp(l, "content-length", 14) == 0) {
            if (vl == 0 || vl > 19) return -1;
            uint64_t x = 0;
            for (size_t i = 0; i < vl; i++) {
                if (v[i] < '0' || v[i] > '9') return -1;
                x = x * 10 + (uint64_t)(v[i] - '0');
            }
            if (have_len && x != clen) return -1;
            have_len = true;
            clen = x;
        } else if (nl == 17 && strncasecmp(l, "transfer-encoding", 17) == 0) {
            te = true;
            /* chunked must be the final coding */
            size_t i = vl;
            while (i > 0 && v[i - 1] != ',' && v[i - 1] != ' ') i--;
            chunked = (vl - i == 7 && strncasecmp(v + i, "chunked", 7) == 0);
        } else if (nl == 10 && strncasecmp(l, "connection", 10) == 0) {
            if (token_in(v, vl, "close")) s->close_after = true;
            if (http10 && token_in(v, vl, "keep-alive")) s->close_after = false;
        }
        l = eol + 1;
    }
    s->body_seen = 0;
    if (s->status < 200 || s->status == 204 || s->status == 304 || fl_cfg.head) {
        s->state = -1; /* no body */
    } else if (te) {
        s->state = chunked ? S_CHUNK_SIZE : S_BODY_CLOSE;
        s->remaining = 0;
        if (!chunked) s->close_after = true;
    } else if (have_len) {
        s->state = S_BODY_LEN;
        s->remaining = clen;
    } else {
        s->state = S_BODY_CLOSE;
        s->close_after = true;
    }
    return 0;
}

static int h1_on_data(fl_conn_t *c)
{
    fl_h1_state_t *s = &c->u.h1;
    while (c->ipos < c->ilen && !c->draining) {
        const uint8_t *p = c->ibuf + c->ipos;
        size_t n = c->ilen - c->ipos;
        switch (s->state) {
        case S_HEAD: {
            size_t from = s->scan_from > 3 ? s->scan_from - 3 : 0;
            const uint8_t *e = from < n ? memmem(p + from, n - from, "\r\n\r\n", 4) : NULL;
            if (!e) {
                if (n > MAX_HEAD) goto parse_error;
                s->scan_from = n;
                return 0;
            }
            size_t hl = (size_t)(e - p) + 4;
            if (s->count == 0) goto parse_error; /* a response nobody asked for */
            if (parse_head(c, (const char *)p, hl) < 0) goto parse_error;
            c->ipos += hl;
            s->scan_from = 0;
            if (s->status == 101) goto parse_error;
            if (s->status < 200) { /* interim response: the final one follows */
                s->state = S_HEAD;
                break;
            }
            if (s->state == -1) complete(c, -1);
            break;
        }
        case S_BODY_LEN:
        case S_CHUNK_DATA: {
            size_t take = n < s->remaining ? n : (size_t)s->remaining;
            s->remaining -= take;
            s->body_seen += take;
            c->ipos += take;
            if (s->remaining == 0) {
                if (s->state == S_BODY_LEN)
                    complete(c, -1);
                else
                    s->state = S_CHUNK_DATA_CR;
            }
            break;
        }
        case S_BODY_CLOSE:
            s->body_seen += n;
            c->ipos += n;
            break;
        default: { /* the byte-wise states of chunked framing */
            uint8_t ch = *p;
            c->ipos++;
            switch (s->state) {
            case S_CHUNK_SIZE: {
                int d = ch >= '0' && ch <= '9'   ? ch - '0'
                        : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                        : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                                 : -1;
                if (d >= 0) {
                    if (s->remaining >> 59) goto parse_error;
                    s->remaining = s->remaining * 16 + (uint64_t)d;
                } else if (ch == ';' || ch == ' ' || ch == '\t') {
                    s->state = S_CHUNK_EXT;
                } else if (ch == '\r') {
                    s->state = S_CHUNK_SIZE_LF;
                } else if (ch == '\n') {
                    goto size_done;
                } else {
                    goto parse_error;
                }
                break;
            }
            case S_CHUNK_EXT:
                if (ch == '\n') goto size_done;
                break;
            case S_CHUNK_SIZE_LF:
                if (ch != '\n') goto parse_error;
            size_done:
                s->state = s->remaining ? S_CHUNK_DATA : S_TRAILER;
                break;
            case S_CHUNK_DATA_CR:
                if (ch == '\r')
                    s->state = S_CHUNK_DATA_LF;
                else if (ch == '\n')
                    s->state = S_CHUNK_SIZE;
                else
                    goto parse_error;
                break;
            case S_CHUNK_DATA_LF:
                if (ch != '\n') goto parse_error;
                s->state = S_CHUNK_SIZE;
                s->remaining = 0;
                break;
            case S_TRAILER:
                if (ch == '\r')
                    s->state = S_TRAILER_END_LF;
                else if (ch == '\n')
                    complete(c, -1);
                else
                    s->state = S_TRAILER_LINE;
                break;
            case S_TRAILER_LINE:
                if (ch == '\n') s->state = S_TRAILER;
                break;
            case S_TRAILER_END_LF:
                if (ch != '\n') goto parse_error;
                complete(c, -1);
                break;
            }
        }
        }
    }
    if (c->draining) c->ipos = c->ilen; /* bytes after a closing response are ignored */
    return 0;
parse_error:
    fl_count_error(c, FL_ERR_PARSE, 1);
    if (s->count) {
        s->count--; /* the response being parsed is the one counted */
        c->inflight--;
        c->w->finished++;
    }
    return -1;
}

static int h1_on_eof(fl_conn_t *c)
{
    fl_h1_state_t *s = &c->u.h1;
    if (s->count == 0) return 0;
    if (s->state == S_BODY_CLOSE) {
        complete(c, -1);
    } else if (s->state != S_HEAD || c->ilen > c->ipos) {
        complete(c, FL_ERR_BODY); /* truncated response */
    }
    return 0;
}

static void h1_reset(fl_conn_t *c)
{
    c->u.h1.count = c->u.h1.sendq = 0;
}

const struct fl_proto_ops fl_h1_ops = {
    .name = "h1",
    .on_ready = h1_on_ready,
    .issue = h1_issue,
    .on_data = h1_on_data,
    .fill_obuf = h1_fill_obuf,
    .can_issue = h1_can_issue,
    .on_eof = h1_on_eof,
    .reset = h1_reset,
};
