/* libFuzzer driver: arbitrary bytes through the whole config loader (YAML parser, directive
 * engine, every module table, validators). Errors go to /dev/null; a config that loads is
 * also dumped, so the dump path is fuzzed too. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    fy_config_t *cfg = fy_config_load_text("fuzz.yaml", (const char *)data, size, devnull);
    if (cfg) {
        fy_config_dump(cfg, devnull);
        fy_config_free(cfg);
    }
    return 0;
}
