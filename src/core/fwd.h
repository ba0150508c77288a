/* Shared forward typedefs (no umbrella header: include what you use).
 * Threads: declarations only. */
#ifndef FY_CORE_FWD_H
#define FY_CORE_FWD_H

typedef struct fy_loop fy_loop_t;
typedef struct fy_io fy_io_t;
typedef struct fy_timer fy_timer_t;
typedef struct fy_arena fy_arena_t;
typedef struct fy_transport fy_transport_t;
typedef struct fy_transport_ops fy_transport_ops_t;
typedef struct fy_exchange fy_exchange_t;
typedef struct fy_handler fy_handler_t;
typedef struct fy_worker fy_worker_t;

#endif
