/* Intercepting proxy pinning bypass: hosts that refuse the forged certificate are passed through.
 * Thread rules: called from any worker; the table is shared, under m->pin_lock. */
#include "handler/mitm_int.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"

bool fy__mitm_pinned(fy__mitm_t *m, const char *host, uint64_t now)
{
    bool r = false;
    pthread_mutex_lock(&m->pin_lock);
    for (int i = 0; i < FY__MITM_MAX_PINS; i++) {
        fy__mitm_pin_t *p = &m->pins[i];
        if (!p->host[0] || strcmp(p->host, host) != 0) continue;
        if (p->until_ms > now)
            r = true;
        else if (p->until_ms)
            memset(p, 0, sizeof *p); /* the bypass expired: try decrypting again */
        break;
    }
    pthread_mutex_unlock(&m->pin_lock);
    return r;
}

void fy__mitm_pin_fail(fy__mitm_t *m, const char *host, uint64_t now)
{
    if (m->conf->pin_failures <= 0) return;
    pthread_mutex_lock(&m->pin_lock);
    fy__mitm_pin_t *p = NULL, *spare = NULL;
    for (int i = 0; i < FY__MITM_MAX_PINS && !p; i++) {
        if (m->pins[i].host[0] && strcmp(m->pins[i].host, host) == 0) p = &m->pins[i];
        if (!spare && (!m->pins[i].host[0] || (m->pins[i].until_ms && m->pins[i].until_ms <= now)))
            spare = &m->pins[i];
    }
    if (!p) p = spare ? spare : &m->pins[(now ^ (uint64_t)(uintptr_t)host) % FY__MITM_MAX_PINS];
    if (strcmp(p->host, host) != 0) {
        memset(p, 0, sizeof *p);
        snprintf(p->host, sizeof p->host, "%s", host);
    }
    if (++p->fails >= m->conf->pin_failures) {
        p->until_ms = now + m->conf->pin_ttl_ms;
        p->fails = 0;
        fy_warn("mitm: %s refused the forged certificate %lld times (certificate pinning?): "
                "passing it through undecrypted for %llus",
                host, (long long)m->conf->pin_failures,
                (unsigned long long)(m->conf->pin_ttl_ms / 1000));
    }
    pthread_mutex_unlock(&m->pin_lock);
}
