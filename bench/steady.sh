#!/usr/bin/env bash
# bench/steady.sh — steady traffic as an OVOS device's bus sees it: clients
# that each send a frame now and then, all the time, and all receive. ovbus
# against its peers with `ovbus bench --steady` and with the independent
# client, and the kernel's floor at the same rate, in one run.
#
#   bench/steady.sh [--repeat N] [--duration D] [--preset LIST] [--peers LIST]
#                   [--name NAME] [--out DIR] [--no-floor] [run.sh flags ...]
#
# Runs bench/run.sh --no-fanout --no-loadtest --steady LIST --crosscheck --pin
# (every server on the first half of the CPUs, every client on the other:
# CPU 0 and CPU 1 on a 2-CPU machine), then the floor, bench/cmd/fanfloor
# -steady LIST (its writer on CPU 0, its clients on CPU 1: the same frames at
# the same moments, relayed with raw write(2) calls and nothing else), with
# `vmstat -t 5` recording the load and the stolen CPU beside all of it. Writes
# into DIR (default bench/results), NAME defaulting to DATE-COMMIT (COMMIT
# with -dirty when the tree has uncommitted changes):
#
#   steady-NAME-bench.{md,json,svg}  ovbus bench --steady: the servers interleaved, medians of N
#   steady-NAME-client.{md,json}     bench/peers/cmd/client steady (gobwas/ws), the same scenarios and servers
#   steady-NAME-floor.{md,json}      the floors (targets floor-steady, -steady-corked, -steady-uring)
#   steady-NAME-machine.txt          the machine, the commit, the load before and after each part
#   steady-NAME-commands.txt         every command
#   steady-NAME-steal.txt            vmstat -t 5 over the whole run (column st: stolen by the host)
#
#   --preset LIST  steady scenarios (default steady: steady20, steady20-json, steady10)
#   --peers LIST   peers beside ovbus (default "uws gobwas")
#   --repeat N     runs of every scenario and server, and of the floor (default 3)
#   --duration D   how long each run sends (default 30s)
#   --no-floor     leave the floor out
# Other flags go to run.sh as they are (--quiet-load X, ...).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
repeat=3 duration=30s preset=steady peers="uws gobwas" name="" out=$root/bench/results floor=1
pass=()
while [[ $# -gt 0 ]]; do
	case $1 in
	--repeat) repeat=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--preset) preset=$2; shift 2 ;;
	--peers) peers=$2; shift 2 ;;
	--name) name=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--no-floor) floor=0; shift ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) pass+=("$1"); shift ;;
	esac
done
[[ $(nproc) -ge 2 ]] || { echo "steady.sh: needs at least 2 CPUs (servers and clients pinned apart)" >&2; exit 1; }
commit=$(cd "$root" && git rev-parse --short HEAD)$(cd "$root" && git diff --quiet HEAD || echo -dirty)
name=${name:-$(date -u +%Y-%m-%d)-$commit}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$root/bench/out/steady-$name
rm -rf "$work"
mkdir -p "$work"
dest=$out/steady-$name

vmstat -t 5 >"$work/steal.txt" &
vmstat_pid=$!
trap 'kill "$vmstat_pid" 2>/dev/null || true' EXIT

"$here/run.sh" --no-fanout --no-loadtest --steady "$preset" --duration "$duration" --repeat "$repeat" --peers "$peers" \
	--crosscheck --pin --out "$work" ${pass[@]+"${pass[@]}"}

if [[ $floor == 1 ]]; then
	(cd "$root" && go build -o "$work/fanfloor" ./bench/cmd/fanfloor)
	half=$(($(nproc) / 2))
	cmd=(taskset -c "0-$((half - 1))" "$work/fanfloor" -steady "$preset" -duration "$duration" -repeat "$repeat"
		-reader-cpu "$half-$(($(nproc) - 1))" -json "$work/floor.json")
	echo "${cmd[*]}" >>"$work/commands.txt"
	echo "before floor: load average $(cut -d' ' -f1-3 /proc/loadavg)" >>"$work/machine.txt"
	echo "steady.sh: ${cmd[*]}" >&2
	"${cmd[@]}" >"$work/floor.md" 2>>"$work/logs/bench.log"
	echo "after floor: load average $(cut -d' ' -f1-3 /proc/loadavg)" >>"$work/machine.txt"
fi
kill "$vmstat_pid" 2>/dev/null || true

for f in steady.md steady.json steady.svg steady-crosscheck.md steady-crosscheck.json floor.md floor.json machine.txt commands.txt steal.txt; do
	[[ -f $work/$f ]] || continue
	case $f in
	steady.*) to=$dest-bench.${f#steady.} ;;
	steady-crosscheck.*) to=$dest-client.${f#steady-crosscheck.} ;;
	*) to=$dest-$f ;;
	esac
	cp "$work/$f" "$to"
done
echo "steady.sh: wrote $dest-* (logs in $work/logs)" >&2
ls "$dest"-*
