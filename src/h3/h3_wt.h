/* WebTransport over HTTP/3 (draft-ietf-webtrans-http3) on the h3 server codec: sessions
 * (extended CONNECT with :protocol = webtransport), their bidirectional streams (signal 0x41 +
 * session id), unidirectional streams (type 0x54 + session id), HTTP Datagrams (RFC 9297:
 * quarter stream id + payload in QUIC DATAGRAM frames) and capsules on the CONNECT stream
 * (CLOSE_WEBTRANSPORT_SESSION, DRAIN_WEBTRANSPORT_SESSION).
 *
 * The h3 codec calls the fy_h3_wt_* hooks; a handler accepts a session with fy_wt_accept and
 * then sees streams and datagrams through fy_wt_ops_t. Backpressure: a stream's received bytes
 * are credited back to the peer only as the handler consumes them (its `data` returns how
 * many); writes are copied into the QUIC stream queue, which the handler watches with
 * fy_wt_stream_buffered (`writable` when it drains).
 * Threads: sessions and their streams live on their QUIC connection's worker thread only. */
#ifndef FY_H3_H3_WT_H
#define FY_H3_H3_WT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fwd.h"
#include "http/exchange.h"
#include "quic/quic.h"

/* codepoints */
#define FY_WT_STREAM_BIDI 0x41u                      /* first varint of a WT bidi stream */
#define FY_WT_STREAM_UNI 0x54u                       /* uni stream type */
#define FY_WT_SETTINGS_DRAFT02 0x2b603742u           /* ENABLE_WEBTRANSPORT (draft-02) */
#define FY_WT_SETTINGS_MAX_SESSIONS_07 0xc671706aull /* WEBTRANSPORT_MAX_SESSIONS (draft-07) */
#define FY_WT_SETTINGS_MAX_SESSIONS 0x14e9cd29ull    /* WT_MAX_SESSIONS (current draft) */
#define FY_H3_SETTINGS_H3_DATAGRAM_04 0xffd277ull    /* H3_DATAGRAM (draft-04), old peers */
#define FY_WT_CAPSULE_CLOSE 0x2843u
#define FY_WT_CAPSULE_DRAIN 0x78aeu
#define FY_H3_DATAGRAM_ERROR 0x33u
/* HTTP/3 error codes of the draft */
#define FY_WT_BUFFERED_STREAM_REJECTED 0x3994bd84ull
#define FY_WT_SESSION_GONE 0x170d7b68ull
#define FY_WT_CLOSE_REASON_MAX 1024u

/* WebTransport application error (32 bits) <-> HTTP/3 error code (the draft's mapping onto
 * 0x52e4a40fa8db.., skipping the reserved 0x1f * N + 0x21 codepoints). from_h3 returns -1 for
 * a code outside the range (or a reserved one). */
uint64_t fy_wt_code_to_h3(uint32_t code);
int64_t fy_wt_code_from_h3(uint64_t h3);

/* ---- capsule reader (RFC 9297 §3.2: type, length, payload), peer input ---- */
typedef struct fy_wt_capsule_rd {
    uint8_t hb[16];
    uint8_t hn;
    bool have_hdr;
    uint64_t type, len, left;
    uint8_t pay[4 + FY_WT_CLOSE_REASON_MAX]; /* the payload of a CLOSE capsule */
    size_t pn;
} fy_wt_capsule_rd_t;

typedef struct fy_wt_capsule_ev {
    int kind; /* 0 none yet, 1 CLOSE (code, reason), 2 DRAIN, -1 malformed (why) */
    uint32_t code;
    const char *reason; /* into the reader; reason_len bytes */
    size_t reason_len;
    const char *why;
} fy_wt_capsule_ev_t;

/* Feed bytes; stops after the first complete CLOSE/DRAIN capsule or error (ev->kind != 0).
 * Unknown capsules are skipped (never buffered). Returns the bytes consumed. */
size_t fy_wt_capsule_feed(fy_wt_capsule_rd_t *rd, const uint8_t *p, size_t n,
                          fy_wt_capsule_ev_t *ev);
/* Serialize a CLOSE capsule (reason cut at FY_WT_CLOSE_REASON_MAX) into b (room 16 + 4 +
 * FY_WT_CLOSE_REASON_MAX); returns its length. */
size_t fy_wt_capsule_close(uint8_t *b, uint32_t code, const char *reason, size_t rlen);

/* ---- the session API for handlers ---- */
typedef struct fy_wt_session fy_wt_session_t;
typedef struct fy_wt_stream fy_wt_stream_t;

typedef struct fy_wt_ops {
    /* The peer opened a stream (uni: receive-only). Set fy_wt_stream_set_ud if wanted. */
    void (*stream)(void *ud, fy_wt_stream_t *st);
    /* Received bytes in order; return how many were used (the rest is given again after
       fy_wt_stream_resume). `fin` comes once, with the last bytes or alone (n == 0), and
       only when everything before it was used. */
    size_t (*data)(void *ud, fy_wt_stream_t *st, const uint8_t *p, size_t n, bool fin);
    /* Queued bytes of `st` were acknowledged (fy_wt_stream_buffered went down). */
    void (*writable)(void *ud, fy_wt_stream_t *st);
    /* The peer reset the stream or asked us to stop sending: `code` is its WebTransport
       error code (-1 when it was not one). */
    void (*reset)(void *ud, fy_wt_stream_t *st, int64_t code);
    /* May be NULL (then `reset` gets both). When set, `reset` is the peer's RESET_STREAM only
       (its buffered bytes are dropped; our sending side stays) and this is its STOP_SENDING
       (QUIC has reset our sending side; `code` -1: the QUIC library does not tell it). */
    void (*stop)(void *ud, fy_wt_stream_t *st, int64_t code);
    /* The peer's DRAIN_WEBTRANSPORT_SESSION: it will end the session soon. May be NULL. */
    void (*drain)(void *ud, fy_wt_session_t *ss);
    /* The stream is gone (both directions ended, or the session closed); `st` is freed after. */
    void (*stream_gone)(void *ud, fy_wt_stream_t *st);
    /* One HTTP Datagram of the session. */
    void (*datagram)(void *ud, fy_wt_session_t *ss, const uint8_t *p, size_t n);
    /* The session ended: the peer's CLOSE capsule (code, reason), its FIN (0, ""), the
       stream's reset or the connection's end (code 0, reason "gone"). After this returns the
       session and its streams are freed (stream_gone was called for each). */
    void (*close)(void *ud, uint32_t code, const char *reason, size_t rlen);
} fy_wt_ops_t;

/* Accept the extended CONNECT `ex` (:protocol webtransport on an h3 stream) as a session:
 * answers 200 and owns the exchange from now on. Returns NULL after having failed the
 * exchange with the reason's status (400 not h3 / no HTTP Datagrams negotiated, 429 over
 * quic.webtransport-max-sessions). Before the client's SETTINGS arrived the session waits
 * for them (the 200 or the 400 goes then; ops->close if the 400 or the client's end comes
 * first). */
fy_wt_session_t *fy_wt_accept(fy_exchange_t *ex, const fy_wt_ops_t *ops, void *ud);
/* Close with a CLOSE_WEBTRANSPORT_SESSION capsule and FIN; every stream is reset with
 * WT_SESSION_GONE. The session is freed before this returns (ops->close is not called). */
void fy_wt_session_close(fy_wt_session_t *ss, uint32_t code, const char *reason, size_t rlen);
/* Send DRAIN_WEBTRANSPORT_SESSION (once per session; later calls send nothing). */
void fy_wt_session_drain(fy_wt_session_t *ss);
/* Send one datagram. 0, or -EMSGSIZE / -EAGAIN / -ENOTSUP (fy_quic_send_datagram). */
int fy_wt_send_datagram(fy_wt_session_t *ss, const void *p, size_t n);
/* Open a unidirectional stream of ours (NULL: no QUIC credit or over the stream limit). */
fy_wt_stream_t *fy_wt_open_uni(fy_wt_session_t *ss);
/* Open a bidirectional stream of ours (0x41 + session id), the same way. */
fy_wt_stream_t *fy_wt_open_bidi(fy_wt_session_t *ss);

bool fy_wt_stream_is_uni(const fy_wt_stream_t *st);
/* The stream's session (NULL once it was reset or its session ended). */
fy_wt_session_t *fy_wt_stream_session(const fy_wt_stream_t *st);
bool fy_wt_stream_is_local(const fy_wt_stream_t *st);
void fy_wt_stream_set_ud(fy_wt_stream_t *st, void *ud);
void *fy_wt_stream_ud(const fy_wt_stream_t *st);
int fy_wt_stream_write(fy_wt_stream_t *st, const void *p, size_t n);
void fy_wt_stream_finish(fy_wt_stream_t *st);
size_t fy_wt_stream_buffered(const fy_wt_stream_t *st);
/* The send-buffer bound the codec uses (quic.send-buffer). */
size_t fy_wt_send_buffer(const fy_wt_stream_t *st);
/* Give the bytes `data` left unused again (deferred, not from inside this call). */
void fy_wt_stream_resume(fy_wt_stream_t *st);
/* RESET_STREAM and STOP_SENDING with WebTransport error `code`. */
void fy_wt_stream_reset(fy_wt_stream_t *st, uint32_t code);
/* One direction only: RESET_STREAM of our sending side (writes fail with -EPIPE after), or
 * STOP_SENDING of the peer's (what still arrives is dropped). The stream stays until QUIC
 * closes it (stream_gone then). */
void fy_wt_stream_reset_send(fy_wt_stream_t *st, uint32_t code);
void fy_wt_stream_stop(fy_wt_stream_t *st, uint32_t code);

/* ---- hooks for the h3 server codec ---- */
typedef struct fy_h3_wt fy_h3_wt_t;
#define FY_H3_APP_WT 1 /* fy_quic_stream_t.app_kind of streams owned by this file */

fy_h3_wt_t *fy_h3_wt_new(fy_quic_conn_t *qc, fy_loop_t *loop, const fy_quic_conf_t *conf);
void fy_h3_wt_free(fy_h3_wt_t *w);
/* Our SETTINGS pairs for WebTransport (written at p, room 64); returns the bytes. */
size_t fy_h3_wt_settings(const fy_quic_conf_t *conf, uint8_t *p);
/* One of the peer's settings: 0 or an H3 error code. */
uint64_t fy_h3_wt_on_setting(fy_h3_wt_t *w, uint64_t id, uint64_t v);
/* The peer's SETTINGS frame is processed: sessions accepted before it are answered now (200,
 * or 400 when it did not enable HTTP Datagrams). */
void fy_h3_wt_settings_done(fy_h3_wt_t *w);
/* A peer bidi stream began with 0x41 + `session_id`: the stream is this file's from now on
 * (qs->app, qs->app_kind); p/n/fin are the bytes after the two varints. */
void fy_h3_wt_bidi(fy_h3_wt_t *w, fy_quic_stream_t *qs, uint64_t session_id, const uint8_t *p,
                   size_t n, bool fin);
/* A peer uni stream of type 0x54: p/n are the bytes after the type (the session id first). */
void fy_h3_wt_uni(fy_h3_wt_t *w, fy_quic_stream_t *qs, const uint8_t *p, size_t n, bool fin);
/* quic app ops for streams with app_kind FY_H3_APP_WT */
void fy_h3_wt_recv(fy_h3_wt_t *w, fy_quic_stream_t *qs, const uint8_t *p, size_t n, bool fin);
void fy_h3_wt_reset(fy_h3_wt_t *w, fy_quic_stream_t *qs, uint64_t code);
void fy_h3_wt_acked(fy_h3_wt_t *w, fy_quic_stream_t *qs);
void fy_h3_wt_stream_close(fy_h3_wt_t *w, fy_quic_stream_t *qs);
/* A QUIC DATAGRAM frame. */
void fy_h3_wt_datagram(fy_h3_wt_t *w, const uint8_t *p, size_t n);
/* An extended CONNECT before dispatch: true (and the exchange failed: 404 no route, 501 the
 * route does not serve WebTransport) when :protocol is webtransport and the route that would
 * get it has no `webtransport` handler. */
bool fy_h3_wt_refuse(fy_exchange_t *ex);
/* GOAWAY: DRAIN_WEBTRANSPORT_SESSION to every session. */
void fy_h3_wt_drain(fy_h3_wt_t *w);

/* Implemented by the h3 server codec: the connection's WebTransport state and the stream id
 * of an exchange of that codec, or NULL. */
fy_h3_wt_t *fy_h3_exchange_wt(fy_exchange_t *ex, int64_t *stream_id);

#endif
