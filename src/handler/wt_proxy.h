/* `webtransport: {handler: proxy, upstream: NAME}`: the WebTransport reverse proxy. Each
 * session from a client (h3 extended CONNECT) is re-originated as a session to a server of the
 * upstream (h3:// only; chosen by its balancing, passive health counting failed connects),
 * over a QUIC connection of its own (h3/h3_wt_client.h). The client's session is answered only
 * once the origin's is: the origin's refusal status goes back to the client (502 when it could
 * not be reached within the upstream's connect-timeout, the QUIC handshake timeout here; an
 * unreachable server is first retried on another one as the upstream's `retries` allow). Then
 * every stream, either side's bidirectional or unidirectional, gets a twin on the other side, with
 * bytes, FIN and resets (WebTransport codes) relayed; datagrams go both ways; a
 * CLOSE_WEBTRANSPORT_SESSION (code, reason) from either side closes the other. Backpressure: bytes
 * are taken from one side's stream only while its twin has fewer than the send buffer queued (the
 * rest waits in the codec, which holds back the peer's flow-control credit).
 * Threads: both sessions of a pair (the client's and the origin's) live on the client
 * connection's worker thread. */
#ifndef FY_HANDLER_WT_PROXY_H
#define FY_HANDLER_WT_PROXY_H

#include "handler/wt_conf.h"
#include "http/handler.h"
#include "upstream/upstream.h"

/* `conf` and `up` are borrowed for the handler's life. */
fy_handler_t *fy_wt_proxy_handler_new(const fy_wt_conf_t *conf, fy_upstream_t *up);

#endif
