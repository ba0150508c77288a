/* SOCKS5 (RFC 1928, RFC 1929) message parser for the intercepting proxy's `kind: socks5`
 * listeners: the greeting, the username/password sub-negotiation and the request. Pure and
 * restartable: call again with more bytes (fuzzed: fuzz/fuzz_socks5.c).
 * Threads: pure; no shared state, callable from any thread. */
#ifndef FY_HANDLER_SOCKS5_H
#define FY_HANDLER_SOCKS5_H

#include <stddef.h>

enum fy_socks5_stage { FY_SOCKS5_GREETING = 0, FY_SOCKS5_AUTH, FY_SOCKS5_REQUEST };

#define FY_SOCKS5_M_NOAUTH 0x1u   /* method 0x00 offered */
#define FY_SOCKS5_M_USERPASS 0x2u /* method 0x02 offered */

#define FY_SOCKS5_CMD_CONNECT 1

typedef struct fy_socks5_msg {
    unsigned methods; /* greeting: FY_SOCKS5_M_* offered */
    char user[256];   /* auth: NUL-terminated (may hold NUL bytes earlier: compare lengths) */
    size_t user_len;
    char pass[256];
    size_t pass_len;
    int cmd;        /* request: 1 CONNECT, 2 BIND, 3 UDP ASSOCIATE */
    char host[256]; /* request: dotted IPv4, IPv6 text, or the domain name (lowercased) */
    int port;
} fy_socks5_msg_t;

#define FY_SOCKS5_EBAD (-1)  /* malformed: wrong version, bad lengths, bad name bytes */
#define FY_SOCKS5_EATYP (-2) /* request with an unknown address type (reply 8) */

/* Parse one message of `stage` from p[0, len). Returns the bytes it took (>0), 0 when more
 * are needed, or FY_SOCKS5_EBAD / FY_SOCKS5_EATYP. */
int fy_socks5_parse(int stage, const unsigned char *p, size_t len, fy_socks5_msg_t *m);

#endif
