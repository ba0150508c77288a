/* Directive table of the fixed-response handler (`respond:`). */
#include "handler/respond_conf.h"

#include <stddef.h>
#include <string.h>

/* RFC 9110 token characters, for header names */
static bool is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int validate_headers(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strmap_t *m = field;
    int rc = 0;
    for (size_t i = 0; i < m->n; i++) {
        const unsigned char *k = (const unsigned char *)m->keys[i];
        bool ok = *k != '\0';
        for (; *k; k++) ok = ok && is_tchar(*k);
        if (!ok) {
            fy_conf_error(ctx, node, NULL, "bad header name '%.60s'", m->keys[i]);
            rc = -1;
        }
        for (const unsigned char *v = (const unsigned char *)m->values[i]; *v; v++) {
            if ((*v < 0x20 && *v != '\t') || *v == 0x7f) {
                fy_conf_error(ctx, node, NULL, "header '%.60s': value has a control character",
                              m->keys[i]);
                rc = -1;
                break;
            }
        }
    }
    return rc;
}

static int validate_body(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_respond_conf_t *r = obj;
    r->body_len = strlen(r->body); /* nodes never hold NUL bytes (conf.c rejects them) */
    return 0;
}

#define R(f) offsetof(fy_respond_conf_t, f)

const fy_conf_directive_t fy_respond_conf_table[] = {
    {.key = "status",
     .type = FY_CT_INT,
     .offset = R(status),
     .dflt = "200",
     .min = 200,
     .max = 599,
     .doc = "Response status code."},
    {.key = "headers",
     .type = FY_CT_STRMAP,
     .offset = R(headers),
     .validate = validate_headers,
     .doc = "Extra response header fields, `name: value`."},
    {.key = "body",
     .type = FY_CT_STRING,
     .offset = R(body),
     .dflt = "",
     .validate = validate_body,
     .doc = "Response body."},
    {.key = NULL},
};
