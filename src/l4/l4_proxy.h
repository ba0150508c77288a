/* PROXY protocol v1 (text) and v2 (binary) headers: built toward origins, parsed from trusted
 * fronts (haproxy.org/download/2.9/doc/proxy-protocol.txt). Pure functions.
 * Threads: pure; no shared state, callable from any thread. */
#ifndef FY_L4_L4_PROXY_H
#define FY_L4_L4_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define FY_L4_PROXY_MAX 536 /* longest header accepted: v2 with 520 bytes of addresses+TLVs */

/* Write a v1 (`version` 1) or v2 (2) header for a TCP connection from `src` to `dst` into
 * out (at least FY_L4_PROXY_MAX bytes). Families differ or are not IP: "UNKNOWN" (v1) /
 * LOCAL (v2). Returns the header length. */
size_t fy_l4_proxy_build(int version, const struct sockaddr *src, const struct sockaddr *dst,
                         uint8_t *out);

/* Parse a header at the start of b[0..len). Returns its length (>0) and, when it carries TCP
 * addresses, sets *has_addr and fills src/dst; 0 when more bytes are needed; -1 when the
 * bytes are not a valid PROXY header or it is longer than FY_L4_PROXY_MAX. */
int fy_l4_proxy_parse(const uint8_t *b, size_t len, struct sockaddr_storage *src,
                      struct sockaddr_storage *dst, bool *has_addr);

#endif
