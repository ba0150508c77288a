/* Accept-Encoding and MIME type matching (policy/compress_neg.h). */
#include "policy/compress_neg.h"

#include <string.h>

static const char *const names[] = {"identity", "gzip", "br", "zstd"};

int fy_compress_coding_id(const char *s, size_t n)
{
    for (int i = 0; i < 4; i++)
        if (fy_str_ieq(fy_str(s, n), names[i], strlen(names[i]))) return i;
    return FY_CODING_UNKNOWN;
}

const char *fy_compress_coding_name(int coding)
{
    return coding >= 0 && coding < 4 ? names[coding] : "identity";
}

/* q-value (RFC 9110 §12.4.2) as thousandths, or -1 when malformed. */
static int qvalue(const char *p, size_t n)
{
    if (n == 0 || n > 5) return -1;
    if (p[0] == '1') {
        for (size_t i = 1; i < n; i++)
            if ((i == 1 && p[i] != '.') || (i > 1 && p[i] != '0')) return -1;
        return 1000;
    }
    if (p[0] != '0') return -1;
    if (n == 1) return 0;
    if (p[1] != '.') return -1;
    int v = 0, scale = 100;
    for (size_t i = 2; i < n; i++, scale /= 10) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v += (p[i] - '0') * scale;
    }
    return v;
}

int fy_compress_negotiate(fy_str_t ae, const int *offer, size_t n)
{
    int q[4] = {-1, -1, -1, -1}, star = -1;
    size_t i = 0;
    while (i < ae.len) {
        while (i < ae.len && (ae.p[i] == ' ' || ae.p[i] == '\t' || ae.p[i] == ',')) i++;
        size_t s = i;
        while (i < ae.len && ae.p[i] != ',' && ae.p[i] != ';' && ae.p[i] != ' ' && ae.p[i] != '\t')
            i++;
        size_t tl = i - s;
        int qv = 1000;
        /* parameters: only q matters */
        while (i < ae.len && ae.p[i] != ',') {
            while (i < ae.len && (ae.p[i] == ' ' || ae.p[i] == '\t' || ae.p[i] == ';')) i++;
            size_t ps = i;
            while (i < ae.len && ae.p[i] != ',' && ae.p[i] != ';' && ae.p[i] != ' ') i++;
            if (i - ps >= 2 && (ae.p[ps] == 'q' || ae.p[ps] == 'Q') && ae.p[ps + 1] == '=') {
                qv = qvalue(ae.p + ps + 2, i - ps - 2);
                if (qv < 0) qv = 0;
            }
        }
        if (tl == 0) continue;
        if (tl == 1 && ae.p[s] == '*') {
            star = qv;
            continue;
        }
        int id = fy_compress_coding_id(ae.p + s, tl);
        if (id >= 0 && qv > q[id]) q[id] = qv;
    }
    int best = FY_CODING_IDENTITY, bq = 0;
    for (size_t k = 0; k < n; k++) {
        int c = offer[k];
        if (c <= 0 || c > 3) continue;
        int cq = q[c] >= 0 ? q[c] : star >= 0 ? star : 0;
        if (cq > bq) {
            bq = cq;
            best = c;
        }
    }
    return best;
}

bool fy_compress_type_matches(fy_str_t ct, const fy_conf_strlist_t *types)
{
    size_t n = 0;
    while (n < ct.len && ct.p[n] != ';' && ct.p[n] != ' ' && ct.p[n] != '\t') n++;
    for (size_t i = 0; i < types->n; i++) {
        const char *t = types->v[i];
        size_t tl = strlen(t);
        if (tl >= 2 && t[tl - 1] == '*' && t[tl - 2] == '/') {
            if (n > tl - 1 && fy_str_ieq(fy_str(ct.p, tl - 1), t, tl - 1)) return true;
        } else if (fy_str_ieq(fy_str(ct.p, n), t, tl)) {
            return true;
        }
    }
    return false;
}
