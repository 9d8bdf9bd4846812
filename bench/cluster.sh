#!/usr/bin/env bash
# bench/cluster.sh — three ovbus nodes against one, in the same run, on 127.0.0.1.
#
#   bench/cluster.sh [--repeat N] [--preset LIST] [--out DIR] [--lead] [--floor N] [--no-bench]
#
# Starts one plain `ovbus serve` and two clusters of three `ovbus serve`
# processes each, with the NATS embedded in ovbus (websocket.cluster.listen and
# routes): one in order "total", one in order "sender". The "total" stream's
# leader is wherever the cluster put it; with --lead the first node, where the
# sender connects, has websocket.cluster.lead (as a house would set it on the
# node whose clients send the most) and the benchmark starts once it leads the
# stream. Each process has its
# own isolated configuration (HOME and XDG paths in a temporary directory). It
# waits until every node's /health says "cluster: up", then runs
# `ovbus bench --compare one=… total3=A,B,C sender3=A,B,C`: the runs are
# interleaved, the sender connects to the first node of a cluster, the
# subscribers round-robin over its three nodes, and the CPU time of all three
# processes is added up.
#
# With --floor N it then runs bench/cmd/clusterfloor N rounds against the
# "total" cluster: the bare JetStream floor (three embedded nats-servers, an
# R3 stream, the nodes' messages and batching) and the same measurements
# through the three nodes, interleaved: lone frames across nodes and 5×200
# bursts. --floor implies --lead (the floor's stream is led by the sender's
# server too); --no-bench skips `ovbus bench` (the floor only).
#
# Writes DIR/cluster-DATE.md (the command, the commit, the machine, the load
# average and stolen CPU, then the tables) and DIR/cluster-DATE.json (and
# DIR/cluster-DATE-floor.json with --floor); DIR defaults to
# bench/results. The servers' logs and the bench output go to
# bench/out/cluster-DATE/ (not kept in git). Every process started is stopped on exit
# (by its pid); the benchmark is bounded by `timeout` (BENCH_TIMEOUT, 1200 s).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
repeat=3
preset=5x200,20x1000,50x2000,100x500
out=$root/bench/results
lead=false
floor=0
bench=true
while [[ $# -gt 0 ]]; do
	case $1 in
	--floor) floor=$2; lead=true; shift 2 ;;
	--no-bench) bench=false; shift ;;
	--repeat) repeat=$2; shift 2 ;;
	--preset) preset=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--lead) lead=true; shift ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) echo "cluster.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp=$(date +%Y-%m-%d-%H%M)
logs=$root/bench/out/cluster-$stamp
mkdir -p "$logs"
limit=${BENCH_TIMEOUT:-1200}
host=127.0.0.1
tmp=$(mktemp -d)

log() { echo "cluster.sh: $*" >&2; }

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bin=$tmp/ovbus
(cd "$root" && go build -o "$bin" ./cmd/ovbus && go build -o "$tmp/clusterfloor" ./bench/cmd/clusterfloor)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# serve NAME PORT [VAR=VALUE ...]: one `ovbus serve` in its own sandbox.
serve() {
	local name=$1 port=$2
	shift 2
	local sb=$tmp/$name
	mkdir -p "$sb/home/.config" "$sb/state" "$sb/data"
	env -i PATH="$PATH" HOME="$sb/home" XDG_CONFIG_HOME="$sb/home/.config" XDG_CONFIG_DIRS="$sb/etc" \
		XDG_STATE_HOME="$sb/state" XDG_DATA_HOME="$sb/data" MYCROFT_SYSTEM_CONFIG="$sb/none" \
		OVOS_DISTRIBUTION_CONFIG="$sb/none" MYCROFT_WEB_CACHE="$sb/none" OVOS_BUS_LOG_FILE= \
		OVOS_BUS_HOST=$host OVOS_BUS_PORT="$port" "$@" "$bin" serve >"$logs/$name.log" 2>&1 &
	pids+=($!)
	echo $!
}

wait_health() { # wait_health PORT WANT
	for _ in $(seq 1 600); do
		if curl -fsS "http://$host:$1/health" 2>/dev/null | grep -q "$2"; then return 0; fi
		sleep 0.1
	done
	log "port $1: /health never said $2"
	return 1
}

# cluster ORDER: three nodes; sets cluster_urls to their URLs, comma-separated.
# It runs in this shell, not in a command substitution, so that the nodes' pids
# reach pids and cleanup stops them.
cluster() {
	local order=$1 ports=() routes=() urls=()
	for i in 0 1 2; do ports+=("$(free_port)"); routes+=("$(free_port)"); done
	for i in 0 1 2; do
		local peers=()
		for j in 0 1 2; do [[ $j == "$i" ]] || peers+=("nats://$host:${routes[$j]}"); done
		local leads=false
		[[ $order == total && $i == 0 && $lead == true ]] && leads=true
		serve "$order$i" "${ports[$i]}" OVOS_BUS_CLUSTER_NAME="$order" OVOS_BUS_CLUSTER_NODE_NAME="$order$i" OVOS_BUS_CLUSTER_LEAD=$leads \
			OVOS_BUS_CLUSTER_ORDER="$order" OVOS_BUS_CLUSTER_LISTEN="$host:${routes[$i]}" \
			OVOS_BUS_CLUSTER_ROUTES="$(IFS=,; echo "${peers[*]}")" OVOS_BUS_CLUSTER_STORE_DIR="$tmp/$order$i/js" >/dev/null
		urls+=("ws://$host:${ports[$i]}/core")
	done
	for i in 0 1 2; do wait_health "${ports[$i]}" "cluster: up" >&2; done
	if [[ $order == total && $lead == true ]]; then wait_health "${ports[0]}" "stream leader" >&2; fi
	cluster_urls=$(IFS=,; echo "${urls[*]}")
}

one_port=$(free_port)
serve one "$one_port" >/dev/null
wait_health "$one_port" ok
cluster total
total=$cluster_urls
cluster sender
sender=$cluster_urls
log "single node ws://$host:$one_port/core; total $total; sender $sender"

cmd=("$bin" bench --preset "$preset" --repeat "$repeat" --pause 1s
	--compare "one=ws://$host:$one_port/core" --compare "total3=$total" --compare "sender3=$sender"
	--save-json "$out/cluster-$stamp.json" --save-md "$tmp/table.md")
fcmd=("$tmp/clusterfloor" -ovbus "$total" -repeat "$floor" -json "$out/cluster-$stamp-floor.json")
# shellcheck source=bench/load.sh
. "$here/load.sh"
load=$(cut -d' ' -f1-3 /proc/loadavg)
stolen=$(steal)
commit=$(cd "$root" && git rev-parse HEAD)$(cd "$root" && git diff --quiet HEAD -- . || echo " (with uncommitted changes)")
if [[ $bench == true ]]; then
	timeout "$limit" "${cmd[@]}" >"$logs/bench.txt" 2>&1 || log "ovbus bench exited $? (see $logs/bench.txt)"
fi
if [[ $floor -gt 0 ]]; then
	timeout "$limit" "${fcmd[@]}" >"$logs/floor.txt" 2>&1 || log "clusterfloor exited $? (see $logs/floor.txt)"
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
stolen_after=$(steal)
{
	echo "# ovbus: three nodes against one (bench/cluster.sh)"
	echo
	echo "- commit: $commit"
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- load average before the run: $load ($stolen); after: $load_after ($stolen_after)"
	echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -sr), $(go version | cut -d' ' -f3);"
	echo "  every ovbus process (each node) sees all $(nproc) cores (GOMAXPROCS $(nproc)), shared with the others and with the client"
	echo "- command: bench/cluster.sh --repeat $repeat --preset $preset$([[ $lead == true ]] && echo " --lead")$([[ $floor -gt 0 ]] && echo " --floor $floor")$([[ $bench == false ]] && echo " --no-bench"), which ran:"
	if [[ $bench == true ]]; then echo "  \`ovbus bench ${cmd[*]:2}\`" | sed "s#$tmp#\$TMP#g; s#$out#bench/results#g"; fi
	if [[ $floor -gt 0 ]]; then echo "  \`clusterfloor ${fcmd[*]:1}\`" | sed "s#$tmp#\$TMP#g; s#$out#bench/results#g"; fi
	echo "- one: a plain ovbus serve; total3 and sender3: three ovbus serve processes each, NATS embedded,"
	echo "  websocket.cluster.order total / sender; the sender on the first node, subscribers round-robin over the three;"
	echo "  server CPU is the sum over the three processes"
	if [[ $lead == true ]]; then echo "- total3: its first node has websocket.cluster.lead and led the stream at the start"
	else echo "- total3: the stream's leader where the cluster put it"; fi
	if [[ $bench == true ]]; then
		echo
		cat "$tmp/table.md"
	fi
	if [[ $floor -gt 0 ]]; then
		echo
		echo "## Across nodes, against the bare JetStream floor (bench/cmd/clusterfloor)"
		echo
		cat "$logs/floor.txt"
	fi
} >"$out/cluster-$stamp.md"
log "wrote $out/cluster-$stamp.md and .json"
