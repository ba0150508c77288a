/* What an intercepted tunnel's TLS looked like, for the inspector's detail view: the client's
 * handshake with us and the certificate we forged for it, and the probe's handshake with the
 * origin and the origin's certificate. Filled once per tunnel (hand-over, probe), read per
 * exchange. */
#include "handler/mitm_int.h"

void fy__mitm_tls_describe(SSL *ssl, bool peer, fy_mitm_peer_tls_t *out)
{
    fy_tls_mitm_describe(ssl, peer, out);
}

const fy_mitm_tls_facts_t *fy_mitm_tls_facts(const fy_exchange_t *ex)
{
    const fy__mitm_tunnel_info_t *ti = ex->tunnel;
    return ti && !ti->plain && ti->tls.client.version[0] ? &ti->tls : NULL;
}
