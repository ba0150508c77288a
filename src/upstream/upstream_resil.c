/* The upstream's circuit breakers and retry budget at run time (upstream.h): each worker's
 * state machines (upstream_breaker.c) in its srv_state_t / up_worker_t, and their transitions
 * made visible process-wide as log lines and counters. Worker's thread, except init/free. */
#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/counters.h"
#include "core/log.h"
#include "net/sock.h"
#include "upstream/upstream_state.h"

void fy__upstream_resil_init(fy_upstream_t *u)
{
    const fy_upstream_conf_t *c = u->conf;
    if (c->retry_budget) {
        char lab[256];
        snprintf(lab, sizeof lab, "upstream=\"%s\"", c->name);
        u->budget_id =
            fy_counter_register("ferry_upstream_retry_budget_exhausted_total", lab, FY_COUNTER);
    }
    if (c->hedge) {
        char lab[256];
        snprintf(lab, sizeof lab, "upstream=\"%s\"", c->name);
        u->hedge_id = fy_counter_register("ferry_upstream_hedges_total", lab, FY_COUNTER);
        u->hedge_win_id = fy_counter_register("ferry_upstream_hedge_wins_total", lab, FY_COUNTER);
    }
    if (!c->breaker) return;
    size_t n = u->nservers;
    if (u->dyn) { /* slots change servers: no per-server series (the scratch id) */
        u->brk_open_ids = fy_xcalloc(n, sizeof *u->brk_open_ids);
        u->brk_half_ids = fy_xcalloc(n, sizeof *u->brk_half_ids);
        for (int k = 0; k < 3; k++) u->brk_to_ids[k] = fy_xcalloc(n, sizeof *u->brk_to_ids[k]);
        return;
    }
    size_t st = sizeof *u->servers, off = offsetof(fy_upstream_server_conf_t, url);
    u->brk_open_ids = fy_counters_register_servers("ferry_upstream_circuit_open", FY_GAUGE, c->name,
                                                   u->servers, n, st, off);
    u->brk_half_ids = fy_counters_register_servers("ferry_upstream_circuit_half_open", FY_GAUGE,
                                                   c->name, u->servers, n, st, off);
    static const char *const to[3] = {"open", "half_open", "closed"};
    for (int k = 0; k < 3; k++) {
        u->brk_to_ids[k] = fy_xcalloc(n, sizeof *u->brk_to_ids[k]);
        for (size_t i = 0; i < n; i++) {
            char lab[600];
            snprintf(lab, sizeof lab, "upstream=\"%s\",server=\"%s\",to=\"%s\"", c->name,
                     u->servers[i].url, to[k]);
            u->brk_to_ids[k][i] =
                fy_counter_register("ferry_upstream_circuit_transitions_total", lab, FY_COUNTER);
        }
    }
}

void fy__upstream_resil_free(fy_upstream_t *u)
{
    /* the gauges outlive this upstream (a reload registers the same series again): take back
       what its breakers still count */
    for (int w = 0; u->conf->breaker && w < u->nworkers; w++)
        for (size_t i = 0; i < u->nservers; i++) {
            int st = u->workers[w].srv[i].brk.state;
            if (st == FY_BRK_OPEN) fy_gauge_add(u->brk_open_ids[i], -1);
            if (st == FY_BRK_HALF_OPEN) fy_gauge_add(u->brk_half_ids[i], -1);
        }
    free(u->brk_open_ids);
    free(u->brk_half_ids);
    for (int k = 0; k < 3; k++) free(u->brk_to_ids[k]);
}

/* One transition of worker w's breaker of `server`, from state `was`. */
static void transition(fy_upstream_t *u, int w, int server, int was, int r)
{
    if (r == FY_BRK_SAME) return;
    const fy_breaker_t *b = &u->workers[w].srv[server].brk;
    char a[64];
    const char *name = u->conf->name;
    const char *addr =
        fy_sock_addr_str((const struct sockaddr *)&u->servers[server].addr, a, sizeof a);
    if (was == FY_BRK_OPEN) fy_gauge_add(u->brk_open_ids[server], -1);
    if (was == FY_BRK_HALF_OPEN) fy_gauge_add(u->brk_half_ids[server], -1);
    switch (r) {
    case FY_BRK_TO_OPEN: {
        fy_gauge_add(u->brk_open_ids[server], 1);
        fy_counter_inc(u->brk_to_ids[0][server]);
        const fy_breaker_conf_t *c = u->conf->breaker;
        const char *why = b->why == FY_BRK_WHY_CONSECUTIVE ? "consecutive failures"
                          : b->why == FY_BRK_WHY_RATE      ? "error rate over the window"
                                                           : "a half-open trial failed";
        fy_warn("upstream %s: server %s circuit breaker open for %llu ms (worker %d): %s "
                "(consecutive-failures %lld, error-rate %lld%%)",
                name, addr, (unsigned long long)b->open_for_ms, w, why, (long long)c->consecutive,
                (long long)c->error_rate);
        break;
    }
    case FY_BRK_TO_HALF_OPEN:
        fy_gauge_add(u->brk_half_ids[server], 1);
        fy_counter_inc(u->brk_to_ids[1][server]);
        fy_info("upstream %s: server %s circuit breaker half-open (worker %d): up to %lld "
                "trial requests",
                name, addr, w, (long long)u->conf->breaker->half_open_requests);
        break;
    default:
        fy_counter_inc(u->brk_to_ids[2][server]);
        fy_info("upstream %s: server %s circuit breaker closed (worker %d): trials succeeded", name,
                addr, w);
    }
}

void fy__upstream_breaker_record(fy_upstream_t *u, int w, int server, bool ok, uint64_t now_ms)
{
    fy_breaker_t *b = &u->workers[w].srv[server].brk;
    int was = b->state;
    transition(u, w, server, was, fy_breaker_record(b, u->conf->breaker, ok, now_ms));
}

/* not closed: out of line, so that the closed case pays no frame for the log buffers */
static __attribute__((noinline)) bool admit_slow(fy_upstream_t *u, int w, int server,
                                                 uint64_t now_ms)
{
    const fy_breaker_conf_t *c = u->conf->breaker;
    fy_breaker_t *b = &u->workers[w].srv[server].brk;
    if (!fy_breaker_usable(b, c, now_ms)) return false;
    int was = b->state;
    transition(u, w, server, was, fy_breaker_admit(b, c, now_ms));
    return true;
}

bool fy_upstream_admit(fy_upstream_t *u, int w, int server, uint64_t now_ms)
{
    if (!u->conf->breaker || u->workers[w].srv[server].brk.state == FY_BRK_CLOSED) return true;
    return admit_slow(u, w, server, now_ms);
}

void fy_upstream_count_request(fy_upstream_t *u, int w, uint64_t now_ms)
{
    if (u->conf->retry_budget)
        fy_retry_budget_request(&u->workers[w].budget, u->conf->retry_budget, now_ms);
}

bool fy_upstream_retry_take(fy_upstream_t *u, int w, uint64_t now_ms)
{
    const fy_retry_budget_conf_t *c = u->conf->retry_budget;
    if (!c || fy_retry_budget_take(&u->workers[w].budget, c, now_ms)) return true;
    fy_counter_inc(u->budget_id);
    return false;
}

void fy_upstream_count_hedge(fy_upstream_t *u, bool won)
{
    fy_counter_inc(won ? u->hedge_win_id : u->hedge_id);
}
