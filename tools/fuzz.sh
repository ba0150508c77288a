#!/bin/sh
# Build every fuzz/fuzz_*.c as a clang libFuzzer driver (+ASan/UBSan, CMake option FY_FUZZ, in
# build-fuzz/) and run each for N seconds (default 60) on its seed corpus.
# New inputs go to build-fuzz/corpus-NAME (the seed corpora in fuzz/corpus stay small).
# Exits non-zero when a driver does not build or finds a crash.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
out=build-fuzz
cmake -S . -B $out -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DFY_FUZZ=ON \
  -DFY_WERROR=OFF >/dev/null
cmake --build $out --target fuzz_drivers -j "$(nproc)" -- --no-print-directory -s
for drv in fuzz/fuzz_*.c; do
  name=$(basename "$drv" .c)
  corpus=${name#fuzz_}
  mkdir -p $out/corpus-$corpus
  echo "== $name ($secs s)"
  ASAN_OPTIONS=detect_leaks=1 $out/fuzz/$name -max_total_time="$secs" -print_final_stats=0 \
    -artifact_prefix=$out/crash-$corpus- $out/corpus-$corpus fuzz/corpus/$corpus 2>$out/$name.log ||
    { tail -40 $out/$name.log; echo "fuzz: $name failed (log: $out/$name.log)"; exit 1; }
  grep -E '^#[0-9]+.*DONE|Done [0-9]+ runs' $out/$name.log | tail -1
done
echo "fuzz: every driver ran ${secs} s without a crash"
