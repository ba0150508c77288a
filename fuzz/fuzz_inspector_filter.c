/* libFuzzer target: the inspector API's request parsing (ops/inspector_filter.c). The input is
 * a query string: its `filter` parameter (percent-decoded) is parsed with the filter language
 * and matched against a fixed flow; the whole input is also parsed as a filter. Invariants: a
 * parse either gives a tree or an error with a position inside the input; decoded query values
 * are NUL-terminated within the buffer and never longer than the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/inspector_filter.h"

static const fy_cs_header_t rq[] = {{FY_STR_LIT("User-Agent"), FY_STR_LIT("fuzz")}};
static const fy_cs_header_t rs[] = {{FY_STR_LIT("Content-Type"), FY_STR_LIT("text/html")}};
static const fy_cs_flow_t flow = {.req_headers = rq,
                                  .n_req_headers = 1,
                                  .res_headers = rs,
                                  .n_res_headers = 1,
                                  .req_body = FY_STR_LIT("name=value"),
                                  .res_body = FY_STR_LIT("<p>hello</p>")};

static const fy_cs_flow_t *load(void *ud)
{
    return ud;
}

static void run(const char *s, size_t n)
{
    const char *err;
    size_t at;
    fy_insp_expr_t *x = fy_insp_filter_parse(s, n, &err, &at);
    if (!x && err && at > n) abort();
    fy_cs_entry_t e = {.id = 1,
                       .status = 200,
                       .method = "GET",
                       .host = "example.test",
                       .target = "/a?b=c",
                       .ctype = "text/html"};
    fy_insp_subject_t sub = {.e = &e, .load = load, .ud = (void *)&flow};
    (void)fy_insp_filter_match(x, &sub);
    (void)fy_insp_filter_needs_flow(x);
    fy_insp_filter_free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *q = (const char *)data;
    char out[4096];
    long n = fy_insp_query_get(q, size, "filter", out, sizeof out);
    if (n >= 0) {
        if ((size_t)n >= sizeof out || (size_t)n > size || out[n] != 0) abort();
        run(out, (size_t)n);
    }
    (void)fy_insp_query_uint(q, size, "limit", 1, 5000);
    char small[3];
    n = fy_insp_query_get(q, size, "after", small, sizeof small);
    if (n >= 0 && ((size_t)n >= sizeof small || small[n] != 0)) abort();
    run(q, size);
    return 0;
}
