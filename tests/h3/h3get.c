/* Test helper for tests/test_h3_client.py: drives the HTTP/3 client codec (src/h3/h3_client.c)
 * the way the proxy will, against a real HTTP/3 server (Debian's gtlsserver, or ferry).
 *
 *   h3get [--insecure] [--ca FILE] [--sni NAME] [--post FILE] [-n N] [--ws] [--save FILE]
 *         ADDR PORT PATH...
 *
 * --ws N sends an extended CONNECT (RFC 9220, :protocol websocket) whose request body is the
 * --post file (WebSocket frames made by the test), keeps the tunnel open until N bytes came
 * back, then cancels it; --save writes the first response body.
 *
 * Prints one line per request: "PATH STATUS BYTES SHA256" or "PATH ERROR KIND CODE WHY", then
 * exits 0 if every request got a response. N requests cycle through the PATHs, all on one
 * connection, as many at once as the server allows. */
#include <arpa/inet.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/loop.h"
#include "h3/h3_client.h"

typedef struct req {
    const char *path;
    fy_h3_client_stream_t *s;
    fy_arena_t arena;
    EVP_MD_CTX *md;
    size_t bytes;
    size_t body_off;
    int status;
    bool done;
} req_t;

static fy_loop_t loop;
static fy_h3_client_t *cli;
static req_t *reqs;
static int nreq, next, ndone, nfail;
static const char *authority;
static char *post;
static size_t post_len;
static bool closed, ws;
static size_t ws_expect; /* --ws: the tunnel stays open until this many bytes came back */
static FILE *save;

static void finish_one(void)
{
    if (++ndone == nreq) {
        fy_h3_client_close(cli);
        closed = true;
        fy_loop_stop(&loop);
    }
}

static void on_head(void *ud, int status, fy_headers_t *hs, bool end)
{
    req_t *r = ud;
    if (status >= 200) r->status = status;
}

static void on_end(void *ud, fy_headers_t *trailers);

static void on_data(void *ud, const char *p, size_t n)
{
    req_t *r = ud;
    EVP_DigestUpdate(r->md, p, n);
    if (save && r == &reqs[0]) fwrite(p, 1, n, save);
    r->bytes += n;
    fy_h3_client_consume(r->s, n);
    if (ws && r->bytes >= ws_expect && !r->done) on_end(r, NULL);
}

static void on_end(void *ud, fy_headers_t *trailers)
{
    req_t *r = ud;
    if (r->done) return;
    unsigned char d[32];
    unsigned dl = 0;
    EVP_DigestFinal_ex(r->md, d, &dl);
    printf("%s %d %zu ", r->path, r->status, r->bytes);
    for (unsigned i = 0; i < dl; i++) printf("%02x", d[i]);
    printf("\n");
    r->done = true;
    fy_h3_client_release(r->s);
    finish_one();
}

static void on_error(void *ud, int kind, uint64_t code, const char *why)
{
    req_t *r = ud;
    if (r->done) return;
    printf("%s ERROR %d 0x%llx %s\n", r->path, kind, (unsigned long long)code, why);
    r->done = true;
    nfail++;
    fy_h3_client_release(r->s);
    finish_one();
}

static ssize_t read_body(void *ud, char *buf, size_t len, const fy_headers_t **trailers)
{
    req_t *r = ud;
    if (ws && r->body_off == post_len) return FY_CLIENT_DEFER; /* a tunnel: no FIN */
    size_t n = post_len - r->body_off < len ? post_len - r->body_off : len;
    memcpy(buf, post + r->body_off, n);
    r->body_off += n;
    *trailers = NULL;
    return (ssize_t)n;
}

static const fy_client_stream_ops_t sops = {on_head, on_data, on_end, on_error, read_body, NULL};

static void submit_more(void)
{
    while (next < nreq) {
        req_t *r = &reqs[next];
        fy_headers_t hs = {0};
        const char *m = ws ? "CONNECT" : post ? "POST" : "GET";
        FY_HDR_ADD(&r->arena, &hs, ":method", m, strlen(m));
        if (ws) FY_HDR_ADD(&r->arena, &hs, ":protocol", "websocket", 9);
        FY_HDR_ADD(&r->arena, &hs, ":scheme", "https", 5);
        FY_HDR_ADD(&r->arena, &hs, ":authority", authority, strlen(authority));
        FY_HDR_ADD(&r->arena, &hs, ":path", r->path, strlen(r->path));
        FY_HDR_ADD(&r->arena, &hs, "user-agent", "ferry-h3get", 11);
        if (ws) FY_HDR_ADD(&r->arena, &hs, "sec-websocket-version", "13", 2);
        r->s = fy_h3_client_submit(cli, &hs, post != NULL, &r->arena, &sops, r);
        if (!r->s) return; /* no credit: on_credit resumes */
        next++;
    }
}

static void on_ready(void *ud)
{
    submit_more();
}

static void on_credit(void *ud)
{
    submit_more();
}

static void on_close(void *ud, const char *why)
{
    printf("CLOSED %s\n", why);
    closed = true;
    fy_loop_stop(&loop);
}

static const fy_h3_client_conn_ops_t cops = {on_ready, on_credit, NULL, on_close};

static void on_timeout(fy_timer_t *t)
{
    printf("TIMEOUT\n");
    fy_loop_stop(&loop);
}

int main(int argc, char **argv)
{
    fy_quic_conf_t conf = {.cc = FY_QUIC_CC_CUBIC,
                           .idle_timeout_ms = 30000,
                           .handshake_timeout_ms = 10000,
                           .max_streams = 100,
                           .stream_window = 256 * 1024,
                           .connection_window = 4 << 20,
                           .send_buffer = 256 * 1024,
                           .max_datagram_size = 1200,
                           .max_connections = 1};
    fy_quic_client_opts_t o = {.conf = &conf, .name = "h3get"};
    int n = 0, i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--insecure"))
            o.insecure = true;
        else if (!strcmp(argv[i], "--ca") && i + 1 < argc)
            o.ca_file = argv[++i];
        else if (!strcmp(argv[i], "--sni") && i + 1 < argc)
            o.sni = argv[++i];
        else if (!strcmp(argv[i], "--ws") && i + 1 < argc) {
            ws = true;
            ws_expect = (size_t)strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--save") && i + 1 < argc) {
            save = fopen(argv[++i], "wb");
            if (!save) return 2;
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--post") && i + 1 < argc) {
            FILE *f = fopen(argv[++i], "rb");
            if (!f) return 2;
            fseek(f, 0, SEEK_END);
            post_len = (size_t)ftell(f);
            fseek(f, 0, SEEK_SET);
            post = malloc(post_len + 1);
            if (fread(post, 1, post_len, f) != post_len) return 2;
            fclose(f);
        } else {
            fprintf(stderr, "h3get: bad option %s\n", argv[i]);
            return 2;
        }
    }
    if (argc - i < 3) {
        fprintf(stderr, "usage: h3get [options] ADDR PORT PATH...\n");
        return 2;
    }
    const char *addr = argv[i], *port = argv[i + 1];
    char **paths = argv + i + 2;
    int npaths = argc - i - 2;
    nreq = n > 0 ? n : npaths;
    static char auth[300];
    snprintf(auth, sizeof auth, "%s:%s", o.sni ? o.sni : addr, port);
    authority = auth;
    if (!o.sni) o.sni = addr;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) return 2;
    reqs = calloc((size_t)nreq, sizeof *reqs);
    for (int k = 0; k < nreq; k++) {
        reqs[k].path = paths[k % npaths];
        fy_arena_init(&reqs[k].arena, NULL, 0, 4096);
        reqs[k].md = EVP_MD_CTX_new();
        EVP_DigestInit_ex(reqs[k].md, EVP_sha256(), NULL);
    }
    if (fy_loop_init(&loop) < 0) return 1;
    fy_loop_update_time(&loop);
    fy_timer_t t;
    fy_timer_init(&t, on_timeout, NULL);
    fy_timer_start(&loop, &t, 60000);
    cli = fy_h3_client_connect(&loop, (struct sockaddr *)&sa, sizeof sa, &o, &cops, NULL);
    if (!cli) return 1;
    fy_loop_run(&loop);
    if (!closed) fy_h3_client_close(cli);
    fy_timer_stop(&loop, &t);
    /* deferred frees */
    fy_defer_t *d;
    while ((d = loop.defer_head)) {
        loop.defer_head = d->next;
        if (!loop.defer_head) loop.defer_tail = &loop.defer_head;
        d->queued = false;
        d->cb(d);
    }
    for (int k = 0; k < nreq; k++) {
        fy_arena_free(&reqs[k].arena);
        EVP_MD_CTX_free(reqs[k].md);
    }
    free(reqs);
    free(post);
    if (save) fclose(save);
    fy_loop_destroy(&loop);
    return ndone == nreq && nfail == 0 ? 0 : 1;
}
