/* `webtransport: echo`: accepts WebTransport sessions (h3 extended CONNECT) and echoes them:
 * a bidirectional stream's bytes come back on it, a unidirectional stream's on a new
 * unidirectional stream of ours, a datagram as a datagram; a peer reset is answered with a
 * reset of the same code. Backpressure: bytes are taken from a stream only while the stream
 * they are echoed on has fewer than quic.send-buffer bytes queued.
 * Threads: the handler object is built with its generation and read-only after; each session's
 * state lives on its connection's worker thread only. */
#ifndef FY_HANDLER_WT_ECHO_H
#define FY_HANDLER_WT_ECHO_H

#include "handler/wt_conf.h"
#include "http/handler.h"

fy_handler_t *fy_wt_handler_new(const fy_wt_conf_t *conf);

#endif
