/* HTTP/3 origin connections (h3://): the protocol table of the multiplexed pool
 * (upstream_mux.c). Each wraps one HTTP/3 client codec (h3/h3_client.c), which does its own
 * I/O on its own UDP socket. */
#include <stdlib.h>

#include "core/alloc.h"
#include "h2/h2_client.h"
#include "h3/h3_client.h"
#include "upstream/upstream_int.h"
#include "upstream/upstream_mux.h"

/* Streams we put on one connection at most (a common initial_max_streams_bidi; more wait for
 * another connection). */
#define H3_MAX_STREAMS 100u

/* The origin side's QUIC settings: response bodies buffered per stream like h2 origins. */
static const fy_quic_conf_t origin_quic = {
    .cc = FY_QUIC_CC_CUBIC,
    .idle_timeout_ms = 60000,
    .handshake_timeout_ms = 10000,
    .max_streams = 100,
    .stream_window = FY_H2C_STREAM_WINDOW,
    .connection_window = FY_H2C_CONN_WINDOW,
    .send_buffer = 256 * 1024,
    .max_datagram_size = 0,
    .max_connections = 1,
};

typedef struct h3conn {
    fy_origin_mux_t m; /* first: the pool's part */
    fy_h3_client_t *c; /* owned until closed */
} h3conn_t;

static h3conn_t *H(fy_origin_mux_t *m)
{
    return (h3conn_t *)m;
}

static void on_ready(void *ud)
{
    fy__mux_ready(&((h3conn_t *)ud)->m);
}

static void on_credit(void *ud)
{
    fy__mux_credit(&((h3conn_t *)ud)->m);
}

static void on_goaway(void *ud)
{
    fy__mux_goaway(&((h3conn_t *)ud)->m);
}

static void on_close(void *ud, const char *why)
{
    h3conn_t *s = ud;
    s->c = NULL; /* the codec frees itself after this returns */
    fy__mux_close(&s->m, why ? why : "origin connection closed", false);
}

static const fy_h3_client_conn_ops_t conn_ops = {on_ready, on_credit, on_goaway, on_close};

static fy_origin_mux_t *h3_connect(fy_upstream_t *u, int w, int server, fy_loop_t *loop,
                                   const char **err)
{
    const fy_upstream_conf_t *uc = fy_upstream_conf(u);
    const fy_upstream_server_conf_t *sv =
        &((const fy_upstream_server_conf_t *)uc->servers.v)[server];
    h3conn_t *s = fy_xcalloc(1, sizeof *s);
    fy__mux_init(&s->m, &fy__mux_h3, u, w, server, loop);
    fy_quic_client_opts_t o = {.conf = &origin_quic,
                               .sni = uc->sni ? uc->sni : sv->host,
                               .ca_file = uc->ca,
                               .insecure = uc->insecure,
                               .cert_file = uc->cert,
                               .key_file = uc->key,
                               .name = uc->name};
    s->c = fy_h3_client_connect(loop, (const struct sockaddr *)&sv->addr, sv->addrlen, &o,
                                &conn_ops, s);
    if (!s->c) {
        free(s);
        *err = "cannot start a QUIC connection to the origin";
        return NULL;
    }
    return &s->m;
}

static size_t h3_max_streams(fy_origin_mux_t *m)
{
    return H(m)->c && fy_h3_client_ready(H(m)->c) ? H3_MAX_STREAMS : 0;
}

/* QUIC stream credit (MAX_STREAMS) comes back only once the server has seen a stream fully
 * closed, which can be later than our release: on_credit tells when more arrives. */
static bool h3_can_open(fy_origin_mux_t *m)
{
    return H(m)->c && fy_h3_client_can_open(H(m)->c);
}

static bool h3_ping(fy_origin_mux_t *m)
{
    (void)m;
    return false; /* QUIC's PINGs and ACKs are the library's */
}

static void nothing(fy_origin_mux_t *m)
{
    (void)m;
}

static void h3_shutdown(fy_origin_mux_t *m, const char *why, bool ours)
{
    (void)why;
    h3conn_t *s = H(m);
    if (ours && s->c) fy_h3_client_close(s->c); /* its streams fail first */
    s->c = NULL;
}

static void h3_close_now(fy_origin_mux_t *m)
{
    h3_shutdown(m, "worker exit", true);
}

static void h3_destroy(fy_origin_mux_t *m)
{
    free(H(m));
}

const fy__mux_proto_t fy__mux_h3 = {
    .name = "h3",
    .guess_streams = H3_MAX_STREAMS,
    .retire_on_down = true,
    .handshake_timeout = "origin handshake timed out",
    .connect = h3_connect,
    .max_streams = h3_max_streams,
    .can_open = h3_can_open,
    .ping = h3_ping,
    .flush = nothing,
    .goaway = nothing,
    .shutdown = h3_shutdown,
    .cancel = nothing,
    .close_now = h3_close_now,
    .destroy = h3_destroy,
};

fy_h3_client_t *fy_origin_mux_h3(fy_origin_mux_t *m)
{
    return m->proto == &fy__mux_h3 ? H(m)->c : NULL;
}
