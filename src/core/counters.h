/* Counters: named per-worker counters, gauges and latency histograms, summed on read.
 *
 * Registration (main thread, at startup or reload) hands out slot indices: a counter or gauge
 * is one slot, a histogram FY_HIST_NSLOTS consecutive slots. Registering the same name and
 * labels again returns the same id, so a reload re-registers without growing.
 *
 * The write rule (no lock, no contended atomic on the request path): every worker thread calls
 * fy_counters_bind(worker_id) once and then writes only its own slot array (its own
 * cache-line-aligned allocation), with a relaxed atomic load + relaxed atomic store (on x86-64
 * a plain `mov`/`add`/`mov`, no `lock` prefix). A reader on any thread sums every array's slots
 * with relaxed loads: each 64-bit value is read whole (never torn), and the sum is exact for
 * what the workers had written when they were read. Threads that never bind (the main thread,
 * tests) write one shared "unbound" array; only one unbound thread may write at a time.
 *
 * Values are 64-bit. Gauges (active connections, streams) are +1/-1 in the slot of the worker
 * that did it; a worker's slot may go negative, the sum is right. Histograms count observations
 * in fixed log-scale buckets (microseconds: 10 µs … 60 s, then +Inf) and keep their sum (µs). */
#ifndef FY_CORE_COUNTERS_H
#define FY_CORE_COUNTERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* FY_GAUGE_MAX: a gauge whose workers' slots are read as their maximum, not their sum (each
 * worker keeps its own high-water mark there with fy_gauge_raise); exported as a gauge. */
enum fy_counter_kind { FY_COUNTER = 0, FY_GAUGE = 1, FY_HISTOGRAM = 2, FY_GAUGE_MAX = 3 };

/* A slot index. 0 is the "none" id: writes to it land in a scratch slot nobody reads, so an id
 * that failed to register (table full) costs nothing and needs no check. */
typedef uint32_t fy_counter_id_t;

/* Most slots one process may register (each worker's array is this many 8-byte slots of
 * virtual memory; only the registered part is touched). */
#define FY_COUNTERS_MAX_SLOTS 65536u
/* Histogram upper bounds (µs), ascending; the bucket after the last is +Inf. */
#define FY_HIST_NBOUNDS 21
extern const uint64_t fy_hist_bounds_us[FY_HIST_NBOUNDS];
/* slots of one histogram: NBOUNDS + 1 buckets (non-cumulative), then the sum */
#define FY_HIST_NSLOTS (FY_HIST_NBOUNDS + 2)

/* Make room for `nworkers` worker arrays (call before the workers start; may be called again
 * with a larger number). Returns 0 or -ENOMEM. Main thread only. */
int fy_counters_init(int nworkers);
/* The calling thread writes worker `worker`'s array from now on (worker < the init count; out
 * of range: the unbound array). */
void fy_counters_bind(int worker);
/* The calling thread's writes go to an array nobody sums: its own connections do not count
 * (the admin listener, so that scrapes do not show up as traffic). */
void fy_counters_bind_discard(void);

/* Register a counter, gauge or histogram named `name` (Prometheus-style: [a-z_][a-z0-9_]*)
 * with `labels` (already rendered: `listener="a",route="0"`, or "" / NULL). Both strings are
 * copied. Returns the id (> 0), the existing id for the same name+labels+kind, or 0 when the
 * slot table is full (logged once by the caller if it cares). Thread-safe (a mutex; never on
 * the request path). */
fy_counter_id_t fy_counter_register(const char *name, const char *labels, int kind);
/* Register n metrics as one block of consecutive slots (so a hot path can reach them from one
 * id with constant offsets): names[i], labels[i] (NULL = ""), kinds[i]. Returns the first id;
 * if the block was registered before (same first name+labels), that id again, after checking
 * that the rest follows it. 0 when the table is full or the block clashes with a different
 * earlier registration. Thread-safe. */
fy_counter_id_t fy_counter_register_block(const char *const *names, const char *const *labels,
                                          const int *kinds, size_t n);
/* Something reads the detailed families (the admin listener's /metrics): the layers register
 * and bump their per-server series only then (a NULL check otherwise). Set at startup, before
 * any upstream is built (fy_http_metrics_want). */
extern bool fy_counters_detail;
/* Register `name` once per upstream server, labels upstream="UPSTREAM",server="URL" where URL
 * is the char * at `url_off` in each of `n` items of `stride` bytes from `items`. Returns an
 * owned array of n ids (free() it; ids of a full table are 0). Thread-safe. */
fy_counter_id_t *fy_counters_register_servers(const char *name, int kind, const char *upstream,
                                              const void *items, size_t n, size_t stride,
                                              size_t url_off);
/* The id of name+labels if registered, else 0. */
fy_counter_id_t fy_counter_lookup(const char *name, const char *labels);

/* Histogram `hist` (an id from a registration of kind FY_HISTOGRAM) counts its first bucket
 * implicitly: at snapshot its count is the sum of the n counter slots from `first` (added to
 * whatever other ranges were named for it; naming the same range again changes nothing), and
 * the first bucket is that count minus the other buckets. Its writers then only observe values
 * above the first bound (fy_hist_observe_above_at): a request path whose latencies are mostly
 * under the clock's resolution writes no histogram slot at all, only the counters it keeps
 * anyway. Returns 0, -EINVAL (not a histogram), -ENOMEM. Thread-safe. */
int fy_counter_hist_count_from(fy_counter_id_t hist, fy_counter_id_t first, uint32_t n);

/* the calling thread's slot array (never NULL) */
extern _Thread_local _Atomic uint64_t *fy__counters_mine;

/* One slot += n by its only writer. On x86-64 one `add` to memory (no `lock`): the aligned
 * 8-byte store it ends with is never torn for a reader's relaxed load, and the asm keeps the
 * compiler from treating it as a plain (racy) access; elsewhere a relaxed load and store. */
static inline void fy__counter_slot_add(_Atomic uint64_t *s, uint64_t n)
{
#if defined(__x86_64__) && !defined(FY_COUNTERS_NO_ASM)
    __asm__("addq %1, %0" : "+m"(*(uint64_t *)s) : "er"(n));
#else
    atomic_store_explicit(s, atomic_load_explicit(s, memory_order_relaxed) + n,
                          memory_order_relaxed);
#endif
}

static inline void fy_counter_add(fy_counter_id_t id, uint64_t n)
{
    fy__counter_slot_add(&fy__counters_mine[id], n);
}
static inline void fy_counter_inc(fy_counter_id_t id)
{
    fy_counter_add(id, 1);
}
/* gauges: +1 / -1 */
static inline void fy_gauge_add(fy_counter_id_t id, int64_t d)
{
    fy_counter_add(id, (uint64_t)d);
}

/* FY_GAUGE_MAX: this worker's slot becomes v if v is larger */
static inline void fy_gauge_raise(fy_counter_id_t id, uint64_t v)
{
    _Atomic uint64_t *s = &fy__counters_mine[id];
    if (v > atomic_load_explicit(s, memory_order_relaxed))
        atomic_store_explicit(s, v, memory_order_relaxed);
}

/* The bucket index (0..FY_HIST_NBOUNDS) of a value in µs: the first bound >= us, or NBOUNDS
 * (+Inf). Prometheus `le` semantics: a value equal to a bound counts in that bound's bucket. */
unsigned fy_hist_bucket(uint64_t us);

static inline unsigned fy_hist_bucket_fast(uint64_t us)
{
    return us <= 10 ? 0 : fy_hist_bucket(us); /* the common sub-turn case without a call */
}

static inline void fy_hist_observe(fy_counter_id_t id, uint64_t us)
{
    if (!id) return;
    fy_counter_inc(id + fy_hist_bucket_fast(us));
    fy_counter_add(id + FY_HIST_NBOUNDS + 1, us);
}

/* The same on an array the caller loaded once from fy__counters_mine (hot paths). */
static inline void fy_counter_add_at(_Atomic uint64_t *mine, fy_counter_id_t id, uint64_t n)
{
    fy__counter_slot_add(&mine[id], n);
}
static inline void fy_hist_observe_at(_Atomic uint64_t *mine, fy_counter_id_t id, uint64_t us)
{
    fy_counter_add_at(mine, id + fy_hist_bucket_fast(us), 1);
    fy_counter_add_at(mine, id + FY_HIST_NBOUNDS + 1, us);
}
/* Observe us on a histogram with an implicit first bucket (fy_counter_hist_count_from): the
 * sum always, the bucket only above the first bound (the first is the remainder). */
static inline void fy_hist_observe_above_at(_Atomic uint64_t *mine, fy_counter_id_t id, uint64_t us)
{
    if (us > fy_hist_bounds_us[0]) fy_counter_add_at(mine, id + fy_hist_bucket(us), 1);
    fy_counter_add_at(mine, id + FY_HIST_NBOUNDS + 1, us);
}

/* One registered metric, summed over every worker at snapshot time. */
typedef struct fy_counter_sample {
    const char *name;   /* borrowed from the registry (lives until exit) */
    const char *labels; /* ditto; "" for none */
    int kind;           /* enum fy_counter_kind */
    int64_t value;      /* counter, gauge; for a histogram: the observation count */
    /* histograms only: cumulative bucket counts (le = fy_hist_bounds_us[i], last = +Inf),
       and the sum in µs */
    uint64_t buckets[FY_HIST_NBOUNDS + 1];
    uint64_t sum_us;
} fy_counter_sample_t;

typedef struct fy_counters_snapshot {
    fy_counter_sample_t *v; /* owned, in registration order */
    size_t n;
} fy_counters_snapshot_t;

/* Sum every worker's slots now (any thread; takes the registry mutex, never a worker's).
 * Returns 0 or -ENOMEM. Free with fy_counters_snapshot_free. */
int fy_counters_snapshot(fy_counters_snapshot_t *snap);
void fy_counters_snapshot_free(fy_counters_snapshot_t *snap);
/* The value of name+labels in a snapshot (a histogram: its count), or -1 if absent. */
int64_t fy_counters_snapshot_get(const fy_counters_snapshot_t *snap, const char *name,
                                 const char *labels);

/* Write a snapshot as text lines in registration order (`name{labels} value`; histograms as
 * _bucket with le in seconds, _sum in seconds, _count): the debug dump. Returns 0 or -errno. */
int fy_counters_write_text(const fy_counters_snapshot_t *snap, FILE *out);
/* The same in the Prometheus text exposition format (GET /metrics): per family, in first-seen
 * order, a HELP and a TYPE line and then all its samples together. Returns 0 or -errno. */
int fy_counters_write_prometheus(const fy_counters_snapshot_t *snap, FILE *out);

/* Process-wide counters that the lower layers (tls, h1/h2/h3, upstream, server) bump where
 * the event happens; registered by fy_counters_register_builtin (main thread, at startup).
 * Until then they are 0, the scratch id, so bumping them is always safe. Index [p] is the
 * protocol: FY_CPROTO_H1, _H2, _H3. */
enum { FY_CPROTO_H1 = 0, FY_CPROTO_H2 = 1, FY_CPROTO_H3 = 2, FY_CPROTO_N = 3 };
enum { FY_CTLS_FULL = 0, FY_CTLS_RESUMED = 1, FY_CTLS_FAILED = 2 };
extern fy_counter_id_t fy_cid_conns_active[FY_CPROTO_N];   /* ferry_connections_active{proto} */
extern fy_counter_id_t fy_cid_conns_total[FY_CPROTO_N];    /* ferry_connections_total{proto} */
extern fy_counter_id_t fy_cid_streams_active[FY_CPROTO_N]; /* ferry_streams_active{proto} */
extern fy_counter_id_t fy_cid_tls_handshakes[3];           /* ferry_tls_handshakes_total{result} */
extern fy_counter_id_t fy_cid_upstream_retries;            /* ferry_upstream_retries_total */
extern fy_counter_id_t fy_cid_upstream_ejections;          /* ferry_upstream_ejections_total */
/* ferry_limit_rejections_total{limit=NAME}, NAME the `limits:` key of the bound that refused a
   request or closed a connection (fy_limit_names) */
enum {
    FY_LIMIT_CONNECTIONS = 0,
    FY_LIMIT_REQUEST_LINE,
    FY_LIMIT_HEADER_BYTES,
    FY_LIMIT_HEADER_COUNT,
    FY_LIMIT_BODY_SIZE,
    FY_LIMIT_HEADER_TIMEOUT,
    FY_LIMIT_BODY_TIMEOUT,
    FY_LIMIT_SEND_TIMEOUT,
    FY_LIMIT_N
};
extern const char *const fy_limit_names[FY_LIMIT_N];
extern fy_counter_id_t fy_cid_limit[FY_LIMIT_N];
#define fy_cid_limit_connections (fy_cid_limit[FY_LIMIT_CONNECTIONS])
enum { FY_CINT_DECRYPTED = 0, FY_CINT_PASSTHROUGH = 1, FY_CINT_N = 2 };
extern fy_counter_id_t fy_cid_l4_sessions_total;          /* ferry_l4_sessions_total */
extern fy_counter_id_t fy_cid_l4_sessions_active;         /* ferry_l4_sessions_active (gauge) */
extern fy_counter_id_t fy_cid_intercept_flows[FY_CINT_N]; /* ferry_intercept_flows_total{mode} */
extern fy_counter_id_t fy_cid_certs_forged;               /* ferry_intercept_certs_forged_total */
/* QUIC connections by side ([0] server: clients' connections to us; [1] client: ours to h3
   origins): ferry_quic_connections_active (gauge) and ferry_quic_connections_total */
extern fy_counter_id_t fy_cid_quic_conns_active[2], fy_cid_quic_conns_total[2];
/* datagrams refused by a connection's full send queue, every connection of the process
   (ferry_quic_datagrams_dropped_total; per connection: fy_quic_datagrams_dropped) */
extern fy_counter_id_t fy_cid_quic_dgrams_dropped;
/* server-side QUIC TLS handshakes completed, [FY_CTLS_FULL] and [FY_CTLS_RESUMED] */
extern fy_counter_id_t fy_cid_quic_handshakes[2];
/* Memory held by server connections and their streams (exchanges), in bytes: buffers, TLS
 * state and record buffers, codec state (issue 19). Totals are summed over workers; the _max
 * gauges are the largest one connection / stream has held on any worker since start. */
extern fy_counter_id_t fy_cid_conn_mem[FY_CPROTO_N];       /* ferry_connection_memory_bytes */
extern fy_counter_id_t fy_cid_conn_mem_max[FY_CPROTO_N];   /* ferry_connection_memory_max_bytes */
extern fy_counter_id_t fy_cid_stream_mem[FY_CPROTO_N];     /* ferry_stream_memory_bytes */
extern fy_counter_id_t fy_cid_stream_mem_max[FY_CPROTO_N]; /* ferry_stream_memory_max_bytes */
extern fy_counter_id_t fy_cid_limit_conn_memory; /* ..._rejections_total{connection-memory} */
/* Memory held by layer-4 TCP sessions (issue 14): the session, its relay buffers while bytes
 * are in flight, the peek buffer, TLS state of terminated ends. Summed over workers; _max is
 * the largest one session has held since start. */
extern fy_counter_id_t fy_cid_l4_sess_mem;     /* ferry_l4_session_memory_bytes */
extern fy_counter_id_t fy_cid_l4_sess_mem_max; /* ferry_l4_session_memory_max_bytes */
void fy_counters_register_builtin(void);

/* A connection of protocol p now holds `now` bytes where it held *held (0 when new; pass now
 * = 0 at its close): the total moves by the difference, the max rises, *held = now. */
static inline void fy_counters_conn_mem(int p, size_t *held, size_t now)
{
    if (now == *held) return;
    fy_gauge_add(fy_cid_conn_mem[p], (int64_t)now - (int64_t)*held);
    fy_gauge_raise(fy_cid_conn_mem_max[p], now);
    *held = now;
}
/* the same for one stream (an exchange) of protocol p */
static inline void fy_counters_stream_mem(int p, size_t *held, size_t now)
{
    if (now == *held) return;
    fy_gauge_add(fy_cid_stream_mem[p], (int64_t)now - (int64_t)*held);
    fy_gauge_raise(fy_cid_stream_mem_max[p], now);
    *held = now;
}

/* a server connection of protocol p (FY_CPROTO_*) opened / closed */
static inline void fy_counters_conn_open(int p)
{
    fy_gauge_add(fy_cid_conns_active[p], 1);
    fy_counter_inc(fy_cid_conns_total[p]);
}
/* a layer-4 session (TCP connection or UDP flow) started; its close: -1 on the gauge */
static inline void fy_counters_l4_open(void)
{
    fy_counter_inc(fy_cid_l4_sessions_total);
    fy_gauge_add(fy_cid_l4_sessions_active, 1);
}
/* a QUIC connection of side 0 (server) or 1 (client) set up; its teardown: -1 on the gauge */
static inline void fy_counters_quic_open(int side)
{
    fy_gauge_add(fy_cid_quic_conns_active[side], 1);
    fy_counter_inc(fy_cid_quic_conns_total[side]);
}
static inline void fy_counters_conn_close(int p)
{
    fy_gauge_add(fy_cid_conns_active[p], -1);
}

#endif
