/* Directive table of the transform filter (`transform:`). */
#include "policy/transform_conf.h"

#include <stddef.h>
#include <string.h>

#include "conf/conf_valid.h"
#include "http/router.h"

static int validate_regex(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *re = *(char **)field;
    char msg[256];
    if (re && fy_regex_check(re, msg, sizeof msg) < 0) {
        fy_conf_error(ctx, node, NULL, "invalid regular expression '%.80s': %s", re, msg);
        return -1;
    }
    return 0;
}

static int validate_tpl(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const char *t = *(char **)field;
    const char *why = t ? fy_transform_template_why(t) : NULL;
    if (why) {
        fy_conf_error(ctx, node, NULL, "template '%.80s': %s", t, why);
        return -1;
    }
    return 0;
}

static int validate_rewrite_to(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                               void *obj)
{
    const char *t = *(char **)field;
    if (t && t[0] != '/' && t[0] != '$' && t[0] != '{') {
        fy_conf_error(ctx, node, NULL, "a rewritten path must start with '/', got '%.80s'", t);
        return -1;
    }
    return validate_tpl(ctx, node, field, obj);
}

static int validate_status(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    int64_t s = *(int64_t *)field;
    if (s != 301 && s != 302 && s != 303 && s != 307 && s != 308) {
        fy_conf_error(ctx, node, NULL, "must be 301, 302, 303, 307 or 308, got %lld", (long long)s);
        return -1;
    }
    return 0;
}

static int validate_tpl_map(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strmap_t *m = field;
    for (size_t i = 0; i < m->n; i++) {
        const char *why = fy_conf_why_not_token(m->keys[i]);
        if (!why) why = fy_conf_why_not_field_value(m->values[i]);
        if (!why) why = fy_transform_template_why(m->values[i]);
        if (why) {
            fy_conf_error(ctx, node, NULL, "%.60s: %s", m->keys[i], why);
            return -1;
        }
    }
    return 0;
}

#define R(f) offsetof(fy_transform_rule_t, f)

static const fy_conf_directive_t rewrite_table[] = {
    {.key = "match",
     .type = FY_CT_STRING,
     .offset = R(match),
     .required = true,
     .validate = validate_regex,
     .doc = "PCRE2 pattern over the (normalised) path; its captures are `$1`..`$9`."},
    {.key = "to",
     .type = FY_CT_STRING,
     .offset = R(to),
     .required = true,
     .validate = validate_rewrite_to,
     .doc = "The new path, a template (`/v2/$1`, `{path}`); a `?` in it replaces the query."},
    {.key = NULL},
};

static const fy_conf_directive_t redirect_table[] = {
    {.key = "match",
     .type = FY_CT_STRING,
     .offset = R(match),
     .required = true,
     .validate = validate_regex,
     .doc = "PCRE2 pattern over the (normalised) path; its captures are `$1`..`$9`."},
    {.key = "to",
     .type = FY_CT_STRING,
     .offset = R(to),
     .required = true,
     .validate = validate_tpl,
     .doc = "The Location, a template, e.g. `https://{host}{request_uri}`."},
    {.key = "status",
     .type = FY_CT_INT,
     .offset = R(status),
     .dflt = "302",
     .validate = validate_status,
     .doc = "301, 302, 303, 307 or 308."},
    {.key = NULL},
};

#define H(f) offsetof(fy_transform_headers_t, f)

static const fy_conf_directive_t headers_table[] = {
    {.key = "set",
     .type = FY_CT_STRMAP,
     .offset = H(set),
     .validate = validate_tpl_map,
     .doc = "Headers set to a template value (any of that name are replaced), e.g. "
            "`{x-client: \"{client}\"}`. Names match in any case; an h1 client gets a "
            "response name spelled as written when it has a capital, else in canonical case "
            "(`ETag`, `X-Frame-Options`), h2 and h3 lowercase."},
    {.key = "append",
     .type = FY_CT_STRMAP,
     .offset = H(append),
     .validate = validate_tpl_map,
     .doc = "Headers added (after any of that name)."},
    {.key = "remove",
     .type = FY_CT_STRLIST,
     .offset = H(remove),
     .validate = fy_conf_valid_token_list,
     .doc = "Header names removed."},
    {.key = NULL},
};

#define T(f) offsetof(fy_transform_conf_t, f)

const fy_conf_directive_t fy_transform_conf_table[] = {
    {.key = "redirect",
     .type = FY_CT_TABLE_LIST,
     .offset = T(redirect),
     .sub = redirect_table,
     .sub_size = sizeof(fy_transform_rule_t),
     .doc = "Redirect rules, tried in order before any rewrite; the first whose `match` fits "
            "answers with `status` and the expanded `Location`."},
    {.key = "rewrite",
     .type = FY_CT_TABLE_LIST,
     .offset = T(rewrite),
     .sub = rewrite_table,
     .sub_size = sizeof(fy_transform_rule_t),
     .doc = "Path rewrite rules, tried in order; the first whose `match` fits rewrites the path "
            "the handler sees (static file, origin request)."},
    {.key = "request-headers",
     .type = FY_CT_TABLE,
     .offset = T(request_headers),
     .sub = headers_table,
     .doc = "Request header edits (remove, then set, then append), before the handler. "
            "Variables: `{host}` `{authority}` `{path}` `{query}` `{request_uri}` `{method}` "
            "`{scheme}` `{client}` `{request_id}` `{header.NAME}` (e.g. a claim the jwt "
            "filter copied)."},
    {.key = "response-headers",
     .type = FY_CT_TABLE,
     .offset = T(response_headers),
     .sub = headers_table,
     .doc = "Response header edits, made when the response head leaves (error pages "
            "included); the same variables, of the request."},
    {.key = "request-id",
     .type = FY_CT_STRING,
     .offset = T(request_id),
     .validate = fy_conf_valid_token,
     .doc = "Header carrying a request id (e.g. `x-request-id`): kept when the client sent a "
            "sane one (1..128 visible characters), else a random one is generated."},
    {.key = "request-id-response",
     .type = FY_CT_BOOL,
     .offset = T(request_id_response),
     .dflt = "true",
     .doc = "Also put the request id on the response."},
    {.key = NULL},
};
