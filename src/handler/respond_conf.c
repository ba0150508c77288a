/* Directive table of the fixed-response handler (`respond:`). */
#include "handler/respond_conf.h"
#include "conf/conf_valid.h"

#include <stddef.h>
#include <string.h>

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
     .validate = fy_conf_valid_header_map,
     .doc = "Extra response header fields, `name: value`."},
    {.key = "body",
     .type = FY_CT_STRING,
     .offset = R(body),
     .dflt = "",
     .validate = validate_body,
     .doc = "Response body."},
    {.key = NULL},
};
