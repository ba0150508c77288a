/* Directive table of `proxy:` (route handler). */
#include "handler/proxy_conf.h"
#include "conf/conf_valid.h"

#include <stddef.h>
#include <string.h>

#define P(f) offsetof(fy_proxy_conf_t, f)

static const char *const forward_path_modes[] = {"normalised", "original", NULL};

static int validate_prefix(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    return fy_conf_valid_path(ctx, node, field, obj); /* it goes into the request line */
}

const fy_conf_directive_t fy_proxy_conf_table[] = {
    {.key = "upstream",
     .type = FY_CT_STRING,
     .offset = P(upstream),
     .required = true,
     .doc = "Name of the upstream (`upstreams:`) that serves this route."},
    {.key = "strip-prefix",
     .type = FY_CT_STRING,
     .offset = P(strip_prefix),
     .validate = validate_prefix,
     .doc = "Path prefix removed before the request goes to the origin."},
    {.key = "add-prefix",
     .type = FY_CT_STRING,
     .offset = P(add_prefix),
     .validate = validate_prefix,
     .doc = "Path prefix added (after `strip-prefix`) before the request goes to the origin."},
    {.key = "preserve-host",
     .type = FY_CT_BOOL,
     .offset = P(preserve_host),
     .dflt = "true",
     .doc = "Send the client's Host to the origin; false sends the upstream server's host:port."},
    {.key = "forwarded",
     .type = FY_CT_BOOL,
     .offset = P(forwarded),
     .dflt = "true",
     .doc = "Add X-Forwarded-For, X-Forwarded-Proto and X-Forwarded-Host."},
    {.key = "via",
     .type = FY_CT_BOOL,
     .offset = P(via),
     .dflt = "false",
     .doc = "Add `Via: 1.1 ferry` to requests and responses."},
    {.key = "forward-path",
     .type = FY_CT_ENUM,
     .offset = P(forward_path),
     .dflt = "normalised",
     .enums = forward_path_modes,
     .doc = "The path sent to the origin: `normalised` (the one routes matched, see "
            "`limits.encoded-slash`) or `original` (byte for byte as the client sent it). The "
            "query is never changed."},
    {.key = "set-headers",
     .type = FY_CT_STRMAP,
     .offset = P(set_headers),
     .validate = fy_conf_valid_header_map,
     .doc = "Request headers set (replacing any the client sent)."},
    {.key = "remove-headers",
     .type = FY_CT_STRLIST,
     .offset = P(remove_headers),
     .validate = fy_conf_valid_token_list,
     .doc = "Request headers removed."},
    {.key = "response-set-headers",
     .type = FY_CT_STRMAP,
     .offset = P(response_set_headers),
     .validate = fy_conf_valid_header_map,
     .doc = "Response headers set (replacing any the origin sent)."},
    {.key = "response-remove-headers",
     .type = FY_CT_STRLIST,
     .offset = P(response_remove_headers),
     .validate = fy_conf_valid_token_list,
     .doc = "Response headers removed."},
    {.key = NULL},
};
