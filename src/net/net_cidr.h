/* A short list of CIDRs (IPv4, IPv6) matched linearly: the "trusted front" lists of listeners
 * (`accept-proxy` on HTTP and layer-4 listeners). Not the policy trie (policy/cidr*.c), which
 * sits above net/ and serves long allow/deny lists. Pure functions.
 * Threads: pure; the lists are read-only after the config loads and read by any worker. */
#ifndef FY_NET_NET_CIDR_H
#define FY_NET_NET_CIDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct fy_net_cidr {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    int bits;
} fy_net_cidr_t;

/* Parse "10.0.0.0/8", "::1", "2001:db8::/32" (no prefix: a host). Returns 0, or -1. */
int fy_net_cidr_parse(const char *s, fy_net_cidr_t *c);
/* Does `addr` (IPv4, IPv6; v4-mapped IPv6 as IPv4) fall inside one of c[0..n)? */
bool fy_net_cidr_match(const fy_net_cidr_t *c, size_t n, const struct sockaddr *addr);

#endif
