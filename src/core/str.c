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
        /* ignore parameters like ";q=0.5" */
        for (size_t k = b; k < e; k++)
            if (s.p[k] == ';') {
                e = k;
                while (e > b && (s.p[e - 1] == ' ' || s.p[e - 1] == '\t')) e--;
                break;
            }
        if (fy_str_ieq(fy_str(s.p + b, e - b), tok, n)) return true;
    }
    return false;
}
