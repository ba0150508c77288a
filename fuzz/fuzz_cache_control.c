/* libFuzzer driver: arbitrary bytes as Cache-Control, as a targeted field (CDN-Cache-Control),
 * as Age and as Vary (policy/cache_cc.c, cache_key.c), then the whole freshness pipeline
 * (policy/cache_fresh.c) over them as one response's head. The input is split at the first
 * NUL, if any, into the field value and a second line of the same field. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/arena.h"
#include "policy/cache_cc.h"
#include "policy/cache_fresh.h"
#include "policy/cache_key.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    const char *nul = memchr(p, 0, size);
    size_t n1 = nul ? (size_t)(nul - p) : size;
    const char *p2 = nul ? nul + 1 : p + size;
    size_t n2 = nul ? size - n1 - 1 : 0;

    fy_cache_cc_t cc;
    fy_cache_cc_init(&cc);
    fy_cache_cc_parse(&cc, p, n1);
    fy_cache_cc_parse(&cc, p2, n2);
    fy_cache_cc_init(&cc);
    (void)fy_cache_cc_parse_targeted(&cc, p, n1);
    (void)fy_cache_parse_age(p, n1);

    fy_header_t hv[8] = {
        {FY_STR_LIT("Cache-Control"), fy_str(p, n1)},
        {FY_STR_LIT("cache-control"), fy_str(p2, n2)},
        {FY_STR_LIT("CDN-Cache-Control"), fy_str(p, n1)},
        {FY_STR_LIT("Age"), fy_str(p2, n2)},
        {FY_STR_LIT("Expires"), fy_str(p, n1)},
        {FY_STR_LIT("Last-Modified"), fy_str(p2, n2)},
        {FY_STR_LIT("Vary"), fy_str(p, n1)},
        {FY_STR_LIT("Accept-Encoding"), fy_str(p2, n2)},
    };
    fy_headers_t hs = {hv, 8, 8};
    fy_cache_resp_info_t ri;
    fy_cache_resp_scan(&hs, "cdn-cache-control", &ri);
    fy_cache_req_info_t qi;
    fy_cache_req_scan(&hs, &qi);
    (void)fy_cache_storable(200, &ri, &qi, false);
    int64_t life = fy_cache_lifetime(200, &ri, 1700000000, 10, 3600, 0, NULL);
    int64_t age = fy_cache_current_age(ri.age, ri.date, 1700000000, 1700000000, 1700000100);
    fy_cache_fresh_t f = {.lifetime = life, .swr = cc.swr, .sie = cc.sie};
    (void)fy_cache_use(&f, age, &qi, false);
    (void)fy_cache_stale_if_error(&f, age, &qi);

    static fy_arena_t a;
    static int init;
    if (!init) {
        fy_arena_init(&a, NULL, 0, 0);
        init = 1;
    }
    size_t vl, kl;
    char *names = fy_cache_vary_names(&a, &hs, &vl);
    if (names) (void)fy_cache_vary_key(&a, &hs, names, vl, &kl);
    fy_arena_reset(&a);
    return 0;
}
