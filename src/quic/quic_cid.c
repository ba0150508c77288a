/* QUIC connection IDs: the CID map, worker-marked CIDs, stateless reset, Retry packets.
 * Threads: the endpoint's worker loop thread only. */
#include "quic/quic_int.h"

#include <stdlib.h>

#include "core/alloc.h"

/* ---- connection-ID map ---- */

static size_t cid_hash(const ngtcp2_cid *cid)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a; CIDs are random, this only spreads them */
    for (size_t i = 0; i < cid->datalen; i++) h = (h ^ cid->data[i]) * 1099511628211ull;
    return (size_t)h;
}

cid_entry_t **fy__quic_map_slot(fy_quic_endpoint_t *ep, const ngtcp2_cid *cid)
{
    cid_entry_t **pp = &ep->buckets[cid_hash(cid) & (ep->nbuckets - 1)];
    while (*pp && !ngtcp2_cid_eq(&(*pp)->cid, cid)) pp = &(*pp)->next;
    return pp;
}

static void map_grow(fy_quic_endpoint_t *ep)
{
    size_t nb = ep->nbuckets * 2;
    cid_entry_t **b = fy_xcalloc(nb, sizeof *b);
    for (size_t i = 0; i < ep->nbuckets; i++)
        for (cid_entry_t *e = ep->buckets[i], *next; e; e = next) {
            next = e->next;
            size_t h = cid_hash(&e->cid) & (nb - 1);
            e->next = b[h];
            b[h] = e;
        }
    free(ep->buckets);
    ep->buckets = b;
    ep->nbuckets = nb;
}

fy_quic_conn_t *fy__quic_map_find(fy_quic_endpoint_t *ep, const uint8_t *id, size_t len)
{
    if (len > NGTCP2_MAX_CIDLEN) return NULL;
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, id, len);
    cid_entry_t *e = *fy__quic_map_slot(ep, &cid);
    return e ? e->c : NULL;
}

int fy__quic_map_add(fy_quic_conn_t *c, const ngtcp2_cid *cid)
{
    fy_quic_endpoint_t *ep = c->ep;
    if (c->ncids == MAX_CIDS) return -1;
    cid_entry_t **pp = fy__quic_map_slot(ep, cid);
    if (*pp) return (*pp)->c == c ? 0 : -1;
    cid_entry_t *e = fy_xmalloc(sizeof *e);
    e->cid = *cid;
    e->c = c;
    e->next = NULL;
    *pp = e;
    c->cids[c->ncids++] = *cid;
    if (++ep->nentries > ep->nbuckets) map_grow(ep);
    return 0;
}

void fy__quic_map_del(fy_quic_conn_t *c, const ngtcp2_cid *cid)
{
    fy_quic_endpoint_t *ep = c->ep;
    cid_entry_t **pp = fy__quic_map_slot(ep, cid);
    if (*pp && (*pp)->c == c) {
        cid_entry_t *e = *pp;
        *pp = e->next;
        free(e);
        ep->nentries--;
    }
    for (size_t i = 0; i < c->ncids; i++)
        if (ngtcp2_cid_eq(&c->cids[i], cid)) {
            c->cids[i] = c->cids[--c->ncids];
            break;
        }
}

void fy__quic_cid_mark(const fy_quic_endpoint_t *ep, uint8_t *b, size_t len)
{
    if (ep->index < 0 || len < 2) return;
    b[CID_EP] = (uint8_t)ep->index;
    b[CID_TAG] = ep->qs->tag;
}

int fy__quic_cb_get_new_cid(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token, size_t len,
                            void *ud)
{
    fy_quic_conn_t *c = ud;
    uint8_t b[NGTCP2_MAX_CIDLEN];
    for (int tries = 0; tries < 4; tries++) {
        fy__quic_rand_bytes(b, len);
        fy__quic_cid_mark(c->ep, b, len);
        ngtcp2_cid_init(cid, b, len);
        if (*fy__quic_map_slot(c->ep, cid)) continue;
        if (ngtcp2_crypto_generate_stateless_reset_token(token, c->ep->qs->secret,
                                                         sizeof c->ep->qs->secret, cid) != 0)
            return NGTCP2_ERR_CALLBACK_FAILURE;
        return fy__quic_map_add(c, cid) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
    }
    return NGTCP2_ERR_CALLBACK_FAILURE;
}

int fy__quic_cb_remove_cid(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *ud)
{
    fy__quic_map_del(ud, cid);
    return 0;
}

/* ---- Retry and stateless reset ---- */

void fy__quic_send_retry(fy_quic_endpoint_t *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *sa,
                         socklen_t salen)
{
    uint8_t tok[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], b[CIDLEN], out[TX_PKT_MAX];
    ngtcp2_cid scid;
    fy__quic_rand_bytes(b, sizeof b);
    ngtcp2_cid_init(&scid, b, sizeof b);
    ngtcp2_ssize tl = ngtcp2_crypto_generate_retry_token(
        tok, ep->qs->secret, sizeof ep->qs->secret, hd->version, (const ngtcp2_sockaddr *)sa, salen,
        &scid, &hd->dcid, fy__quic_now_ns());
    if (tl < 0) return;
    ngtcp2_ssize n = ngtcp2_crypto_write_retry(out, sizeof out, hd->version, &hd->scid, &scid,
                                               &hd->dcid, tok, (size_t)tl);
    if (n > 0) fy__quic_send_one(ep, sa, salen, out, (size_t)n);
}

void fy__quic_send_stateless_reset(fy_quic_endpoint_t *ep, const uint8_t *dcid, size_t dcidlen,
                                   size_t pktlen, const struct sockaddr *sa, socklen_t salen)
{
    /* smaller than what triggered it, so two endpoints cannot loop (RFC 9000 §10.3.3) */
    if (pktlen < 43 || dcidlen > NGTCP2_MAX_CIDLEN) return;
    size_t len = pktlen - 1 > 100 ? 100 : pktlen - 1;
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN], rnd[100], out[128];
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, dcid, dcidlen);
    if (ngtcp2_crypto_generate_stateless_reset_token(token, ep->qs->secret, sizeof ep->qs->secret,
                                                     &cid) != 0)
        return;
    size_t rl = len - NGTCP2_STATELESS_RESET_TOKENLEN;
    fy__quic_rand_bytes(rnd, rl);
    ngtcp2_ssize n = ngtcp2_pkt_write_stateless_reset(out, sizeof out, token, rnd, rl);
    if (n > 0) fy__quic_send_one(ep, sa, salen, out, (size_t)n);
}
