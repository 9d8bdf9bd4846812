#!/usr/bin/env bash
# bench/attack.sh — run every attack (bench/attack) against a real `ovbus serve`
# on 127.0.0.1, one scenario at a time, and write the figures.
#
#   bench/attack.sh [--src DIR] [--rev REV] [--out DIR] [--name NAME] [--only "churn bomb …"]
#                   [--soak DURATION | --no-soak] [--soak-args "FLAGS"] [--smoke] [--rss-limit MiB] [--keep]
#
# Builds ovbus from DIR (default: this checkout) at its current commit and the
# harness (bench/attack) from this checkout, then runs each scenario with its
# default counts (the figures each scenario targets) and writes
# OUT/attack-NAME.json and OUT/attack-NAME.md (default bench/results,
# NAME the date): the commit of DIR with a "-dirty" marker when its tree has
# changes, the exact commands, the load average before each scenario, every
# figure; when the soak ran, OUT/attack-NAME.svg too, its memory over time.
# Per-scenario JSON and the servers' logs stay in bench/out/attack-NAME/.
#
#   --src DIR     the tree to build ovbus from (e.g. /work/main for a "before")
#   --rev REV     build ovbus from that commit of DIR's repository instead of its
#                 working tree (git archive into a temporary directory)
#   --only LIST   these scenarios only (churn bomb large-idle handshake stalled
#                 fullbus fdlimit slowcut wtimeout shutdown soak)
#   --soak D      run the soak for D (default 30m); --no-soak leaves it out
#   --soak-args F more flags for the soak (attack soak -h), e.g. "-busy 30s -quiet 0"
#   --smoke       tiny counts (seconds per scenario): checks the pipeline only
#   --rss-limit M a server past M MiB of RSS is killed and the scenario says so
#                 (default 6144: today's code takes ~5 GB in the bomb scenario)
#   --keep        keep the other scenarios' results of the same NAME: with --only,
#                 reruns those scenarios and rewrites the report with all of them
#                 (each scenario's section names the commits it ran on)
#
# Each scenario is bounded by its own -timeout; every server is stopped by the
# harness, by pid. Needs Linux (/proc) and a file limit of 20 000 for fullbus.
set -euo pipefail
args="" # the command line as typed, quoted where needed
if [[ $# -gt 0 ]]; then args=$(printf '%q ' "$@"); args=${args% }; fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
src=$root rev="" out=$root/bench/results name=$(date +%Y-%m-%d) only="" soak=30m soakargs="" smoke=0 rsslimit=6144 keep=0
while [[ $# -gt 0 ]]; do
	case $1 in
	--src) src=$(cd "$2" && pwd); shift 2 ;;
	--rev) rev=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--name) name=$2; shift 2 ;;
	--only) only=$2; shift 2 ;;
	--soak) soak=$2; shift 2 ;;
	--no-soak) soak=""; shift ;;
	--soak-args) soakargs=$2; shift 2 ;;
	--smoke) smoke=1; shift ;;
	--rss-limit) rsslimit=$2; shift 2 ;;
	--keep) keep=1; shift ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) echo "attack.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$root/bench/out/attack-$name
if [[ $keep == 0 ]]; then rm -rf "$work"; fi
mkdir -p "$work/bin"
log() { echo "attack.sh: $*" >&2; }

if [[ -n $rev ]]; then
	commit=$(git -C "$src" rev-parse "$rev^{commit}")
	tree=$(mktemp -d)
	trap 'rm -rf "$tree"' EXIT
	git -C "$src" archive "$commit" | tar -x -C "$tree"
	src_build=$tree
else
	commit=$(git -C "$src" rev-parse HEAD)
	if [[ -n $(git -C "$src" status --porcelain --untracked-files=no) ]]; then commit+="-dirty"; fi
	src_build=$src
fi
harness_commit=$(git -C "$root" rev-parse HEAD)
if [[ -n $(git -C "$root" status --porcelain --untracked-files=no -- bench/attack bench/attack.sh) ]]; then harness_commit+="-dirty"; fi
log "building ovbus from $src ($commit)"
(cd "$src_build" && go build -o "$work/bin/ovbus" ./cmd/ovbus)
(cd "$root" && go build -o "$work/bin/attack" ./bench/attack)

all="churn bomb large-idle handshake stalled fullbus fdlimit slowcut wtimeout shutdown soak"
scen=${only:-"churn bomb large-idle handshake stalled fullbus fdlimit slowcut wtimeout shutdown"}
if [[ -z $only && -n $soak ]]; then scen+=" soak"; fi
flags=(-ovbus "$work/bin/ovbus" -rss-limit "$rsslimit")
if [[ $smoke == 1 ]]; then flags+=(-smoke); fi
if [[ $keep == 0 ]]; then : >"$work/commands.txt"; fi
export ATTACK_OVBUS_COMMIT=$commit ATTACK_HARNESS_COMMIT=$harness_commit
status=0
for s in $scen; do
	rm -rf "${work:?}/$s" "$work/$s.json"
	extra=()
	if [[ $s == soak && -n $soak && $smoke == 0 ]]; then extra=(-duration "$soak"); fi
	# shellcheck disable=SC2206 # the soak's flags, split as the shell would
	if [[ $s == soak ]]; then extra+=($soakargs); fi
	cmd=(attack "${flags[@]}" -work "$work/$s" -out "$work/$s.json" "$s" "${extra[@]}")
	echo "${cmd[*]}" >>"$work/commands.txt"
	log "$s (load $(cut -d' ' -f1-3 /proc/loadavg))"
	if ! "$work/bin/attack" "${cmd[@]:1}" 2>"$work/$s.stderr"; then
		log "$s: failed, see $work/$s.stderr"
		status=1
	fi
done
files=()
for s in $all; do
	if [[ -f $work/$s.json ]]; then files+=("$work/$s.json"); fi
done

python3 - "$work/meta.json" "bench/attack.sh $args" <<PY
import json, sys
json.dump({
  "ovbus commit": "$commit",
  "ovbus built from": "$src",
  "harness commit": "$harness_commit",
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "machine": "$(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(uname -sr), file limit $(ulimit -Hn)",
  "load average at the end": "$(cut -d' ' -f1-3 /proc/loadavg)",
  "go": "$(go version | cut -d' ' -f3-)",
  "command": sys.argv[2],
  "scenario commands": "at the end of the markdown file; logs in bench/out/attack-$name/",
}, open(sys.argv[1], "w"), indent=2)
PY
plot=()
if [[ -f $work/soak.json ]]; then plot=(-svg "$out/attack-$name.svg"); fi
"$work/bin/attack" report -meta "$work/meta.json" -json "$out/attack-$name.json" -md "$out/attack-$name.md" "${plot[@]}" "${files[@]}"
{
	echo
	echo "## Commands"
	echo
	echo '```'
	echo "bench/attack.sh $args"
	sed "s|$work/bin/||; s|$work|bench/out/attack-$name|g" "$work/commands.txt"
	echo '```'
} >>"$out/attack-$name.md"
# Paths relative to the checkout, so that the files read the same anywhere.
sed -i "s|$work/bin/||g; s|$root/||g; s|$root|.|g" "$out/attack-$name.json" "$out/attack-$name.md"
rm -rf "$work/bin"
log "wrote $out/attack-$name.json and $out/attack-$name.md${plot:+ and $out/attack-$name.svg}"
exit $status
