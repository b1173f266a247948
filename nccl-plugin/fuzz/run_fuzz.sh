#!/usr/bin/env bash
# Runs the wire-parser fuzzer for a bounded time from a fresh seed corpus.
#   run_fuzz.sh <seed-writer> <fuzzer> <dict> <seconds> [max-len (default 512)]
set -euo pipefail
seeds=$1 fuzzer=$2 dict=$3 secs=$4 max_len=${5:-512}
work=$(mktemp -d /tmp/tqplg-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
"$seeds" "$work/corpus"
cd "$work"   # crash-* files land here; on failure they are printed (hex) before the cleanup
rc=0
"$fuzzer" -max_total_time="$secs" -dict="$dict" -print_final_stats=1 -rss_limit_mb=2048 \
  -timeout=10 -max_len="$max_len" corpus || rc=$?
for f in crash-* leak-* timeout-* oom-*; do
  [[ -e $f ]] && { echo "== $f"; od -A d -t x1 "$f" | head -20; }
done
exit $rc
