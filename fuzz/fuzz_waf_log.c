/* libFuzzer entry for the WAF's reading of ModSecurity log lines (src/policy/waf_conf.c:
 * fy__waf_log_fields): the lines quote request bytes. Traps when a field points outside the
 * line, when a found id is not 1..10 digits, or when the message does not come after it. */
#include "policy/waf_conf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = malloc(size + 1);
    if (!line) return 0;
    memcpy(line, data, size);
    line[size] = '\0';
    size_t len = strlen(line);
    const char *id, *msg;
    size_t il, ml;
    bool ok = fy__waf_log_fields(line, &id, &il, &msg, &ml);
    if (ok) {
        if (id < line || id + il > line + len || il == 0 || il > 10) abort();
        for (size_t i = 0; i < il; i++)
            if (id[i] < '0' || id[i] > '9') abort();
        if (ml && (msg < id + il || msg + ml > line + len)) abort();
    } else if (il || ml) {
        abort();
    }
    free(line);
    return 0;
}
