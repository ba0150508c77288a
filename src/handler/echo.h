/* Echo: answers 200 with the request body streamed back as it arrives (chunked when the
 * request length is unknown; request trailers are returned as response trailers). A
 * diagnostic handler for tests and for the post/upload benchmark rows; `echo: {}` in a route. */
#ifndef FY_HANDLER_ECHO_H
#define FY_HANDLER_ECHO_H

#include "http/handler.h"

fy_handler_t *fy_echo_handler_new(void);

#endif
