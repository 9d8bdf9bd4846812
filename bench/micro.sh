#!/usr/bin/env bash
# bench/micro.sh — the micro-benchmarks BENCHMARKS.md quotes, into a results file.
#
#   bench/micro.sh [--count N] [--pairs N] [--out FILE]
#
# Runs, from the repository root, one after the other:
#   (cd ws && go test -run '^$' -bench 'BenchmarkRoundTrip|BenchmarkMask|BenchmarkUTF8|BenchmarkEcho' -benchmem -count N .)
#   go test -run '^$' -bench BenchmarkFanout -benchtime 50000x -benchmem -count N ./bus/
#   python3 bench/wsproto/roundtrip.py --size small|large [--deflate]   (when wsproto is installed)
# then, for the ratio of the protocol cores, --pairs N (default 5) pairs of
# ws's BenchmarkRoundTrip/small (one test binary, -count 1) and wsproto's small
# round trip, one right after the other, so that a drift of a shared machine
# hits both sides alike,
# and writes FILE (default bench/results/micro-DATE.txt): the date, the commit
# (with +dirty when the tree has uncommitted changes), the Go version, the CPU,
# the load average before and after, then each command line followed by its
# output as printed, and the ratio: wsproto's median over ws's median of the
# pairs, with the lowest and highest ratio of a single pair. Every figure of the micro-benchmark and wsproto tables in
# BENCHMARKS.md must come from such a file. The machine should be quiet: the
# file records the load so that a reader can judge.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
count=3
pairs=5
out="bench/results/micro-$(date -u +%Y-%m-%d).txt"
while [ $# -gt 0 ]; do
  case $1 in
    --count) count=$2; shift 2;;
    --pairs) pairs=$2; shift 2;;
    --out) out=$2; shift 2;;
    *) echo "usage: bench/micro.sh [--count N] [--pairs N] [--out FILE]" >&2; exit 2;;
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
  # The ratio: pairs of ws's small round trip (ns/op) and wsproto's (µs per
  # iteration), each pair one right after the other.
  tmp=$(mktemp -d)
  (cd ws && go test -c -o "$tmp/ws.test" .)
  echo "" >>"$out"
  echo "# $pairs pairs: (cd ws && ./ws.test -test.run '^\$' -test.bench 'BenchmarkRoundTrip/small\$' -test.count 1), then /usr/bin/python3 bench/wsproto/roundtrip.py --size small" >>"$out"
  for i in $(seq "$pairs"); do
    ns=$(cd ws && "$tmp/ws.test" -test.run '^$' -test.bench 'BenchmarkRoundTrip/small$' -test.count 1 | awk '/^BenchmarkRoundTrip\/small/ { print $3 }')
    us=$(/usr/bin/python3 bench/wsproto/roundtrip.py --size small | sed -n 's/.*us_per_iteration=\([0-9.]*\).*/\1/p')
    echo "pair $i: ws ${ns} ns  wsproto ${us} us" | tee -a "$out"
  done
  rm -rf "$tmp"
  ratio=$(awk '
    function median(a, n,   i, j, t) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    /^pair [0-9]+: ws [0-9.]+ ns  wsproto [0-9.]+ us$/ {
      n++; w[n] = $4; p[n] = $7; r = $7 * 1000 / $4
      if (n == 1 || r < lo) lo = r
      if (n == 1 || r > hi) hi = r
    }
    END {
      if (!n) exit
      mw = median(w, n); mp = median(p, n)
      printf "ratio:   wsproto small %.2f us / ws RoundTrip/small %.1f ns (medians of %d pairs) = x%.0f (single pairs x%.0f-x%.0f)\n", mp, mw, n, mp * 1000 / mw, lo, hi
    }' "$out")
  [ -n "$ratio" ] && { echo "" >>"$out"; echo "$ratio" | tee -a "$out"; }
else
  echo "" >>"$out"
  echo "(wsproto not installed: no wsproto figures)" >>"$out"
fi
echo "" >>"$out"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (after)" >>"$out"
echo "wrote $out" >&2
