/* libFuzzer target: request paths through fy_path_normalize (http/path.c) under each
 * encoded-slash option, with and without slash merging. Invariants checked on success: the
 * result starts with '/', fits the input's length, holds no "." or ".." segment, no escape of
 * an unreserved character, no lower-case hex digit in an escape, no "//" when merging, no
 * encoded slash unless kept; and normalising the result again gives the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/path.h"

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1; /* lower case is a finding here */
}

static void check(const char *out, int n, const fy_path_opts_t *o)
{
    if (n <= 0 || out[0] != '/') abort();
    for (int i = 0; i < n; i++) {
        if (out[i] == '/' && i + 1 < n && out[i + 1] == '/' && o->merge_slashes) abort();
        if (out[i] == '/') {
            int e = i + 1;
            while (e < n && out[e] != '/') e++;
            int sl = e - i - 1;
            if ((sl == 1 && out[i + 1] == '.') ||
                (sl == 2 && out[i + 1] == '.' && out[i + 2] == '.'))
                abort();
        }
        if (out[i] == '%') {
            if (i + 2 >= n) abort();
            int h = hexval(out[i + 1]), l = hexval(out[i + 2]);
            if (h < 0 || l < 0) abort();
            int v = h * 16 + l;
            if ((v >= 'A' && v <= 'Z') || (v >= 'a' && v <= 'z') || (v >= '0' && v <= '9') ||
                v == '-' || v == '.' || v == '_' || v == '~')
                abort();
            if ((v == '/' || v == '\\') && o->encoded_slash != FY_PATH_SLASH_KEEP) abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) return 0;
    static const fy_path_opts_t opts[] = {
        {FY_PATH_SLASH_REJECT, true},  {FY_PATH_SLASH_KEEP, true},  {FY_PATH_SLASH_DECODE, true},
        {FY_PATH_SLASH_REJECT, false}, {FY_PATH_SLASH_KEEP, false}, {FY_PATH_SLASH_DECODE, false},
    };
    char *in = malloc(size ? size : 1); /* exact size: ASan sees any over-read */
    char *out = malloc(size ? size : 1), *again = malloc(size ? size : 1);
    if (!in || !out || !again) abort();
    if (size) memcpy(in, data, size);
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
        int n = fy_path_normalize(in, size, out, size, &opts[k]);
        if (n == FY_PATH_ENOSPC) abort(); /* the result never outgrows the input */
        /* the fast path may say "normal" only where normalising changes nothing */
        if (fy_path_is_normal(in, size, opts[k].merge_slashes) &&
            (n != (int)size || memcmp(in, out, size)))
            abort();
        if (n < 0) continue;
        if ((size_t)n > size) abort();
        check(out, n, &opts[k]);
        /* idempotent (a decoded %25 stays "%25", so a second pass sees the same escapes) */
        int m = fy_path_normalize(out, (size_t)n, again, (size_t)n, &opts[k]);
        if (opts[k].encoded_slash != FY_PATH_SLASH_DECODE &&
            (m != n || memcmp(out, again, (size_t)n)))
            abort();
    }
    free(in);
    free(out);
    free(again);
    return 0;
}
