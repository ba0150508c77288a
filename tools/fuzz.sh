#!/bin/sh
# Build every fuzz/fuzz_*.c with clang's libFuzzer (+ASan/UBSan) and run each for N seconds.
# Usage: tools/fuzz.sh [SECONDS] [DRIVER...]   (e.g. tools/fuzz.sh 5 fuzz_path_norm)
# The library sources (everything CMake links into ferry_app, i.e. all of src/ but main.c and
# the unit tests) are compiled once into build-fuzz/obj, two at a time, then each driver is
# linked against them. New inputs go to build-fuzz/corpus-NAME (the seed corpora in
# fuzz/corpus stay small). Exits non-zero if a build fails or a driver finds a crash.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
out=build-fuzz
cc=${CC_FUZZ:-clang}
cflags="-std=gnu17 -g -O1 -D_GNU_SOURCE -Isrc -Iinclude -fsanitize=fuzzer-no-link,address,undefined"
libs="-lssl -lcrypto -lyaml -lpcre2-8 -lnghttp2 -lngtcp2_crypto_gnutls -lngtcp2 -lgnutls
  -lnghttp3 -lz -lbrotlienc -lbrotlidec -lzstd -lpthread -lm"
mkdir -p $out/obj

srcs=$(find src -name '*.c' ! -name '*_test.c' ! -path src/main.c | sort)
echo "== compiling $(echo "$srcs" | wc -l) library sources"
# one object per source, named after its path (src/h1/h1_parse.c -> h1_h1_parse.o)
echo "$srcs" | CC="$cc" CFLAGS="$cflags" OUT="$out/obj" xargs -P2 -n1 sh -c '
  o="$OUT/$(echo "${1#src/}" | tr / _ | sed "s/\.c$/.o/")"
  $CC $CFLAGS -c -o "$o" "$1"' sh
objs=$(for s in $srcs; do echo "$out/obj/$(echo "${s#src/}" | tr / _ | sed 's/\.c$/.o/')"; done)

if [ $# -gt 0 ]; then
  drivers=$(for d in "$@"; do echo "fuzz/${d%.c}.c"; done)
else
  drivers=$(ls fuzz/fuzz_*.c)
fi
for drv in $drivers; do
  name=$(basename "$drv" .c)
  corpus=${name#fuzz_}
  echo "== $name ($secs s)"
  # shellcheck disable=SC2086
  $cc $cflags -fsanitize=fuzzer -o $out/$name "$drv" $objs $libs
  mkdir -p $out/corpus-$corpus
  $out/$name -max_total_time="$secs" -print_final_stats=1 $out/corpus-$corpus fuzz/corpus/$corpus
done
