/* TCP and UDP echo modes: send --size byte messages, check that the exact bytes come back.
 *
 * Message k is PATTERN[k % 251 ..] (a fixed pseudo-random buffer, so consecutive messages
 * differ); for UDP its first 8 bytes carry k, so a lost datagram is told from a wrong one. */
#include "fl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PHASES 251

static uint8_t *pattern; /* owned for the process lifetime: echo_size + PHASES bytes */

int fl_echo_init(void)
{
    pattern = malloc(fl_cfg.echo_size + PHASES);
    if (!pattern) return -1;
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < fl_cfg.echo_size + PHASES; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        pattern[i] = (uint8_t)x;
    }
    return 0;
}

static const uint8_t *msg(uint64_t seq)
{
    return pattern + seq % PHASES;
}

static int echo_on_ready(fl_conn_t *c)
{
    c->u.echo.head = c->u.echo.count = c->u.echo.sendq = 0;
    c->u.echo.seq_sent = c->u.echo.seq_recv = 0;
    c->u.echo.out_off = c->u.echo.in_off = 0;
    return 0;
}

static bool echo_can_issue(fl_conn_t *c)
{
    return c->u.echo.count < (uint32_t)fl_cfg.streams;
}

static int echo_issue(fl_conn_t *c, uint64_t t)
{
    c->u.echo.sent_at[(c->u.echo.head + c->u.echo.count) % FL_STREAMS_MAX] = t;
    c->u.echo.count++;
    c->u.echo.sendq++;
    fl_conn_want_flush(c);
    return 0;
}

static void pop(fl_conn_t *c, int err)
{
    uint64_t t = c->u.echo.sent_at[c->u.echo.head];
    c->u.echo.head = (c->u.echo.head + 1) % FL_STREAMS_MAX;
    c->u.echo.count--;
    c->u.echo.seq_recv++;
    if (err == FL_ERR_TIMEOUT) { /* a lost datagram: not a reply */
        fl_count_error(c, err, 1);
        c->inflight--;
        c->w->finished++;
        return;
    }
    fl_finish(c, t, 0, err < 0 ? fl_cfg.echo_size : 0, err);
}

static int tcp_fill(fl_conn_t *c)
{
    size_t sz = fl_cfg.echo_size;
    while (c->u.echo.sendq && c->oend < FL_OBUF_SIZE) {
        size_t take = sz - c->u.echo.out_off;
        if (take > FL_OBUF_SIZE - c->oend) take = FL_OBUF_SIZE - c->oend;
        memcpy(c->obuf + c->oend, msg(c->u.echo.seq_sent) + c->u.echo.out_off, take);
        c->oend += take;
        c->u.echo.out_off += take;
        if (c->u.echo.out_off == sz) {
            c->u.echo.out_off = 0;
            c->u.echo.seq_sent++;
            c->u.echo.sendq--;
        }
    }
    return 0;
}

static int tcp_on_data(fl_conn_t *c)
{
    size_t sz = fl_cfg.echo_size;
    while (c->ipos < c->ilen) {
        if (c->u.echo.count == 0) goto wrong;
        size_t n = c->ilen - c->ipos;
        size_t want = sz - c->u.echo.in_off;
        if (n > want) n = want;
        if (memcmp(c->ibuf + c->ipos, msg(c->u.echo.seq_recv) + c->u.echo.in_off, n) != 0)
            goto wrong;
        c->ipos += n;
        c->u.echo.in_off += n;
        if (c->u.echo.in_off == sz) {
            c->u.echo.in_off = 0;
            pop(c, -1);
        }
    }
    return 0;
wrong:
    if (c->u.echo.count)
        pop(c, FL_ERR_BODY);
    else
        fl_count_error(c, FL_ERR_BODY, 1);
    return -1; /* the stream cannot be resynchronised: reconnect */
}

static int udp_fill(fl_conn_t *c)
{
    if (!c->u.echo.sendq) return 0;
    size_t sz = fl_cfg.echo_size;
    memcpy(c->obuf, msg(c->u.echo.seq_sent), sz);
    if (sz >= 8) memcpy(c->obuf, &c->u.echo.seq_sent, 8);
    c->oend = sz;
    c->u.echo.seq_sent++;
    c->u.echo.sendq--;
    return 0;
}

static int udp_on_data(fl_conn_t *c)
{
    size_t sz = fl_cfg.echo_size;
    const uint8_t *p = c->ibuf + c->ipos;
    size_t n = c->ilen - c->ipos;
    c->ipos = c->ilen = 0;
    uint64_t seq = c->u.echo.seq_recv;
    if (sz >= 8 && n >= 8) memcpy(&seq, p, 8);
    /* datagrams before this one (still in flight, older) were lost */
    if (seq < c->u.echo.seq_recv || seq >= c->u.echo.seq_recv + c->u.echo.count) {
        fl_count_error(c, FL_ERR_BODY, 1);
        return 0; /* a stray or duplicate datagram: counted, not fatal */
    }
    while (c->u.echo.seq_recv < seq) pop(c, FL_ERR_TIMEOUT);
    bool good = n == sz && (sz < 8 || memcmp(p + 8, msg(seq) + 8, sz - 8) == 0) &&
                (sz >= 8 || memcmp(p, msg(seq), sz) == 0);
    pop(c, good ? -1 : FL_ERR_BODY);
    return 0;
}

static void echo_reset(fl_conn_t *c)
{
    c->u.echo.count = c->u.echo.sendq = 0;
}

const struct fl_proto_ops fl_tcp_echo_ops = {
    .name = "tcp-echo",
    .on_ready = echo_on_ready,
    .issue = echo_issue,
    .on_data = tcp_on_data,
    .fill_obuf = tcp_fill,
    .can_issue = echo_can_issue,
    .on_eof = NULL,
    .reset = echo_reset,
};

const struct fl_proto_ops fl_udp_echo_ops = {
    .name = "udp-echo",
    .on_ready = echo_on_ready,
    .issue = echo_issue,
    .on_data = udp_on_data,
    .fill_obuf = udp_fill,
    .can_issue = echo_can_issue,
    .on_eof = NULL,
    .reset = echo_reset,
};

/* ---- WebSocket echo (ws://, wss://) ----
 * One HTTP/1.1 Upgrade per connection (fixed key, so the expected Sec-WebSocket-Accept is the
 * RFC 6455 sample's), then --size byte binary messages, -m in flight, each echoed back by the
 * server as one unmasked binary frame whose payload must be the exact bytes sent. Client frames
 * carry the all-zero masking key (the payload goes out as is; servers do not check the key). */

#define WS_KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define WS_ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
#define WS_HEAD_MAX 8192

static size_t ws_hdr(uint8_t *h, size_t sz, bool masked)
{
    size_t n = 2;
    h[0] = 0x82; /* FIN, binary */
    if (sz < 126) {
        h[1] = (uint8_t)sz;
    } else if (sz < 65536) {
        h[1] = 126;
        h[2] = (uint8_t)(sz >> 8);
        h[3] = (uint8_t)sz;
        n = 4;
    } else {
        h[1] = 127;
        for (int i = 0; i < 8; i++) h[2 + i] = (uint8_t)((uint64_t)sz >> (56 - 8 * i));
        n = 10;
    }
    if (masked) {
        h[1] |= 0x80;
        memset(h + n, 0, 4);
        n += 4;
    }
    return n;
}

static bool ws_can_issue(fl_conn_t *c)
{
    return c->u.echo.ws == 2 && c->u.echo.count < (uint32_t)fl_cfg.streams;
}

static int ws_on_ready(fl_conn_t *c)
{
    echo_on_ready(c);
    c->u.echo.ws = 0;
    c->u.echo.ws_payload = false;
    return 0;
}

static int ws_fill(fl_conn_t *c)
{
    if (c->u.echo.ws == 0) {
        int n = snprintf((char *)c->obuf, FL_OBUF_SIZE,
                         "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                         "Connection: Upgrade\r\nSec-WebSocket-Key: " WS_KEY "\r\n"
                         "Sec-WebSocket-Version: 13\r\n\r\n",
                         fl_cfg.urls[0].path, fl_cfg.authority);
        if (n < 0 || n >= FL_OBUF_SIZE) return -1;
        c->oend = (size_t)n;
        c->u.echo.ws = 1;
        return 0;
    }
    size_t sz = fl_cfg.echo_size;
    uint8_t h[14];
    size_t hl = ws_hdr(h, sz, true);
    while (c->u.echo.sendq && c->oend < FL_OBUF_SIZE) {
        size_t off = c->u.echo.out_off, room = FL_OBUF_SIZE - c->oend, take;
        if (off < hl) {
            take = hl - off < room ? hl - off : room;
            memcpy(c->obuf + c->oend, h + off, take);
        } else {
            take = hl + sz - off < room ? hl + sz - off : room;
            memcpy(c->obuf + c->oend, msg(c->u.echo.seq_sent) + (off - hl), take);
        }
        c->oend += take;
        c->u.echo.out_off += take;
        if (c->u.echo.out_off == hl + sz) {
            c->u.echo.out_off = 0;
            c->u.echo.seq_sent++;
            c->u.echo.sendq--;
        }
    }
    return 0;
}

static int ws_upgrade(fl_conn_t *c)
{
    const uint8_t *p = c->ibuf + c->ipos;
    size_t n = c->ilen - c->ipos;
    const uint8_t *end = NULL;
    for (size_t i = 3; i < n; i++)
        if (p[i] == '\n' && p[i - 1] == '\r' && p[i - 2] == '\n' && p[i - 3] == '\r') {
            end = p + i + 1;
            break;
        }
    if (!end) {
        if (n < WS_HEAD_MAX) return 0; /* wait for more */
        fl_count_error(c, FL_ERR_PARSE, 1);
        return -1;
    }
    size_t hn = (size_t)(end - p);
    bool ok = hn > 12 && !memcmp(p, "HTTP/1.1 101", 12) &&
              memmem(p, hn, WS_ACCEPT, sizeof(WS_ACCEPT) - 1) != NULL;
    if (!ok) {
        fl_count_error(c, hn > 12 && memcmp(p, "HTTP/1.1 101", 12) ? FL_ERR_STATUS : FL_ERR_PARSE,
                       1);
        return -1;
    }
    c->ipos += hn;
    c->u.echo.ws = 2;
    return 1;
}

static int ws_on_data(fl_conn_t *c)
{
    if (c->u.echo.ws < 2) {
        int r = ws_upgrade(c);
        if (r <= 0) return r;
    }
    size_t sz = fl_cfg.echo_size;
    while (c->ipos < c->ilen) {
        if (!c->u.echo.ws_payload) {
            uint8_t want[14];
            size_t hl = ws_hdr(want, sz, false);
            if (c->ilen - c->ipos < hl) return 0; /* the rest of the header comes later */
            if (c->u.echo.count == 0 || memcmp(c->ibuf + c->ipos, want, hl) != 0) goto wrong;
            c->ipos += hl;
            c->u.echo.ws_payload = true;
            c->u.echo.in_off = 0;
            continue;
        }
        size_t n = c->ilen - c->ipos;
        size_t need = sz - c->u.echo.in_off;
        if (n > need) n = need;
        if (memcmp(c->ibuf + c->ipos, msg(c->u.echo.seq_recv) + c->u.echo.in_off, n) != 0)
            goto wrong;
        c->ipos += n;
        c->u.echo.in_off += n;
        if (c->u.echo.in_off == sz) {
            c->u.echo.in_off = 0;
            c->u.echo.ws_payload = false;
            pop(c, -1);
        }
    }
    return 0;
wrong: /* a frame of another kind or size (close, ping...), or wrong bytes */
    if (c->u.echo.count)
        pop(c, FL_ERR_BODY);
    else
        fl_count_error(c, FL_ERR_BODY, 1);
    return -1;
}

const struct fl_proto_ops fl_ws_echo_ops = {
    .name = "ws-echo",
    .on_ready = ws_on_ready,
    .issue = echo_issue,
    .on_data = ws_on_data,
    .fill_obuf = ws_fill,
    .can_issue = ws_can_issue,
    .on_eof = NULL,
    .reset = echo_reset,
};
