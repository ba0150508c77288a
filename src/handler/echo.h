/* Echo: answers 200 with the request body streamed back as it arrives (chunked when the
 * request length is unknown; request trailers are returned as response trailers). A
 * diagnostic handler for tests and for the post/upload benchmark rows; `echo: {}` in a route.
 * On an extended CONNECT (h2 RFC 8441) it opens the tunnel with 200 and echoes its bytes.
 * Threads: the handler object is built with its generation and read-only after; each
 * exchange's state lives on its connection's worker thread only. */
#ifndef FY_HANDLER_ECHO_H
#define FY_HANDLER_ECHO_H

#include "http/handler.h"

fy_handler_t *fy_echo_handler_new(void);

#endif
