#!/usr/bin/env bash
# stress.sh [N [COMMAND...]]: runs COMMAND (default `make test`) N times
# (default 10) in a row with two busy loops beside it (two processes spinning
# on a CPU each), as on a loaded machine, and stops at the first failure.
# Each run's output goes to $STRESS_DIR/run-K.log (default a new directory
# under $TMPDIR); one line per run says how it went and the load average.
# The busy loops are stopped on exit, by their pids.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
shift || true
[ $# -gt 0 ] || set -- make test
dir=${STRESS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/ovbus-stress.XXXXXX")}
mkdir -p "$dir"

sh -c 'while :; do :; done' & busy1=$!
sh -c 'while :; do :; done' & busy2=$!
trap 'kill $busy1 $busy2 2>/dev/null || true' EXIT

echo "stress: \`$*\` $runs times beside two busy loops (pids $busy1 $busy2) on $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +dirty), $(nproc) cores; logs in $dir"
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  if "$@" >"$dir/run-$i.log" 2>&1; then
    echo "stress: run $i/$runs ok ($(( $(date +%s) - start ))s, load $(cut -d' ' -f1-3 /proc/loadavg))"
  else
    echo "stress: run $i/$runs FAILED ($(( $(date +%s) - start ))s); the end of $dir/run-$i.log:"
    grep -E -- '^(--- FAIL|FAIL|panic|WARNING: DATA RACE)|_test\.go:[0-9]+:' "$dir/run-$i.log" | head -40 || true
    tail -20 "$dir/run-$i.log"
    exit 1
  fi
done
echo "stress: $runs/$runs runs green"
