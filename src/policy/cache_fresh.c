/* Shared-cache semantics (policy/cache_fresh.h). */
#include "policy/cache_fresh.h"

#include <string.h>

static fy_str_t trim(fy_str_t s)
{
    while (s.len && (s.p[0] == ' ' || s.p[0] == '\t')) s.p++, s.len--;
    while (s.len && (s.p[s.len - 1] == ' ' || s.p[s.len - 1] == '\t')) s.len--;
    return s;
}

void fy_cache_resp_scan(const fy_headers_t *hs, const char *target, fy_cache_resp_info_t *ri)
{
    memset(ri, 0, sizeof *ri);
    ri->date = ri->expires = ri->last_modified = -1;
    ri->age = -1;
    size_t tl = target ? strlen(target) : 0;
    fy_cache_cc_t tcc;
    fy_cache_cc_init(&tcc);
    bool tseen = false, tbad = false, age_seen = false;
    for (size_t i = 0; i < hs->n; i++) {
        fy_str_t n = hs->v[i].name, v = hs->v[i].value;
        if (tl && fy_str_ieq(n, target, tl)) {
            tseen = true;
            if (fy_cache_cc_parse_targeted(&tcc, v.p, v.len) < 0) tbad = true;
            continue;
        }
        /* by length, then the first letter (| 0x20: only a filter, ieq decides), so a field
           costs one comparison at most */
        char c0 = n.len ? (char)(n.p[0] | 0x20) : 0;
        switch (n.len) {
        case 3:
            if (c0 == 'a' && fy_str_ieq(n, "age", 3) && !age_seen) {
                age_seen = true; /* later lines are further members: the first one counts */
                ri->age = fy_cache_parse_age(v.p, v.len);
            }
            break;
        case 4:
            if (c0 == 'd') {
                if (fy_str_ieq(n, "date", 4) && ri->date < 0)
                    ri->date = fy_http_date_parse(trim(v));
            } else if (c0 == 'e') {
                if (fy_str_ieq(n, "etag", 4) && !ri->etag.len) ri->etag = trim(v);
            } else if (c0 == 'v' && fy_str_ieq(n, "vary", 4)) {
                fy_str_t t = trim(v);
                if (t.len) ri->has_vary = true;
                /* "*" as a member anywhere in the list */
                for (size_t k = 0; k < t.len; k++)
                    if (t.p[k] == '*') ri->vary_star = true;
            }
            break;
        case 7:
            if (c0 == 'e' && fy_str_ieq(n, "expires", 7)) {
                time_t e = fy_http_date_parse(trim(v));
                if (e < 0) e = 0; /* invalid, e.g. "0": already expired (§5.3) */
                if (ri->expires >= 0 && ri->expires != e) ri->expires_conflict = true;
                ri->expires = e;
            }
            break;
        case 10:
            if (c0 == 's' && fy_str_ieq(n, "set-cookie", 10)) ri->set_cookie = true;
            break;
        case 13:
            if (c0 == 'c') {
                if (fy_str_ieq(n, "cache-control", 13)) fy_cache_cc_parse(&ri->cc, v.p, v.len);
            } else if (c0 == 'l' && fy_str_ieq(n, "last-modified", 13))
                ri->last_modified = fy_http_date_parse(trim(v));
            break;
        }
    }
    if (tseen && !tbad) { /* RFC 9213 §2.2: a valid targeted field replaces Cache-Control */
        ri->cc = tcc;
        ri->targeted = true;
    }
}

void fy_cache_req_scan(const fy_headers_t *hs, fy_cache_req_info_t *qi)
{
    memset(qi, 0, sizeof *qi);
    fy_cache_cc_init(&qi->cc);
    bool cc = false, pragma = false;
    for (size_t i = 0; i < hs->n; i++) {
        fy_str_t n = hs->v[i].name;
        if (n.len == 13 && fy_str_ieq(n, "cache-control", 13)) {
            cc = true;
            fy_cache_cc_parse(&qi->cc, hs->v[i].value.p, hs->v[i].value.len);
        } else if (n.len == 13 && fy_str_ieq(n, "authorization", 13))
            qi->authorization = true;
        else if (n.len == 6 && fy_str_ieq(n, "pragma", 6) &&
                 fy_str_list_has(hs->v[i].value, "no-cache", 8))
            pragma = true;
    }
    if (!cc && pragma) qi->cc.flags |= FY_CC_NO_CACHE;
}

bool fy_cache_status_heuristic(int status)
{
    switch (status) {
    case 200:
    case 203:
    case 204:
    case 206:
    case 300:
    case 301:
    case 308:
    case 404:
    case 405:
    case 410:
    case 414:
    case 501:
        return true;
    }
    return false;
}

bool fy_cache_status_understood(int status)
{
    switch (status) {
    case 200:
    case 203:
    case 204:
    case 300:
    case 301:
    case 302:
    case 303:
    case 307:
    case 308:
    case 400:
    case 403:
    case 404:
    case 405:
    case 410:
    case 414:
    case 500:
    case 501:
    case 502:
    case 503:
    case 504:
        return true;
    }
    return false;
}

int fy_cache_storable(int status, const fy_cache_resp_info_t *ri, const fy_cache_req_info_t *qi,
                      bool store_set_cookie)
{
    const fy_cache_cc_t *cc = &ri->cc;
    if (status < 200 || status == 206 || status == 304) return FY_CACHE_NS_STATUS;
    if (qi && (qi->cc.flags & FY_CC_NO_STORE)) return FY_CACHE_NS_NO_STORE;
    if (cc->flags & FY_CC_MUST_UNDERSTAND) {
        /* §5.2.2.3: store only statuses we understand; then no-store is overridden */
        if (!fy_cache_status_understood(status)) return FY_CACHE_NS_STATUS;
    } else if (cc->flags & FY_CC_NO_STORE)
        return FY_CACHE_NS_NO_STORE;
    if (cc->flags & FY_CC_PRIVATE) return FY_CACHE_NS_PRIVATE;
    /* §3.5 */
    if (qi && qi->authorization &&
        !(cc->flags & (FY_CC_MUST_REVALIDATE | FY_CC_PUBLIC | FY_CC_S_MAXAGE)))
        return FY_CACHE_NS_AUTH;
    if (ri->vary_star) return FY_CACHE_NS_VARY_STAR;
    if (ri->set_cookie && !store_set_cookie) return FY_CACHE_NS_SET_COOKIE;
    bool explicit = (cc->flags & (FY_CC_MAX_AGE | FY_CC_S_MAXAGE | FY_CC_PUBLIC)) ||
                    ri->expires >= 0 || ri->expires_conflict;
    if (!explicit && !fy_cache_status_heuristic(status)) return FY_CACHE_NS_NO_FRESH;
    return FY_CACHE_STORE_OK;
}

int64_t fy_cache_lifetime(int status, const fy_cache_resp_info_t *ri, time_t response_time,
                          int64_t pct, int64_t heuristic_max, int64_t dflt, bool *heuristic)
{
    const fy_cache_cc_t *cc = &ri->cc;
    if (heuristic) *heuristic = false;
    if (cc->flags & FY_CC_S_MAXAGE) return (cc->bad & FY_CC_S_MAXAGE) ? 0 : cc->s_maxage;
    if (cc->flags & FY_CC_MAX_AGE) return (cc->bad & FY_CC_MAX_AGE) ? 0 : cc->max_age;
    if (ri->expires_conflict) return 0;
    time_t date = ri->date >= 0 ? ri->date : response_time;
    if (ri->expires >= 0) return ri->expires > date ? (int64_t)(ri->expires - date) : 0;
    if (dflt > 0) return dflt;
    if ((fy_cache_status_heuristic(status) || (cc->flags & FY_CC_PUBLIC)) &&
        ri->last_modified >= 0 && ri->last_modified < date) {
        int64_t h = (int64_t)(date - ri->last_modified) * pct / 100;
        if (h > heuristic_max) h = heuristic_max;
        if (heuristic) *heuristic = true;
        return h;
    }
    return 0;
}

int64_t fy_cache_current_age(int64_t age_value, time_t date, time_t request_time,
                             time_t response_time, time_t now)
{
    if (age_value < 0) age_value = 0;
    int64_t apparent = date >= 0 && response_time > date ? (int64_t)(response_time - date) : 0;
    int64_t delay = response_time > request_time ? (int64_t)(response_time - request_time) : 0;
    int64_t corrected = age_value + delay;
    int64_t initial = apparent > corrected ? apparent : corrected;
    int64_t resident = now > response_time ? (int64_t)(now - response_time) : 0;
    int64_t a = initial + resident;
    return a > FY_CC_DELTA_MAX ? FY_CC_DELTA_MAX : a;
}

int fy_cache_use(const fy_cache_fresh_t *f, int64_t age, const fy_cache_req_info_t *qi,
                 bool ignore_request_no_cache)
{
    const fy_cache_cc_t *q = &qi->cc;
    if (f->no_cache) return FY_CACHE_USE_REVALIDATE;
    if (!ignore_request_no_cache) {
        if (q->flags & FY_CC_NO_CACHE) return FY_CACHE_USE_REVALIDATE;
        /* request max-age: not older than this (an invalid value: no limit is safer to
           read as 0, i.e. revalidate) */
        if (q->flags & FY_CC_MAX_AGE) {
            int64_t ma = (q->bad & FY_CC_MAX_AGE) ? 0 : q->max_age;
            if (age > ma) return FY_CACHE_USE_REVALIDATE;
        }
    }
    int64_t left = f->lifetime - age; /* > 0: fresh */
    if (q->flags & FY_CC_MIN_FRESH) {
        int64_t mf = (q->bad & FY_CC_MIN_FRESH) ? 0 : q->min_fresh;
        if (left < mf) return FY_CACHE_USE_REVALIDATE;
    }
    if (left > 0) return FY_CACHE_USE_FRESH;
    if (f->never_stale) return FY_CACHE_USE_REVALIDATE;
    int64_t stale = -left;
    if ((q->flags & FY_CC_MAX_STALE) && !(q->bad & FY_CC_MAX_STALE) && stale <= q->max_stale)
        return FY_CACHE_USE_STALE;
    if (f->swr > 0 && stale <= f->swr) return FY_CACHE_USE_SWR;
    return FY_CACHE_USE_REVALIDATE;
}

bool fy_cache_stale_if_error(const fy_cache_fresh_t *f, int64_t age, const fy_cache_req_info_t *qi)
{
    if (f->never_stale || f->no_cache) return false;
    int64_t stale = age - f->lifetime;
    int64_t allow = f->sie;
    /* the request may allow it too (RFC 5861 §4) */
    if (qi && (qi->cc.flags & FY_CC_SIE) && !(qi->cc.bad & FY_CC_SIE) && qi->cc.sie > allow)
        allow = qi->cc.sie;
    return allow > 0 && stale <= allow;
}
