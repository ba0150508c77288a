#!/bin/sh
# Rejects banned functions and upward #includes (DESIGN.md §3 layer order).
set -eu
cd "$(dirname "$0")/.."
fail=0
banned='\b(strcpy|strcat|sprintf|vsprintf|gets|atoi|strtok)[[:space:]]*\('
if grep -nE "$banned" $(git ls-files 'src/*.c' 'src/*.h' 'tools/load/*.c' 2>/dev/null || find src -name '*.[ch]') ; then
  echo "check-style: banned function (use snprintf/memcpy/strtol/strtok_r)"; fail=1
fi
# layer rank: a file may include only its own folder or lower ranks
rank() {
  case "$1" in
    core) echo 0;; conf) echo 1;; tls) echo 2;; net) echo 3;; quic) echo 4;; http) echo 5;;
    h1|h2|h3) echo 6;; upstream) echo 7;; policy) echo 8;; handler|l4) echo 9;; ops) echo 10;;
    *) echo 11;;
  esac
}
for f in $(find src -mindepth 2 -name '*.[ch]'); do
  mod=$(echo "$f" | cut -d/ -f2)
  r=$(rank "$mod")
  for inc in $(sed -n 's/^#include "\([a-z0-9_]*\)\/.*/\1/p' "$f"); do
    ri=$(rank "$inc")
    if [ "$inc" != "$mod" ] && [ "$ri" -ge "$r" ]; then
      echo "check-style: $f includes $inc/ (layer $inc is not below $mod)"; fail=1
    fi
  done
  # the embedding API (include/ferry/) is what handler and above implement: lower layers
  # never see it
  if [ "$r" -lt "$(rank handler)" ] && grep -q '^#include <ferry/' "$f"; then
    echo "check-style: $f includes <ferry/...> (the embedding API sits at the handler layer)"
    fail=1
  fi
done
[ $fail = 0 ] && echo "check-style: ok"
exit $fail
