#include "http/router.h"

#include <stdlib.h>
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

const fy_route_t *fy_router_match(const fy_router_t *rt, const fy_exchange_t *ex)
{
    for (size_t i = 0; i < rt->n; i++) {
        const fy_route_t *r = &rt->routes[i];
        if (r->methods && !(r->methods & (1u << ex->req.method_id))) continue;
        if (!path_matches(r, ex->req.path)) continue;
        if (!fy_route_host_matches(r, ex->req.authority)) continue;
        return r;
    }
    return NULL;
}

void fy_router_free(fy_router_t *rt)
{
    for (size_t i = 0; i < rt->n; i++)
        if (rt->routes[i].handler && rt->routes[i].handler->ops->destroy)
            rt->routes[i].handler->ops->destroy(rt->routes[i].handler);
    free(rt->routes);
    rt->routes = NULL;
    rt->n = 0;
}

void fy_exchange_dispatch(fy_exchange_t *ex)
{
    const fy_route_t *r = fy_router_match(ex->ctx->router, ex);
    if (!r) {
        fy_exchange_fail(ex, 404, "no route");
        return;
    }
    r->handler->ops->on_request(r->handler, ex);
}
