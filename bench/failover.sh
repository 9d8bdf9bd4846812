#!/usr/bin/env bash
# bench/failover.sh — the cluster's failover table: how long cross-node
# delivery stops, and how many frames are lost, when a node dies, freezes or
# is cut off; beside JetStream's own failover.
#
#   bench/failover.sh [--repeat N] [--floor N] [--out DIR]
#
# Runs the e2e fault suite (TestClusterFaults and TestClusterPartialLink:
# three `ovbus serve` processes, a sender on every node at 100 frames/s, two
# receivers on every node; SIGKILL and SIGSTOP of the stream's leader and of
# a follower, node 2's routes cut and healed, one route cut; each in order
# "total" and "sender") N times (default 3), built without the race
# detector, with OVBUS_FAULT_REPORT set: the suite writes, per fault, the
# longest time a receiver on a node the fault did not hit went without a
# frame from another such node, the frames lost, and how long the cluster
# took to settle. Then `clusterfloor -failover -repeat N` (default 3): the
# same kill of a leader against JetStream alone (a stream, and a lease kept
# on a KV bucket by compare-and-set).
#
# Writes DIR/failover-DATE.md (the commit, the machine, the load and stolen
# CPU, the tables) and DIR/failover-DATE.jsonl (the suite's rows); DIR
# defaults to bench/results. Each step is bounded by `timeout`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
repeat=3
floor=3
out=$root/bench/results
while [[ $# -gt 0 ]]; do
	case $1 in
	--repeat) repeat=$2; shift 2 ;;
	--floor) floor=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) echo "failover.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp=$(date +%Y-%m-%d-%H%M)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log() { echo "failover.sh: $*" >&2; }

# shellcheck source=bench/load.sh
. "$here/load.sh"
load=$(cut -d' ' -f1-3 /proc/loadavg)
stolen=$(steal)
commit=$(cd "$root" && git rev-parse HEAD)$(cd "$root" && git diff --quiet HEAD -- . || echo " (with uncommitted changes)")
rows=$out/failover-$stamp.jsonl
: >"$rows"
for i in $(seq 1 "$repeat"); do
	log "fault suite, run $i/$repeat"
	(cd "$root" && OVBUS_FAULT_REPORT=$rows timeout 1200 go test -count=1 -timeout 20m \
		-run '^(TestClusterFaults|TestClusterPartialLink)$' ./e2e/ >"$tmp/suite-$i.txt" 2>&1) ||
		{ log "the fault suite failed in run $i:"; tail -40 "$tmp/suite-$i.txt" >&2; exit 1; }
done
(cd "$root" && go build -o "$tmp/clusterfloor" ./bench/cmd/clusterfloor)
log "JetStream's own failover, $floor kills of each kind"
timeout 1200 "$tmp/clusterfloor" -failover -repeat "$floor" -json "$tmp/floor.json" >"$tmp/floor.txt" 2>&1 ||
	{ log "clusterfloor failed:"; cat "$tmp/floor.txt" >&2; exit 1; }
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
stolen_after=$(steal)
{
	echo "# ovbus: failover (bench/failover.sh)"
	echo
	echo "- commit: $commit"
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- load average before: $load ($stolen); after: $load_after ($stolen_after)"
	echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -sr), $(go version | cut -d' ' -f3);"
	echo "  three \`ovbus serve\` processes (no race detector) and the test's clients share the $(nproc) cores"
	echo "- commands: bench/failover.sh --repeat $repeat --floor $floor, which ran $repeat times"
	echo "  \`OVBUS_FAULT_REPORT=bench/results/failover-$stamp.jsonl go test -count=1 -run '^(TestClusterFaults|TestClusterPartialLink)\$' ./e2e/\`"
	echo "  and \`clusterfloor -failover -repeat $floor\`"
	echo
	echo "## ovbus, three nodes (e2e fault suite; a sender on every node at 100 frames/s)"
	echo
	echo "Longest cross-node silence: the longest time, from the fault to the cluster settling, that a receiver on a"
	echo "node the fault did not hit got no frame from a sender on another such node. Frames lost: sent by a killed"
	echo "node's client and received by no surviving client (the checker allows only those, and only the last ones)."
	echo
	python3 - "$rows" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
keys = []
for r in rows:
    k = (r["order"], r["fault"])
    if k not in keys:
        keys.append(k)
print("| order | fault | runs | longest cross-node silence: max | median | frames lost per run | settled after (median) |")
print("|---|---|---:|---:|---:|---|---:|")
for k in keys:
    rs = [r for r in rows if (r["order"], r["fault"]) == k]
    sil = [r["longest_silence_s"] for r in rs]
    lost = ", ".join(str(r["lost"]) for r in rs)
    rec = statistics.median(r["recovery_s"] for r in rs)
    print(f"| {k[0]} | {k[1]} | {len(rs)} | {max(sil):.3f} s | {statistics.median(sil):.3f} s | {lost} | {rec:.1f} s |")
EOF
	echo
	echo "## JetStream alone (bench/cmd/clusterfloor -failover)"
	echo
	echo "Three embedded nats-servers, an R3 memory stream (and a KV bucket, R3, memory, TTL 2 s) as order \"total\""
	echo "would use them: a publish every 5 ms from one server (a lease renewal every 10 ms), the leader's process killed."
	echo
	cat "$tmp/floor.txt"
} >"$out/failover-$stamp.md"
log "wrote $out/failover-$stamp.md and .jsonl"
