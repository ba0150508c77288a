#include "http/path.h"

#include <string.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

/* Step 1 (and 2): decode into out. Decoding never lengthens the input. */
static int decode(const char *in, size_t len, char *out, size_t cap, const fy_path_opts_t *o)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t w = 0;
    for (size_t i = 0; i < len;) {
        char c = in[i];
        size_t take = 1;
        char enc[3];
        if (c == '%') {
            if (len - i < 3) return FY_PATH_EBAD;
            int h = hexval(in[i + 1]), l = hexval(in[i + 2]);
            if (h < 0 || l < 0) return FY_PATH_EBAD;
            unsigned char v = (unsigned char)(h * 16 + l);
            i += 3;
            if (is_unreserved(v) ||
                ((v == '/' || v == '\\') && o->encoded_slash == FY_PATH_SLASH_DECODE)) {
                c = (char)v;
            } else if ((v == '/' || v == '\\') && o->encoded_slash == FY_PATH_SLASH_REJECT) {
                return FY_PATH_ESLASH;
            } else {
                enc[0] = '%';
                enc[1] = hex[v >> 4];
                enc[2] = hex[v & 15];
                take = 3;
            }
        } else {
            i++;
        }
        if (take == 1 && c == '/' && o->merge_slashes && w > 0 && out[w - 1] == '/') continue;
        if (w + take > cap) return FY_PATH_ENOSPC;
        if (take == 1)
            out[w++] = c;
        else
            for (size_t k = 0; k < 3; k++) out[w++] = enc[k];
    }
    return (int)w;
}

/* Step 3, in place: RFC 3986 §5.2.4 over a path that starts with '/'. The input buffer is read
 * at r and written at w <= r. */
static int remove_dots(char *p, size_t len)
{
    size_t r = 0, w = 0;
    while (r < len) {
        /* p[r] == '/' here: one segment is p[r+1 .. e) */
        size_t s = r + 1, e = s;
        while (e < len && p[e] != '/') e++;
        size_t sl = e - s;
        bool last = e == len;
        if (sl == 1 && p[s] == '.') {
            /* "/." : drop; at the end it leaves a "/" */
            if (last) p[w++] = '/';
        } else if (sl == 2 && p[s] == '.' && p[s + 1] == '.') {
            if (w == 0) return FY_PATH_EABOVE;
            while (w > 0 && p[w - 1] != '/') w--; /* drop the last output segment... */
            w--;                                  /* ...and its '/' */
            if (last) p[w++] = '/';
        } else {
            memmove(p + w, p + r, e - r);
            w += e - r;
        }
        r = e;
    }
    if (w == 0) p[w++] = '/';
    return (int)w;
}

bool fy_path_is_normal(const char *p, size_t len, bool merge_slashes)
{
    if (len == 0 || p[0] != '/') return false;
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '%') return false;
        if (p[i] != '/' || i + 1 == len) continue;
        char d = p[i + 1];
        if (d == '/' && merge_slashes) return false;
        if (d == '.') {
            size_t j = i + 2; /* "/." or "/.." as a whole segment */
            if (j == len || p[j] == '/') return false;
            if (p[j] == '.' && (j + 1 == len || p[j + 1] == '/')) return false;
        }
    }
    return true;
}

int fy_path_normalize(const char *in, size_t len, char *out, size_t cap, const fy_path_opts_t *opts)
{
    if (len == 0 || in[0] != '/') return FY_PATH_EBAD;
    int n = decode(in, len, out, cap, opts);
    if (n < 0) return n;
    return remove_dots(out, (size_t)n);
}
