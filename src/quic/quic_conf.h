/* Typed QUIC transport settings (`quic:`), shared by every listener that lists `h3`.
 * Table: quic/quic_conf.c.
 * Threads: built on the main thread while a config generation loads, then read-only and shared
 * by every worker for that generation's life. */
#ifndef FY_QUIC_QUIC_CONF_H
#define FY_QUIC_QUIC_CONF_H

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"

enum fy_quic_cc { FY_QUIC_CC_CUBIC = 0, FY_QUIC_CC_BBR = 1, FY_QUIC_CC_RENO = 2 };

typedef struct fy_quic_conf {
    bool retry;                    /* `retry`: address validation with Retry tokens, default off */
    int cc;                        /* `congestion-control`: enum fy_quic_cc, default cubic */
    uint64_t idle_timeout_ms;      /* `idle-timeout`, default 30s */
    uint64_t handshake_timeout_ms; /* `handshake-timeout`, default 10s */
    int64_t max_streams;           /* `max-streams`: concurrent request streams, default 100 */
    uint64_t stream_window;        /* `stream-window`: request body bytes per stream, 256k */
    uint64_t connection_window;    /* `connection-window`: per connection, default 4m */
    uint64_t send_buffer;          /* `send-buffer`: response bytes queued per stream, 256k */
    uint64_t max_datagram_size;    /* `max-datagram-frame-size`: 0 disables DATAGRAM, 1200 */
    uint64_t qpack_table_capacity; /* `qpack-table-capacity`: our decoder's table, 4k */
    int64_t qpack_blocked_streams; /* `qpack-blocked-streams`, default 16 */
    int64_t max_connections;       /* `max-connections` per worker and listener, 10000 */
    int64_t wt_max_sessions;       /* `webtransport-max-sessions` per connection, default 4 */
    int64_t wt_max_streams;        /* `webtransport-max-streams` peer streams per session, 100 */
} fy_quic_conf_t;

extern const fy_conf_directive_t fy_quic_conf_table[];

#endif
