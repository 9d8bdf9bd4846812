#!/usr/bin/env bash
# bench/micro.sh — the micro-benchmarks BENCHMARKS.md quotes, into a results file.
#
#   bench/micro.sh [--count N] [--out FILE]
#
# Runs, from the repository root, one after the other:
#   (cd ws && go test -run '^$' -bench 'BenchmarkRoundTrip|BenchmarkMask|BenchmarkUTF8|BenchmarkEcho' -benchmem -count N .)
#   go test -run '^$' -bench BenchmarkFanout -benchtime 50000x -benchmem -count N ./bus/
#   python3 bench/wsproto/roundtrip.py --size small|large [--deflate]   (when wsproto is installed)
# and writes FILE (default bench/results/micro-DATE.txt): the date, the commit
# (with +dirty when the tree has uncommitted changes), the Go version, the CPU,
# the load average before and after, then each command line followed by its
# output as printed, and the ratio of wsproto's small round trip to ws's
# (BenchmarkRoundTrip/small, median) of the same run. Every figure of the micro-benchmark and wsproto tables in
# BENCHMARKS.md must come from such a file. The machine should be quiet: the
# file records the load so that a reader can judge.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
count=3
out="bench/results/micro-$(date -u +%Y-%m-%d).txt"
while [ $# -gt 0 ]; do
  case $1 in
    --count) count=$2; shift 2;;
    --out) out=$2; shift 2;;
    *) echo "usage: bench/micro.sh [--count N] [--out FILE]" >&2; exit 2;;
  esac
done

commit=$(git rev-parse HEAD)
git diff --quiet HEAD || commit="$commit+dirty"
mkdir -p "$(dirname "$out")"
{
  echo "# bench/micro.sh --count $count"
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:  $commit"
  echo "go:      $(go version)"
  echo "cpu:     $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') × $(nproc)"
  echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (before)"
} >"$out"

run() {
  echo "" >>"$out"
  echo "\$ $*" >>"$out"
  "$@" 2>&1 | tee -a "$out"
}
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
# ws is a module of its own: its benchmarks run from ws/.
echo "" >>"$out"; echo "# from ws/ (cd ws):" >>"$out"
(cd ws && run go test -run '^$' -bench 'BenchmarkRoundTrip|BenchmarkMask|BenchmarkUTF8|BenchmarkEcho' -benchmem -count "$count" .)
run go test -run '^$' -bench BenchmarkFanout -benchtime 50000x -benchmem -count "$count" ./bus/
if /usr/bin/python3 -c 'import wsproto' 2>/dev/null; then
  for args in "--size small" "--size large" "--size small --deflate"; do
    # shellcheck disable=SC2086
    run /usr/bin/python3 bench/wsproto/roundtrip.py $args
  done
  # The ratio of the same run: the median of ws's BenchmarkRoundTrip/small
  # (ns/op) against wsproto's small figure (µs per iteration, a median).
  ratio=$(awk '
    /^BenchmarkRoundTrip\/small-[0-9]+ / { v[++n] = $3 }
    /^wsproto .* size=small deflate=False/ { for (i = 1; i <= NF; i++) if ($i ~ /^us_per_iteration=/) { split($i, a, "="); w = a[2] } }
    END {
      if (!n || !w) exit
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
      printf "ratio:   wsproto small %.2f us / ws RoundTrip/small median %.1f ns = x%.0f\n", w, m, w * 1000 / m
    }' "$out")
  [ -n "$ratio" ] && { echo "" >>"$out"; echo "$ratio" | tee -a "$out"; }
else
  echo "" >>"$out"
  echo "(wsproto not installed: no wsproto figures)" >>"$out"
fi
echo "" >>"$out"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (after)" >>"$out"
echo "wrote $out" >&2
