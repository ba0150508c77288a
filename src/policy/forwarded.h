/* The real client address behind trusted proxies: X-Forwarded-For (de facto) and Forwarded
 * (RFC 7239). Pure parsers of peer bytes (fuzzed by fuzz/fuzz_forwarded.c) and the walk that
 * picks the client: starting from the peer, while the current address is a trusted proxy, step
 * one hop to the left; the first untrusted address is the client ("rightmost untrusted"). A hop
 * that does not parse (garbage, `unknown`, an obfuscated RFC 7239 node) ends the walk at the
 * trusted address to its right, so a client can never pick an address of its choice by
 * sending garbage; so does running out of hops (everything was trusted: the leftmost one).
 * Threads: pure; no shared state, callable from any thread. */
#ifndef FY_POLICY_FORWARDED_H
#define FY_POLICY_FORWARDED_H

#include <stdbool.h>
#include <stddef.h>

#include "http/exchange.h"
#include "policy/cidr.h"

/* Most hops looked at, counted from the right (a longer chain stops the walk there). */
#define FY_FORWARDED_MAX_HOPS 32

/* One hop of a header: an address, or a hop that names none (invalid = true). */
typedef struct fy_forwarded_hop {
    fy_ip_t ip;
    bool invalid;
} fy_forwarded_hop_t;

/* Parse one X-Forwarded-For field value ("203.0.113.7, 10.0.0.1", elements optionally with a
 * port: "1.2.3.4:80", "[2001:db8::1]:443", or bracketed v6 alone), appending its hops left to
 * right into `hops` (capacity `cap`, `*n` in use). When more than cap hops arrive, the oldest
 * (leftmost) are dropped and `*dropped` is set. Empty elements are skipped. Never fails. */
void fy_forwarded_parse_xff(const char *v, size_t len, fy_forwarded_hop_t *hops, size_t cap,
                            size_t *n, bool *dropped);
/* The same for one Forwarded field value (RFC 7239 §4): comma-separated elements of
 * `;`-separated pairs, token or quoted-string values (quoted-pairs unescaped); the hop is the
 * element's `for=` node (IPv4, "[IPv6]", either with an optional port). An element without a
 * `for` pair, with `for=unknown`, an obfuscated node or a syntax error is an invalid hop. */
void fy_forwarded_parse_rfc7239(const char *v, size_t len, fy_forwarded_hop_t *hops, size_t cap,
                                size_t *n, bool *dropped);

/* The client address of a request from `peer` with headers `hs`: `peer` itself unless it is in
 * `trusted` (a trie whose prefixes have values >= 0); then the walk above over the Forwarded
 * header lines (when there is one) or else the X-Forwarded-For lines, in order. */
fy_ip_t fy_forwarded_client(const fy_headers_t *hs, const fy_ip_t *peer,
                            const fy_cidr_trie_t *trusted);

#endif
