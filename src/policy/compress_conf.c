/* Directive table of the compression filter (`compress:`). */
#include "policy/compress_conf.h"

#include <stddef.h>
#include <string.h>

#include "policy/compress_neg.h"

static int validate_encodings(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                              void *obj)
{
    const fy_conf_strlist_t *l = field;
    for (size_t i = 0; i < l->n; i++)
        if (fy_compress_coding_id(l->v[i], strlen(l->v[i])) <= FY_CODING_IDENTITY) {
            fy_conf_error(ctx, node, NULL, "unknown encoding '%.40s' (br, zstd, gzip)", l->v[i]);
            return -1;
        }
    return 0;
}

static int validate_types(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    const fy_conf_strlist_t *l = field;
    for (size_t i = 0; i < l->n; i++) {
        const char *s = strchr(l->v[i], '/');
        if (!s || s == l->v[i] || !s[1] || strchr(l->v[i], ';') || strchr(l->v[i], ' ')) {
            fy_conf_error(ctx, node, NULL, "'%.60s' is not a MIME type like text/html or text/*",
                          l->v[i]);
            return -1;
        }
        for (char *p = l->v[i]; *p; p++)
            if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
    }
    return 0;
}

#define C(f) offsetof(fy_compress_conf_t, f)

const fy_conf_directive_t fy_compress_conf_table[] = {
    {.key = "enabled",
     .type = FY_CT_BOOL,
     .offset = C(enabled),
     .dflt = "true",
     .doc = "Compress (`compress: enabled` is the short form); false keeps the route's "
            "responses as they are."},
    {.key = "encodings",
     .type = FY_CT_STRLIST,
     .offset = C(encodings),
     .dflt = "[br, zstd, gzip]",
     .validate = validate_encodings,
     .doc = "Encodings offered, best first: the client's highest `q` in `Accept-Encoding` wins, "
            "this order breaks ties."},
    {.key = "min-size",
     .type = FY_CT_SIZE,
     .offset = C(min_size),
     .dflt = "256",
     .max = 1 << 30,
     .doc = "Bodies known to be smaller stay identity (bodies of unknown length are "
            "compressed)."},
    {.key = "types",
     .type = FY_CT_STRLIST,
     .offset = C(types),
     .dflt = "[text/*, application/json, application/javascript, application/xml, "
             "application/wasm, application/x-ndjson, image/svg+xml, application/manifest+json]",
     .validate = validate_types,
     .doc = "MIME types compressed (`Content-Type` before any `;`); `text/*` is every text "
            "type."},
    {.key = "gzip-level",
     .type = FY_CT_INT,
     .offset = C(gzip_level),
     .dflt = "5",
     .min = 1,
     .max = 12,
     .doc = "gzip level: libdeflate's 1..12 for bodies compressed in one shot (`one-shot-max`), "
            "zlib's 1..9 when streaming (10..12 stream as 9)."},
    {.key = "brotli-level",
     .type = FY_CT_INT,
     .offset = C(brotli_level),
     .dflt = "4",
     .min = 0,
     .max = 11,
     .doc = "Brotli quality."},
    {.key = "zstd-level",
     .type = FY_CT_INT,
     .offset = C(zstd_level),
     .dflt = "3",
     .min = 1,
     .max = 19,
     .doc = "zstd level."},
    {.key = "file-chunk",
     .type = FY_CT_SIZE,
     .offset = C(file_chunk),
     .dflt = "64k",
     .min = 4096,
     .max = 16 << 20,
     .doc = "Static files are read and compressed this many bytes per send (the client's pace "
            "sets the next read: no whole-file buffering), except gzip and zstd ones up to "
            "`one-shot-max`: those are read whole and compressed in one call."},
    {.key = "one-shot-max",
     .type = FY_CT_SIZE,
     .offset = C(one_shot_max),
     .dflt = "256k",
     .max = 16 << 20,
     .doc = "A gzip or zstd body whose Content-Length is at most this (or that comes whole in "
            "one send) is held and compressed in one call (libdeflate for gzip; Content-Length "
            "set to the result); br, longer and unknown-length bodies stream send by send. 0: "
            "always stream."},
    {.key = NULL},
};
