#!/usr/bin/env bash
# bench/idle.sh — ovbus's idle memory per connection, commits side by side.
#
#   bench/idle.sh [--rounds N] [--levels 5000,19000] [--port P] [--out FILE] COMMIT[@386]...
#
# Builds `ovbus` at each COMMIT (from `git archive`, so the working tree is
# not touched; HEAD is the checked-out commit; COMMIT@386 builds it as a
# 32-bit binary, GOARCH=386: the structures' layout of the linux-armv7
# binary on a 32-bit Raspberry Pi, run here by the amd64 kernel, named
# SHORTCOMMIT-386 in the output) and measures them interleaved,
# N rounds (default 3) of COMMIT1 COMMIT2 …: each round starts the commit's
# `ovbus serve` afresh and alone (configuration isolated from the user's, as
# bench/run.sh --idle does), opens the levels' idle connections to it with the
# independent client (bench/peers/cmd/client idle: handshake and greeting,
# then nothing) and records the server's RSS per connection, with where it
# went (resident anonymous and file-backed pages, and the Go runtime's memory
# classes from the bus's /metrics on port P+1: heap objects, free heap,
# stacks, the runtime's metadata), then stops it.
# Writes FILE (default bench/results/idle-DATE-SHORTCOMMIT.txt of HEAD): the
# command, the date, the commits, the Go version, the load average before and
# after each run, every run's lines as the client printed them, and per
# commit and level the median of the rounds (RSS per connection over all
# connections, and over those added since the previous level; then each part
# of where it went).
# The peers' figures come from bench/run.sh --idle.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
rounds=3 levels=5000,19000 port=18190 out=""
cmdline="bench/idle.sh $*"
while [[ $# -gt 0 ]]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--levels) levels=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	-*) echo "idle.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	*) break ;;
	esac
done
[[ $# -ge 1 ]] || { echo "idle.sh: name at least one commit (see --help)" >&2; exit 2; }
cd "$root"
head=$(git rev-parse --short=7 HEAD)
out=${out:-bench/results/idle-$(date -u +%Y-%m-%d)-$head.txt}
work=$(mktemp -d)
pid=""
cleanup() {
	if [[ -n $pid ]]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { echo "idle.sh: $*" >&2; }

commits=()
for c in "$@"; do
	arch=""
	if [[ $c =~ ^(.+)@386$ ]]; then
		c=${BASH_REMATCH[1]} arch=386
	fi
	full=$(git rev-parse --verify "$c^{commit}")
	short=${full:0:7} # the commit as committed: uncommitted changes are not in the build
	name=$short${arch:+-$arch}
	log "building ovbus at $short${arch:+ for $arch}"
	if [[ ! -d $work/src-$short ]]; then
		mkdir -p "$work/src-$short"
		git archive "$full" | tar -x -C "$work/src-$short"
	fi
	(cd "$work/src-$short" && GOARCH=${arch:-$(go env GOARCH)} go build -ldflags "-X main.commit=$short" -o "$work/ovbus-$name" ./cmd/ovbus)
	commits+=("$name")
done
(cd "$here/peers" && go build -o "$work/client" ./cmd/client)

{
	echo "# $cmdline"
	echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "head:    $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (uncommitted changes, not in the builds)')"
	echo "commits: ${commits[*]} (ovbus built from each with go build ./cmd/ovbus; NAME-386 with GOARCH=386)"
	echo "go:      $(go version)"
	echo "cpu:     $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') × $(nproc)"
	echo "levels:  $levels; $rounds rounds, interleaved"
} >"$out"

wait_port() {
	for _ in $(seq 1 200); do
		kill -0 "$pid" 2>/dev/null || { log "ovbus exited; see $work/serve.log"; cat "$work/serve.log" >&2; return 1; }
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	log "ovbus did not listen on $port within 20 s"
	return 1
}

if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
	log "port $port is in use: choose another with --port"
	exit 1
fi
mkdir -p "$work/xdg/config" "$work/xdg/state" "$work/xdg/data" "$work/xdg/cache"
for r in $(seq 1 "$rounds"); do
	for c in "${commits[@]}"; do
		# The user's mycroft.conf must not change the bus under test.
		env XDG_CONFIG_HOME="$work/xdg/config" XDG_STATE_HOME="$work/xdg/state" XDG_DATA_HOME="$work/xdg/data" \
			XDG_CACHE_HOME="$work/xdg/cache" XDG_CONFIG_DIRS="$work/xdg/config" MYCROFT_SYSTEM_CONFIG="$work/xdg/none.conf" \
			OVOS_BUS_HOST=127.0.0.1 OVOS_BUS_PORT="$port" OVOS_BUS_METRICS_ADDRESS="127.0.0.1:$((port + 1))" \
			"$work/ovbus-$c" serve --log-file "" </dev/null >"$work/serve.log" 2>&1 &
		pid=$!
		wait_port
		load=$(cut -d' ' -f1-3 /proc/loadavg)
		log "round $r, $c (load $load)"
		echo "" >>"$out"
		echo "round $r, $c, load before $load:" >>"$out"
		"$work/client" idle -n "$levels" -metrics "http://127.0.0.1:$((port + 1))/metrics" "$c=ws://127.0.0.1:$port/core@$pid" |
			tee -a "$out" >&2
		kill "$pid"
		wait "$pid" 2>/dev/null || true
		pid=""
	done
done
echo "" >>"$out"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
echo "" >>"$out"
echo "median of the rounds, RSS per connection (all / added since the last level):" >>"$out"
awk '$1 != "target" && NF == 9 && $6 == "B" { k = $1 " " $2; all[k] = all[k] " " $5; add[k] = add[k] " " $7; if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
	function median(s,   a, m, i, j, t) { m = split(s, a, " "); for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
	END { for (i = 1; i <= n; i++) printf "  %-16s %6s conns  %6.0f B  %6.0f B\n", substr(order[i], 1, index(order[i], " ") - 1), substr(order[i], index(order[i], " ") + 1), median(all[order[i]]), median(add[order[i]]) }' "$out" >>"$out.tmp"
echo "" >>"$out.tmp"
echo "median of the rounds, where it went (per connection over all connections):" >>"$out.tmp"
awk '/^[^ ]/ && NF == 9 && $6 == "B" { k = $1 "  " $2 " conns"; next }
	/^  [^:]+ per connection: / && k != "" {
		line = $0; sub(/^  /, "", line); head = substr(line, 1, index(line, ":") - 1); line = substr(line, index(line, ":") + 2)
		m = split(line, items, ", ")
		for (i = 1; i <= m; i++) {
			w = split(items[i], f, " "); name = substr(items[i], 1, length(items[i]) - length(f[w - 1]) - length(f[w]) - 2)
			key = k SUBSEP head SUBSEP name; vals[key] = vals[key] " " f[w - 1]
			if (!(key in seen)) { seen[key] = 1; order[++n] = key }
		}
	}
	function median(s,   a, m, i, j, t) { m = split(s, a, " "); for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
	END { for (i = 1; i <= n; i++) { split(order[i], p, SUBSEP); g = p[1] ", " p[2]
		if (g != last) { printf "%s  %s:", (last == "" ? "" : "\n"), g; last = g; sep = "" }
		printf "%s %s %.0f B", sep, p[3], median(vals[order[i]]); sep = "," } if (n) print "" }' "$out" >>"$out.tmp"
cat "$out.tmp" >>"$out"
rm -f "$out.tmp"
tail -n +$(($(grep -m1 -n '^median of the rounds' "$out" | cut -d: -f1))) "$out"
log "wrote $out"
