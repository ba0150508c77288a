#include "core/counters.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/alloc.h"

const uint64_t fy_hist_bounds_us[FY_HIST_NBOUNDS] = {
    10,    25,     50,     100,    250,     500,     1000,    2500,     5000,     10000,    25000,
    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000, 60000000,
};

typedef struct desc {
    char *name, *labels; /* owned */
    int kind;
    fy_counter_id_t id;
    uint32_t next; /* hash chain: index + 1 into descs, 0 = end */
    /* a histogram with an implicit first bucket: its count is the sum of these slot ranges
       ({first, n}; owned) */
    uint32_t (*count_from)[2];
    uint32_t ncount_from;
} desc_t;

#define NHASH 4096u

/* Slot 0 is the scratch slot of id 0; registered ids start at 1. The unbound array is bss:
 * untouched pages cost no memory. */
bool fy_counters_detail;

static _Alignas(64) _Atomic uint64_t unbound[FY_COUNTERS_MAX_SLOTS];
_Thread_local _Atomic uint64_t *fy__counters_mine = unbound;
/* written by threads whose own traffic is not to be counted (the admin listener); never read */
static _Alignas(64) _Atomic uint64_t discarded[FY_COUNTERS_MAX_SLOTS];

void fy_counters_bind_discard(void)
{
    fy__counters_mine = discarded;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t **workers; /* owned: nworkers arrays of MAX_SLOTS, each mmap'd */
static int nworkers;
static desc_t *descs; /* owned */
static size_t ndescs, capdescs;
static uint32_t hash[NHASH];
static uint32_t nslots = 1;

int fy_counters_init(int n)
{
    int r = 0;
    pthread_mutex_lock(&mu);
    if (n > nworkers) {
        _Atomic uint64_t **v = realloc(workers, (size_t)n * sizeof *v);
        if (!v) {
            r = -ENOMEM;
        } else {
            workers = v;
            for (; nworkers < n; nworkers++) {
                /* page-aligned (so cache-line-aligned), zeroed, touched only where written */
                void *p = mmap(NULL, FY_COUNTERS_MAX_SLOTS * sizeof(uint64_t),
                               PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p == MAP_FAILED) {
                    r = -ENOMEM;
                    break;
                }
                workers[nworkers] = p;
            }
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

void fy_counters_bind(int worker)
{
    pthread_mutex_lock(&mu);
    fy__counters_mine = worker >= 0 && worker < nworkers ? workers[worker] : unbound;
    pthread_mutex_unlock(&mu);
}

static uint32_t hash_of(const char *name, const char *labels)
{
    uint32_t h = 2166136261u;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ '{') * 16777619u;
    for (const char *p = labels; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return h % NHASH;
}

static desc_t *find(const char *name, const char *labels, uint32_t h)
{
    for (uint32_t i = hash[h]; i; i = descs[i - 1].next)
        if (strcmp(descs[i - 1].name, name) == 0 && strcmp(descs[i - 1].labels, labels) == 0)
            return &descs[i - 1];
    return NULL;
}

/* mu held */
static fy_counter_id_t add_locked(const char *name, const char *labels, int kind, uint32_t h)
{
    uint32_t need = kind == FY_HISTOGRAM ? FY_HIST_NSLOTS : 1;
    if (nslots + need > FY_COUNTERS_MAX_SLOTS) return 0;
    if (ndescs == capdescs) {
        capdescs = capdescs ? capdescs * 2 : 256;
        descs = fy_xrealloc(descs, capdescs * sizeof *descs);
    }
    desc_t *d = &descs[ndescs++];
    d->name = fy_xstrdup(name);
    d->labels = fy_xstrdup(labels);
    d->kind = kind;
    d->id = nslots;
    d->count_from = NULL;
    d->ncount_from = 0;
    d->next = hash[h];
    hash[h] = (uint32_t)ndescs;
    nslots += need;
    return d->id;
}

fy_counter_id_t fy_counter_register(const char *name, const char *labels, int kind)
{
    if (!labels) labels = "";
    uint32_t h = hash_of(name, labels);
    pthread_mutex_lock(&mu);
    desc_t *d = find(name, labels, h);
    fy_counter_id_t id = d ? (d->kind == kind ? d->id : 0) : add_locked(name, labels, kind, h);
    pthread_mutex_unlock(&mu);
    return id;
}

fy_counter_id_t fy_counter_register_block(const char *const *names, const char *const *labels,
                                          const int *kinds, size_t n)
{
    fy_counter_id_t first = 0, next = 0;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < n; i++) {
        const char *l = labels[i] ? labels[i] : "";
        uint32_t h = hash_of(names[i], l);
        desc_t *d = find(names[i], l, h);
        fy_counter_id_t id;
        if (i == 0 && d) {
            first = next = d->id;
        } else if (i == 0) {
            if (nslots + n * FY_HIST_NSLOTS > FY_COUNTERS_MAX_SLOTS) break; /* all or none */
            first = next = nslots;
        }
        id = d ? (d->kind == kinds[i] ? d->id : 0) : add_locked(names[i], l, kinds[i], h);
        if (id != next) {
            first = 0;
            break;
        }
        next += kinds[i] == FY_HISTOGRAM ? FY_HIST_NSLOTS : 1;
    }
    pthread_mutex_unlock(&mu);
    return first;
}

fy_counter_id_t *fy_counters_register_servers(const char *name, int kind, const char *upstream,
                                              const void *items, size_t n, size_t stride,
                                              size_t url_off)
{
    fy_counter_id_t *ids = fy_xcalloc(n ? n : 1, sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        const char *url = *(char *const *)((const char *)items + i * stride + url_off);
        char lab[512];
        snprintf(lab, sizeof lab, "upstream=\"%s\",server=\"%s\"", upstream, url);
        ids[i] = fy_counter_register(name, lab, kind);
    }
    return ids;
}

fy_counter_id_t fy_counter_lookup(const char *name, const char *labels)
{
    if (!labels) labels = "";
    pthread_mutex_lock(&mu);
    desc_t *d = find(name, labels, hash_of(name, labels));
    fy_counter_id_t id = d ? d->id : 0;
    pthread_mutex_unlock(&mu);
    return id;
}

int fy_counter_hist_count_from(fy_counter_id_t hist, fy_counter_id_t first, uint32_t n)
{
    int r = -EINVAL;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < ndescs; i++) {
        desc_t *d = &descs[i];
        if (d->id != hist) continue;
        if (d->kind != FY_HISTOGRAM || !hist || !first || first + n > nslots) break;
        r = 0;
        for (uint32_t k = 0; k < d->ncount_from; k++)
            if (d->count_from[k][0] == first && d->count_from[k][1] == n) goto out;
        void *v = realloc(d->count_from, (d->ncount_from + 1) * sizeof *d->count_from);
        if (!v) {
            r = -ENOMEM;
            break;
        }
        d->count_from = v;
        d->count_from[d->ncount_from][0] = first;
        d->count_from[d->ncount_from][1] = n;
        d->ncount_from++;
        break;
    }
out:
    pthread_mutex_unlock(&mu);
    return r;
}

/* The bounds grow by at least 2x from one to the next, so each [2^k, 2^(k+1)) holds at most
 * one: the bucket of us is the first bound >= 2^k (k = floor(log2 us)) or the one after it,
 * one table load and one compare instead of a search. first_at[k]: index of the first bound
 * >= 2^k (NBOUNDS: none); bound_or_max[NBOUNDS] is the +Inf sentinel. */
static uint8_t first_at[64];
static uint64_t bound_or_max[FY_HIST_NBOUNDS + 1];

__attribute__((constructor)) static void bucket_table(void)
{
    for (unsigned b = 0; b < FY_HIST_NBOUNDS; b++) bound_or_max[b] = fy_hist_bounds_us[b];
    bound_or_max[FY_HIST_NBOUNDS] = UINT64_MAX;
    for (unsigned k = 0; k < 64; k++) {
        unsigned b = 0;
        while (b < FY_HIST_NBOUNDS && fy_hist_bounds_us[b] < (1ull << k)) b++;
        first_at[k] = (uint8_t)b;
    }
}

unsigned fy_hist_bucket(uint64_t us)
{
    if (us == 0) return 0;
    unsigned b = first_at[63 - __builtin_clzll(us)];
    return b + (us > bound_or_max[b]);
}

static uint64_t sum_slot(uint32_t slot)
{
    uint64_t v = atomic_load_explicit(&unbound[slot], memory_order_relaxed);
    for (int w = 0; w < nworkers; w++)
        v += atomic_load_explicit(&workers[w][slot], memory_order_relaxed);
    return v;
}

static uint64_t max_slot(uint32_t slot)
{
    uint64_t v = atomic_load_explicit(&unbound[slot], memory_order_relaxed);
    for (int w = 0; w < nworkers; w++) {
        uint64_t x = atomic_load_explicit(&workers[w][slot], memory_order_relaxed);
        if (x > v) v = x;
    }
    return v;
}

int fy_counters_snapshot(fy_counters_snapshot_t *snap)
{
    pthread_mutex_lock(&mu);
    snap->n = ndescs;
    snap->v = calloc(ndescs ? ndescs : 1, sizeof *snap->v);
    if (!snap->v) {
        snap->n = 0;
        pthread_mutex_unlock(&mu);
        return -ENOMEM;
    }
    for (size_t i = 0; i < ndescs; i++) {
        const desc_t *d = &descs[i];
        fy_counter_sample_t *s = &snap->v[i];
        s->name = d->name;
        s->labels = d->labels;
        s->kind = d->kind;
        if (d->kind != FY_HISTOGRAM) {
            s->value = (int64_t)(d->kind == FY_GAUGE_MAX ? max_slot(d->id) : sum_slot(d->id));
            continue;
        }
        uint64_t cum = 0;
        for (unsigned b = 0; b <= FY_HIST_NBOUNDS; b++) {
            cum += sum_slot(d->id + b);
            s->buckets[b] = cum;
        }
        if (d->ncount_from) {
            /* read after the buckets: a writer bumps the count before the bucket, so (x86 keeps
               stores and loads in order) the count read here is never below them */
            uint64_t total = 0;
            for (uint32_t k = 0; k < d->ncount_from; k++)
                for (uint32_t j = 0; j < d->count_from[k][1]; j++)
                    total += sum_slot(d->count_from[k][0] + j);
            uint64_t first = total > cum ? total - cum : 0;
            for (unsigned b = 0; b <= FY_HIST_NBOUNDS; b++) s->buckets[b] += first;
            cum += first;
        }
        s->value = (int64_t)cum;
        s->sum_us = sum_slot(d->id + FY_HIST_NBOUNDS + 1);
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

void fy_counters_snapshot_free(fy_counters_snapshot_t *snap)
{
    free(snap->v);
    snap->v = NULL;
    snap->n = 0;
}

int64_t fy_counters_snapshot_get(const fy_counters_snapshot_t *snap, const char *name,
                                 const char *labels)
{
    if (!labels) labels = "";
    for (size_t i = 0; i < snap->n; i++)
        if (strcmp(snap->v[i].name, name) == 0 && strcmp(snap->v[i].labels, labels) == 0)
            return snap->v[i].value;
    return -1;
}

static void write_seconds(FILE *out, uint64_t us)
{
    fprintf(out, "%llu.%06llu", (unsigned long long)(us / 1000000),
            (unsigned long long)(us % 1000000));
}

/* HELP text of the families Ferry registers (unknown names get a generic one). */
static const char *const helps[][2] = {
    {"ferry_connections_active", "Open client connections, by protocol."},
    {"ferry_connections_total", "Client connections accepted, by protocol."},
    {"ferry_streams_active", "Requests in progress on open connections, by protocol."},
    {"ferry_tls_handshakes_total", "TLS handshakes, both sides, by result."},
    {"ferry_upstream_retries_total", "Proxied requests sent again to another attempt."},
    {"ferry_upstream_ejections_total", "Upstream servers ejected after consecutive failures."},
    {"ferry_limit_rejections_total", "Requests or connections refused by a named limit."},
    {"ferry_http_responses_total",
     "Finished exchanges by listener, route, status class, protocol."},
    {"ferry_http_request_bytes_total", "Request body bytes received."},
    {"ferry_http_response_bytes_total", "Response body bytes sent."},
    {"ferry_http_ttfb_seconds", "Time from the request head to the response head, per route."},
    {"ferry_http_duration_seconds", "Time from the request head to the end, per route."},
    {"ferry_upstream_responses_total", "Proxied exchanges by upstream server and status class."},
    {"ferry_upstream_ttfb_seconds", "Time to the response head of proxied exchanges, per server."},
    {"ferry_upstream_duration_seconds", "Total time of proxied exchanges, per upstream server."},
    {"ferry_upstream_pool_idle", "Idle keep-alive HTTP/1.1 connections pooled per server."},
    {"ferry_upstream_pool_connections",
     "Origin connections open per server (TCP for h1 and h2, QUIC for h3)."},
    {"ferry_upstream_pool_waiters", "Requests waiting for a stream on an h2/h3 origin connection."},
    {"ferry_upstream_server_retries_total", "Requests sent again after this server failed them."},
    {"ferry_upstream_server_ejections_total", "Passive ejections of this server."},
    {"ferry_upstream_circuit_open", "Workers whose circuit breaker of this server is open."},
    {"ferry_upstream_circuit_half_open", "Workers whose breaker of this server is half-open."},
    {"ferry_upstream_circuit_transitions_total", "Circuit breaker transitions, by new state."},
    {"ferry_upstream_retry_budget_exhausted_total", "Retries refused by the retry budget."},
    {"ferry_upstream_hedges_total", "Hedged attempts started (a second server asked)."},
    {"ferry_upstream_hedge_wins_total", "Hedged attempts whose response head came first."},
    {"ferry_l4_sessions_total", "Layer-4 sessions (TCP connections, UDP flows) started."},
    {"ferry_l4_sessions_active", "Layer-4 sessions open."},
    {"ferry_intercept_flows_total", "Intercepted CONNECT/SOCKS/transparent flows, by mode."},
    {"ferry_intercept_certs_forged_total", "Certificates minted for interception."},
    {"ferry_quic_connections_active", "QUIC connections open, by side (server, client)."},
    {"ferry_quic_connections_total", "QUIC connections set up, by side (server, client)."},
    {"ferry_quic_handshakes_total",
     "QUIC TLS handshakes Ferry served, by result (full, resumed with a session ticket)."},
    {"ferry_quic_datagrams_dropped_total",
     "QUIC/WebTransport datagrams refused because a connection's send queue was full."},
    {"ferry_l4_route_sessions_total", "Layer-4 sessions started, per l4 route."},
    {"ferry_l4_bytes_total", "Layer-4 bytes relayed per l4 route (up: client to origin)."},
    {"ferry_connection_memory_bytes",
     "Bytes held by open client connections (buffers, TLS, codec state), by protocol."},
    {"ferry_connection_memory_max_bytes", "Most bytes one client connection has held."},
    {"ferry_stream_memory_bytes", "Bytes held by requests in progress, by protocol."},
    {"ferry_stream_memory_max_bytes", "Most bytes one request has held."},
};

static const char *help_of(const char *name)
{
    for (size_t i = 0; i < sizeof helps / sizeof *helps; i++)
        if (strcmp(helps[i][0], name) == 0) return helps[i][1];
    return NULL;
}

static const char *const type_names[] = {"counter", "gauge", "histogram", "gauge"};

static void write_sample(const fy_counter_sample_t *s, FILE *out)
{
    const char *sep = s->labels[0] ? "," : "";
    if (s->kind != FY_HISTOGRAM) {
        fprintf(out, "%s{%s} %lld\n", s->name, s->labels, (long long)s->value);
        return;
    }
    for (unsigned b = 0; b <= FY_HIST_NBOUNDS; b++) {
        fprintf(out, "%s_bucket{%s%sle=\"", s->name, s->labels, sep);
        if (b < FY_HIST_NBOUNDS)
            write_seconds(out, fy_hist_bounds_us[b]);
        else
            fputs("+Inf", out);
        fprintf(out, "\"} %llu\n", (unsigned long long)s->buckets[b]);
    }
    fprintf(out, "%s_sum{%s} ", s->name, s->labels);
    write_seconds(out, s->sum_us);
    fprintf(out, "\n%s_count{%s} %lld\n", s->name, s->labels, (long long)s->value);
}

int fy_counters_write_text(const fy_counters_snapshot_t *snap, FILE *out)
{
    for (size_t i = 0; i < snap->n; i++) write_sample(&snap->v[i], out);
    return ferror(out) ? -EIO : 0;
}

int fy_counters_write_prometheus(const fy_counters_snapshot_t *snap, FILE *out)
{
    /* the exposition format wants every family in one group under its HELP and TYPE: the
       registry interleaves them (blocks), so write family by family in first-seen order */
    bool *done = calloc(snap->n ? snap->n : 1, sizeof *done);
    if (!done) return -ENOMEM;
    for (size_t i = 0; i < snap->n; i++) {
        if (done[i]) continue;
        const fy_counter_sample_t *s = &snap->v[i];
        const char *h = help_of(s->name);
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", s->name, h ? h : "Ferry metric.", s->name,
                type_names[s->kind]);
        for (size_t j = i; j < snap->n; j++)
            if (!done[j] && snap->v[j].kind == s->kind && strcmp(snap->v[j].name, s->name) == 0) {
                write_sample(&snap->v[j], out);
                done[j] = true;
            }
    }
    free(done);
    return ferror(out) ? -EIO : 0;
}

fy_counter_id_t fy_cid_conns_active[FY_CPROTO_N], fy_cid_conns_total[FY_CPROTO_N];
fy_counter_id_t fy_cid_streams_active[FY_CPROTO_N];
fy_counter_id_t fy_cid_tls_handshakes[3];
fy_counter_id_t fy_cid_upstream_retries, fy_cid_upstream_ejections;
fy_counter_id_t fy_cid_limit[FY_LIMIT_N];
const char *const fy_limit_names[FY_LIMIT_N] = {
    "connections", "request-line",   "header-bytes", "header-count",
    "body-size",   "header-timeout", "body-timeout", "send-timeout",
};
fy_counter_id_t fy_cid_l4_sessions_total, fy_cid_l4_sessions_active;
fy_counter_id_t fy_cid_l4_sess_mem, fy_cid_l4_sess_mem_max;
fy_counter_id_t fy_cid_intercept_flows[FY_CINT_N], fy_cid_certs_forged;
fy_counter_id_t fy_cid_quic_conns_active[2], fy_cid_quic_conns_total[2];
fy_counter_id_t fy_cid_quic_dgrams_dropped;
fy_counter_id_t fy_cid_quic_handshakes[2];
fy_counter_id_t fy_cid_conn_mem[FY_CPROTO_N], fy_cid_conn_mem_max[FY_CPROTO_N];
fy_counter_id_t fy_cid_stream_mem[FY_CPROTO_N], fy_cid_stream_mem_max[FY_CPROTO_N];
fy_counter_id_t fy_cid_limit_conn_memory;

void fy_counters_register_builtin(void)
{
    static const char *const proto[FY_CPROTO_N] = {"proto=\"h1\"", "proto=\"h2\"", "proto=\"h3\""};
    for (int p = 0; p < FY_CPROTO_N; p++) {
        fy_cid_conns_active[p] =
            fy_counter_register("ferry_connections_active", proto[p], FY_GAUGE);
        fy_cid_conns_total[p] =
            fy_counter_register("ferry_connections_total", proto[p], FY_COUNTER);
        fy_cid_streams_active[p] = fy_counter_register("ferry_streams_active", proto[p], FY_GAUGE);
    }
    static const char *const tls[3] = {"result=\"full\"", "result=\"resumed\"",
                                       "result=\"failed\""};
    for (int i = 0; i < 3; i++)
        fy_cid_tls_handshakes[i] =
            fy_counter_register("ferry_tls_handshakes_total", tls[i], FY_COUNTER);
    fy_cid_upstream_retries = fy_counter_register("ferry_upstream_retries_total", "", FY_COUNTER);
    fy_cid_upstream_ejections =
        fy_counter_register("ferry_upstream_ejections_total", "", FY_COUNTER);
    for (int i = 0; i < FY_LIMIT_N; i++) {
        char lab[64];
        snprintf(lab, sizeof lab, "limit=\"%s\"", fy_limit_names[i]);
        fy_cid_limit[i] = fy_counter_register("ferry_limit_rejections_total", lab, FY_COUNTER);
    }
    fy_cid_l4_sessions_total = fy_counter_register("ferry_l4_sessions_total", "", FY_COUNTER);
    fy_cid_l4_sessions_active = fy_counter_register("ferry_l4_sessions_active", "", FY_GAUGE);
    fy_cid_l4_sess_mem = fy_counter_register("ferry_l4_session_memory_bytes", "", FY_GAUGE);
    fy_cid_l4_sess_mem_max =
        fy_counter_register("ferry_l4_session_memory_max_bytes", "", FY_GAUGE_MAX);
    static const char *const modes[FY_CINT_N] = {"mode=\"decrypted\"", "mode=\"passthrough\""};
    for (int i = 0; i < FY_CINT_N; i++)
        fy_cid_intercept_flows[i] =
            fy_counter_register("ferry_intercept_flows_total", modes[i], FY_COUNTER);
    fy_cid_certs_forged = fy_counter_register("ferry_intercept_certs_forged_total", "", FY_COUNTER);
    static const char *const sides[2] = {"side=\"server\"", "side=\"client\""};
    for (int i = 0; i < 2; i++) {
        fy_cid_quic_conns_active[i] =
            fy_counter_register("ferry_quic_connections_active", sides[i], FY_GAUGE);
        fy_cid_quic_conns_total[i] =
            fy_counter_register("ferry_quic_connections_total", sides[i], FY_COUNTER);
    }
    fy_cid_quic_dgrams_dropped =
        fy_counter_register("ferry_quic_datagrams_dropped_total", "", FY_COUNTER);
    for (int i = 0; i < 2; i++)
        fy_cid_quic_handshakes[i] =
            fy_counter_register("ferry_quic_handshakes_total", tls[i], FY_COUNTER);
    for (int p = 0; p < FY_CPROTO_N; p++) {
        fy_cid_conn_mem[p] =
            fy_counter_register("ferry_connection_memory_bytes", proto[p], FY_GAUGE);
        fy_cid_conn_mem_max[p] =
            fy_counter_register("ferry_connection_memory_max_bytes", proto[p], FY_GAUGE_MAX);
        fy_cid_stream_mem[p] = fy_counter_register("ferry_stream_memory_bytes", proto[p], FY_GAUGE);
        fy_cid_stream_mem_max[p] =
            fy_counter_register("ferry_stream_memory_max_bytes", proto[p], FY_GAUGE_MAX);
    }
    fy_cid_limit_conn_memory = fy_counter_register("ferry_limit_rejections_total",
                                                   "limit=\"connection-memory\"", FY_COUNTER);
}
