/* intercept.destinations: compile the rules once, check each destination in order. */
#include "handler/mitm_dest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "handler/mitm_conf.h"

typedef struct dest_rule {
    const fy_mitm_dest_rule_t *conf; /* borrowed */
    fy_cidr_t *cidrs;                /* owned: CIDRs and the keywords' ranges */
    const char **cidr_src;           /* owned array; the entry each CIDR came from */
    size_t ncidr;
    fy_conf_strlist_t names; /* owned array of borrowed strings: name patterns */
    int (*ports)[2];         /* owned: lo, hi */
    size_t nports;
} dest_rule_t;

struct fy_mitm_dest {
    dest_rule_t *rules;
    size_t n;
};

static const char *const loopback_cidrs[] = {"127.0.0.0/8", "::1/128", NULL};
static const char *const private_cidrs[] = {
    "10.0.0.0/8",     "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
    "169.254.0.0/16", "fc00::/7",      "fe80::/10",      NULL};

static void add_cidr(dest_rule_t *r, const char *s, const char *src)
{
    if (fy_cidr_parse(s, &r->cidrs[r->ncidr]) < 0) return; /* validated at load */
    r->cidr_src[r->ncidr++] = src;
}

fy_mitm_dest_t *fy__mitm_dest_new(const fy_conf_list_t *rules)
{
    fy_mitm_dest_t *d = fy_xcalloc(1, sizeof *d);
    d->n = rules->n;
    d->rules = fy_xcalloc(rules->n ? rules->n : 1, sizeof *d->rules);
    const fy_mitm_dest_rule_t *rc = rules->v;
    for (size_t i = 0; i < rules->n; i++) {
        dest_rule_t *r = &d->rules[i];
        r->conf = &rc[i];
        size_t max = 0;
        for (size_t k = 0; k < rc[i].hosts.n; k++) max += 8; /* a keyword expands to <= 7 */
        r->cidrs = fy_xcalloc(max ? max : 1, sizeof *r->cidrs);
        r->cidr_src = fy_xcalloc(max ? max : 1, sizeof *r->cidr_src);
        r->names.v = fy_xcalloc(rc[i].hosts.n ? rc[i].hosts.n : 1, sizeof(char *));
        for (size_t k = 0; k < rc[i].hosts.n; k++) {
            char *h = rc[i].hosts.v[k];
            fy_cidr_t c;
            if (strcmp(h, "loopback") == 0) {
                for (const char *const *p = loopback_cidrs; *p; p++) add_cidr(r, *p, h);
            } else if (strcmp(h, "private") == 0) {
                for (const char *const *p = private_cidrs; *p; p++) add_cidr(r, *p, h);
            } else if (fy_cidr_parse(h, &c) == 0) {
                add_cidr(r, h, h);
            } else {
                r->names.v[r->names.n++] = h;
            }
        }
        r->ports = fy_xcalloc(rc[i].ports.n ? rc[i].ports.n : 1, sizeof *r->ports);
        for (size_t k = 0; k < rc[i].ports.n; k++)
            if (fy_port_range_parse(rc[i].ports.v[k], &r->ports[r->nports][0],
                                    &r->ports[r->nports][1]) == 0)
                r->nports++;
    }
    return d;
}

void fy__mitm_dest_free(fy_mitm_dest_t *d)
{
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) {
        free(d->rules[i].cidrs);
        free(d->rules[i].cidr_src);
        free(d->rules[i].names.v);
        free(d->rules[i].ports);
    }
    free(d->rules);
    free(d);
}

void fy__mitm_dest_normalise(const struct sockaddr *sa, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof *out);
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
            struct sockaddr_in *o = (void *)out;
            o->sin_family = AF_INET;
            o->sin_port = a->sin6_port;
            memcpy(&o->sin_addr, a->sin6_addr.s6_addr + 12, 4);
            if (o->sin_addr.s_addr == htonl(INADDR_ANY))
                o->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return;
        }
        struct sockaddr_in6 *o = (void *)out;
        o->sin6_family = AF_INET6;
        o->sin6_port = a->sin6_port;
        o->sin6_addr = IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr) ? in6addr_loopback : a->sin6_addr;
        return;
    }
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in *o = (void *)out;
        *o = *(const struct sockaddr_in *)sa;
        if (o->sin_addr.s_addr == htonl(INADDR_ANY)) o->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
}

/* `name` as an address when it is an IP literal. */
static bool literal(const char *name, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a = (void *)ss;
    struct sockaddr_in6 *b = (void *)ss;
    if (inet_pton(AF_INET, name, &a->sin_addr) == 1) {
        a->sin_family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, name, &b->sin6_addr) == 1) {
        b->sin6_family = AF_INET6;
        return true;
    }
    return false;
}

static void deny_why(const dest_rule_t *r, size_t i, const char *name, int port, const char *what,
                     char *why, size_t whylen)
{
    if (!why) return;
    bool v6 = strchr(name, ':') != NULL;
    snprintf(why, whylen, "%s%s%s:%d is denied by intercept.destinations[%zu] (line %d: %s%s)",
             v6 ? "[" : "", name, v6 ? "]" : "", port, i, r->conf->line,
             what ? "hosts " : "any host", what ? what : "");
    if (r->nports) {
        size_t n = strlen(why);
        if (n > 1 && n < whylen) snprintf(why + n - 1, whylen - n + 1, ", port %d)", port);
    }
}

int fy__mitm_dest_check(const fy_mitm_dest_t *d, const char *name, int port,
                        const struct sockaddr *addr, char *why, size_t whylen)
{
    struct sockaddr_storage lit, norm;
    if (!addr && literal(name, &lit)) addr = (const struct sockaddr *)&lit;
    if (addr) {
        fy__mitm_dest_normalise(addr, &norm);
        addr = (const struct sockaddr *)&norm;
    }
    for (size_t i = 0; i < d->n; i++) {
        const dest_rule_t *r = &d->rules[i];
        bool port_ok = r->nports == 0;
        for (size_t k = 0; k < r->nports && !port_ok; k++)
            port_ok = port >= r->ports[k][0] && port <= r->ports[k][1];
        if (!port_ok) continue;
        const char *what = NULL; /* the entry that matched; NULL: the rule names no hosts */
        bool match = r->ncidr == 0 && r->names.n == 0;
        for (size_t k = 0; k < r->names.n && !match; k++) {
            fy_conf_strlist_t one = {.v = &r->names.v[k], .n = 1};
            if (fy_host_list_match(&one, name)) {
                match = true;
                what = r->names.v[k];
            }
        }
        if (!match && r->ncidr) {
            if (!addr) return FY_DEST_NEED_ADDR;
            for (size_t k = 0; k < r->ncidr && !match; k++)
                if (fy_cidr_match(&r->cidrs[k], addr)) {
                    match = true;
                    what = r->cidr_src[k];
                }
        }
        if (!match) continue;
        if (r->conf->action == 0) return FY_DEST_ALLOW;
        deny_why(r, i, name, port, what, why, whylen);
        return FY_DEST_DENY;
    }
    return FY_DEST_ALLOW;
}
