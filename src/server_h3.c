/* The HTTP/3 side of a listener: its certificates loaded into GnuTLS for QUIC (reloaded when
 * the files change) and the Alt-Svc value its TCP side advertises. Main thread (generation
 * and slot building). */
#include "server_int.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "tls/tickets.h"

/* ---- HTTP/3 (QUIC over UDP on the TCP listener's address) ---- */

static uint64_t fnv_file(uint64_t h, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return h ^ 1;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
    fclose(f);
    return h;
}

/* Session tickets for QUIC: on unless `session-tickets: false`; with `ticket-keys`, GnuTLS's key
 * is derived from the file's first (encrypting) key, so a fleet sharing the file resumes each
 * other's h3 sessions as it does over TCP. Read again on every reload. */
static int h3_tickets(const fy_listener_conf_t *lc, fy_quic_server_t *qs)
{
    const fy_tls_conf_t *t = lc->tls;
    if (!t->session_tickets || !t->ticket_keys)
        return fy_quic_server_set_tickets(qs, t->session_tickets, NULL, 0);
    char msg[512];
    fy_tls_tickets_t *k = fy_tls_tickets_load(t->ticket_keys, msg, sizeof msg);
    if (!k) {
        fy_error("listener %s: h3: %s", lc->address, msg);
        return -1;
    }
    unsigned char first[80];
    size_t n = fy_tls_tickets_first(k, first);
    fy_tls_tickets_free(k);
    int r = fy_quic_server_set_tickets(qs, true, first, n);
    memset(first, 0, sizeof first);
    return r;
}

/* The listener's certificates, loaded into GnuTLS for QUIC (the same PEM files as OpenSSL):
 * a new server for the slot, or (a reload) the slot's server given the files when their
 * contents changed. Returns 0, or -1 after logging. */
int h3_certs(const fy_config_t *cfg, const fy_listener_conf_t *lc, slot_t *sl)
{
    const fy_tls_conf_t *t = lc->tls;
    size_t n = t->certificates.n + 2, k = 0;
    const char **certs = fy_xcalloc(n, sizeof *certs), **keys = fy_xcalloc(n, sizeof *keys);
    char sscert[4096], sskey[4096];
    int r = -1;
    if (t->cert && t->key) {
        certs[k] = t->cert;
        keys[k++] = t->key;
    }
    const fy_tls_cert_conf_t *cc = t->certificates.v;
    for (size_t i = 0; i < t->certificates.n; i++) {
        certs[k] = cc[i].cert;
        keys[k++] = cc[i].key;
    }
    if (t->self_signed) {
        if (fy_tls_selfsigned_ensure(cfg->data_dir, sscert, sskey, sizeof sscert) < 0) goto out;
        certs[k] = sscert;
        keys[k++] = sskey;
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < k; i++) h = fnv_file(fnv_file(h, certs[i]), keys[i]);
    if (!sl->quic) {
        sl->quic_conf = cfg->quic;
        sl->quic = fy_quic_server_new(&sl->quic_conf, certs, keys, k, lc->address);
        r = sl->quic ? 0 : -1;
    } else {
        r = h == sl->cert_hash ? 0 : fy_quic_server_set_certs(sl->quic, certs, keys, k);
    }
    if (r == 0) sl->cert_hash = h;
    if (r == 0) r = h3_tickets(lc, sl->quic);
out:
    free(certs);
    free(keys);
    return r;
}

/* `Alt-Svc: h3=":PORT"` for the TCP side of listeners that also serve h3 */
const char *h3_alt_svc(const fy_listener_conf_t *lc)
{
    if (!(lc->protocols & FY_PROTO_H3)) return NULL;
    const struct sockaddr *sa = (const struct sockaddr *)&lc->addr;
    unsigned port = ntohs(sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
                                                    : ((const struct sockaddr_in *)sa)->sin_port);
    char *v = fy_xmalloc(32);
    snprintf(v, 32, "h3=\":%u\"; ma=86400", port);
    return v;
}
