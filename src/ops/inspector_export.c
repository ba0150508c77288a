/* A stored flow's request as a Python snippet (urllib from the standard library, so it runs
 * without installing anything): the same method, URL, headers and body, sent straight to the
 * flow's authority. Values the store redacted stay "[redacted]". */
#include "ops/inspector_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A Python literal: 'str' (bytes false) or b'bytes'. Every byte outside printable ASCII is
   escaped, so the snippet is ASCII whatever the flow held (\xNN in a str is U+00NN: header
   values go out as Latin-1, the same bytes). */
static void py_lit(fy__sb_t *b, const char *s, size_t n, bool bytes)
{
    fy__sb_puts(b, bytes ? "b'" : "'");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == '\'')
            fy__sb_printf(b, "\\%c", c);
        else if (c == '\n')
            fy__sb_puts(b, "\\n");
        else if (c == '\r')
            fy__sb_puts(b, "\\r");
        else if (c == '\t')
            fy__sb_puts(b, "\\t");
        else if (c < 0x20 || c >= 0x7f)
            fy__sb_printf(b, "\\x%02x", c);
        else
            fy__sb_put(b, s + i, 1);
    }
    fy__sb_puts(b, "'");
}

static bool skipped(fy_str_t n)
{
    static const char *const names[] = {"host",       "content-length",
                                        "connection", "proxy-connection",
                                        "keep-alive", "transfer-encoding"};
    if (n.len && n.p[0] == ':') return true;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (n.len == strlen(names[i]) && strncasecmp(n.p, names[i], n.len) == 0) return true;
    return false;
}

void fy__insp_python(fy__sb_t *b, const fy_cs_flow_t *f)
{
    fy__sb_puts(b, "import urllib.error\nimport urllib.request\n\n");
    fy__sb_printf(b, "# flow %llu, captured by the Ferry inspector\n", (unsigned long long)f->id);
    fy__sb_puts(b, "req = urllib.request.Request(\n    ");
    fy__sb_t u = {0};
    fy__sb_put(&u, f->scheme.p, f->scheme.len);
    fy__sb_puts(&u, "://");
    fy__sb_put(&u, f->authority.p, f->authority.len);
    fy__sb_put(&u, f->target.p, f->target.len);
    py_lit(b, u.p, u.len, false);
    free(u.p);
    fy__sb_puts(b, ",\n    method=");
    py_lit(b, f->method.p, f->method.len, false);
    fy__sb_puts(b, ",\n    headers={\n");
    for (size_t i = 0; i < f->n_req_headers; i++) {
        if (skipped(f->req_headers[i].name)) continue;
        fy__sb_puts(b, "        ");
        py_lit(b, f->req_headers[i].name.p, f->req_headers[i].name.len, false);
        fy__sb_puts(b, ": ");
        py_lit(b, f->req_headers[i].value.p, f->req_headers[i].value.len, false);
        fy__sb_puts(b, ",\n");
    }
    fy__sb_puts(b, "    },\n");
    if (f->req_body.len) {
        fy__sb_puts(b, "    data=");
        py_lit(b, f->req_body.p, f->req_body.len, true);
        fy__sb_puts(b, ",\n");
    }
    fy__sb_puts(b, ")\n");
    if (f->flags & FY_CS_REQ_TRUNCATED)
        fy__sb_puts(b, "# the request body was cut at inspector.body-cap\n");
    fy__sb_puts(b, "try:\n    res = urllib.request.urlopen(req, timeout=30)\n"
                   "except urllib.error.HTTPError as e:  # 4xx and 5xx\n    res = e\n"
                   "print(res.status, res.reason)\n"
                   "print(res.read().decode('utf-8', 'replace'))\n");
}
