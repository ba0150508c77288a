/* A CONNECT exchange as a tunnel transport (core/tunnel_io.h): the request body (h2/h3 DATA
 * of the CONNECT stream) is what reads return, writes become response body sends, so tunnel
 * code drives the stream directly, without a socket. Backpressure is the exchange's: a write
 * returns 0 while the previous one is with the codec (until `proceed`: the stream's
 * flow-control window took it), and the next request slice is asked for only once the last
 * one was read.
 * Lifetime: the transport takes the exchange's handler_data and producer; it is freed when
 * both the user closed it and the exchange's arena was reset (whichever comes last). After
 * the exchange ended (client reset, connection gone) reads and writes fail with -ECONNRESET.
 * Threads: the exchange's worker. */
#ifndef FY_HTTP_EXCHANGE_TIO_H
#define FY_HTTP_EXCHANGE_TIO_H

#include "core/tunnel_io.h"
#include "http/exchange.h"

/* Answer ex (a CONNECT) with 200, the head sent now, and return it as a transport. */
fy_tio_t *fy_exchange_tio_start(fy_exchange_t *ex);

#endif
