/* Addresses, the compiled CIDR trie and the `cidr:` filter (policy/cidr.h). */
#include "policy/cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"
#include "policy/cidr_conf.h"
#include "policy/forwarded.h"

/* ---- addresses ---- */

static uint64_t be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
}

static void from_v4(uint32_t host_order, fy_ip_t *out)
{
    out->hi = 0;
    out->lo = 0xffff00000000ull | host_order;
}

bool fy_ip_is_v4(const fy_ip_t *ip)
{
    return ip->hi == 0 && (ip->lo >> 32) == 0xffff;
}

int fy_ip_parse(const char *s, size_t n, fy_ip_t *out)
{
    char buf[INET6_ADDRSTRLEN + 1];
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (memchr(s, ':', n)) {
        unsigned char a[16];
        if (inet_pton(AF_INET6, buf, a) != 1) return -1;
        out->hi = be64(a);
        out->lo = be64(a + 8);
        return 0;
    }
    struct in_addr a4;
    if (inet_pton(AF_INET, buf, &a4) != 1) return -1;
    from_v4(ntohl(a4.s_addr), out);
    return 0;
}

/* the mask of the first len bits */
static void mask_of(unsigned len, uint64_t *mhi, uint64_t *mlo)
{
    *mhi = len == 0 ? 0 : len >= 64 ? ~0ull : ~0ull << (64 - len);
    *mlo = len <= 64 ? 0 : len >= 128 ? ~0ull : ~0ull << (128 - len);
}

int fy_ip_parse_cidr(const char *s, fy_ip_t *ip, unsigned *len, const char **why)
{
    const char *slash = strchr(s, '/');
    size_t alen = slash ? (size_t)(slash - s) : strlen(s);
    *why = "not an IPv4 or IPv6 address";
    if (fy_ip_parse(s, alen, ip) < 0) return -1;
    bool v4 = !memchr(s, ':', alen);
    unsigned max = v4 ? 32 : 128, l = max;
    if (slash) {
        const char *p = slash + 1;
        if (!*p || strlen(p) > 3) goto badlen;
        l = 0;
        for (; *p; p++) {
            if (*p < '0' || *p > '9') goto badlen;
            l = l * 10 + (unsigned)(*p - '0');
        }
        if (l > max || (slash[1] == '0' && slash[2])) goto badlen;
    }
    unsigned full = v4 ? l + 96 : l;
    uint64_t mhi, mlo;
    mask_of(full, &mhi, &mlo);
    if ((ip->hi & ~mhi) || (ip->lo & ~mlo)) {
        *why = "has bits set below the prefix length (write the network address)";
        return -1;
    }
    *len = full;
    return 0;
badlen:
    *why = v4 ? "bad prefix length (0..32)" : "bad prefix length (0..128)";
    return -1;
}

void fy_ip_format(const fy_ip_t *ip, char *buf, size_t cap)
{
    unsigned char a[16];
    put64(a, ip->hi);
    put64(a + 8, ip->lo);
    if (fy_ip_is_v4(ip))
        inet_ntop(AF_INET, a + 12, buf, (socklen_t)cap);
    else
        inet_ntop(AF_INET6, a, buf, (socklen_t)cap);
}

/* ---- the trie ---- */

typedef struct entry {
    fy_ip_t ip;
    unsigned len;
    int value;
} entry_t;

#define NONE UINT32_MAX

/* One node of the compiled trie: a prefix (the bits above `len` of hi/lo) that the address
   must share, the value when a configured prefix ends here (-1: a branch point only), and the
   children by the bit after the prefix. */
typedef struct node {
    uint64_t hi, lo, mhi, mlo;
    uint32_t child[2];
    int16_t value;
    uint8_t len;
} node_t;

struct fy_cidr_trie {
    entry_t *e; /* owned: what was added */
    size_t ne, cape;
    node_t *v; /* owned: compiled; v[0] is the root */
    size_t n, cap;
};

fy_cidr_trie_t *fy_cidr_trie_new(void)
{
    return fy_xcalloc(1, sizeof(fy_cidr_trie_t));
}

void fy_cidr_trie_add(fy_cidr_trie_t *t, const fy_ip_t *ip, unsigned len, int value)
{
    if (len > 128) len = 128;
    if (t->ne == t->cape) {
        t->cape = t->cape ? t->cape * 2 : 8;
        t->e = fy_xrealloc(t->e, t->cape * sizeof *t->e);
    }
    uint64_t mhi, mlo;
    mask_of(len, &mhi, &mlo);
    t->e[t->ne++] = (entry_t){{ip->hi & mhi, ip->lo & mlo}, len, value};
}

static unsigned bit_at(uint64_t hi, uint64_t lo, unsigned i)
{
    return i < 64 ? (unsigned)(hi >> (63 - i)) & 1 : (unsigned)(lo >> (127 - i)) & 1;
}

/* leading bits in which a and b agree */
static unsigned common_bits(const fy_ip_t *a, const fy_ip_t *b)
{
    uint64_t x = a->hi ^ b->hi;
    if (x) return (unsigned)__builtin_clzll(x);
    x = a->lo ^ b->lo;
    return x ? 64 + (unsigned)__builtin_clzll(x) : 128;
}

static uint32_t new_node(fy_cidr_trie_t *t)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->v = fy_xrealloc(t->v, t->cap * sizeof *t->v);
    }
    return (uint32_t)t->n++;
}

/* Compile entries e[0..n) (non-empty), all sharing their first `depth` bits, into one node and
   its subtrees. The node's prefix is the longest one every entry shares (bounded by the
   shortest entry): single-child chains never become nodes. */
static uint32_t build(fy_cidr_trie_t *t, entry_t *e, size_t n)
{
    unsigned L = 128;
    for (size_t i = 0; i < n; i++) {
        unsigned c = common_bits(&e[0].ip, &e[i].ip);
        if (c < L) L = c;
        if (e[i].len < L) L = e[i].len;
    }
    uint32_t id = new_node(t);
    int value = -1;
    /* entries ending here go first; the rest split by bit L */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].len == L) {
            if (e[i].value > value) value = e[i].value;
            entry_t tmp = e[k];
            e[k++] = e[i];
            e[i] = tmp;
        }
    size_t z = k;
    for (size_t i = k; i < n; i++)
        if (!bit_at(e[i].ip.hi, e[i].ip.lo, L)) {
            entry_t tmp = e[z];
            e[z++] = e[i];
            e[i] = tmp;
        }
    uint64_t mhi, mlo;
    mask_of(L, &mhi, &mlo);
    node_t nd = {.hi = e[0].ip.hi & mhi,
                 .lo = e[0].ip.lo & mlo,
                 .mhi = mhi,
                 .mlo = mlo,
                 .child = {NONE, NONE},
                 .value = (int16_t)value,
                 .len = (uint8_t)L};
    if (z > k) nd.child[0] = build(t, e + k, z - k);
    if (n > z) nd.child[1] = build(t, e + z, n - z);
    t->v[id] = nd; /* after the recursion: t->v may have moved */
    return id;
}

void fy_cidr_trie_compile(fy_cidr_trie_t *t)
{
    t->n = 0;
    if (t->ne == 0) return;
    entry_t *tmp = fy_xmalloc(t->ne * sizeof *tmp);
    memcpy(tmp, t->e, t->ne * sizeof *tmp);
    build(t, tmp, t->ne);
    free(tmp);
}

int fy_cidr_trie_lookup(const fy_cidr_trie_t *t, const fy_ip_t *a)
{
    int best = -1;
    if (!t || t->n == 0) return -1;
    const node_t *v = t->v;
    uint32_t i = 0;
    for (;;) {
        const node_t *nd = &v[i];
        if (((a->hi ^ nd->hi) & nd->mhi) | ((a->lo ^ nd->lo) & nd->mlo)) break;
        if (nd->value >= 0) best = nd->value;
        if (nd->len >= 128) break;
        i = nd->child[bit_at(a->hi, a->lo, nd->len)];
        if (i == NONE) break;
    }
    return best;
}

size_t fy_cidr_trie_nodes(const fy_cidr_trie_t *t)
{
    return t ? t->n : 0;
}

void fy_cidr_trie_free(fy_cidr_trie_t *t)
{
    if (!t) return;
    free(t->e);
    free(t->v);
    free(t);
}

/* ---- the filter ---- */

enum { ALLOW = 0, DENY = 1 };

typedef struct cidr_filter {
    fy_filter_t base;
    fy_cidr_trie_t *rules;   /* owned: ALLOW / DENY by longest prefix */
    fy_cidr_trie_t *trusted; /* owned, or NULL: trusted proxies */
    bool default_deny;       /* an allow list exists: what it does not name is denied */
    int status;
    fy_counter_id_t denied;
} cidr_filter_t;

static fy_filter_verdict_t cidr_on_request(fy_filter_t *f, fy_exchange_t *ex)
{
    const cidr_filter_t *c = (const cidr_filter_t *)f;
    fy_ip_t ip;
    bool deny = true; /* no IP peer (cannot happen on TCP/UDP listeners): refused */
    if (fy_ip_from_sockaddr(ex->remote, &ip)) {
        if (c->trusted) ip = fy_forwarded_client(&ex->req.headers, &ip, c->trusted);
        int v = fy_cidr_trie_lookup(c->rules, &ip);
        deny = v < 0 ? c->default_deny : v == DENY;
    }
    if (__builtin_expect(!deny, 1)) return FY_FILTER_NEXT;
    fy_counter_inc(c->denied);
    fy_exchange_fail(ex, c->status, "cidr: client address denied");
    return FY_FILTER_DONE;
}

static void cidr_destroy(fy_filter_t *f)
{
    cidr_filter_t *c = (cidr_filter_t *)f;
    fy_cidr_trie_free(c->rules);
    fy_cidr_trie_free(c->trusted);
    free(c);
}

static const fy_filter_ops_t cidr_ops = {
    .name = "cidr",
    .stage = FY_STAGE_ACCESS,
    .on_request = cidr_on_request,
    .destroy = cidr_destroy,
};

static int add_list(fy_cidr_trie_t *t, const fy_conf_strlist_t *l, int value, const char *where)
{
    for (size_t i = 0; i < l->n; i++) {
        fy_ip_t ip;
        unsigned len;
        const char *why;
        if (fy_ip_parse_cidr(l->v[i], &ip, &len, &why) < 0) {
            fy_error("%s: cidr: '%s' %s", where, l->v[i], why);
            return -1;
        }
        fy_cidr_trie_add(t, &ip, len, value);
    }
    return 0;
}

fy_cidr_trie_t *fy__cidr_trie_of(const fy_conf_strlist_t *l, const char *where)
{
    if (l->n == 0) return NULL;
    fy_cidr_trie_t *t = fy_cidr_trie_new();
    if (add_list(t, l, 1, where) < 0) {
        fy_cidr_trie_free(t);
        return NULL;
    }
    fy_cidr_trie_compile(t);
    return t;
}

fy_filter_t *fy_cidr_filter_new(const fy_cidr_conf_t *conf, const char *where)
{
    cidr_filter_t *c = fy_xcalloc(1, sizeof *c);
    c->base.ops = &cidr_ops;
    c->rules = fy_cidr_trie_new();
    c->status = (int)conf->status;
    c->default_deny = conf->allow.n > 0;
    if (add_list(c->rules, &conf->allow, ALLOW, where) < 0 ||
        add_list(c->rules, &conf->deny, DENY, where) < 0)
        goto fail;
    fy_cidr_trie_compile(c->rules);
    if (conf->trusted_proxies.n) {
        c->trusted = fy__cidr_trie_of(&conf->trusted_proxies, where);
        if (!c->trusted) goto fail;
    }
    char labels[160];
    snprintf(labels, sizeof labels, "policy=\"%s\"", where);
    c->denied = fy_counter_register("ferry_policy_cidr_denied_total", labels, FY_COUNTER);
    return &c->base;
fail:
    cidr_destroy(&c->base);
    return NULL;
}
