#!/usr/bin/env bash
# cluster-faults.sh [N]: runs the cluster's fault suite (e2e TestClusterFaults,
# TestClusterStartFirst and TestClusterPartialLink: three `ovbus serve`
# processes, built with the race detector, under SIGKILL, SIGSTOP, cut routes
# and a late start, in both orders) N
# times in a row (default 20) with two busy loops beside it (two processes
# spinning on a CPU each), as on a loaded machine, and stops at the first
# failure. Each run's output goes to $FAULTS_DIR/run-K.log (default a new
# directory under $TMPDIR); one line per run says how it went, then a
# summary line with the load average. The busy loops are stopped on exit,
# by their pids.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
dir=${FAULTS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/ovbus-faults.XXXXXX")}
mkdir -p "$dir"

sh -c 'while :; do :; done' & busy1=$!
sh -c 'while :; do :; done' & busy2=$!
trap 'kill $busy1 $busy2 2>/dev/null || true' EXIT

echo "cluster-faults: the fault suite $runs times beside two busy loops (pids $busy1 $busy2) on $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +dirty), $(nproc) cores; logs in $dir"
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  if go test -race -count=1 -timeout 20m -run '^(TestClusterFaults|TestClusterStartFirst|TestClusterPartialLink)$' -v ./e2e/ >"$dir/run-$i.log" 2>&1; then
    echo "cluster-faults: run $i/$runs ok ($(( $(date +%s) - start ))s, load $(cut -d' ' -f1-3 /proc/loadavg))"
  else
    echo "cluster-faults: run $i/$runs FAILED ($(( $(date +%s) - start ))s); the end of $dir/run-$i.log:"
    grep -E -- '^(--- FAIL|FAIL|panic|WARNING: DATA RACE)|faults_test.go|faultcheck_test.go' "$dir/run-$i.log" | head -40 || true
    exit 1
  fi
done
echo "cluster-faults: $runs/$runs runs green"
