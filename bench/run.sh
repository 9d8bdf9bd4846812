#!/usr/bin/env bash
# bench/run.sh — measure ovbus against its peers, side by side, on 127.0.0.1.
#
#   bench/run.sh [--repeat N] [--peers "gorilla gws gobwas coder tornado node uws"]
#                [--pairs] [--quick] [--no-fanout] [--no-loadtest] [--idle] [--pin]
#                [--preset LIST] [--echo-preset LIST] [--crosscheck] [--out DIR]
#                [--steady LIST [--duration D]]
#
# Fan-out: starts `ovbus serve` (OVOS_BUS_PORT, configuration isolated from the
# user's) and every peer's fan-out server (bench/peers/run-peer.sh), each its
# own process, then runs `ovbus bench --preset seeds` comparing them, runs
# interleaved A B C … A B C … With --pairs, each peer runs alone beside ovbus
# instead: one comparison (and one table) per peer.
# Echo: starts examples/echoserver and every peer's echo server (Tornado has
# none) and runs `ovbus loadtest --preset std` (or --echo-preset) the same way.
#
# Steady traffic (--steady LIST): starts `ovbus serve` and every peer's fan-out
# server again and runs `ovbus bench --preset LIST --duration D` (steady
# scenarios: every client sends on its own schedule and receives everything)
# comparing them; with --crosscheck, the same with the independent client
# (bench/peers/cmd/client steady): steady.md/.json/.svg and
# steady-crosscheck.md/.json.
#
# Idle memory (--idle): starts each server afresh, alone (`ovbus serve`, then
# every peer's fan-out server), opens 5 000 and then 19 000 idle connections to
# it with the independent client (bench/peers/cmd/client idle) and records
# the server's RSS per connection in idle.txt.
#
# Writes under DIR (default bench/out/run-DATE): fanout.md, fanout.json,
# fanout.svg, loadtest.md, loadtest.json, loadtest.svg, machine.txt, the exact
# commands in commands.txt, and the servers' logs. Every server started is
# stopped on exit (by its pid). Each benchmark invocation is bounded by
# `timeout` (BENCH_TIMEOUT, default 1200 s).
#
#   --repeat N   runs of every scenario and server (default 3)
#   --quick      small scenarios, one repeat: a smoke test of the pipeline
#   --peers LIST which peers (default: all seven)
#   --idle       also measure idle memory (IDLE_LEVELS, default 5000,19000)
#   --preset LIST  fan-out scenarios (default seeds), e.g. 100x2000,1000x200
#   --echo-preset LIST  echo scenarios (default std), a preset (std; echo: 1x300,
#                1x300w64, 1x1m, 100x1kw16) or CONNSxPAYLOAD[wWINDOW],... e.g. 1x300,1x300w64,1x1m
#   --crosscheck after each fan-out comparison, run the same scenarios on the
#                same servers with the independent client (bench/peers/cmd/client
#                fanout, gobwas/ws): NAME-crosscheck.txt beside NAME.md
#   --pin        run the servers on the first half of the CPUs and the clients
#                on the other half (taskset), so that a client's CPU time is
#                not taken from the server it measures
#   --quiet-load X  before each benchmark, wait (up to 10 min) until the
#                1-minute load average is below X: the machine may be shared
#   --steady LIST   also run steady scenarios (steady, steady20, steady20-json,
#                steady10 or CLIENTS@RATE[:BINARY_SHARE], as ovbus bench --preset)
#   --duration D    how long each steady run sends (default 30s)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
repeat=3
peers="gorilla gws gobwas coder tornado node uws"
pairs=0 quick=0 fanout=1 loadtest=1 idle=0 pin=0 crosscheck=0 preset=seeds echo_preset=std quiet= steady= duration=30s
out=""
while [[ $# -gt 0 ]]; do
	case $1 in
	--repeat) repeat=$2; shift 2 ;;
	--peers) peers=$2; shift 2 ;;
	--pairs) pairs=1; shift ;;
	--quick) quick=1; repeat=1; shift ;;
	--no-fanout) fanout=0; shift ;;
	--no-loadtest) loadtest=0; shift ;;
	--idle) idle=1; shift ;;
	--pin) pin=1; shift ;;
	--preset) preset=$2; shift 2 ;;
	--echo-preset) echo_preset=$2; shift 2 ;;
	--crosscheck) crosscheck=1; shift ;;
	--out) out=$2; shift 2 ;;
	--quiet-load) quiet=$2; shift 2 ;;
	--steady) steady=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
out=${out:-$root/bench/out/run-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
limit=${BENCH_TIMEOUT:-1200}
host=127.0.0.1

log() { echo "run.sh: $*" >&2; }

# With --pin, every server runs under srvpin and every client under clipin.
srvpin=() clipin=()
if [[ $pin == 1 ]]; then
	ncpu=$(nproc)
	[[ $ncpu -ge 2 ]] || { log "--pin needs at least 2 CPUs"; exit 1; }
	half=$((ncpu / 2))
	srvpin=(taskset -c "0-$((half - 1))") clipin=(taskset -c "$half-$((ncpu - 1))")
fi

# Every pid we start, stopped on exit.
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stop() { # stop one server started here
	kill "$1" 2>/dev/null || true
	for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
}

wait_port() { # wait_port PORT PID NAME
	for _ in $(seq 1 200); do
		kill -0 "$2" 2>/dev/null || { log "$3 exited; see $out/logs"; return 1; }
		if (exec 3<>"/dev/tcp/$host/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	log "$3 did not listen on $1 within 20 s"
	return 1
}

wait_quiet() { # wait until the 1-minute load average is below $quiet
	[[ -z $quiet ]] && return 0
	for _ in $(seq 1 120); do
		if awk -v q="$quiet" '{ exit !($1 < q) }' /proc/loadavg; then return 0; fi
		sleep 5
	done
	log "load average still $(cut -d' ' -f1 /proc/loadavg) after 10 min: running anyway"
}

port_free() {
	if (exec 3<>"/dev/tcp/$host/$1") 2>/dev/null; then
		log "port $1 is in use: stop what listens there or edit the ports in run.sh"
		exit 1
	fi
}

log "building ovbus and the echo server"
# The commit is stamped in, so that every report records it (with +dirty for uncommitted changes).
commit=$(cd "$root" && git rev-parse --short=12 HEAD)$(cd "$root" && git diff --quiet HEAD || echo +dirty)
(cd "$root" && go build -ldflags "-X main.commit=$commit" -o "$out/ovbus" ./cmd/ovbus && go build -o "$out/echoserver" ./examples/echoserver)
ovbus=$out/ovbus

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "cpus: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "go: $(go version)"
	echo "kernel: $(uname -sr)"
	echo "loadavg: $(cut -d' ' -f1-3 /proc/loadavg)"
	if [[ $pin == 1 ]]; then echo "pinned: servers ${srvpin[*]}, clients ${clipin[*]}"; else echo "pinned: no"; fi
	echo "commit: $commit"
	command -v node >/dev/null && echo "node: $(node --version)"
	echo "python3-tornado: $(/usr/bin/python3 -c 'import tornado; print(tornado.version)' 2>/dev/null || echo none)"
} >"$out/machine.txt"
: >"$out/commands.txt"

start_peer() { # start_peer NAME MODE PORT -> prints pid
	port_free "$3"
	PEER_OUT="$out/logs" "${srvpin[@]}" "$here/peers/run-peer.sh" "$1" "$2" "$3"
}

# ---------------------------------------------------------------- fan-out
ovbus_port=18100
start_ovbus() {
	port_free $ovbus_port
	mkdir -p "$out/xdg/config" "$out/xdg/state" "$out/xdg/data" "$out/xdg/cache"
	# The user's mycroft.conf must not change the bus under test.
	"${srvpin[@]}" env XDG_CONFIG_HOME="$out/xdg/config" XDG_STATE_HOME="$out/xdg/state" \
		XDG_DATA_HOME="$out/xdg/data" XDG_CACHE_HOME="$out/xdg/cache" XDG_CONFIG_DIRS="$out/xdg/config" \
		MYCROFT_SYSTEM_CONFIG="$out/xdg/none.conf" \
		OVOS_BUS_HOST=$host OVOS_BUS_PORT=$ovbus_port \
		"$ovbus" serve --log-file "" </dev/null >"$out/logs/ovbus-serve.log" 2>&1 &
	ovbus_pid=$!
	pids+=("$ovbus_pid")
	wait_port $ovbus_port "$ovbus_pid" "ovbus serve"
}

run_logged() { # run_logged NAME OUTFILE PROGRAM ARGS... ; a client run, pinned, bounded, its load recorded
	local name=$1 file=$2 prog=$3; shift 3
	echo "${clipin[*]}${clipin:+ }$(basename "$prog") $*" >>"$out/commands.txt"
	wait_quiet
	log "$(basename "$prog") $* (load average $(cut -d' ' -f1-3 /proc/loadavg))"
	echo "before $name: load average $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
	set +e
	timeout --foreground "$limit" "${clipin[@]}" "$prog" "$@" >"$file" 2>>"$out/logs/bench.log"
	local rc=$?
	set -e
	echo "after $name: load average $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
	if [[ $rc -gt 1 ]]; then log "$name: $(basename "$prog") exit status $rc (see $out/logs/bench.log)"; fi
	return 0
}

bench_cmd() { # bench_cmd NAME TARGETS... ; writes NAME.md/.json/.svg
	local name=$1; shift
	local args=(bench --preset "$preset" --repeat "$repeat")
	if [[ $quick == 1 ]]; then args=(bench --preset 5x200,20x1000 --repeat 1); fi
	args+=(--pause 500ms --format markdown --save-json "$out/$name.json" --plot "$out/$name.svg" --verbose "$@")
	run_logged "$name" "$out/$name.md" "$ovbus" "${args[@]}"
	[[ $crosscheck == 1 ]] && crosscheck_cmd "$name" "$@"
	return 0
}

# The seeds preset's scenarios, for the independent client.
seeds="5x200,20x1000,50x2000,100x500,1000x100"

build_client() { [[ -x $out/client ]] || (cd "$here/peers" && go build -o "$out/client" ./cmd/client); }

crosscheck_cmd() { # crosscheck_cmd NAME TARGETS... ; writes NAME-crosscheck.txt
	local name=$1; shift
	build_client
	local list=$preset
	[[ $list == seeds ]] && list=$seeds
	[[ $quick == 1 ]] && list=5x200,20x1000
	: >"$out/$name-crosscheck.txt"
	for sc in ${list//,/ }; do
		local args=(fanout -clients "${sc%x*}" -messages "${sc#*x}" -repeat "$repeat" "$@")
		echo "${clipin[*]}${clipin:+ }client ${args[*]}" >>"$out/commands.txt"
		wait_quiet
		log "client ${args[*]}"
		timeout --foreground "$limit" "${clipin[@]}" "$out/client" "${args[@]}" >>"$out/$name-crosscheck.txt" 2>>"$out/logs/bench.log" ||
			log "$name: the independent client failed at $sc (see $out/logs/bench.log)"
	done
}

start_buses() { # start_buses PORT: ovbus serve and every peer's fan-out server from PORT on; sets targets and bus_pids
	start_ovbus
	targets=("ovbus=ws://$host:$ovbus_port/core") bus_pids=("$ovbus_pid")
	local port=$1
	for p in $peers; do
		pid=$(start_peer "$p" fanout $port) || { log "skipping $p"; port=$((port + 1)); continue; }
		pids+=("$pid") bus_pids+=("$pid")
		targets+=("$p=ws://$host:$port/core")
		port=$((port + 1))
	done
}

if [[ $fanout == 1 ]]; then
	if [[ $pairs == 0 ]]; then
		start_buses 18101
		bench_cmd fanout "${targets[@]}"
		for p in "${bus_pids[@]}"; do stop "$p"; done
	else
		start_ovbus
		subject="ovbus=ws://$host:$ovbus_port/core"
		port=18101
		for p in $peers; do
			pid=$(start_peer "$p" fanout $port) || { log "skipping $p"; continue; }
			pids+=("$pid")
			bench_cmd "fanout-$p" "$subject" "$p=ws://$host:$port/core"
			stop "$pid"
		done
		stop "$ovbus_pid"
	fi
fi

# ---------------------------------------------------------------- steady
if [[ -n $steady ]]; then
	start_buses 18401
	run_logged steady "$out/steady.md" "$ovbus" bench --preset "$steady" --duration "$duration" --repeat "$repeat" \
		--pause 500ms --format markdown --save-json "$out/steady.json" --plot "$out/steady.svg" --verbose "${targets[@]}"
	if [[ $crosscheck == 1 ]]; then
		build_client
		run_logged steady-crosscheck "$out/steady-crosscheck.md" "$out/client" steady -preset "$steady" -duration "$duration" \
			-repeat "$repeat" -json "$out/steady-crosscheck.json" "${targets[@]}"
	fi
	for p in "${bus_pids[@]}"; do stop "$p"; done
fi

# ---------------------------------------------------------------- echo
if [[ $loadtest == 1 ]]; then
	echo_port=18200
	port_free $echo_port
	"${srvpin[@]}" "$out/echoserver" -addr "$host:$echo_port" </dev/null >"$out/logs/echoserver.log" 2>&1 &
	echo_pid=$!
	pids+=("$echo_pid")
	wait_port $echo_port "$echo_pid" echoserver
	targets=("ovbus=ws://$host:$echo_port/")
	port=18201
	for p in $peers; do
		[[ $p == tornado ]] && continue # the Tornado reference is a bus only
		pid=$(start_peer "$p" echo $port) || { log "skipping $p"; port=$((port + 1)); continue; }
		pids+=("$pid")
		targets+=("$p=ws://$host:$port/core")
		port=$((port + 1))
	done
	args=(loadtest --preset "$echo_preset" --duration 2s --repeat "$repeat")
	if [[ $quick == 1 ]]; then args=(loadtest --preset 10x1k --duration 500ms --repeat 1); fi
	args+=(--pause 500ms --format markdown --save-json "$out/loadtest.json" --plot "$out/loadtest.svg" --verbose "${targets[@]}")
	run_logged loadtest "$out/loadtest.md" "$ovbus" "${args[@]}"
fi

# ---------------------------------------------------------------- idle memory
if [[ $idle == 1 ]]; then
	(cd "$here/peers" && go build -o "$out/client" ./cmd/client)
	levels=${IDLE_LEVELS:-5000,19000}
	: >"$out/idle.txt"
	measure_idle() { # measure_idle NAME PORT PID
		local args=(idle -n "$levels" "$1=ws://$host:$2/core@$3")
		echo "${clipin[*]}${clipin:+ }client ${args[*]}" >>"$out/commands.txt"
		log "client ${args[*]}"
		timeout --foreground "$limit" "${clipin[@]}" "$out/client" "${args[@]}" | { [[ -s $out/idle.txt ]] && tail -n +2 || cat; } >>"$out/idle.txt" ||
			log "idle $1: client failed (see above)"
	}
	start_ovbus
	measure_idle ovbus $ovbus_port "$ovbus_pid"
	stop "$ovbus_pid"
	port=18301
	for p in $peers; do
		pid=$(start_peer "$p" fanout $port) || { log "skipping $p"; port=$((port + 1)); continue; }
		pids+=("$pid")
		measure_idle "$p" $port "$pid"
		stop "$pid"
		port=$((port + 1))
	done
fi

log "done: $out"
ls "$out"
