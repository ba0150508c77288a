/* Ferry embedded as a WebTransport server: routes with `webtransport: app` hand their sessions
 * to C callbacks (streams and datagrams with backpressure).
 *
 *   ferry_t *f = ferry_new(yaml, err, sizeof err);   // include/ferry/mitm.h
 *   ferry_set_webtransport(f, &ops);                 // before ferry_start
 *   ferry_start(f);  ...  ferry_stop(f);  ferry_free(f);
 *
 * Threading: callbacks run on Ferry's worker threads (one session's callbacks always on the
 * same thread, never at once), in its event loop: they must not block. The functions below may
 * be called only from inside a callback of the same session (the loop's thread); they never
 * call a callback back from inside themselves, except ferry_wt_stream_reset (stream_gone) and
 * ferry_wt_session_close (nothing after it).
 *
 * Backpressure: `data` returns how many of the bytes it used; the rest is kept and offered
 * again after ferry_wt_stream_resume, and the peer gets flow-control credit only for used
 * bytes. Writes are copied into the stream's send queue: keep ferry_wt_stream_buffered under
 * ferry_wt_send_buffer and wait for `writable` (the queue shrank) before writing more.
 * Errors: int functions return 0 or a negative errno value. */
#ifndef FERRY_WEBTRANSPORT_H
#define FERRY_WEBTRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry ferry_t;
typedef struct ferry_wt_session ferry_wt_session_t;
typedef struct ferry_wt_stream ferry_wt_stream_t;

typedef struct ferry_wt_ops {
    /* A session was accepted (200 sent) on `path`: return its user data (given to every other
       callback of the session as `sud`). */
    void *(*session)(ferry_wt_session_t *s, const char *path, void *ud);
    /* The client opened a stream (uni: receive-only). */
    void (*stream)(ferry_wt_session_t *s, ferry_wt_stream_t *st, void *sud);
    /* Bytes in order; return how many were used. `fin` comes once, after all bytes. */
    size_t (*data)(ferry_wt_stream_t *st, const uint8_t *p, size_t n, int fin, void *sud);
    /* The stream's send queue shrank. */
    void (*writable)(ferry_wt_stream_t *st, void *sud);
    /* The client reset the stream or sent STOP_SENDING (WebTransport code, -1: none). */
    void (*reset)(ferry_wt_stream_t *st, int64_t code, void *sud);
    /* The stream is gone; do not use `st` after this returns. */
    void (*stream_gone)(ferry_wt_stream_t *st, void *sud);
    void (*datagram)(ferry_wt_session_t *s, const uint8_t *p, size_t n, void *sud);
    /* The session ended (client CLOSE code/reason, or 0/"gone"); every stream got stream_gone
       first. Do not use `s` after this returns. */
    void (*close)(uint32_t code, const char *reason, size_t rlen, void *sud);
    void *ud;
} ferry_wt_ops_t;

/* Give routes with `webtransport: app` these callbacks (copied). Before ferry_start.
 * -EINVAL when no route has `webtransport: app`. */
int ferry_set_webtransport(ferry_t *f, const ferry_wt_ops_t *ops);

/* Close the session with a CLOSE_WEBTRANSPORT_SESSION capsule (streams are reset); no
   callback of it comes after (not even close). */
void ferry_wt_session_close(ferry_wt_session_t *s, uint32_t code, const char *reason, size_t rlen);
/* 0, -EMSGSIZE, -EAGAIN (send queue full: the datagram is dropped), -ENOTSUP. */
int ferry_wt_send_datagram(ferry_wt_session_t *s, const void *p, size_t n);
/* A stream of ours; NULL when the client gives no stream credit now. */
ferry_wt_stream_t *ferry_wt_open_stream(ferry_wt_session_t *s, int uni);

/* 0, or -EPIPE (receive-only or gone). */
int ferry_wt_stream_write(ferry_wt_stream_t *st, const void *p, size_t n);
void ferry_wt_stream_finish(ferry_wt_stream_t *st);
size_t ferry_wt_stream_buffered(const ferry_wt_stream_t *st);
size_t ferry_wt_send_buffer(const ferry_wt_stream_t *st);
void ferry_wt_stream_resume(ferry_wt_stream_t *st);
void ferry_wt_stream_reset(ferry_wt_stream_t *st, uint32_t code);
int ferry_wt_stream_is_uni(const ferry_wt_stream_t *st);
/* The stream's session (NULL once it was reset or its session ended). */
ferry_wt_session_t *ferry_wt_stream_session(const ferry_wt_stream_t *st);
void ferry_wt_stream_set_ud(ferry_wt_stream_t *st, void *ud);
void *ferry_wt_stream_ud(const ferry_wt_stream_t *st);

#ifdef __cplusplus
}
#endif

#endif
