/* Ferry embedded as an intercepting proxy with C hooks (include/ferry/mitm.h).
 *
 *   mitm_hooks PORT CA_DIR [UPSTREAM_CA]
 *
 * listens on 127.0.0.1:PORT and, for every flow:
 *  - on_request:  adds `x-hooked: 1` to the request; answers /hook-local itself;
 *  - on_response: adds `x-example-status: <origin status>` and turns 404 into 200;
 *  - on_response_body: upper-cases every "nginx" in the body (per chunk, in place) and
 *    appends a line at the end;
 *  - on_tunnel: passes tunnels to 127.0.0.1 through undecrypted (by IP), decrypts the rest.
 * Runs until SIGINT/SIGTERM. */
#include <ferry/mitm.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_request(ferry_flow_t *f, void *ud)
{
    (void)ud;
    if (strcmp(ferry_flow_path(f), "/hook-local") == 0) {
        static const char body[] = "answered by a hook\n";
        ferry_flow_respond(f, 200, "text/plain", body, sizeof body - 1);
        return;
    }
    ferry_flow_set_header(f, FERRY_REQUEST, "x-hooked", "1");
}

static void on_response(ferry_flow_t *f, void *ud)
{
    (void)ud;
    char v[16];
    snprintf(v, sizeof v, "%d", ferry_flow_status(f));
    ferry_flow_add_header(f, FERRY_RESPONSE, "x-example-status", v);
    if (ferry_flow_status(f) == 404) ferry_flow_set_status(f, 200);
}

static void on_response_body(ferry_flow_t *f, ferry_chunk_t *c, void *ud)
{
    (void)ud;
    /* same length: in place */
    for (size_t i = 0; i + 5 <= c->len; i++)
        if (memcmp(c->data + i, "nginx", 5) == 0) memcpy(c->data + i, "NGINX", 5);
    if (c->last) {
        /* a different length: memory from the flow */
        static const char tail[] = "-- seen by mitm_hooks\n";
        char *p = ferry_flow_alloc(f, c->len + sizeof tail - 1);
        memcpy(p, c->data, c->len);
        memcpy(p + c->len, tail, sizeof tail - 1);
        c->data = p;
        c->len += sizeof tail - 1;
    }
}

static int on_tunnel(const char *host, int port, void *ud)
{
    (void)port, (void)ud;
    return strcmp(host, "127.0.0.1") == 0 ? FERRY_TUNNEL_PASS : FERRY_TUNNEL_DECRYPT;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PORT CA_DIR [UPSTREAM_CA]\n", argv[0]);
        return 2;
    }
    char yaml[4096];
    int n = snprintf(yaml, sizeof yaml,
                     "workers: 2\n"
                     "listeners:\n  - address: \"127.0.0.1:%s\"\n    kind: intercept\n"
                     "intercept:\n  ca-dir: \"%s\"\n",
                     argv[1], argv[2]);
    if (argc > 3) snprintf(yaml + n, sizeof yaml - (size_t)n, "  upstream-ca: \"%s\"\n", argv[3]);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* workers inherit it: signals come to sigwait */
    char err[2048];
    ferry_t *f = ferry_new(yaml, err, sizeof err);
    if (!f) {
        fprintf(stderr, "ferry_new: %s\n", err);
        return 1;
    }
    ferry_hooks_t hooks = {.on_request = on_request,
                           .on_response = on_response,
                           .on_response_body = on_response_body,
                           .on_tunnel = on_tunnel};
    if (ferry_set_hooks(f, &hooks) < 0 || ferry_start(f) < 0) {
        fprintf(stderr, "cannot start\n");
        ferry_free(f);
        return 1;
    }
    printf("mitm_hooks: listening on 127.0.0.1:%s\n", argv[1]);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    ferry_free(f);
    return 0;
}
