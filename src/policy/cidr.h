/* Client addresses and CIDR prefix sets: a compiled, path-compressed binary trie over 128-bit
 * keys (IPv4 as v4-mapped IPv6, ::ffff:a.b.c.d, so one trie holds both families and a
 * v4-mapped client matches the IPv4 rules), and the `cidr:` filter (stage access) that allows
 * or denies an exchange by the longest prefix that holds its client address.
 *
 * Why path-compressed and not multibit: the lists are short (tens to a few thousand prefixes)
 * and sparse in a 128-bit space; a path-compressed node costs one masked 128-bit compare and
 * one bit test, so a lookup is at most (number of prefixes on the path + branch points) steps
 * and memory is 2N nodes, whatever the prefix lengths. A multibit trie (stride 8) would need
 * up to 16 levels of 256-entry tables for IPv6 and controlled prefix expansion at build. The
 * trie is built once per config generation (main thread) and read-only afterwards, so workers
 * share it without locks. */
#ifndef FY_POLICY_CIDR_H
#define FY_POLICY_CIDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "http/filter.h"

/* An address as 128 bits, most significant first; IPv4 is ::ffff:a.b.c.d. */
typedef struct fy_ip {
    uint64_t hi, lo;
} fy_ip_t;

/* Fill `out` from an AF_INET / AF_INET6 socket address. false for other families or NULL.
 * Inline: it runs once per request of every CIDR and rate-limit filter. */
static inline bool fy_ip_from_sockaddr(const struct sockaddr *sa, fy_ip_t *out)
{
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
        out->hi = 0;
        out->lo = 0xffff00000000ull | __builtin_bswap32(s4->sin_addr.s_addr);
        return true;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
        uint64_t a, b;
        memcpy(&a, s6->sin6_addr.s6_addr, 8);
        memcpy(&b, s6->sin6_addr.s6_addr + 8, 8);
        out->hi = __builtin_bswap64(a);
        out->lo = __builtin_bswap64(b);
        return true;
    }
    return false;
}
/* Parse "192.0.2.1" or "2001:db8::1" (n bytes, not NUL-terminated; no brackets, no port, no
 * zone). 0, or -1 when it is not an address. */
int fy_ip_parse(const char *s, size_t n, fy_ip_t *out);
/* Parse "10.0.0.0/8", "2001:db8::/32", or a bare address (= /32 or /128). Host bits below the
 * prefix must be zero ("10.0.0.1/8" is an error: it usually hides a typo). IPv4 lengths are
 * stored +96. 0, or -1 with a reason in `why` (static string). */
int fy_ip_parse_cidr(const char *s, fy_ip_t *ip, unsigned *len, const char **why);
/* "192.0.2.1" or "2001:db8::1" into buf (>= 46 bytes). */
void fy_ip_format(const fy_ip_t *ip, char *buf, size_t cap);
bool fy_ip_is_v4(const fy_ip_t *ip);

/* ---- the trie ---- */

typedef struct fy_cidr_trie fy_cidr_trie_t;

/* An empty set (aborts on OOM: config time). */
fy_cidr_trie_t *fy_cidr_trie_new(void);
/* Add prefix ip/len (len 0..128; bits below len are ignored) with `value` (0..32767). The
 * same prefix added twice keeps the larger value. Invalidates a compiled trie until the next
 * fy_cidr_trie_compile. */
void fy_cidr_trie_add(fy_cidr_trie_t *t, const fy_ip_t *ip, unsigned len, int value);
/* Build the lookup structure from what was added. */
void fy_cidr_trie_compile(fy_cidr_trie_t *t);
/* The value of the longest compiled prefix that holds `a`, or -1 when none does. Thread-safe
 * (read-only). */
int fy_cidr_trie_lookup(const fy_cidr_trie_t *t, const fy_ip_t *a);
size_t fy_cidr_trie_nodes(const fy_cidr_trie_t *t);
void fy_cidr_trie_free(fy_cidr_trie_t *t);
/* Folder-internal: a compiled trie of the CIDRs `l` (value 1 each), NULL when l is empty or
 * after logging "where: cidr: 'x' why" for one that does not parse. */
struct fy_conf_strlist;
fy_cidr_trie_t *fy__cidr_trie_of(const struct fy_conf_strlist *l, const char *where);

/* ---- the filter ---- */

typedef struct fy_cidr_conf fy_cidr_conf_t; /* policy/cidr_conf.h */

/* The `cidr:` filter of `conf` (copied: the filter does not keep `conf`). `where` names it in
 * logs ("routes[2]", "listeners[0]"). NULL after logging when a prefix does not parse (the
 * config validator has checked them already). The filter holds no reference yet. */
fy_filter_t *fy_cidr_filter_new(const fy_cidr_conf_t *conf, const char *where);

#endif
