/* HTTP/2 server codec: the frame pre-scanner. feed() reads the frame headers on their way
 * to nghttp2 for what it does not check on streams it has closed or never saw (frame_head).
 * Thread rules: h2_server_int.h. */
#include "h2/h2_server_int.h"

static bool in_gap(const h2_conn_t *c, int32_t id)
{
    unsigned n = c->ngaps < NELEM(c->gaps) ? c->ngaps : NELEM(c->gaps);
    for (unsigned i = 0; i < n; i++)
        if (id >= c->gaps[i].lo && id <= c->gaps[i].hi) return true;
    return false;
}

static bool is_client_closed(const h2_conn_t *c, int32_t id)
{
    unsigned n = c->nclosed < NELEM(c->client_closed) ? c->nclosed : NELEM(c->client_closed);
    for (unsigned i = 0; i < n; i++)
        if (c->client_closed[i] == id) return true;
    return false;
}

/* The header of a client frame that nghttp2 may let pass unanswered, after nghttp2 has read
 * every frame before it. nghttp2 answers DATA and HEADERS on a stream the client had closed
 * (END_STREAM or RST_STREAM) with GOAWAY STREAM_CLOSED (RFC 9113 §5.1 closed, §6.1; a stream
 * error made a connection error, §5.4) only while it keeps the closed stream, which is never
 * when the client has max-concurrent-streams open; and it ignores a HEADERS on an id skipped
 * below one already used. */
static void frame_head(h2_conn_t *c, uint8_t type, int32_t id)
{
    char a[64];
    if (is_client_closed(c, id)) {
        if (nghttp2_session_find_stream(c->ng, id)) return; /* kept: nghttp2 answers */
        fy_info("client %s: h2 frame on stream %d after its END_STREAM or RST_STREAM: GOAWAY "
                "STREAM_CLOSED",
                fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), (int)id);
        nghttp2_session_terminate_session(c->ng, NGHTTP2_STREAM_CLOSED);
        c->goaway = true;
        return;
    }
    if (type == NGHTTP2_HEADERS && in_gap(c, id)) {
        /* §5.1.1: a new stream's id must exceed all the client used; connection error */
        fy_info("client %s: h2 HEADERS opens stream %d after stream %d: GOAWAY PROTOCOL_ERROR",
                fy_sock_addr_str((struct sockaddr *)&c->remote, a, sizeof a), (int)id,
                (int)c->max_sid);
        nghttp2_session_terminate_session(c->ng, NGHTTP2_PROTOCOL_ERROR);
        c->goaway = true;
    }
}

/* Feed the client's bytes to nghttp2, scanning frame headers on the way for what nghttp2
 * does not check on streams it has closed or never saw (frame_head). nghttp2 reads the bytes
 * before such a header first, so that the answer follows every earlier frame, and reads each
 * RST_STREAM before anything after it is scanned (on_frame_recv notes the stream). */
int fy__h2_feed(h2_conn_t *c, const char *data, size_t len)
{
    size_t i = 0, fed = 0;
    while (i < len) {
        if (c->scan_magic) {
            size_t k = len - i < c->scan_magic ? len - i : c->scan_magic;
            i += k;
            c->scan_magic -= (unsigned)k;
            continue;
        }
        if (c->scan_skip) {
            size_t k = len - i < c->scan_skip ? len - i : c->scan_skip;
            i += k;
            c->scan_skip -= (uint32_t)k;
            if (c->scan_skip == 0 && c->scan_split) {
                c->scan_split = false;
                if (fy__h2_feed_ng(c, data + fed, i - fed) < 0) return -1;
                fed = i;
            }
            continue;
        }
        const uint8_t *h;
        if (c->scan_hlen == 0 && len - i >= 9) {
            h = (const uint8_t *)data + i; /* a whole header in this read: no copy */
            i += 9;
        } else {
            c->scan_hdr[c->scan_hlen++] = (uint8_t)data[i++];
            if (c->scan_hlen < 9) continue;
            c->scan_hlen = 0;
            h = c->scan_hdr;
        }
        uint8_t type = h[3];
        int32_t id = (int32_t)((uint32_t)(h[5] & 0x7f) << 24 | (uint32_t)h[6] << 16 |
                               (uint32_t)h[7] << 8 | h[8]);
        c->scan_skip = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
        c->scan_split = type == NGHTTP2_RST_STREAM && c->scan_skip;
        if ((type != NGHTTP2_HEADERS && type != NGHTTP2_DATA) || !(id & 1)) continue;
        if (id > c->max_sid) {
            if (type == NGHTTP2_HEADERS) {
                /* a new stream (or an error nghttp2 answers): ids it skips are closed */
                int32_t next = c->max_sid ? c->max_sid + 2 : 1;
                if (id > next) {
                    unsigned g = c->ngaps++ % NELEM(c->gaps);
                    c->gaps[g].lo = next;
                    c->gaps[g].hi = id - 2;
                }
                c->max_sid = id;
            }
            continue;
        }
        if (!is_client_closed(c, id) && !(type == NGHTTP2_HEADERS && in_gap(c, id))) continue;
        size_t start = i >= 9 ? i - 9 : 0; /* the header may have begun in the last read */
        if (start > fed) {
            if (fy__h2_feed_ng(c, data + fed, start - fed) < 0) return -1;
            fed = start;
        }
        frame_head(c, type, id);
    }
    return fy__h2_feed_ng(c, data + fed, len - fed);
}
