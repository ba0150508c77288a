/* WebSocket tunnels through the proxy: where each direction's frames end (RFC 6455 §5.2), so
 * that our Close frames (1001, on a graceful stop or the tunnel timeout) go only between two
 * frames, and the per-thread list of open tunnels fy_proxy_drain walks. Worker's thread only
 * (see proxy_int.h). */
#include "handler/proxy_int.h"

#include <string.h>
#include <sys/random.h>

/* ---- WebSocket tunnels: Close frames of ours (stop, tunnel timeout) ---- */

/* This thread's open WebSocket tunnels (fy_proxy_drain). */
__thread fy_list_t fy__proxy_open_ws;
__thread bool fy__proxy_open_ws_init;

void fy__proxy_ws_feed(ws_track_t *t, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n) {
        if (t->left) {
            size_t k = n < t->left ? n : (size_t)t->left;
            t->left -= k;
            p += k;
            n -= k;
            continue;
        }
        t->hdr[t->hlen++] = *p++;
        n--;
        if (t->hlen < 2) continue;
        unsigned l7 = t->hdr[1] & 0x7fu;
        size_t need = 2u + (t->hdr[1] & 0x80u ? 4u : 0u) + (l7 == 126 ? 2u : l7 == 127 ? 8u : 0u);
        if (t->hlen < need) continue;
        uint64_t len = l7;
        if (l7 == 126) len = (uint64_t)t->hdr[2] << 8 | t->hdr[3];
        if (l7 == 127)
            for (int i = 2; i < 10; i++) len = len << 8 | t->hdr[i];
        t->left = len;
        t->hlen = 0;
    }
}

bool fy__proxy_ws_at_boundary(const ws_track_t *t)
{
    return t->left == 0 && t->hlen == 0;
}

/* Close, 1001 "going away" (RFC 6455 §7.4.1), server to client: unmasked */
static const char ws_close_1001[4] = {(char)0x88, 0x02, 0x03, (char)0xe9};

/* Our Close to the client, once nothing else is being sent and its frames are whole. */
void fy__proxy_ws_close_down(proxy_req_t *pr)
{
    if (pr->ws_down_sent || pr->finished || pr->stopped || pr->res_sending ||
        !fy__proxy_ws_at_boundary(&pr->ws_down))
        return;
    pr->ws_down_sent = true;
    pr->res_sending = true; /* the codec calls proceed once it is out */
    pr->sending_len = 0;
    struct iovec iov = {(void *)ws_close_1001, sizeof ws_close_1001};
    fy_exchange_send(pr->ex, &iov, 1, FY_SEND_MORE);
}

/* Our Close to the origin (client to server: masked), then the end of that direction. */
void fy__proxy_ws_close_up(proxy_req_t *pr)
{
    if (pr->ws_up_sent || pr->q_end || pr->qn || !fy__proxy_ws_at_boundary(&pr->ws_up)) return;
    pr->ws_up_sent = true;
    uint8_t m[4] = {0x5a, 0x3c, 0x96, 0xe1};
    if (getrandom(m, sizeof m, GRND_NONBLOCK) != (ssize_t)sizeof m)
        m[0] ^= (uint8_t)fy__proxy_now_us();
    uint8_t *f = pr->ws_up_frame;
    f[0] = 0x88;
    f[1] = 0x82;
    memcpy(f + 2, m, 4);
    f[6] = 0x03 ^ m[0];
    f[7] = 0xe9 ^ m[1];
    pr->qp = (const char *)f;
    pr->qn = sizeof pr->ws_up_frame;
    pr->q_end = true;
    fy__proxy_resume_body(pr);
}

/* Stop or tunnel timeout: Close 1001 to both sides (each as soon as its direction is between
 * frames), then the peers' answers end the tunnel: the origin's close finishes the exchange.
 * A close handshake that takes longer than `limits.tunnel-close-timeout` is cut. */
void fy__proxy_ws_going_away(proxy_req_t *pr)
{
    if (pr->ws_closing || pr->finished || pr->stopped) return;
    pr->ws_closing = true;
    pr->timer_kind = T_IDLE;
    fy_timer_start(pr->loop, &pr->timer, pr->ex->ctx->limits->tunnel_close_timeout_ms);
    fy__proxy_ws_close_up(pr);
    if (!pr->finished && !pr->stopped) fy__proxy_ws_close_down(pr);
}

/* After our Close went to the client, what the origin sends is not for it (its Close reply
 * included): consumed and dropped. */
void fy__proxy_ws_drop_down(proxy_req_t *pr)
{
    for (int guard = 0; guard < 64 && !pr->finished && !pr->stopped; guard++) {
        /* (a ring lends its next bytes from inside the consume) */
        if (pr->zn && fy_origin_stream_is_open(pr->os)) {
            size_t n = pr->zn;
            pr->zn = 0;
            pr->in_codec++;
            fy_origin_stream_consume(pr->os, n);
            pr->in_codec--;
            continue;
        }
        break;
    }
}

void fy_proxy_drain(void)
{
    if (!fy__proxy_open_ws_init) return;
    fy_list_t *l = fy__proxy_open_ws.next;
    while (l != &fy__proxy_open_ws) {
        proxy_req_t *pr = fy_container_of(l, proxy_req_t, ws_node);
        l = l->next; /* going away may finish the exchange and unlink it */
        fy__proxy_ws_going_away(pr);
    }
}
