#!/bin/sh
# Build every fuzz/fuzz_*.c with clang's libFuzzer (+ASan/UBSan) and run each for N seconds.
# New inputs go to build-fuzz/corpus-NAME (the seed corpora in fuzz/corpus stay small).
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
out=build-fuzz
mkdir -p $out
srcs=$(find src -mindepth 2 -name '*.c' ! -name '*_test.c' | sort)
for drv in fuzz/fuzz_*.c; do
  name=$(basename "$drv" .c)
  corpus=${name#fuzz_}
  echo "== $name ($secs s)"
  clang -std=gnu17 -g -O1 -D_GNU_SOURCE -Isrc -fsanitize=fuzzer,address,undefined \
    -o $out/$name "$drv" $srcs src/config.c -lssl -lcrypto -lyaml -lpcre2-8 -lnghttp2 -lngtcp2_crypto_gnutls -lngtcp2 -lgnutls -lnghttp3 -lpthread
  mkdir -p $out/corpus-$corpus
  $out/$name -max_total_time="$secs" -print_final_stats=1 $out/corpus-$corpus fuzz/corpus/$corpus
done
