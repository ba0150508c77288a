#!/bin/sh
# Regenerates the reference part of docs/CONFIG.md (below the marker) from `ferry doc-config`.
set -eu
cd "$(dirname "$0")/.."
bin=${1:-build/ferry}
marker='<!-- Everything below is generated from the directive tables by `ferry doc-config`'
start=$(grep -nF "$marker" docs/CONFIG.md | cut -d: -f1)
[ -n "$start" ] || { echo "regen-config-doc: marker not found in docs/CONFIG.md" >&2; exit 1; }
# the marker comment ends at the first line with "-->"; one blank line follows it
end=$(tail -n +"$start" docs/CONFIG.md | grep -n -- '-->' | head -1 | cut -d: -f1)
{ head -n $((start + end - 1)) docs/CONFIG.md; echo; "$bin" doc-config; } > docs/CONFIG.md.new
mv docs/CONFIG.md.new docs/CONFIG.md
