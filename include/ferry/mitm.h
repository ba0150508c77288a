/* Ferry as an embeddable intercepting proxy: start it from a YAML configuration and register
 * C hooks on its flows (Titanium Web Proxy's event model, in C).
 *
 *   ferry_t *f = ferry_new(yaml, err, sizeof err);      // listeners of kind intercept/socks5
 *   ferry_set_hooks(f, &hooks);                          // before ferry_start
 *   ferry_start(f);  ...  ferry_stop(f);  ferry_free(f);
 *
 * Threading: hooks run on Ferry's worker threads, several at once for different flows; one
 * flow's hooks run on one thread, in order: on_request, on_request_body (per chunk),
 * on_response, on_response_body (per chunk). A hook must not block (it runs in the event
 * loop) and must not keep a ferry_flow_t after it returns.
 *
 * Everything here is stable API; the types behind the pointers are not. Link with libferry
 * (the CMake target ferry_app). Errors: functions returning int return 0 or a negative errno
 * value. */
#ifndef FERRY_MITM_H
#define FERRY_MITM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry ferry_t;
typedef struct ferry_flow ferry_flow_t;

/* A body chunk handed to on_request_body / on_response_body. The hook may change the bytes in
 * place, or point `data` and `len` at a replacement that stays valid until the flow ends
 * (ferry_flow_alloc gives such memory); len 0 drops the chunk. `last` is set on the final
 * chunk (possibly empty).
 * A flow whose body hook is registered is sent on with chunked framing (or without a
 * Content-Length on h2), so lengths may change freely. */
typedef struct ferry_chunk {
    char *data;
    size_t len;
    int last;
} ferry_chunk_t;

enum { FERRY_TUNNEL_DECRYPT = 0, FERRY_TUNNEL_PASS = 1 };

typedef struct ferry_hooks {
    /* A request is about to go to its origin: read or edit its head, or answer it with
       ferry_flow_respond (then no other hook of the flow runs). */
    void (*on_request)(ferry_flow_t *f, void *ud);
    void (*on_request_body)(ferry_flow_t *f, ferry_chunk_t *c, void *ud);
    /* The origin's response head arrived: read or edit it (status, headers). */
    void (*on_response)(ferry_flow_t *f, void *ud);
    void (*on_response_body)(ferry_flow_t *f, ferry_chunk_t *c, void *ud);
    /* A CONNECT (or SOCKS5) tunnel to host:port whose first bytes are a TLS ClientHello:
       return FERRY_TUNNEL_PASS to relay it undecrypted. */
    int (*on_tunnel)(const char *host, int port, void *ud);
    void *ud;
} ferry_hooks_t;

/* Build a server from YAML text (the same configuration as `ferry run`). NULL with the
   errors ("<embedded>:line:col: key: message" lines) in err. */
ferry_t *ferry_new(const char *yaml, char *err, size_t errlen);
/* Register hooks (copied). Before ferry_start. -EINVAL without an intercept/socks5 listener. */
int ferry_set_hooks(ferry_t *f, const ferry_hooks_t *hooks);
/* Start the worker threads; returns at once. */
int ferry_start(ferry_t *f);
/* Drain and stop (waits for the workers). */
void ferry_stop(ferry_t *f);
void ferry_free(ferry_t *f);

/* ---- flows (valid only inside a hook) ---- */

/* 0: request side, 1: response side (on_response and later). */
enum { FERRY_REQUEST = 0, FERRY_RESPONSE = 1 };

/* NUL-terminated copies owned by the flow. */
const char *ferry_flow_method(ferry_flow_t *f);
const char *ferry_flow_host(ferry_flow_t *f);   /* authority as sent: host[:port] */
const char *ferry_flow_path(ferry_flow_t *f);   /* path?query */
const char *ferry_flow_scheme(ferry_flow_t *f); /* "http" or "https" */
int ferry_flow_intercepted(ferry_flow_t *f);    /* 1: came through a decrypted tunnel */
/* The first field named `name` (any case) of that side, or NULL. */
const char *ferry_flow_header(ferry_flow_t *f, int side, const char *name);
/* Set (replace all of that name), add, or remove a field. Returns 0 or -EINVAL (response
   side before on_response). */
int ferry_flow_set_header(ferry_flow_t *f, int side, const char *name, const char *value);
int ferry_flow_add_header(ferry_flow_t *f, int side, const char *name, const char *value);
int ferry_flow_remove_header(ferry_flow_t *f, int side, const char *name);
/* Response status (0 before on_response); set it in on_response. */
int ferry_flow_status(ferry_flow_t *f);
int ferry_flow_set_status(ferry_flow_t *f, int status);
/* Memory that lives as long as the flow (freed with it). NULL never: aborts on OOM. */
void *ferry_flow_alloc(ferry_flow_t *f, size_t n);
/* In on_request: answer without contacting the origin (body copied). Touch nothing of the
   flow after this call. */
int ferry_flow_respond(ferry_flow_t *f, int status, const char *content_type, const char *body,
                       size_t len);

#ifdef __cplusplus
}
#endif

#endif
