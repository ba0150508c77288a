/* Destination control of the intercepting proxy (`intercept.destinations`): ordered allow /
 * deny rules over destination hosts (CIDRs against the resolved address, name patterns
 * against the name) and ports. Used by handler/mitm.c for CONNECT, absolute-form requests,
 * SOCKS5 and transparent connections. Immutable once built: any thread may check. */
#ifndef FY_HANDLER_MITM_DEST_H
#define FY_HANDLER_MITM_DEST_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "conf/conf.h"

typedef struct fy_mitm_dest fy_mitm_dest_t;

/* Compile `rules` (a list of fy_mitm_dest_rule_t, validated by the config table; borrowed,
 * must outlive the result). Never NULL (aborts on OOM). */
fy_mitm_dest_t *fy__mitm_dest_new(const fy_conf_list_t *rules);
void fy__mitm_dest_free(fy_mitm_dest_t *d);

enum { FY_DEST_DENY = 0, FY_DEST_ALLOW = 1, FY_DEST_NEED_ADDR = -1 };

/* May a client go to `name`:`port`? `addr` is the address it resolved to, or NULL when not
 * known yet: then FY_DEST_NEED_ADDR when the answer depends on it (an address rule comes
 * before any rule the name alone decides). A name that is an IP literal is its own address.
 * On FY_DEST_DENY, `why` (may be NULL) gets "H:P is denied by intercept.destinations[i]
 * (line L: ...)". */
int fy__mitm_dest_check(const fy_mitm_dest_t *d, const char *name, int port,
                        const struct sockaddr *addr, char *why, size_t whylen);

/* The address a connect to `sa` really reaches: an IPv4-mapped IPv6 address is its IPv4
 * address, and the unspecified address (0.0.0.0, ::) is loopback (Linux connects there).
 * The port is kept; `out` is zeroed first. */
void fy__mitm_dest_normalise(const struct sockaddr *sa, struct sockaddr_storage *out);

#endif
