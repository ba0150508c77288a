/* WebTransport client session (draft-ietf-webtrans-http3) towards an h3:// origin, for the
 * WebTransport proxy: one QUIC connection of its own per session (quic/quic.h client, ALPN
 * h3), our SETTINGS (H3_DATAGRAM, ENABLE_CONNECT_PROTOCOL's peer side, draft-02
 * ENABLE_WEBTRANSPORT and WT_MAX_SESSIONS), an extended CONNECT (:protocol webtransport), then
 * bidirectional (0x41 + session id) and unidirectional (0x54 + session id) streams both ways,
 * HTTP Datagrams (quarter stream id) and the CLOSE_WEBTRANSPORT_SESSION capsule.
 *
 * Threads: the loop's thread only. Callbacks run from the loop (only fy_wtc_stream_reset calls
 * one, stream_gone, from inside itself); from inside them the owner may use every function here,
 * including fy_wtc_close (then no further callback comes).
 *
 * Backpressure: received stream bytes are credited back to the origin only as `data` uses
 * them (the rest is given again after fy_wtc_stream_resume); writes are copied into the QUIC
 * stream queue, watched with fy_wtc_stream_buffered (`writable` when it shrinks). */
#ifndef FY_H3_H3_WT_CLIENT_H
#define FY_H3_H3_WT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/fwd.h"
#include "quic/quic.h"

typedef struct fy_wtc fy_wtc_t;
typedef struct fy_wtc_stream fy_wtc_stream_t;

typedef struct fy_wtc_ops {
    /* The origin answered the CONNECT: 200 (streams and datagrams may go now) or another
       status (the session is dead: call fy_wtc_close); 0 when the connection failed first. */
    void (*ready)(void *ud, int status);
    /* The origin opened a stream (uni: receive-only). */
    void (*stream)(void *ud, fy_wtc_stream_t *st);
    /* As fy_wt_ops_t.data: returns the bytes used; `fin` once, after everything was used. */
    size_t (*data)(void *ud, fy_wtc_stream_t *st, const uint8_t *p, size_t n, bool fin);
    /* Queued bytes of `st` were acknowledged. */
    void (*writable)(void *ud, fy_wtc_stream_t *st);
    /* RESET_STREAM or STOP_SENDING from the origin: its WebTransport code (-1: not one). */
    void (*reset)(void *ud, fy_wtc_stream_t *st, int64_t code);
    /* May be NULL (then `reset` gets both). As fy_wt_ops_t.stop: when set, `reset` is the
       origin's RESET_STREAM only and this its STOP_SENDING (code -1: not known). */
    void (*stop)(void *ud, fy_wtc_stream_t *st, int64_t code);
    /* The origin's DRAIN_WEBTRANSPORT_SESSION: it will end the session soon. May be NULL. */
    void (*drain)(void *ud);
    /* The stream is gone; freed after this returns. */
    void (*stream_gone)(void *ud, fy_wtc_stream_t *st);
    /* One HTTP Datagram of the session (payload after the quarter stream id). */
    void (*datagram)(void *ud, const uint8_t *p, size_t n);
    /* The session ended after `ready(200)`: the origin's CLOSE capsule (code, reason), its FIN
       (0, ""), or the connection's end (0, "gone"). Every stream got stream_gone first. Call
       fy_wtc_close afterwards (it sends nothing more). */
    void (*close)(void *ud, uint32_t code, const char *reason, size_t rlen);
} fy_wtc_ops_t;

/* Connect to `sa` and send CONNECT https://`authority``path` (`origin`: the Origin header, or
 * NULL). `o` as for fy_quic_connect (o->conf borrowed for the session's life; it must allow
 * datagrams); strings copied. NULL (logged) when the connection could not start. */
fy_wtc_t *fy_wtc_connect(fy_loop_t *loop, const struct sockaddr *sa, socklen_t salen,
                         const fy_quic_client_opts_t *o, const char *authority, const char *path,
                         const char *origin, const fy_wtc_ops_t *ops, void *ud);
/* End the session: a CLOSE_WEBTRANSPORT_SESSION capsule (code, reason) and FIN if it is open,
 * every stream reset (WT_SESSION_GONE), then the connection closes once the capsule is
 * acknowledged (at most a second later). No callback after this; `c` is freed later by itself. */
void fy_wtc_close(fy_wtc_t *c, uint32_t code, const char *reason, size_t rlen);
/* Send DRAIN_WEBTRANSPORT_SESSION to the origin (once; nothing before ready(200)). */
void fy_wtc_drain(fy_wtc_t *c);
/* Send one datagram: 0, -EMSGSIZE, -EAGAIN (queue full: counted, dropped), -ENOTSUP. */
int fy_wtc_send_datagram(fy_wtc_t *c, const void *p, size_t n);
/* Open a stream of ours (NULL: not ready, or no QUIC stream credit left). */
fy_wtc_stream_t *fy_wtc_open(fy_wtc_t *c, bool uni);

bool fy_wtc_stream_is_uni(const fy_wtc_stream_t *st);
void fy_wtc_stream_set_ud(fy_wtc_stream_t *st, void *ud);
void *fy_wtc_stream_ud(const fy_wtc_stream_t *st);
/* 0, or -EPIPE (a receive-only stream, or gone). */
int fy_wtc_stream_write(fy_wtc_stream_t *st, const void *p, size_t n);
void fy_wtc_stream_finish(fy_wtc_stream_t *st);
size_t fy_wtc_stream_buffered(const fy_wtc_stream_t *st);
/* The bound the owner keeps fy_wtc_stream_buffered under (the conf's send_buffer). */
size_t fy_wtc_send_buffer(const fy_wtc_stream_t *st);
/* Give again what `data` left unused (deferred). */
void fy_wtc_stream_resume(fy_wtc_stream_t *st);
/* RESET_STREAM and STOP_SENDING with WebTransport error `code`; stream_gone is called from
 * inside this call (as fy_wt_stream_reset does) and nothing else comes for `st`. */
void fy_wtc_stream_reset(fy_wtc_stream_t *st, uint32_t code);
/* One direction only, as fy_wt_stream_reset_send / fy_wt_stream_stop. */
void fy_wtc_stream_reset_send(fy_wtc_stream_t *st, uint32_t code);
void fy_wtc_stream_stop(fy_wtc_stream_t *st, uint32_t code);

/* ---- the wire pieces, pure (h3_wt_client_test.c) ---- */

/* A peer stream's prefix: the type varint (`want`: 0x41 bidi, 0x54 uni), then the session id.
 * state: 0 reading, 1 a WebTransport stream (sid set), -1 another type (control, QPACK,
 * unknown: the rest is not ours). */
typedef struct fy__wtc_prefix {
    int state;
    bool have_type;
    uint8_t sb[8];
    size_t sn;
    uint64_t type, sid;
} fy__wtc_prefix_t;
/* Returns the bytes taken; stops right after the prefix (or after a foreign type). */
size_t fy__wtc_prefix_feed(fy__wtc_prefix_t *pr, uint64_t want, const uint8_t *p, size_t n);
/* Our control stream: its type, then SETTINGS (both H3_DATAGRAM codepoints, draft-02
 * ENABLE_WEBTRANSPORT, WT_MAX_SESSIONS 1). b: 64 bytes. */
size_t fy__wtc_settings(uint8_t *b);
/* A stream of ours begins with this (type, session id). b: 16 bytes. */
size_t fy__wtc_stream_head(uint8_t *b, bool uni, uint64_t sid);
/* A DATA frame carrying a CLOSE_WEBTRANSPORT_SESSION capsule (reason cut at
 * FY_WT_CLOSE_REASON_MAX). b: 32 + FY_WT_CLOSE_REASON_MAX bytes. */
size_t fy__wtc_close_frame(uint8_t *b, uint32_t code, const char *reason, size_t rlen);
/* A DATA frame carrying a DRAIN_WEBTRANSPORT_SESSION capsule. b: 16 bytes. */
size_t fy__wtc_drain_frame(uint8_t *b);
/* An HTTP Datagram of session `sid` (quarter stream id, payload): 0 if over `cap`. */
size_t fy__wtc_datagram(uint8_t *b, size_t cap, uint64_t sid, const void *p, size_t n);
/* A received datagram's payload offset when it belongs to session `sid`, else 0. */
size_t fy__wtc_datagram_of(const uint8_t *p, size_t n, uint64_t sid);

#endif
