/* X-Forwarded-For / Forwarded parsing and the trusted-proxy walk (policy/forwarded.h). */
#include "policy/forwarded.h"

#include <string.h>

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static void push(fy_forwarded_hop_t *hops, size_t cap, size_t *n, bool *dropped,
                 const fy_forwarded_hop_t *h)
{
    if (cap == 0) return;
    if (*n == cap) { /* keep the rightmost cap hops */
        memmove(hops, hops + 1, (cap - 1) * sizeof *hops);
        (*n)--;
        *dropped = true;
    }
    hops[(*n)++] = *h;
}

/* One node: "1.2.3.4", "1.2.3.4:80", "[v6]", "[v6]:80" (and, for X-Forwarded-For, a bare v6).
   Ports must be 1..5 digits. */
static bool parse_node(const char *p, size_t n, bool bare_v6, fy_ip_t *out)
{
    if (n && p[0] == '[') {
        const char *end = memchr(p, ']', n);
        if (!end) return false;
        size_t rest = n - (size_t)(end + 1 - p);
        const char *q = end + 1;
        if (rest) {
            if (q[0] != ':' || rest < 2 || rest > 6) return false;
            for (size_t i = 1; i < rest; i++)
                if (q[i] < '0' || q[i] > '9') return false;
        }
        return fy_ip_parse(p + 1, (size_t)(end - p - 1), out) == 0;
    }
    const char *colon = memchr(p, ':', n);
    if (colon && memchr(colon + 1, ':', n - (size_t)(colon + 1 - p))) /* two colons: v6 */
        return bare_v6 && fy_ip_parse(p, n, out) == 0;
    if (colon) {
        size_t plen = n - (size_t)(colon + 1 - p);
        if (plen < 1 || plen > 5) return false;
        for (size_t i = 0; i < plen; i++)
            if (colon[1 + i] < '0' || colon[1 + i] > '9') return false;
        n = (size_t)(colon - p);
    }
    if (memchr(p, ':', n)) return false;
    return fy_ip_parse(p, n, out) == 0;
}

void fy_forwarded_parse_xff(const char *v, size_t len, fy_forwarded_hop_t *hops, size_t cap,
                            size_t *n, bool *dropped)
{
    size_t i = 0;
    while (i <= len) {
        size_t s = i;
        while (i < len && v[i] != ',') i++;
        size_t e = i;
        while (s < e && is_ows(v[s])) s++;
        while (e > s && is_ows(v[e - 1])) e--;
        if (e > s) {
            fy_forwarded_hop_t h = {{0, 0}, false};
            h.invalid = !parse_node(v + s, e - s, true, &h.ip);
            push(hops, cap, n, dropped, &h);
        }
        i++; /* past the comma (or the end) */
    }
}

static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* RFC 7239 §4. The parser walks one element at a time; a syntax error makes the element
   invalid and skips to the next top-level comma (outside quotes). */
void fy_forwarded_parse_rfc7239(const char *v, size_t len, fy_forwarded_hop_t *hops, size_t cap,
                                size_t *n, bool *dropped)
{
    size_t i = 0;
    while (i < len) {
        fy_forwarded_hop_t h = {{0, 0}, true};
        bool bad = false, any = false, have_for = false;
        for (;;) { /* pairs of one element */
            while (i < len && is_ows(v[i])) i++;
            if (i >= len || v[i] == ',') break;
            if (v[i] == ';') {
                i++;
                continue;
            }
            size_t ks = i;
            while (i < len && is_tchar((unsigned char)v[i])) i++;
            size_t ke = i;
            any = true;
            if (ke == ks || i >= len || v[i] != '=') {
                bad = true;
                break;
            }
            i++;
            char val[64];
            size_t vn = 0;
            bool too_long = false;
            if (i < len && v[i] == '"') {
                i++;
                bool closed = false;
                while (i < len) {
                    char c = v[i++];
                    if (c == '"') {
                        closed = true;
                        break;
                    }
                    if (c == '\\') {
                        if (i >= len) break;
                        c = v[i++];
                    }
                    if ((unsigned char)c < 0x20 && c != '\t') {
                        bad = true;
                        break;
                    }
                    if (vn < sizeof val)
                        val[vn++] = c;
                    else
                        too_long = true;
                }
                if (!closed) bad = true;
            } else {
                while (i < len && is_tchar((unsigned char)v[i])) {
                    if (vn < sizeof val)
                        val[vn++] = v[i];
                    else
                        too_long = true;
                    i++;
                }
                if (vn == 0 && !too_long) bad = true;
            }
            if (bad) break;
            while (i < len && is_ows(v[i])) i++;
            if (i < len && v[i] != ';' && v[i] != ',') {
                bad = true;
                break;
            }
            if (ke - ks == 3 && (v[ks] | 0x20) == 'f' && (v[ks + 1] | 0x20) == 'o' &&
                (v[ks + 2] | 0x20) == 'r') {
                if (have_for) { /* two `for` in one element: which one is meant? neither */
                    h.invalid = true;
                    bad = true;
                    break;
                }
                have_for = true;
                h.invalid = too_long || !parse_node(val, vn, false, &h.ip);
            }
        }
        if (bad) {
            h.invalid = true;
            bool q = false;
            for (; i < len; i++) {
                if (q && v[i] == '\\') {
                    i++;
                    continue;
                }
                if (v[i] == '"') q = !q;
                if (!q && v[i] == ',') break;
            }
        }
        if (any || bad) push(hops, cap, n, dropped, &h);
        if (i < len) i++; /* the comma */
    }
}

fy_ip_t fy_forwarded_client(const fy_headers_t *hs, const fy_ip_t *peer,
                            const fy_cidr_trie_t *trusted)
{
    if (fy_cidr_trie_lookup(trusted, peer) < 0) return *peer;
    bool rfc = FY_HDR_FIND(hs, "forwarded") != NULL;
    fy_forwarded_hop_t hops[FY_FORWARDED_MAX_HOPS];
    size_t n = 0;
    bool dropped = false;
    for (size_t i = 0; i < hs->n; i++) {
        const fy_header_t *h = &hs->v[i];
        if (rfc && fy_str_ieq(h->name, "forwarded", 9))
            fy_forwarded_parse_rfc7239(h->value.p, h->value.len, hops, FY_FORWARDED_MAX_HOPS, &n,
                                       &dropped);
        else if (!rfc && fy_str_ieq(h->name, "x-forwarded-for", 15))
            fy_forwarded_parse_xff(h->value.p, h->value.len, hops, FY_FORWARDED_MAX_HOPS, &n,
                                   &dropped);
    }
    fy_ip_t cur = *peer;
    while (n > 0) {
        const fy_forwarded_hop_t *h = &hops[--n];
        if (h->invalid) break;
        cur = h->ip;
        if (fy_cidr_trie_lookup(trusted, &cur) < 0) break;
    }
    return cur;
}
