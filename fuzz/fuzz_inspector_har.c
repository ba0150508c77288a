/* libFuzzer target: HAR documents uploaded to the inspector (POST /api/import), read by the
 * small JSON reader in ops/inspector_har.c. The store behind it takes no flow (queue-bytes 1:
 * every submit is dropped at once), so only parsing and the flow mapping run. Invariant: the
 * import either refuses the document (-1 with a reason) or counts at most its entries. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/inspector_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fy_inspector_t ins;
    if (!ins.store) {
        fy_cs_conf_t c = {.dir = "/tmp/ferry-fuzz-inspector-har",
                          .max_size = 1 << 20,
                          .body_cap = 1 << 16,
                          .max_queue = 1,
                          .max_queue_bytes = 1};
        ins.store = fy_cs_open(&c);
        if (!ins.store) abort();
    }
    const char *err = NULL;
    long n = fy__insp_har_import(&ins, (const char *)data, size, &err);
    if (n < 0 && !err) abort();
    if (n > 0) abort(); /* nothing can be queued */
    return 0;
}
