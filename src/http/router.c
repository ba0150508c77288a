#include "http/router.h"

#include "http/http_conf.h"
#include "http/path.h"
#include "http/protocol.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

bool fy_route_host_matches(const fy_route_t *r, fy_str_t host)
{
    if (r->nhosts == 0) return true;
    /* strip the port (but not inside an IPv6 literal) */
    size_t len = host.len;
    if (len && host.p[0] == '[') {
        for (size_t i = 0; i < len; i++)
            if (host.p[i] == ']') {
                len = i + 1;
                break;
            }
    } else {
        for (size_t i = 0; i < len; i++)
            if (host.p[i] == ':') {
                len = i;
                break;
            }
    }
    if (len && host.p[len - 1] == '.') len--; /* "example.com." */
    for (size_t i = 0; i < r->nhosts; i++) {
        const char *h = r->hosts[i];
        if (h[0] == '*' && h[1] == '.') {
            size_t sl = strlen(h + 1); /* ".example.com" */
            if (len > sl && strncasecmp(host.p + len - sl, h + 1, sl) == 0) return true;
        } else if (strlen(h) == len && strncasecmp(host.p, h, len) == 0) {
            return true;
        }
    }
    return false;
}

static bool path_matches(const fy_route_t *r, fy_str_t path)
{
    if (r->path_len <= 1) return true;
    if (path.len < r->path_len || memcmp(path.p, r->path, r->path_len) != 0) return false;
    /* "/api" matches "/api", "/api/x", "/api?..." but not "/apix"; "/api/" is a plain prefix */
    return path.len == r->path_len || r->path[r->path_len - 1] == '/' || path.p[r->path_len] == '/';
}

static pcre2_code *compile(const char *pattern, char *err, size_t errlen)
{
    int ec;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, 0, &ec, &off, NULL);
    if (!re) {
        PCRE2_UCHAR buf[200];
        pcre2_get_error_message(ec, buf, sizeof buf);
        snprintf(err, errlen, "%s at offset %zu", (const char *)buf, (size_t)off);
    }
    return re;
}

int fy_regex_check(const char *pattern, char *err, size_t errlen)
{
    pcre2_code *re = compile(pattern, err, errlen);
    pcre2_code_free(re);
    return re ? 0 : -1;
}

int fy_route_set_regex(fy_route_t *r, const char *pattern, char *err, size_t errlen)
{
    pcre2_code *re = compile(pattern, err, errlen);
    if (!re) return -1;
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    r->regex = re;
    return 0;
}

/* one match-data block per thread, reused: we never need the captures */
static __thread pcre2_match_data *md;

void fy_router_thread_cleanup(void)
{
    pcre2_match_data_free(md);
    md = NULL;
}

static bool regex_matches(const fy_route_t *r, fy_str_t path)
{
    if (!md) md = pcre2_match_data_create(1, NULL);
    if (!md) return false;
    return pcre2_match(r->regex, (PCRE2_SPTR)path.p, path.len, 0, 0, md, NULL) >= 0;
}

static bool headers_match(const fy_route_t *r, const fy_exchange_t *ex)
{
    for (size_t i = 0; i < r->n_headers; i++) {
        const char *name = r->header_names[i], *want = r->header_values[i];
        size_t nl = strlen(name), wl = strlen(want);
        bool found = false;
        for (size_t k = 0; k < ex->req.headers.n && !found; k++) {
            const fy_header_t *h = &ex->req.headers.v[k];
            if (h->name.len != nl || strncasecmp(h->name.p, name, nl) != 0) continue;
            found = (wl == 1 && want[0] == '*') || fy_str_eq(h->value, want, wl);
        }
        if (!found) return false;
    }
    return true;
}

/* `name=value` pairs of the raw query; a parameter without '=' has an empty value. */
static bool query_matches(const fy_route_t *r, fy_str_t q)
{
    for (size_t i = 0; i < r->n_query; i++) {
        const char *name = r->query_names[i], *want = r->query_values[i];
        size_t nl = strlen(name), wl = strlen(want);
        bool found = false;
        size_t p = 0;
        while (p <= q.len && !found) {
            size_t e = p;
            while (e < q.len && q.p[e] != '&') e++;
            fy_str_t item = fy_str(q.p + p, e - p);
            const char *eq = item.len ? memchr(item.p, '=', item.len) : NULL; /* p may be NULL */
            size_t kl = eq ? (size_t)(eq - item.p) : item.len;
            if (kl == nl && memcmp(item.p, name, nl) == 0) {
                fy_str_t v = eq ? fy_str(eq + 1, item.len - kl - 1) : FY_STR_LIT("");
                found = (wl == 1 && want[0] == '*') || fy_str_eq(v, want, wl);
            }
            p = e + 1;
        }
        if (!found) return false;
    }
    return true;
}

const fy_route_t *fy_router_match(const fy_router_t *rt, const fy_exchange_t *ex)
{
    for (size_t i = 0; i < rt->n; i++) {
        const fy_route_t *r = &rt->routes[i];
        if (r->methods && !(r->methods & (1u << ex->req.method_id))) continue;
        if (!path_matches(r, ex->req.path)) continue;
        if (!fy_route_host_matches(r, ex->req.authority)) continue;
        if (r->path_exact && !fy_str_eq(ex->req.path, r->path_exact, strlen(r->path_exact)))
            continue;
        if (r->regex && !regex_matches(r, ex->req.path)) continue;
        if (r->n_headers && !headers_match(r, ex)) continue;
        if (r->n_query && !query_matches(r, ex->req.query)) continue;
        return r;
    }
    return NULL;
}

void fy_router_free(fy_router_t *rt)
{
    for (size_t i = 0; i < rt->n; i++) {
        pcre2_code_free(rt->routes[i].regex);
        fy_filter_chain_free(&rt->routes[i].filters);
    }
    for (size_t i = 0; i < rt->n; i++)
        if (rt->routes[i].handler && rt->routes[i].handler->ops->destroy)
            rt->routes[i].handler->ops->destroy(rt->routes[i].handler);
    free(rt->routes);
    rt->routes = NULL;
    rt->n = 0;
}

/* One spelling of the path for routes, policies and origins (http/path.h). Intercepted
 * exchanges (through a mitm tunnel or a forward-proxy listener) are left as the client sent
 * them: the intercepting proxy forwards to third parties and stays transparent. The target
 * stays as received (access log, `proxy.forward-path: original`). Returns false after failing
 * the exchange. */
static bool normalize_path(fy_exchange_t *ex)
{
    fy_str_t p = ex->req.path;
    if (ex->tunnel || ex->ctx->forward_proxy || p.len == 0 || p.p[0] != '/') return true;
    const fy_http_limits_t *l = ex->ctx->limits;
    fy_path_opts_t o = {.encoded_slash =
                            l ? (enum fy_path_slash)l->encoded_slash : FY_PATH_SLASH_REJECT,
                        .merge_slashes = l ? l->merge_slashes : true};
    if (fy_path_is_normal(p.p, p.len, o.merge_slashes)) return true;
    char *out = fy_arena_alloc(ex->arena, p.len);
    int n = fy_path_normalize(p.p, p.len, out, p.len, &o);
    switch (n) {
    case FY_PATH_EBAD:
        fy_exchange_fail(ex, 400, "bad percent-encoding in the path");
        return false;
    case FY_PATH_ESLASH:
        fy_exchange_fail(ex, 400, "encoded '/' or '\\' in the path (limits.encoded-slash)");
        return false;
    case FY_PATH_EABOVE:
        fy_exchange_fail(ex, 400, "the path climbs above the root");
        return false;
    default:
        if (n < 0) {
            fy_exchange_fail(ex, 400, "bad path");
            return false;
        }
    }
    if ((size_t)n != p.len || memcmp(out, p.p, p.len) != 0) ex->req.path = fy_str(out, (size_t)n);
    return true;
}

void fy_exchange_dispatch(fy_exchange_t *ex)
{
    /* FY_STAGE_PROTOCOL: before any route (http/protocol.h) */
    if (__builtin_expect(fy__http_protocol_suspect(ex), 0) && fy__http_protocol_stage(ex)) return;
    if (!normalize_path(ex)) return;
    const fy_route_t *r = ex->route = fy_router_match(ex->ctx->router, ex);
    if (__builtin_expect(ex->ctx->filters != NULL || (r && r->filters.n), 0)) {
        fy_filter_run(ex); /* filters, then the handler (or the 404) */
        return;
    }
    if (!r) {
        fy_exchange_fail(ex, 404, "no route");
        return;
    }
    r->handler->ops->on_request(r->handler, ex);
}
