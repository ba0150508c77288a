/* Validators shared by the directive tables for values that reach a wire or the file system:
 * header names and values, cookie names, path prefixes, server names, and the files a
 * config names. Each table hooks one of them as a directive's `validate` (conf.h), so a CR
 * or LF in a config value is a `file:line:col: key: message` error at load time instead of
 * bytes injected into a request line or a header block.
 *
 * The fy_conf_why_* predicates are pure: they return NULL when `s` is acceptable, else a
 * static string saying what is wrong ("has a line break (CR or LF)"). They never allocate
 * and may be called from any thread.
 *
 * The fy_conf_valid_* functions have the `validate` signature of fy_conf_directive_t: they
 * check the converted field (`field`), report with fy_conf_error at the position of the
 * offending node (for a map or list: the entry itself) and return 0 or -1. */
#ifndef FY_CONF_CONF_VALID_H
#define FY_CONF_CONF_VALID_H

#include "conf/conf.h"

/* RFC 9110 §5.6.2 token: header field names, cookie names, methods. Non-empty. */
const char *fy_conf_why_not_token(const char *s);
/* RFC 9110 §5.5 field value: no CR, LF, NUL or other control byte except HTAB, no leading
   or trailing space or tab. May be empty. */
const char *fy_conf_why_not_field_value(const char *s);
/* An absolute path (prefix) that is sent in a request line: starts with '/', then only RFC
   3986 path characters (unreserved, sub-delims, ':', '@', '/', well-formed %XX); no space,
   control byte, '?', '#' or byte >= 0x80. */
const char *fy_conf_why_not_path(const char *s);
/* As a path, with a query after '?' allowed (origin-form: health-check.path); no fragment. */
const char *fy_conf_why_not_target(const char *s);
/* A DNS host name as sent in TLS SNI: dot-separated labels of letters, digits, '-' and '_',
   each 1..63 bytes, at most 253 bytes, an optional trailing dot. */
const char *fy_conf_why_not_hostname(const char *s);

/* FY_CT_STRING validators (a NULL field passes). */
int fy_conf_valid_token(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj);
int fy_conf_valid_field_value(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                              void *obj);
int fy_conf_valid_path(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj);
int fy_conf_valid_target(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj);
int fy_conf_valid_hostname(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj);
/* A file that must exist, be a regular file and be readable now (certificates, keys, CA
   bundles, files served by rules): "cannot read 'x.pem': No such file or directory". */
int fy_conf_valid_readable_file(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                                void *obj);
/* A log destination: `off`, `stdout`, `stderr`, or a file that can be opened for appending
   (it exists and is writable, or its folder exists and is writable). */
int fy_conf_valid_log_target(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                             void *obj);

/* A folder for generated state (CA, self-signed certificates): it is a folder, or it can be
   made (mkdir -p): its nearest existing ancestor is a writable folder. */
int fy_conf_valid_state_dir(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj);

/* FY_CT_STRMAP: every name a token, every value a field value (header blocks). */
int fy_conf_valid_header_map(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                             void *obj);
/* FY_CT_STRLIST: every item a token (header names to remove). */
int fy_conf_valid_token_list(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field,
                             void *obj);

/* Check that `path` names a readable regular file; 0, or -1 with "cannot read 'path': why"
   in msg. For validators that must look at two fields at once (cert and key). */
int fy_conf_check_readable(const char *path, char *msg, size_t len);

/* The value node of `key` in the MAP `map`, or `map` itself when absent (for positions). */
const fy_conf_node_t *fy_conf_map_at(const fy_conf_node_t *map, const char *key);

#endif
