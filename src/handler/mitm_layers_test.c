/* The interception hooks and the HAR capture are sink layers (http/filter.h), not wrappers of
 * ex->sink: the codec's sink stays in place (mitm_connect.c asks it whether it can hand its
 * connection over), the HAR observer finds the capture with fy_exchange_find_layer, and each
 * sits at its stage: hooks (FY_STAGE_REWRITE) above a compression layer (FY_STAGE_COMPRESS)
 * above the capture (FY_STAGE_CAPTURE), which keeps exactly what the codec was given. Request
 * bodies meet them in the same order on their way to the handler. The codec and the
 * compression layer are fakes. */
#include "handler/mitm_hooks.h"
#include "handler/mitm_int.h"

#include <ctype.h>
#include <string.h>

#include "core/test.h"
#include "http/filter.h"

static char wire[64]; /* what the codec was given */
static size_t wlen;
static int finals, reads;
static void c_send(fy_exchange_t *ex, const struct iovec *b, size_t n, int state)
{
    (void)ex;
    for (size_t i = 0; i < n; i++) {
        memcpy(wire + wlen, b[i].iov_base, b[i].iov_len);
        wlen += b[i].iov_len;
    }
    finals += state == FY_SEND_FINAL;
}
static void c_read_body(fy_exchange_t *ex)
{
    (void)ex;
    reads++;
}
static int c_detach(fy_exchange_t *ex, int *fd, char *buf, size_t cap, size_t *len)
{
    (void)ex, (void)buf, (void)cap;
    *fd = 42;
    *len = 0;
    return 0;
}
static const fy_sink_ops_t codec = {
    .name = "codec", .send = c_send, .read_body = c_read_body, .detach = c_detach};

/* "compression": appends '!' to each piece, and notes what it saw */
static char seen[64];
static void z_send(fy_sink_layer_t *l, fy_exchange_t *ex, const struct iovec *b, size_t n,
                   int state)
{
    static char out[64];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + k, b[i].iov_base, b[i].iov_len);
        k += b[i].iov_len;
    }
    memcpy(seen, out, k);
    seen[k] = 0;
    out[k++] = '!';
    struct iovec v = {out, k};
    fy_layer_next_send(l, ex, &v, 1, state);
}
static const fy_layer_ops_t zops = {.name = "z", .send = z_send};

static void upper(ferry_flow_t *f, ferry_chunk_t *c, void *ud)
{
    (void)f, (void)ud;
    for (size_t i = 0; i < c->len; i++) c->data[i] = (char)toupper((unsigned char)c->data[i]);
}
static void reverse(ferry_flow_t *f, ferry_chunk_t *c, void *ud)
{
    (void)f, (void)ud;
    for (size_t i = 0; i < c->len / 2; i++) {
        char t = c->data[i];
        c->data[i] = c->data[c->len - 1 - i];
        c->data[c->len - 1 - i] = t;
    }
}

static char got[64]; /* the request body as the handler got it */
static void on_body(fy_exchange_t *ex, const char *p, size_t n, bool end)
{
    (void)ex, (void)end;
    memcpy(got, p, n);
    got[n] = 0;
}

int main(void)
{
    fy_loop_t loop = {0};
    fy_http_ctx_t ctx = {.loop = &loop};
    fy_arena_t arena;
    fy_arena_init(&arena, NULL, 0, 4096);
    fy_exchange_t ex = {.arena = &arena, .ctx = &ctx, .sink = &codec};
    ex.req.content_length = 5;

    fy_intercept_conf_t conf = {.capture = {.har = "x.har", .body_cap = 6}};
    fy__mitm_t m = {.conf = &conf};
    ferry_hooks_t hooks = {.on_response_body = upper, .on_request_body = reverse};

    /* the order the mitm handler begins them in, with a policy layer pushed in between */
    fy__mitm_capture_begin(&m, &ex);
    fy_sink_layer_t z;
    fy_exchange_push_layer(&ex, &z, &zops, FY_STAGE_COMPRESS);
    CHECK(!fy__mitm_hooks_begin(&hooks, &ex));
    CHECK(ex.sink == &codec); /* nothing wraps the codec's sink */

    fy_str_t qb, rb;
    bool cut = true;
    CHECK(fy_mitm_captured(&ex, &qb, &rb, &cut));
    CHECK(qb.len == 0 && rb.len == 0 && !cut);

    /* request body: codec -> capture -> hooks -> handler */
    fy_exchange_read_body(&ex, on_body);
    CHECK_EQ_INT(reads, 1);
    char body[] = "hello";
    ex.on_body(&ex, body, 5, true);
    CHECK(strcmp(got, "olleh") == 0);

    /* response: hooks (upper) -> compression ('!') -> capture -> codec */
    ex.res.status = 200;
    ex.res.content_length = -1;
    struct iovec v = {"abc", 3};
    fy_exchange_send(&ex, &v, 1, FY_SEND_MORE);
    v.iov_base = "defg";
    v.iov_len = 4;
    fy_exchange_send(&ex, &v, 1, FY_SEND_FINAL);
    CHECK(strcmp(seen, "DEFG") == 0); /* the hooks ran above the compression */
    CHECK(wlen == 9 && memcmp(wire, "ABC!DEFG!", 9) == 0);
    CHECK_EQ_INT(finals, 1);

    CHECK(fy_mitm_captured(&ex, &qb, &rb, &cut));
    CHECK(fy_str_eq(qb, "hello", 5));  /* as the client sent it */
    CHECK(fy_str_eq(rb, "ABC!DE", 6)); /* as the client got it, up to the cap */
    CHECK(cut);

    /* CONNECT: the take-over reaches the codec through the layers */
    int fd = -1;
    size_t len = 1;
    char pre[8];
    CHECK_EQ_INT(fy_exchange_detach(&ex, &fd, pre, sizeof pre, &len), 0);
    CHECK_EQ_INT(fd, 42);

    /* no capture configured: none found */
    fy_exchange_t ex2 = {.arena = &arena, .ctx = &ctx, .sink = &codec};
    conf.capture.body_cap = 0;
    fy__mitm_capture_begin(&m, &ex2);
    CHECK(!fy_mitm_captured(&ex2, &qb, &rb, &cut));

    fy_arena_free(&arena);
    printf("%d passed, %d failed\n", fy_test_pass, fy_test_fail);
    return fy_test_fail ? 1 : 0;
}
