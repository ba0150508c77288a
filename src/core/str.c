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
