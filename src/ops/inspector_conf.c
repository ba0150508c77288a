/* Directive tables of `inspector:` and of a route's `capture:`. */
#include "ops/inspector_conf.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_valid.h"

int fy_inspector_parse_addr(const char *s, struct sockaddr_storage *out, socklen_t *len)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s) return -1;
    size_t hl = (size_t)(colon - s);
    const char *h = s;
    if (s[0] == '[') {
        if (hl < 2 || s[hl - 1] != ']') return -1;
        h = s + 1;
        hl -= 2;
    }
    if (hl >= sizeof host) return -1;
    memcpy(host, h, hl);
    host[hl] = 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 1 || port > 65535 || end == colon + 1) return -1;
    memset(out, 0, sizeof *out);
    struct sockaddr_in *a4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *len = sizeof *a4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *len = sizeof *a6;
        return 0;
    }
    return -1;
}

static int valid_listen(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    fy_inspector_conf_t *c = obj;
    const char *s = *(char **)field;
    if (fy_inspector_parse_addr(s, &c->addr, &c->addrlen) == 0) return 0;
    fy_conf_error(ctx, node, NULL, "'%s' is not a numeric HOST:PORT (e.g. 127.0.0.1:9902)", s);
    return -1;
}

static int valid_token(fy_conf_ctx_t *ctx, const fy_conf_node_t *node, void *field, void *obj)
{
    (void)obj;
    const char *s = *(char **)field;
    if (!s) return 0;
    for (const char *p = s; *p; p++)
        if (*p <= ' ' || *p >= 0x7f || *p == '&' || *p == '#' || *p == '%') {
            fy_conf_error(ctx, node, NULL,
                          "may hold only printable ASCII without space, &, # or %%");
            return -1;
        }
    if (!*s) {
        fy_conf_error(ctx, node, NULL, "is empty (leave it out for no token)");
        return -1;
    }
    return 0;
}

#define I(f) offsetof(fy_inspector_conf_t, f)

const fy_conf_directive_t fy_inspector_conf_table[] = {
    {.key = "dir",
     .type = FY_CT_STRING,
     .offset = I(dir),
     .validate = fy_conf_valid_state_dir,
     .doc = "The capture store's folder (segment files); default `DATA-DIR/inspector`."},
    {.key = "max-size",
     .type = FY_CT_SIZE,
     .offset = I(max_size),
     .dflt = "256m",
     .min = 64 << 10,
     .max = INT64_MAX,
     .doc = "Bytes of segments kept; the oldest segments are deleted past it (a ring)."},
    {.key = "max-age",
     .type = FY_CT_DURATION,
     .offset = I(max_age_ms),
     .dflt = "24h",
     .doc = "Segments whose newest flow is older than this are deleted; 0: no age bound."},
    {.key = "segment-size",
     .type = FY_CT_SIZE,
     .offset = I(segment_size),
     .dflt = "16m",
     .min = 4096,
     .max = 1ll << 32,
     .doc = "A segment file is closed past this size (at most a quarter of `max-size`)."},
    {.key = "body-cap",
     .type = FY_CT_SIZE,
     .offset = I(body_cap),
     .dflt = "1m",
     .max = 64 << 20,
     .doc = "Body bytes kept per direction and flow; longer bodies are cut and marked truncated."},
    {.key = "redact",
     .type = FY_CT_BOOL,
     .offset = I(redact),
     .dflt = "true",
     .doc = "Store `[redacted]` for Authorization, Cookie, Set-Cookie, Proxy-Authorization, "
            "`redact-headers` and the `redact-json` members of JSON bodies."},
    {.key = "redact-headers",
     .type = FY_CT_STRLIST,
     .offset = I(redact_headers),
     .validate = fy_conf_valid_token_list,
     .doc = "More header names whose values are redacted."},
    {.key = "redact-json",
     .type = FY_CT_STRLIST,
     .offset = I(redact_json),
     .doc = "JSON member names (any depth) whose values are redacted in request and response "
            "bodies."},
    {.key = "address",
     .type = FY_CT_STRING,
     .offset = I(address),
     .dflt = "127.0.0.1:9902",
     .validate = valid_listen,
     .doc = "Address of the inspector's web UI and JSON API (loopback unless you set a token)."},
    {.key = "token",
     .type = FY_CT_STRING,
     .offset = I(token),
     .validate = valid_token,
     .doc = "When set, the UI and API ask for it (`Authorization: Bearer T` or `?token=T`)."},
    {.key = "queue",
     .type = FY_CT_INT,
     .offset = I(queue),
     .dflt = "4096",
     .min = 1,
     .max = 1 << 20,
     .doc = "Flows waiting for the store's writer; past it flows are dropped and counted."},
    {.key = "queue-bytes",
     .type = FY_CT_SIZE,
     .offset = I(queue_bytes),
     .dflt = "64m",
     .min = 4096,
     .max = 1ll << 34,
     .doc = "Bytes waiting for the store's writer; past it flows are dropped and counted."},
    {.key = "intercepted",
     .type = FY_CT_BOOL,
     .offset = I(intercepted),
     .dflt = "true",
     .doc = "Store every flow of the intercepting listeners."},
    {.key = "max-clients",
     .type = FY_CT_INT,
     .offset = I(max_clients),
     .dflt = "32",
     .min = 1,
     .max = 1024,
     .doc = "UI and API connections served at once; more are answered 503."},
    {.key = "replay-timeout",
     .type = FY_CT_DURATION,
     .offset = I(replay_timeout_ms),
     .dflt = "30s",
     .min = 100,
     .max = 3600 * 1000,
     .doc = "A replayed request's connect, send and whole response."},
    {.key = "breakpoint-timeout",
     .type = FY_CT_DURATION,
     .offset = I(breakpoint_timeout_ms),
     .dflt = "5m",
     .min = 100,
     .max = 24 * 3600 * 1000,
     .doc = "A request held at a breakpoint goes on unchanged after this long."},
    {.key = NULL},
};

#define R(f) offsetof(fy_capture_route_conf_t, f)

const fy_conf_directive_t fy_capture_route_conf_table[] = {
    {.key = "sample-percent",
     .type = FY_CT_INT,
     .offset = R(sample_percent),
     .dflt = "-1",
     .min = -1,
     .max = 100,
     .doc = "Share of the route's flows stored at random; default 100 when no condition is "
            "set, else 0."},
    {.key = "status-min",
     .type = FY_CT_INT,
     .offset = R(status_min),
     .dflt = "0",
     .min = 0,
     .max = 999,
     .doc = "Also store every flow whose status is at least this (e.g. 500)."},
    {.key = "slower-than",
     .type = FY_CT_DURATION,
     .offset = R(slower_than_ms),
     .dflt = "0",
     .doc = "Also store every flow that took longer than this."},
    {.key = "header",
     .type = FY_CT_STRING,
     .offset = R(header),
     .validate = fy_conf_valid_token,
     .doc = "Also store every flow whose request or response has this header."},
    {.key = "bodies",
     .type = FY_CT_BOOL,
     .offset = R(bodies),
     .dflt = "true",
     .doc = "Keep bodies (up to `inspector.body-cap`) of the flows that may be stored."},
    {.key = NULL},
};
