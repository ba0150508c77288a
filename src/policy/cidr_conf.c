/* The `cidr:` directive tables (policy/cidr_conf.h). */
#include "policy/cidr_conf.h"

#include <stddef.h>
#include <string.h>

#include "policy/cidr.h"

int fy_cidr_conf_valid_list(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    const fy_conf_strlist_t *l = field;
    int rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        fy_ip_t ip;
        unsigned len;
        const char *why;
        const fy_conf_node_t *at = node->kind == FY_CONF_SEQ && i < node->n ? node->items[i] : node;
        if (fy_ip_parse_cidr(l->v[i], &ip, &len, &why) < 0) {
            fy_conf_error(ctx, at, NULL, "'%.60s' %s; expected e.g. 10.0.0.0/8 or 2001:db8::/32",
                          l->v[i], why);
            rc = -1;
        }
    }
    return rc;
}

static int check_cidr(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const fy_cidr_conf_t *c = obj;
    if (c->use && (c->allow.n || c->deny.n || c->trusted_proxies.n)) {
        fy_conf_error(ctx, map, "use",
                      "names a cidr-lists entry: allow, deny and trusted-proxies go there");
        return -1;
    }
    if (!c->use && !c->allow.n && !c->deny.n) {
        fy_conf_error(ctx, map, NULL, "needs `allow`, `deny` or `use`");
        return -1;
    }
    return 0;
}

#define F(f) offsetof(fy_cidr_conf_t, f)

#define CIDR_RULES                                                                                 \
    {.key = "allow",                                                                               \
     .type = FY_CT_STRLIST,                                                                        \
     .offset = F(allow),                                                                           \
     .validate = fy_cidr_conf_valid_list,                                                          \
     .doc = "Client CIDRs (`10.0.0.0/8`, `2001:db8::/32`) or addresses allowed; when set, "        \
            "every client not in it is denied. The longest matching prefix of `allow` and "        \
            "`deny` decides (IPv4-mapped IPv6 clients match the IPv4 prefixes)."},                 \
        {.key = "deny",                                                                            \
         .type = FY_CT_STRLIST,                                                                    \
         .offset = F(deny),                                                                        \
         .validate = fy_cidr_conf_valid_list,                                                      \
         .doc = "Client CIDRs denied (a prefix in both lists denies). Example: "                   \
                "`cidr: {allow: [10.0.0.0/8], deny: [10.9.0.0/16], status: 404}`."},               \
        {.key = "trusted-proxies",                                                                 \
         .type = FY_CT_STRLIST,                                                                    \
         .offset = F(trusted_proxies),                                                             \
         .validate = fy_cidr_conf_valid_list,                                                      \
         .doc = "Peers whose `Forwarded` (RFC 7239; preferred when present) or "                   \
                "`X-Forwarded-For` is believed: the client is the rightmost address of the "       \
                "chain that is not one of these; unset: the peer address is the client."},         \
    {                                                                                              \
        .key = "status", .type = FY_CT_INT, .offset = F(status), .dflt = "403", .min = 400,        \
        .max = 599, .doc = "Status of the answer to a denied client."                              \
    }

const fy_conf_directive_t fy_cidr_conf_table[] = {
    {.key = "use",
     .type = FY_CT_STRING,
     .offset = F(use),
     .doc = "The name of a top-level `cidr-lists` entry to apply instead of inline rules; "
            "shorthand `cidr: NAME`."},
    CIDR_RULES,
    {.key = NULL, .check = check_cidr},
};

static int check_named(fy_conf_ctx_t *ctx, const fy_conf_node_t *map, void *obj)
{
    const fy_cidr_conf_t *c = obj;
    if (!c->allow.n && !c->deny.n) {
        fy_conf_error(ctx, map, NULL, "needs `allow` or `deny`");
        return -1;
    }
    return 0;
}

const fy_conf_directive_t fy_cidr_list_conf_table[] = {
    {.key = "name",
     .type = FY_CT_STRING,
     .offset = F(name),
     .required = true,
     .doc = "What listeners (`cidr: NAME`) and routes (`cidr: NAME`) call this list."},
    CIDR_RULES,
    {.key = NULL, .check = check_named},
};
