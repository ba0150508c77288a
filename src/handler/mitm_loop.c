/* Intercepting proxy self-loop detection: is a destination one of our own proxy listeners?
 * Thread rules: any worker; own[] is written only before the workers start. */
#include "handler/mitm_int.h"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <string.h>

/* Is the (normalised) address one of this host's: loopback, or on one of its interfaces? */
static bool addr_is_local(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET &&
        (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127)
        return true;
    if (sa->sa_family == AF_INET6 &&
        IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr))
        return true;
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) < 0) return true; /* cannot tell: rather refuse than loop */
    bool local = false;
    for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next) {
        const struct sockaddr *a = i->ifa_addr;
        if (!a || a->sa_family != sa->sa_family) continue;
        if (a->sa_family == AF_INET)
            local = ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
                    ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
        else
            local = memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                           &((const struct sockaddr_in6 *)sa)->sin6_addr, 16) == 0;
    }
    freeifaddrs(ifs);
    return local;
}

/* Would a connection to `sa` reach one of our own proxy listeners? Every spelling of an address
   counts (`[::ffff:127.0.0.1]`, `0.0.0.0`, `127.1` and the numeric forms resolve to these); a
   listener bound to a wildcard is reached through any of this host's addresses of its family
   (IPv6 listeners are IPV6_V6ONLY). */
bool fy__mitm_loops(const fy__mitm_t *m, const struct sockaddr *sa)
{
    struct sockaddr_storage d;
    fy__mitm_dest_normalise(sa, &d);
    const struct sockaddr *dst = (const struct sockaddr *)&d;
    int local = -1; /* not asked yet */
    for (size_t i = 0; i < m->nown; i++) {
        struct sockaddr_storage os;
        const struct sockaddr *raw = (const struct sockaddr *)&m->own[i];
        bool wild = (raw->sa_family == AF_INET &&
                     ((const struct sockaddr_in *)raw)->sin_addr.s_addr == htonl(INADDR_ANY)) ||
                    (raw->sa_family == AF_INET6 &&
                     IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)raw)->sin6_addr));
        fy__mitm_dest_normalise(raw, &os);
        const struct sockaddr *o = (const struct sockaddr *)&os;
        if (o->sa_family != dst->sa_family) continue;
        if (dst->sa_family == AF_INET) {
            const struct sockaddr_in *a = (const void *)dst, *b = (const void *)o;
            if (a->sin_port != b->sin_port) continue;
            if (!wild && a->sin_addr.s_addr == b->sin_addr.s_addr) return true;
        } else {
            const struct sockaddr_in6 *a = (const void *)dst, *b = (const void *)o;
            if (a->sin6_port != b->sin6_port) continue;
            if (!wild && memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0)
                return true;
        }
        if (wild) {
            if (local < 0) local = addr_is_local(dst);
            if (local) return true;
        }
    }
    return false;
}

void fy_mitm_add_own_address(fy_handler_t *h, const struct sockaddr *sa, socklen_t len)
{
    fy__mitm_t *m = (fy__mitm_t *)h;
    if (m->nown < sizeof m->own / sizeof m->own[0] && len <= sizeof m->own[0])
        memcpy(&m->own[m->nown++], sa, len);
}
