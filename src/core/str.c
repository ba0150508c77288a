#include "core/str.h"

bool fy_str_list_has(fy_str_t s, const char *tok, size_t n)
{
    size_t i = 0;
    while (i < s.len) {
        while (i < s.len && (s.p[i] == ' ' || s.p[i] == '\t' || s.p[i] == ',')) i++;
        size_t b = i;
        while (i < s.len && s.p[i] != ',') i++;
        size_t e = i;
        while (e > b && (s.p[e - 1] == ' ' || s.p[e - 1] == '\t')) e--;
        /* parameters: ";q=0" (RFC 9110 §12.4.2) means "not acceptable"; others are ignored */
        bool refused = false;
        for (size_t k = b; k < e; k++)
            if (s.p[k] == ';') {
                size_t q = k + 1;
                while (q < e && (s.p[q] == ' ' || s.p[q] == '\t')) q++;
                if (q + 2 < e + 1 && q + 1 < e && (s.p[q] == 'q' || s.p[q] == 'Q') &&
                    s.p[q + 1] == '=') {
                    refused = true;
                    for (size_t z = q + 2; z < e; z++)
                        if (s.p[z] != '0' && s.p[z] != '.' && s.p[z] != ' ' && s.p[z] != '\t')
                            refused = false;
                }
                e = k;
                while (e > b && (s.p[e - 1] == ' ' || s.p[e - 1] == '\t')) e--;
                break;
            }
        if (!refused && fy_str_ieq(fy_str(s.p + b, e - b), tok, n)) return true;
    }
    return false;
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '-' || c == '+') return 62;
    if (c == '_' || c == '/') return 63;
    return -1;
}

int fy_base64url_decode(const char *in, size_t len, unsigned char *out, size_t cap)
{
    while (len && in[len - 1] == '=') len--;
    if (len % 4 == 1) return -1;
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64val(in[i]);
        if (v < 0) return -1;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o == cap) return -1;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return (int)o;
}
