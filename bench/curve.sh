#!/usr/bin/env bash
# bench/curve.sh — the fan-out cost curve ("cost grows linearly, not
# worse"): server CPU per delivery at 10, 100, 1 000 and 10 000 subscribers,
# as a markdown table (each point also as a ratio to the server's own
# 100-subscriber figure) and an SVG chart.
#
#   bench/curve.sh [--from REPORT.json [--floor FLOOR.json]] [--out DIR] [--repeat N]
#                  [--peers LIST] [--preset LIST] [--no-floor] [run.sh flags ...]
#
# Without --from it runs the scenarios with bench/run.sh (ovbus serve and the
# peers, each its own process; --no-loadtest), then the kernel's floor under
# the same scenarios (bench/cmd/fanfloor: the same frames written to as many
# loopback sockets with raw system calls and nothing else, as a burst all in
# hand and as a relay of a sender's frames; its writer on CPU 0, its reader
# on CPU 1), and draws from the fanout.json and floor.json those write, the
# floors as two more lines (floor-burst, floor-relay); with --from it only
# draws from a report saved by `ovbus bench --save-json` (or run.sh), and
# from a floor saved by `fanfloor -json` given with --floor. Writes
# DIR/curve.md (also printed), DIR/curve.svg and DIR/floor.md.
#
#   --preset LIST  scenarios (default 10x20000,100x2000,1000x200,10000x100: about
#                  200 000 to 1 000 000 deliveries each; 10 000 subscribers need
#                  RLIMIT_NOFILE above 10 000 for the servers and the client)
#   --peers LIST   peers beside ovbus (default "uws gobwas")
#   --repeat N     runs of every scenario and server, and of each floor (default 3)
#   --no-floor     leave the floor out
#   other flags go to run.sh as they are (--pin, --quiet-load X, ...)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
from="" out="" repeat=3 peers="uws gobwas" preset=10x20000,100x2000,1000x200,10000x100 floor=1 floorjson=""
pass=()
while [[ $# -gt 0 ]]; do
	case $1 in
	--from) from=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--repeat) repeat=$2; shift 2 ;;
	--peers) peers=$2; shift 2 ;;
	--preset) preset=$2; shift 2 ;;
	--no-floor) floor=0; shift ;;
	--floor) floorjson=$2; shift 2 ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) pass+=("$1"); shift ;;
	esac
done
out=${out:-$root/bench/out/curve-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [[ -z $from ]]; then
	"$here/run.sh" --no-loadtest --preset "$preset" --repeat "$repeat" --peers "$peers" --out "$out" ${pass[@]+"${pass[@]}"}
	from=$out/fanout.json
	if [[ $floor == 1 ]]; then
		(cd "$root" && go build -o "$out/fanfloor" ./bench/cmd/fanfloor)
		cmd=("$out/fanfloor" -preset "$preset" -repeat "$repeat" -json "$out/floor.json")
		if [[ $(nproc) -ge 2 ]]; then cmd=(taskset -c 0 "${cmd[@]}"); else cmd+=(-reader-cpu ""); fi
		echo "${cmd[*]}" >>"$out/commands.txt"
		echo "curve.sh: ${cmd[*]}" >&2
		"${cmd[@]}" >"$out/floor.md"
		floorjson=$out/floor.json
	fi
fi
(cd "$root" && go run ./bench/cmd/curve --md "$out/curve.md" --svg "$out/curve.svg" "$from" ${floorjson:+"$floorjson"})
cat "$out/curve.md"
echo "curve.sh: wrote $out/curve.md and $out/curve.svg" >&2
