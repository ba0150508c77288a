/* libFuzzer driver: arbitrary bytes as a discovery file (src/upstream/discovery_file.c): both
 * forms (one URL per line, YAML), the URL parser under them. Checks that a success wrote at
 * most `max` entries, each a NUL-terminated URL the URL parser accepts again, and that every
 * error message is NUL-terminated and names the file. Also runs the DNS answer-TTL walk
 * (src/net/dns.c) over the same bytes, the one DNS parser of ours besides c-ares'. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/dns.h"
#include "upstream/discovery.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fy_disc_entry_t out[8];
    char err[1024];
    memset(err, 'x', sizeof err);
    int n = fy_discovery_parse("fuzz.list", (const char *)data, size, out, 8, err, sizeof err);
    if (n > 8) abort();
    if (n < 0 && (!memchr(err, 0, sizeof err) || strncmp(err, "fuzz.list", 9) != 0)) abort();
    for (int i = 0; i < n; i++) {
        if (!memchr(out[i].url, 0, sizeof out[i].url)) abort();
        if (out[i].weight < 1 || out[i].weight > 1000) abort();
        fy_upstream_server_conf_t sv = {0};
        char host[256], auth[256], e2[700];
        if (fy_upstream_url_parse(out[i].url, &sv, true, host, auth, e2, sizeof e2) < 0) abort();
    }
    int64_t ttl = fy_dns_answer_ttl(data, size);
    if (ttl < -1 || ttl > 0x7fffffff) abort();
    return 0;
}
